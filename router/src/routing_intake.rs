//! The routing intake (`routing.mode = "targeted"`): this router's own view
//! of which edge holds whom ([`herald_amqp::routing`]), fed by every
//! edge's presence reports and snapshots.
//!
//! Each session declares a queue of its own (exclusive, deleted with the
//! connection, at most `routing.queue_max_length` reports, drop-head),
//! bound to `herald.presence` and `herald.presence.sync`, so every router
//! reads every report (the presence book's queue is shared: each report
//! reaches one router of a root). The view starts over with each session
//! (reports may have been missed in between) and routes to every edge
//! while no session runs.
//!
//! A report that brings a user or client to an edge returns what this
//! router sent elsewhere for them lately; it is re-sent to that edge
//! (through the publisher the intake put in the slot), confirmed in the
//! background, at most [`CATCH_UP_IN_FLIGHT`] messages at once. A report
//! that cannot be read is counted and acknowledged.

use std::sync::Arc;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicQosOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{Connection, ExchangeKind};
use tokio_util::sync::CancellationToken;

use herald_amqp::envelope::short;
use herald_amqp::link::{Bundling, PublisherSlot};
use herald_amqp::presence::{PresenceAmqp, PresenceReport};
use herald_amqp::publisher::Forwarded;
use herald_amqp::routing::{CatchUp, Routing};
use herald_amqp::supervisor::SessionError;
use herald_amqp::topology::{Topology, bounded, durable_exchange};
use herald_engine::schedule::timing::now_ms;

/// Reports in flight to this router.
const PREFETCH: u16 = 256;
/// Most catch-up messages waiting for their confirm; the intake waits for
/// one before publishing more.
pub const CATCH_UP_IN_FLIGHT: usize = 256;

/// The routing intake, run by a [`herald_amqp::Supervisor`] on every
/// connection.
#[derive(Debug, Clone)]
pub struct RoutingIntake {
    topology: Topology,
    routing: Arc<Routing>,
    slot: PublisherSlot,
    bundling: Bundling,
    queue_max_length: u32,
}

/// Stops the view when the session ends, however it ends.
struct Listening(Arc<Routing>);

impl Drop for Listening {
    fn drop(&mut self) {
        self.0.stop();
    }
}

impl RoutingIntake {
    /// An intake feeding `routing`, re-sending through the publisher in
    /// `slot` in messages of `bundling`.
    pub fn new(
        topology: Topology,
        routing: Arc<Routing>,
        slot: PublisherSlot,
        bundling: Bundling,
        queue_max_length: u32,
    ) -> Self {
        RoutingIntake {
            topology,
            routing,
            slot,
            bundling,
            queue_max_length,
        }
    }

    /// One session: declare, consume until `shutdown` or a failure.
    pub async fn run(
        &self,
        connection: Arc<Connection>,
        shutdown: CancellationToken,
    ) -> Result<(), SessionError> {
        let channel = connection.create_channel().await?;
        let presence = self.topology.presence_exchange.as_str();
        let sync = self.topology.sync_exchange();
        durable_exchange(&channel, presence, ExchangeKind::Fanout).await?;
        durable_exchange(&channel, &sync, ExchangeKind::Fanout).await?;
        let options = QueueDeclareOptions {
            exclusive: true,
            auto_delete: true,
            ..QueueDeclareOptions::default()
        };
        let queue = channel
            .queue_declare("".into(), options, bounded(self.queue_max_length))
            .await?;
        let queue = queue.name().clone();
        for exchange in [presence, sync.as_str()] {
            channel
                .queue_bind(
                    queue.clone(),
                    short(exchange),
                    "".into(),
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await?;
        }
        channel
            .basic_qos(PREFETCH, BasicQosOptions::default())
            .await?;
        let mut consumer = channel
            .basic_consume(
                queue.clone(),
                "herald-routing".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        self.routing.start(now_ms());
        let _listening = Listening(Arc::clone(&self.routing));
        tracing::info!(queue = %queue, "routing view listening to presence reports");
        let mut confirms = FuturesUnordered::new();
        loop {
            let next = tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                Some(()) = confirms.next(), if !confirms.is_empty() => continue,
                next = consumer.next() => next,
            };
            let delivery = match next {
                Some(Ok(d)) => d,
                Some(Err(e)) => return Err(e.into()),
                None => {
                    return Err(SessionError::Lost(
                        "the broker cancelled the routing consumer".into(),
                    ));
                }
            };
            match PresenceReport::from_amqp(&delivery.properties, &delivery.data) {
                Ok(report) => {
                    for catch_up in self.routing.apply(&report, now_ms()) {
                        self.catch_up(catch_up, &mut confirms).await;
                    }
                }
                Err(rejection) => {
                    self.routing.metrics().reports_rejected.inc();
                    tracing::warn!(reason = %rejection.reason, field = rejection.field, "presence report unreadable; not applied to the routing view");
                }
            }
            delivery.ack(BasicAckOptions::default()).await?;
        }
    }

    /// Re-send what went elsewhere to the edge recipients arrived on.
    async fn catch_up(
        &self,
        (edge, batch): CatchUp,
        confirms: &mut FuturesUnordered<futures_util::future::BoxFuture<'static, ()>>,
    ) {
        let metrics = self.routing.metrics().clone();
        let Some(publisher) = self.slot.current() else {
            metrics.catch_up_failed.inc_by(batch.len() as u64);
            tracing::warn!(edge = %edge, notifications = batch.len(), "no publisher for a catch-up");
            return;
        };
        tracing::debug!(edge = %edge, notifications = batch.len(), "catching up an edge recipients arrived on");
        for range in self.bundling.split(&batch) {
            while confirms.len() >= CATCH_UP_IN_FLIGHT {
                confirms.next().await;
            }
            let count = range.len() as u64;
            match publisher.send_to_edge(&edge, &batch[range]).await {
                Ok(sent) => {
                    let publisher = publisher.clone();
                    let metrics = metrics.clone();
                    confirms.push(Box::pin(async move {
                        if !matches!(publisher.confirmed(sent).await, Ok(Forwarded::Routed)) {
                            metrics.catch_up_failed.inc_by(count);
                        }
                    }));
                }
                Err(e) => {
                    metrics.catch_up_failed.inc_by(count);
                    tracing::warn!(edge = %edge, error = %e, "a catch-up was not published");
                }
            }
        }
    }
}
