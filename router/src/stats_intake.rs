//! The router's stats intake: consume the edges' stats reports
//! ([`herald_amqp::stats`]) from this root's shared `herald.presence.stats`
//! queue and keep each edge's latest in the [`RedisStatsBook`], where every
//! router reads it for `GET /v1/stats` ([`crate::stats`]).
//!
//! The queue is bounded ([`QUEUE_MAX_LENGTH`], policy drop-head: the oldest
//! go, every edge sends a newer report with its next heartbeat); at most
//! [`PREFETCH`] reports are in flight per router. A report is acked once
//! recorded (or found older than the one kept, or refused because the book
//! is full: counted). A report that cannot be read is dead-lettered to
//! `herald.dead` with `x-herald-error` (confirmed, then acked) and counted
//! in `herald_stats_intake_reports_total{result="rejected"}`. A book that
//! fails (Redis down) ends the session: the report goes back to the queue
//! and the supervisor reconnects with backoff.

use std::sync::Arc;

use futures_util::StreamExt;
use lapin::Connection;
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use tokio_util::sync::CancellationToken;

use herald_amqp::envelope::{dead_letter_properties, short};
use herald_amqp::metrics::AmqpMetrics;
use herald_amqp::publisher::{Forwarded, Publisher};
use herald_amqp::supervisor::SessionError;
use herald_amqp::topology::Topology;
use herald_engine::schedule::store::redis::{Put, RedisStatsBook};

use crate::stats::StatsMetrics;

/// Reports in flight per router.
pub const PREFETCH: u16 = 16;
/// Most reports the shared queue keeps (drop-head beyond): a few per edge.
pub const QUEUE_MAX_LENGTH: u32 = 10_000;

/// The intake session, run by a [`herald_amqp::Supervisor`] on every connection.
#[derive(Clone)]
pub struct StatsIntake {
    topology: Topology,
    book: RedisStatsBook,
    metrics: StatsMetrics,
    amqp: AmqpMetrics,
}

impl std::fmt::Debug for StatsIntake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatsIntake")
            .field("queue", &self.topology.stats_queue())
            .finish_non_exhaustive()
    }
}

impl StatsIntake {
    /// An intake recording into `book`.
    pub fn new(
        topology: Topology,
        book: RedisStatsBook,
        metrics: StatsMetrics,
        amqp: AmqpMetrics,
    ) -> Self {
        StatsIntake {
            topology,
            book,
            metrics,
            amqp,
        }
    }

    /// One session: declare, consume until `shutdown` or a failure.
    pub async fn run(
        &self,
        connection: Arc<Connection>,
        shutdown: CancellationToken,
    ) -> Result<(), SessionError> {
        let publisher = Publisher::open(
            &connection,
            &self.topology.edges_exchange,
            self.amqp.clone(),
        )
        .await?;
        self.topology.declare(publisher.channel()).await?;
        self.topology
            .declare_stats(publisher.channel(), QUEUE_MAX_LENGTH)
            .await?;
        let channel = connection.create_channel().await?;
        channel
            .basic_qos(PREFETCH, BasicQosOptions::default())
            .await?;
        let tag = format!("herald-stats-{}", &herald_engine::publish::new_id()[..12]);
        let queue = self.topology.stats_queue();
        let mut consumer = channel
            .basic_consume(
                short(&queue),
                short(&tag),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        tracing::info!(queue = %queue, "consuming stats reports");
        loop {
            let next = tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                next = consumer.next() => next,
            };
            match next {
                Some(Ok(delivery)) => self.handle(delivery, &publisher).await?,
                Some(Err(e)) => return Err(e.into()),
                None => {
                    return Err(SessionError::Lost(
                        "the broker cancelled the stats consumer".into(),
                    ));
                }
            }
        }
    }

    async fn handle(&self, delivery: Delivery, publisher: &Publisher) -> Result<(), SessionError> {
        match herald_amqp::stats::decode(&delivery.properties, &delivery.data) {
            Ok(part) => {
                let put = self
                    .book
                    .put(&part)
                    .await
                    .map_err(|e| SessionError::Lost(format!("recording stats failed: {e}")))?;
                match put {
                    Put::Stored => self.metrics.report("recorded"),
                    Put::Older => self.metrics.report("older"),
                    Put::Full => {
                        self.metrics.report("full");
                        tracing::warn!(edge = %part.id, "stats report of a new edge refused: the book of parts is full");
                    }
                }
                tracing::debug!(edge = %part.id, topics = part.topics.len(), "stats report recorded");
            }
            Err(rejection) => {
                let dead = dead_letter_properties(
                    &delivery.properties,
                    &rejection,
                    delivery.routing_key.as_str(),
                );
                let confirm = publisher
                    .send_raw(
                        short(&self.topology.dead_exchange),
                        delivery.routing_key.clone(),
                        dead,
                        &bytes::Bytes::from(delivery.data.clone()),
                    )
                    .await?;
                match publisher.confirmed_one(confirm).await {
                    Ok(Forwarded::Routed) => {}
                    Ok(Forwarded::Unroutable) | Err(_) => {
                        return Err(SessionError::Lost(
                            "a dead letter was not taken; declaring again".into(),
                        ));
                    }
                }
                self.metrics.report("rejected");
                tracing::warn!(reason = %rejection.reason, field = rejection.field, "stats report refused and dead-lettered");
            }
        }
        delivery.ack(BasicAckOptions::default()).await?;
        Ok(())
    }
}
