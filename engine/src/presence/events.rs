//! Presence events to a topic: the bounded queue and the task that stores
//! the transitions ([`crate::presence::transition`]) through the
//! delayed store, their configuration (`[presence]`) and metrics.
//!
//! Bounds: transitions wait in one queue of `presence.events_queue`
//! (10,000) per process for the task that stores them in batches of up to
//! [`BATCH`]; when the queue is full the newest is dropped (policy
//! drop-newest). Every transition is counted in
//! `herald_presence_events_total{event, outcome}`: `published`,
//! `duplicate` (already stored), `dropped` (queue full), `failed` (the
//! store refused the batch), `no_callback` (the topic has no
//! `callback_url`: nothing would hear it, nothing is stored).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use herald_protocol::envelope::{Notification, Scope};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::callback::target::Target;
use crate::presence::transition::{Move, Transition, event_id};
use crate::schedule::entry::{Entry, Phase};
use crate::schedule::service::Delayed;
use crate::schedule::store::Insert;
use crate::schedule::timing::now_ms;

/// Most transitions stored in one batch.
pub const BATCH: usize = 500;
/// The default of `presence.events_queue`.
pub const EVENTS_QUEUE: usize = 10_000;

/// The entry stored for `t`: due now, callback-only, of `topic`.
pub fn entry(t: &Transition, topic: &str, now: u64) -> Entry {
    let payload = Bytes::from(t.payload());
    Entry {
        notification: Notification {
            id: t.id.clone(),
            scope: Scope::User,
            users: vec![t.user.clone()],
            clients: Vec::new(),
            sites: Vec::new(),
            event: t.event.as_str().to_owned(),
            topic: Some(topic.to_owned()),
            content_type: "application/json".to_owned(),
            payload,
            payload_is_utf8: true,
            ttl: None,
            encodings: Default::default(),
            accepted: herald_protocol::envelope::Accepted::at(std::time::SystemTime::now()),
        },
        due_ms: now,
        accepted_ms: now,
        when_online: false,
        attempts: 0,
        phase: Phase::Deliver,
        fire_ms: 0,
        calls: 0,
        target: Target {
            callback_url: None,
            recheck_url: None,
            browsers: false,
        },
    }
}

/// `[presence]`: events to a topic (both binaries). Each field is the key of its name,
/// described once in its row of [`crate::config::table::SECTIONS`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PresenceConfig {
    /// Key `presence.events_topic`.
    pub events_topic: Option<String>,
    /// Key `presence.events_queue`.
    pub events_queue: usize,
}

impl Default for PresenceConfig {
    fn default() -> Self {
        PresenceConfig {
            events_topic: None,
            events_queue: EVENTS_QUEUE,
        }
    }
}

impl PresenceConfig {
    /// Every rule, as problems named `presence.*`.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(t) = &self.events_topic
            && !herald_protocol::envelope::is_valid_name(t)
        {
            out.push(format!(
                "presence.events_topic: {t:?} is not a topic name (1 to 200 characters of A-Z a-z 0-9 . _ ~ @ / + = -)"
            ));
        }
        if !(1..=1_000_000).contains(&self.events_queue) {
            out.push(format!(
                "presence.events_queue: must be 1 to 1000000, got {}",
                self.events_queue
            ));
        }
        out
    }
}

/// What came of a transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventOutcome {
    /// Stored: its callback will be made.
    Published,
    /// Its id was stored already (a repeat).
    Duplicate,
    /// The queue was full (drop-newest).
    Dropped,
    /// The store refused the batch.
    Failed,
    /// The topic has no `callback_url`.
    NoCallback,
}

impl EventOutcome {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            EventOutcome::Published => "published",
            EventOutcome::Duplicate => "duplicate",
            EventOutcome::Dropped => "dropped",
            EventOutcome::Failed => "failed",
            EventOutcome::NoCallback => "no_callback",
        }
    }
}

impl prometheus_client::encoding::EncodeLabelValue for EventOutcome {
    fn encode(
        &self,
        encoder: &mut prometheus_client::encoding::LabelValueEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        std::fmt::Write::write_str(encoder, self.as_str())
    }
}

/// Labels of [`EventMetrics::events`].
#[derive(Debug, Clone, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct EventLabels {
    /// `online` or `offline`.
    pub event: Move,
    /// What came of it.
    pub outcome: EventOutcome,
}

/// Counters of presence events.
#[derive(Debug, Clone, Default)]
pub struct EventMetrics {
    /// Transitions by event and outcome.
    pub events: Family<EventLabels, Counter>,
    /// Users of edge processes found dead and taken offline by the
    /// routers' sweep.
    pub swept: Counter,
}

impl EventMetrics {
    /// Register `herald_presence_events_total` and
    /// `herald_presence_swept_users_total`.
    pub fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        registry.register(
            "herald_presence_events",
            "Online and offline transitions for presence.events_topic, by event and outcome (published, duplicate, dropped: queue full, failed: store refused, no_callback: the topic has no callback_url)",
            self.events.clone(),
        );
        registry.register(
            "herald_presence_swept_users",
            "Users taken off an edge process whose liveness key expired (the routers' presence sweep)",
            self.swept.clone(),
        );
        // Every series at 0 from the start (ten), so a scrape shows the
        // family before the first event and a rate has a baseline.
        for event in [Move::Online, Move::Offline] {
            for outcome in [
                EventOutcome::Published,
                EventOutcome::Duplicate,
                EventOutcome::Dropped,
                EventOutcome::Failed,
                EventOutcome::NoCallback,
            ] {
                self.count(event, outcome, 0);
            }
        }
    }

    /// Count `n` transitions.
    pub fn count(&self, event: Move, outcome: EventOutcome, n: u64) {
        self.events
            .get_or_create(&EventLabels { event, outcome })
            .inc_by(n);
    }
}

/// Where transitions go: a bounded queue to the task that stores them
/// ([`EventStorer`]), or nowhere when no topic is set. Cheap to clone.
#[derive(Debug, Clone)]
pub struct PresenceEvents {
    tx: Option<mpsc::Sender<Transition>>,
    metrics: EventMetrics,
    /// Random per process: with `seq`, the ids of events decided here
    /// (standalone).
    boot: Arc<str>,
    seq: Arc<AtomicU64>,
}

impl PresenceEvents {
    /// No topic: transitions are ignored (and not counted).
    pub fn disabled(metrics: EventMetrics) -> Self {
        PresenceEvents {
            tx: None,
            metrics,
            boot: Arc::from(""),
            seq: Arc::default(),
        }
    }

    /// With `config.events_topic` set: the queue, and the task that
    /// stores its transitions into `delayed` (run it with the process's
    /// other tasks). Without: [`Self::disabled`] and no task.
    pub fn new(
        config: &PresenceConfig,
        delayed: Delayed,
        metrics: EventMetrics,
    ) -> (Self, Option<EventStorer>) {
        let Some(topic) = config.events_topic.clone() else {
            return (PresenceEvents::disabled(metrics), None);
        };
        let (tx, rx) = mpsc::channel(config.events_queue.max(1));
        let storer = EventStorer {
            rx,
            storer: Storer {
                topic: Arc::from(topic),
                delayed,
                metrics: metrics.clone(),
            },
        };
        let bits: u64 = rand::random();
        let events = PresenceEvents {
            tx: Some(tx),
            metrics,
            boot: Arc::from(format!("{bits:016x}")),
            seq: Arc::default(),
        };
        (events, Some(storer))
    }

    /// Whether a topic is set.
    pub fn enabled(&self) -> bool {
        self.tx.is_some()
    }

    /// The metrics transitions are counted in.
    pub fn metrics(&self) -> &EventMetrics {
        &self.metrics
    }

    /// Queue `t` for storing; counted as `dropped` when the queue is full.
    pub fn emit(&self, t: Transition) {
        let Some(tx) = &self.tx else { return };
        let event = t.event;
        if tx.try_send(t).is_err() {
            self.metrics.count(event, EventOutcome::Dropped, 1);
        }
    }

    /// A transition decided in this process (standalone: the hub saw the
    /// user's first or last session), queued with an id of this process's
    /// boot and a counter.
    pub fn local(&self, user: &str, site: &str, client: Option<&str>, event: Move, edge: &str) {
        if self.tx.is_none() {
            return;
        }
        let n = self.seq.fetch_add(1, Ordering::Relaxed).to_string();
        self.emit(Transition {
            user: user.to_owned(),
            site: site.to_owned(),
            client: client.map(str::to_owned),
            event,
            at_ms: now_ms(),
            edge: edge.to_owned(),
            id: event_id(&[edge, &self.boot, &n, user, event.as_str()]),
        });
    }
}

/// The task that stores queued transitions, in batches of up to
/// [`BATCH`], until shutdown (then what is queued, and it returns).
pub struct EventStorer {
    rx: mpsc::Receiver<Transition>,
    storer: Storer,
}

impl std::fmt::Debug for EventStorer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStorer")
            .field("topic", &self.storer.topic)
            .finish_non_exhaustive()
    }
}

impl crate::task::Task for EventStorer {
    fn name(&self) -> &'static str {
        "presence-events"
    }

    fn run(self: Box<Self>, shutdown: CancellationToken) -> crate::task::TaskFuture {
        let EventStorer { rx, storer } = *self;
        Box::pin(storer.run(rx, shutdown))
    }
}

struct Storer {
    topic: Arc<str>,
    delayed: Delayed,
    metrics: EventMetrics,
}

impl Storer {
    async fn run(self, mut rx: mpsc::Receiver<Transition>, shutdown: CancellationToken) {
        let mut batch = Vec::with_capacity(BATCH);
        loop {
            let n = tokio::select! {
                biased;
                n = rx.recv_many(&mut batch, BATCH) => n,
                _ = shutdown.cancelled() => {
                    rx.close();
                    while rx.recv_many(&mut batch, BATCH).await > 0 {
                        self.store(std::mem::take(&mut batch)).await;
                    }
                    return;
                }
            };
            if n == 0 {
                return;
            }
            self.store(std::mem::take(&mut batch)).await;
        }
    }

    async fn store(&self, batch: Vec<Transition>) {
        let topic: &str = &self.topic;
        self.delayed.know_topics(std::iter::once(topic)).await;
        if !self.delayed.topics().calls_back(Some(topic)) {
            for t in &batch {
                self.metrics.count(t.event, EventOutcome::NoCallback, 1);
            }
            tracing::debug!(
                topic,
                events = batch.len(),
                "presence events not stored: the topic has no callback_url"
            );
            return;
        }
        let now = now_ms();
        let events: Vec<Move> = batch.iter().map(|t| t.event).collect();
        let entries = batch.iter().map(|t| entry(t, topic, now)).collect();
        match self.delayed.accept(entries).await {
            Ok(outcome) => {
                for (event, insert) in events.into_iter().zip(outcome) {
                    let o = match insert {
                        Insert::Accepted => EventOutcome::Published,
                        Insert::Duplicate(_) => EventOutcome::Duplicate,
                    };
                    self.metrics.count(event, o, 1);
                }
            }
            Err(e) => {
                for event in events {
                    self.metrics.count(event, EventOutcome::Failed, 1);
                }
                tracing::warn!(error = %e, topic, events = batch.len(), "presence events not stored");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn online() -> Transition {
        crate::presence::transition::sample_online()
    }

    #[test]
    fn the_entry_is_callback_only_due_now_of_the_topic() {
        let e = entry(&online(), "presence", 42);
        assert_eq!(e.due_ms, 42);
        assert!(!e.target.browsers);
        assert_eq!(e.notification.topic.as_deref(), Some("presence"));
        assert_eq!(e.notification.event, "online");
        assert_eq!(e.notification.users, vec!["alice".to_owned()]);
        assert_eq!(e.id(), online().id);
    }

    #[test]
    fn config_is_checked() {
        assert!(PresenceConfig::default().problems().is_empty());
        let bad = PresenceConfig {
            events_topic: Some("has space".into()),
            events_queue: 0,
        };
        let p = bad.problems();
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].starts_with("presence.events_topic"));
        assert!(p[1].starts_with("presence.events_queue"));
    }

    #[test]
    fn a_full_queue_drops_the_newest_and_counts_it() {
        let metrics = EventMetrics::default();
        let (tx, _rx) = mpsc::channel(1);
        let events = PresenceEvents {
            tx: Some(tx),
            ..PresenceEvents::disabled(metrics.clone())
        };
        events.emit(online());
        events.emit(online());
        let dropped = metrics
            .events
            .get_or_create(&EventLabels {
                event: Move::Online,
                outcome: EventOutcome::Dropped,
            })
            .get();
        assert_eq!(dropped, 1);
    }
}
