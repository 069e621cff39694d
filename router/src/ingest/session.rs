//! The session loop: one per connection, from declaring the topology to
//! the drain at shutdown. Each delivery becomes a forward
//! ([`plan`](super::plan)) that joins the forwards in flight
//! ([`in_flight`](super::in_flight)), whose confirms are settled and acked
//! as they come back.

use std::sync::Arc;

use futures_util::StreamExt;
use lapin::Connection;
use lapin::message::Delivery;
use lapin::options::{BasicCancelOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use tokio_util::sync::CancellationToken;

use super::in_flight::{InFlight, ack_written};
use super::{Ingest, SOURCE};
use herald_amqp::envelope::short;
use herald_amqp::publisher::Publisher;
use herald_amqp::supervisor::SessionError;
use herald_engine::metrics::SourceLabels;

impl Ingest {
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
        let mut publisher = Publisher::open(
            &connection,
            &topology.edges_exchange,
            self.inner.amqp_metrics.clone(),
        )
        .await?;
        if let Some(routing) = &config.routing {
            publisher = publisher.with_routing(&topology.targeted_exchange(), Arc::clone(routing));
        }
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
