//! The AMQP intake: consume the publications queue, validate, forward.
//!
//! For each delivery, in the order they arrive:
//! - valid: publish to the edges exchange (confirm mode), and once the broker
//!   confirms, ack the delivery;
//! - invalid: publish the original body and properties to the dead-letter
//!   exchange with `x-herald-error` (the reason) and `x-herald-field`, and
//!   once the broker confirms, ack the delivery.
//!
//! - delayed (`delay-ms`, `deliver-at`, `when-online`): store it in the
//!   delayed store ([`Delayed::accept`]), and once it is durable, ack;
//! - a cancel (`type` = `herald.cancel`): cancel in the delayed store, ack;
//!   an unknown id is dead-lettered.
//!
//! While the delayed store is unreachable, a delayed publication ends the
//! session like a failed forward: it goes back to the queue, and the intake
//! reconnects with backoff (nothing delayed is lost or delivered early).
//!
//! Nothing is acked before its forward is confirmed, so a publication the
//! backend got a confirm for survives a router crash or a broker restart: at
//! worst it is forwarded twice (delivery is at-least-once; edges can dedupe
//! by `message_id`). A forward that fails or is refused ends the session: the
//! connection closes, its unacked deliveries go back to the queue, and the
//! supervisor reconnects with backoff.
//!
//! One task does it all, without a task per delivery: every hand-off
//! between lapin's I/O thread and the tokio workers costs the router more
//! CPU than validating a publication does.
//!
//! ```text
//!  consumer --delivery--> validate --publish, in delivery order--> forwards in flight (Ordered)
//!                                                                     | confirms, oldest first
//!                                                                     v
//!                       basic.ack(multiple) of the last one <-- every confirm ready now
//! ```
//!
//! Forwards are sent in delivery order and confirmed concurrently, and
//! taken back in delivery order ([`Ordered`](ordered::Ordered): only the
//! oldest forward wakes the task). Once the confirms that are in have been taken, one
//! `basic.ack` with `multiple` acks every delivery up to the last of them.
//! The first forward taken back that failed ends the session; it and the
//! ones after it stay unacked.
//!
//! Bound: the prefetch (`basic.qos`, set before `basic.consume`) caps the
//! unacked deliveries, so at most `prefetch` forwards are in flight.

mod in_flight;
mod ordered;
mod plan;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use herald_protocol::envelope::{Limits, Notification};
use lapin::Connection;
use lapin::message::Delivery;
use lapin::options::{BasicCancelOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::{DeliveryTag, FieldTable, ShortString};
use tokio_util::sync::CancellationToken;

use self::in_flight::{InFlight, ack_written};
use herald_amqp::envelope::{Rejection, short};
use herald_amqp::link::PublisherSlot;
use herald_amqp::metrics::AmqpMetrics;
use herald_amqp::publisher::{ForwardError, Forwarded, Publisher};
use herald_amqp::supervisor::SessionError;
use herald_amqp::topology::Topology;
use herald_engine::metrics::{PublishMetrics, SourceLabels};
use herald_engine::schedule::service::Delayed;

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

/// The intake session: run by the [`herald_amqp::Supervisor`] on
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
    delayed: Option<Delayed>,
}

/// A forward on its way: its publish, then the broker's confirm.
type Forward = Pin<Box<dyn Future<Output = Confirmed> + Send>>;

/// What the broker said about a forward, and what settling its delivery
/// needs.
struct Confirmed {
    delivery_tag: DeliveryTag,
    outcome: Result<Forwarded, ForwardError>,
    sent: Sent,
}

/// What a forward carried.
enum Sent {
    /// A valid publication, to the edges exchange.
    Edges {
        notification: Notification,
        redelivered: bool,
    },
    /// A delayed publication, into the delayed store.
    Stored {
        id: String,
        due_ms: u64,
        duplicate: bool,
    },
    /// A cancel, applied to the delayed store.
    Cancelled { id: String, too_late: bool },
    /// A refused publication, to the dead-letter exchange.
    Dead {
        rejection: Rejection,
        message_id: Option<ShortString>,
        routing_key: ShortString,
    },
}

impl Ingest {
    /// An intake that publishes through a publisher it also puts in `slot`
    /// (for the HTTP link).
    /// With `delayed`, publications carrying timing headers are stored
    /// there; without, they are dead-lettered
    /// ([`DELAYED_DISABLED`](herald_amqp::envelope::DELAYED_DISABLED)).
    pub fn new(
        config: IngestConfig,
        slot: PublisherSlot,
        publish_metrics: PublishMetrics,
        amqp_metrics: AmqpMetrics,
        delayed: Option<Delayed>,
    ) -> Self {
        Ingest {
            inner: Arc::new(Inner {
                config,
                slot,
                publish_metrics,
                amqp_metrics,
                delayed,
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
        let tag = format!("herald-router-{}", &herald_engine::publish::new_id()[..12]);
        let mut consumer = channel
            .basic_consume(
                short(&topology.queue),
                short(&tag),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        tracing::info!(queue = %topology.queue, edges = %topology.edges_exchange, prefetch = config.prefetch, consumer = %tag, "consuming publications");

        let accepted = self
            .inner
            .publish_metrics
            .accepted
            .get_or_create(&SourceLabels { source: SOURCE })
            .clone();
        let mut flight = InFlight::new(channel.clone());
        let outcome = loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break Ok(()),
                Some(confirmed) = flight.forwards.next(), if !flight.forwards.is_empty() => {
                    if let Err(e) = self.settle_ready(confirmed, &mut flight, &accepted).await {
                        break Err(e);
                    }
                }
                written = ack_written(&mut flight.ack_write), if flight.ack_write.is_some() => {
                    if let Err(e) = written {
                        tracing::warn!(error = %e, "cannot ack forwarded deliveries; they will be redelivered");
                        break Err(e.into());
                    }
                }
                next = consumer.next() => match next {
                    Some(Ok(delivery)) => {
                        if let Err(e) = self.handle(delivery, &publisher, &mut flight).await {
                            break Err(e);
                        }
                    }
                    Some(Err(e)) => break Err(e.into()),
                    None => break Err(SessionError::Lost("the broker cancelled the consumer".into())),
                },
            }
        };
        // On an error, dropping the forwards in flight leaves their
        // deliveries unacked: the broker requeues them when the connection
        // closes.
        outcome?;
        // Shutdown: stop deliveries, let confirmed forwards be acked, close.
        if let Err(e) = channel
            .basic_cancel(short(&tag), BasicCancelOptions::default())
            .await
        {
            tracing::warn!(error = %e, "cancelling the consumer failed");
        }
        let pending = flight.forwards.len();
        let drained = tokio::time::timeout(config.drain_timeout, async {
            while let Some(confirmed) = flight.forwards.next().await {
                self.settle_ready(confirmed, &mut flight, &accepted).await?;
            }
            ack_written(&mut flight.ack_write).await?;
            Ok::<(), SessionError>(())
        })
        .await;
        match drained {
            Ok(Ok(())) => tracing::info!(forwards = pending, "in-flight forwards finished"),
            Ok(Err(e)) => tracing::warn!(
                error = %e,
                unacked = flight.forwards.len(),
                "draining the forwards failed; the broker will redeliver what is not acked"
            ),
            Err(_) => tracing::warn!(
                unconfirmed = flight.forwards.len(),
                timeout_ms = config.drain_timeout.as_millis() as u64,
                "forwards still unconfirmed at shutdown; the broker will redeliver them"
            ),
        }
        drop(flight);
        for ch in [&channel, publisher.channel()] {
            if let Err(e) = ch.close(200, "OK".into()).await {
                tracing::debug!(error = %e, "closing a channel");
            }
        }
        Ok(())
    }

    /// Parse one delivery and send its forward, which joins `flight`.
    async fn handle(
        &self,
        delivery: Delivery,
        publisher: &Publisher,
        flight: &mut InFlight,
    ) -> Result<(), SessionError> {
        flight.forwards.push(self.forward(delivery, publisher));
        Ok(())
    }
}
