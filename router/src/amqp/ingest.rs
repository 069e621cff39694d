//! The AMQP intake: consume the publications queue, validate, forward.
//!
//! For each delivery, in the order they arrive:
//! - valid: publish to the edges exchange (confirm mode), and once the broker
//!   confirms, ack the delivery;
//! - invalid: publish the original body and properties to the dead-letter
//!   exchange with `x-herald-error` (the reason) and `x-herald-field`, and
//!   once the broker confirms, ack the delivery.
//!
//! Nothing is acked before its forward is confirmed, so a publication the
//! backend got a confirm for survives a router crash or a broker restart: at
//! worst it is forwarded twice (delivery is at-least-once; edges can dedupe
//! by `message_id`). Forwards are sent in order and confirmed concurrently;
//! the prefetch (`basic.qos`, set before `basic.consume`) bounds how many are
//! in flight. A forward that fails or is refused ends the session: the
//! connection closes, its unacked deliveries go back to the queue, and the
//! supervisor reconnects with backoff.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use herald_protocol::envelope::Limits;
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::{Acker, Connection};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::envelope::{Rejection, dead_letter_properties, from_amqp_bytes, short};
use super::link::PublisherSlot;
use super::metrics::AmqpMetrics;
use super::publisher::{ForwardError, Forwarded, Publisher};
use super::supervisor::SessionError;
use super::topology::Topology;
use crate::metrics::{PublishMetrics, SourceLabels};

/// Metric and log label of this intake.
pub const SOURCE: &str = "amqp";

/// Settings of the intake.
#[derive(Debug, Clone)]
pub struct IngestConfig {
    /// Names to declare and use.
    pub topology: Topology,
    /// Most unacknowledged deliveries (`basic.qos` prefetch count).
    pub prefetch: u16,
    /// Envelope limits.
    pub limits: Limits,
    /// On shutdown, how long in-flight forwards may take to be confirmed.
    pub drain_timeout: Duration,
}

/// The intake session: run by the [`super::supervisor::Supervisor`] on
/// every connection. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Ingest {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: IngestConfig,
    slot: PublisherSlot,
    publish_metrics: PublishMetrics,
    amqp_metrics: AmqpMetrics,
}

/// Where a forward goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Destination {
    /// The edges exchange.
    Edges,
    /// The dead-letter exchange.
    Dead,
}

/// What a forward task needs besides its delivery.
#[derive(Clone)]
struct Forwarding {
    publisher: Publisher,
    failed: CancellationToken,
    publish_metrics: PublishMetrics,
}

impl Ingest {
    /// An intake that publishes through a publisher it also puts in `slot`
    /// (for the HTTP link).
    pub fn new(
        config: IngestConfig,
        slot: PublisherSlot,
        publish_metrics: PublishMetrics,
        amqp_metrics: AmqpMetrics,
    ) -> Self {
        Ingest {
            inner: Arc::new(Inner {
                config,
                slot,
                publish_metrics,
                amqp_metrics,
            }),
        }
    }

    /// One session on `connection`: declare the topology, open the publisher
    /// and fill the slot, consume until `shutdown` (then cancel the consumer,
    /// wait for in-flight forwards, close the channels and return `Ok`) or
    /// until something fails (return the error).
    pub async fn run(
        &self,
        connection: Arc<Connection>,
        shutdown: CancellationToken,
    ) -> Result<(), SessionError> {
        let config = &self.inner.config;
        let topology = &config.topology;
        let publisher = Publisher::open(
            &connection,
            &topology.edges_exchange,
            self.inner.amqp_metrics.clone(),
        )
        .await?;
        topology.declare(publisher.channel()).await?;
        let _filled = self.inner.slot.fill(publisher.clone());

        let channel = connection.create_channel().await?;
        // The prefetch must be set before consuming, or the broker pushes
        // the whole queue at once.
        channel
            .basic_qos(config.prefetch, BasicQosOptions::default())
            .await?;
        let tag = format!("herald-router-{}", &crate::publish::new_id()[..12]);
        let mut consumer = channel
            .basic_consume(
                short(&topology.queue),
                short(&tag),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        tracing::info!(queue = %topology.queue, edges = %topology.edges_exchange, prefetch = config.prefetch, consumer = %tag, "consuming publications");

        let forwarding = Forwarding {
            publisher: publisher.clone(),
            failed: CancellationToken::new(),
            publish_metrics: self.inner.publish_metrics.clone(),
        };
        let mut in_flight = JoinSet::new();
        let outcome = loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break Ok(()),
                _ = forwarding.failed.cancelled() => {
                    break Err(SessionError::Lost("a forward failed".into()));
                }
                Some(joined) = in_flight.join_next(), if !in_flight.is_empty() => {
                    if let Err(e) = joined {
                        tracing::error!(error = %e, "a forward task failed");
                    }
                }
                next = consumer.next() => match next {
                    Some(Ok(delivery)) => {
                        if let Err(e) = self.handle(delivery, &forwarding, &mut in_flight).await {
                            break Err(e.into());
                        }
                    }
                    Some(Err(e)) => break Err(e.into()),
                    None => break Err(SessionError::Lost("the broker cancelled the consumer".into())),
                },
            }
        };
        // On an error, dropping the in-flight tasks leaves their deliveries
        // unacked: the broker requeues them when the connection closes.
        outcome?;
        // Shutdown: stop deliveries, let confirmed forwards be acked, close.
        if let Err(e) = channel
            .basic_cancel(short(&tag), BasicCancelOptions::default())
            .await
        {
            tracing::warn!(error = %e, "cancelling the consumer failed");
        }
        let pending = in_flight.len();
        let drained = tokio::time::timeout(config.drain_timeout, async {
            while in_flight.join_next().await.is_some() {}
        })
        .await;
        match drained {
            Ok(()) => tracing::info!(forwards = pending, "in-flight forwards finished"),
            Err(_) => tracing::warn!(
                unconfirmed = in_flight.len(),
                timeout_ms = config.drain_timeout.as_millis() as u64,
                "forwards still unconfirmed at shutdown; the broker will redeliver them"
            ),
        }
        in_flight.abort_all();
        for ch in [&channel, publisher.channel()] {
            if let Err(e) = ch.close(200, "OK".into()).await {
                tracing::debug!(error = %e, "closing a channel");
            }
        }
        Ok(())
    }

    /// Parse one delivery and send its forward; the confirm and the ack
    /// happen in a task of `in_flight`.
    async fn handle(
        &self,
        delivery: Delivery,
        forwarding: &Forwarding,
        in_flight: &mut JoinSet<()>,
    ) -> lapin::Result<()> {
        let Delivery {
            routing_key,
            redelivered,
            properties,
            data,
            acker,
            ..
        } = delivery;
        let body = Bytes::from(data);
        let limits = &self.inner.config.limits;
        match from_amqp_bytes(&properties, body.clone(), limits, crate::publish::new_id) {
            Ok(n) => {
                let confirm = forwarding.publisher.send(&n).await?;
                let f = forwarding.clone();
                in_flight.spawn(async move {
                    let outcome = f.publisher.confirmed(confirm).await;
                    if f.settle(outcome, &acker, Destination::Edges).await {
                        f.publish_metrics
                            .accepted
                            .get_or_create(&SourceLabels { source: SOURCE })
                            .inc();
                        tracing::debug!(id = %n.id, event = %n.event, scope = %n.scope, redelivered, "forwarded to the edges");
                    }
                });
            }
            Err(rejection) => {
                let topology = &self.inner.config.topology;
                let dead = dead_letter_properties(&properties, &rejection, routing_key.as_str());
                let confirm = forwarding
                    .publisher
                    .send_raw(
                        short(&topology.dead_exchange),
                        routing_key.clone(),
                        dead,
                        &body,
                    )
                    .await?;
                let f = forwarding.clone();
                let message_id = properties.message_id().clone();
                in_flight.spawn(async move {
                    let outcome = f.publisher.confirmed(confirm).await;
                    if f.settle(outcome, &acker, Destination::Dead).await {
                        f.rejected(
                            &rejection,
                            message_id.as_ref().map(|m| m.as_str()),
                            routing_key.as_str(),
                        );
                    }
                });
            }
        }
        Ok(())
    }
}

impl Forwarding {
    /// Ack the delivery if its forward was confirmed. On any failure, leave
    /// it unacked, log, and end the session. True once acked.
    ///
    /// An unroutable forward to the edges is fine (no edge is listening; it
    /// is counted). An unroutable dead letter is not: its queue is gone, so
    /// the session ends and the next one declares it again before the
    /// publication comes back.
    async fn settle(
        &self,
        outcome: Result<Forwarded, ForwardError>,
        acker: &Acker,
        to: Destination,
    ) -> bool {
        match (outcome, to) {
            (Ok(Forwarded::Routed), _) => {}
            (Ok(Forwarded::Unroutable), Destination::Edges) => {
                tracing::debug!("forward confirmed, but no edge queue is bound")
            }
            (Ok(Forwarded::Unroutable), Destination::Dead) => {
                tracing::warn!("the dead-letter exchange routes to no queue; declaring it again");
                self.failed.cancel();
                return false;
            }
            (Err(e), _) => {
                tracing::warn!(error = %e, "a forward was not confirmed; the delivery will be redelivered");
                self.failed.cancel();
                return false;
            }
        }
        match acker.ack(BasicAckOptions::default()).await {
            Ok(true) => true,
            Ok(false) => {
                tracing::warn!(
                    "cannot ack a forwarded delivery (channel closed); it will be redelivered"
                );
                self.failed.cancel();
                false
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot ack a forwarded delivery; it will be redelivered");
                self.failed.cancel();
                false
            }
        }
    }

    fn rejected(&self, rejection: &Rejection, message_id: Option<&str>, routing_key: &str) {
        self.publish_metrics.reject(SOURCE, rejection.kind);
        tracing::warn!(
            reason = %rejection.reason,
            field = rejection.field,
            message_id,
            routing_key,
            "publication refused and dead-lettered"
        );
    }
}
