//! The router's presence intake: consume the edges' presence reports from
//! this root's shared `herald.presence` queue, record them in the
//! [`PresenceBook`] (Redis, shared by every router), and release what is
//! held for each user who came online. The users a report moved between
//! offline and online cluster-wide (decided by the book, once whichever
//! root's copy comes first) go to the presence events
//! (`presence.events_topic`).
//!
//! A report is acked once recorded. A report that cannot be read is
//! dead-lettered to `herald.dead` with `x-herald-error` (confirmed, then
//! acked). A book that fails (Redis down) ends the session: the report goes
//! back to the queue and the supervisor reconnects with backoff.

use std::sync::Arc;

use futures_util::StreamExt;
use lapin::Connection;
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use tokio_util::sync::CancellationToken;

use herald_amqp::envelope::{dead_letter_properties, short};
use herald_amqp::metrics::AmqpMetrics;
use herald_amqp::presence::{PresenceAmqp, PresenceReport};
use herald_amqp::publisher::{Forwarded, Publisher};
use herald_amqp::supervisor::SessionError;
use herald_amqp::topology::Topology;
use herald_engine::presence::PresenceBook;
use herald_engine::presence::events::PresenceEvents;
use herald_engine::schedule::service::Delayed;
use herald_engine::schedule::timing::now_ms;

/// Reports in flight per router.
const PREFETCH: u16 = 64;
/// Most reports the shared queue keeps (drop-head beyond).
pub const QUEUE_MAX_LENGTH: u32 = 100_000;

/// The intake session, run by a [`herald_amqp::Supervisor`] on every connection.
#[derive(Clone)]
pub struct PresenceIntake {
    topology: Topology,
    book: Arc<dyn PresenceBook>,
    delayed: Delayed,
    metrics: AmqpMetrics,
    events: PresenceEvents,
}

impl std::fmt::Debug for PresenceIntake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PresenceIntake")
            .field("queue", &self.topology.presence_queue)
            .finish_non_exhaustive()
    }
}

impl PresenceIntake {
    /// An intake recording into `book`, releasing through `delayed`, and
    /// publishing the users a report moved cluster-wide to `events`.
    pub fn new(
        topology: Topology,
        book: Arc<dyn PresenceBook>,
        delayed: Delayed,
        metrics: AmqpMetrics,
        events: PresenceEvents,
    ) -> Self {
        PresenceIntake {
            topology,
            book,
            delayed,
            metrics,
            events,
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
            self.metrics.clone(),
        )
        .await?;
        self.topology.declare(publisher.channel()).await?;
        self.topology
            .declare_presence(publisher.channel(), QUEUE_MAX_LENGTH)
            .await?;
        let channel = connection.create_channel().await?;
        channel
            .basic_qos(PREFETCH, BasicQosOptions::default())
            .await?;
        let tag = format!(
            "herald-presence-{}",
            &herald_engine::publish::new_id()[..12]
        );
        let mut consumer = channel
            .basic_consume(
                short(&self.topology.presence_queue),
                short(&tag),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        tracing::info!(queue = %self.topology.presence_queue, "consuming presence reports");
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
                        "the broker cancelled the presence consumer".into(),
                    ));
                }
            }
        }
    }

    async fn handle(&self, delivery: Delivery, publisher: &Publisher) -> Result<(), SessionError> {
        match PresenceReport::from_amqp(&delivery.properties, &delivery.data) {
            Ok(report) => {
                let moved =
                    self.book.record(&report, now_ms()).await.map_err(|e| {
                        SessionError::Lost(format!("recording presence failed: {e}"))
                    })?;
                for t in moved {
                    self.events.emit(t);
                }
                self.delayed.metrics().presence_reports.inc();
                for user in &report.online {
                    self.delayed.user_online(user);
                }
                tracing::debug!(edge = %report.edge, online = report.online.len(), offline = report.offline.len(), "presence recorded");
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
                self.delayed.metrics().presence_rejected.inc();
                tracing::warn!(reason = %rejection.reason, field = rejection.field, "presence report refused and dead-lettered");
            }
        }
        delivery.ack(BasicAckOptions::default()).await?;
        Ok(())
    }
}
