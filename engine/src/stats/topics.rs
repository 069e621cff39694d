//! [`TopicStats`]: the per-topic rolling windows of one process and their
//! Prometheus counters, with a bounded set of topic names.
//!
//! # Which names get a row (and a `topic` label)
//! A topic is counted under its own name when it is *admitted*; everything
//! else (no topic, or a topic not admitted) is counted under `other`.
//! - Where the registered topics are known (standalone, and the routers:
//!   they hold the store), a topic is admitted when it is registered
//!   (`PUT /v1/topics/{name}`) or configured (`[schedule.topics.NAME]`).
//! - An edge does not hold the topics, so it admits names as it sees them;
//!   the routers fold an edge's rows of unregistered names into `other`
//!   when they merge the cluster's figures.
//! - At most `[stats] max_topics` names are admitted per process (first come,
//!   kept for the process's life: a name's day window must not vanish). Past
//!   that, policy *fold*: new names count under `other`, and
//!   `herald_stats_topics_folded_total` counts each event folded so.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::window::{Counts, EVENTS, Event, Rolling, Windows};

/// Name of the bucket of everything not counted under its own name.
pub const OTHER: &str = "other";
/// Default of `[stats] max_topics`.
pub const DEFAULT_MAX_TOPICS: usize = 100;

/// Labels of `herald_topic_events_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TopicEventLabels {
    /// An admitted topic or `other`.
    pub topic: Arc<str>,
    /// [`Event::as_str`].
    pub event: &'static str,
}

/// Label of `herald_topic_lateness_seconds`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TopicLabels {
    /// An admitted topic or `other`.
    pub topic: Arc<str>,
}

/// Which topic names are admitted (see the module's policy).
pub type Admission = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// The per-topic statistics of this process. Cheap to clone; every clone
/// counts into the same table.
#[derive(Clone)]
pub struct TopicStats {
    inner: Arc<Inner>,
}

struct Inner {
    max_topics: usize,
    admission: RwLock<Option<Admission>>,
    /// Admitted names and `other`, by name (bounded by `max_topics` + 1).
    table: Mutex<BTreeMap<Arc<str>, Rolling>>,
    other: Arc<str>,
    events: Family<TopicEventLabels, Counter>,
    lateness: Family<TopicLabels, Histogram>,
    folded: Counter,
    admitted: Gauge,
    /// Every topic's events since the process started.
    totals: [AtomicU64; EVENTS],
}

impl std::fmt::Debug for TopicStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopicStats")
            .field("max_topics", &self.inner.max_topics)
            .field("topics", &self.inner.table.lock().len())
            .finish()
    }
}

impl Default for TopicStats {
    fn default() -> Self {
        TopicStats::new(DEFAULT_MAX_TOPICS)
    }
}

fn lateness_histogram() -> Histogram {
    Histogram::new([
        0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    ])
}

impl TopicStats {
    /// A table admitting at most `max_topics` names, every name until
    /// [`TopicStats::admit_with`] says otherwise.
    pub fn new(max_topics: usize) -> TopicStats {
        let other: Arc<str> = Arc::from(OTHER);
        let mut table = BTreeMap::new();
        table.insert(Arc::clone(&other), Rolling::new());
        TopicStats {
            inner: Arc::new(Inner {
                max_topics,
                admission: RwLock::new(None),
                table: Mutex::new(table),
                other,
                events: Family::default(),
                lateness: Family::new_with_constructor(lateness_histogram),
                folded: Counter::default(),
                admitted: Gauge::default(),
                totals: Default::default(),
            }),
        }
    }

    /// Admit only the names `admit` accepts (the registered topics).
    pub fn admit_with(&self, admit: Admission) {
        *self.inner.admission.write() = Some(admit);
    }

    /// Register `herald_topic_*` and `herald_stats_topics_*`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "herald_topic_events",
            "Events per topic (accepted, delivered, callbacks_*, held, cancelled, expired); topic is a registered topic or other",
            self.inner.events.clone(),
        );
        registry.register(
            "herald_topic_lateness_seconds",
            "Firing lateness of delayed notifications per topic, seconds from due time to hand-off",
            self.inner.lateness.clone(),
        );
        registry.register(
            "herald_stats_topics_folded",
            "Events counted under topic other because the table of topic names was full ([stats] max_topics)",
            self.inner.folded.clone(),
        );
        registry.register(
            "herald_stats_topics",
            "Topic names with a row of their own in the statistics (other not included)",
            self.inner.admitted.clone(),
        );
        // `other` exists from the start, so rates see its first event.
        for e in Event::ALL {
            let _ = self.inner.events.get_or_create(&TopicEventLabels {
                topic: Arc::clone(&self.inner.other),
                event: e.as_str(),
            });
        }
        let _ = self.inner.lateness.get_or_create(&TopicLabels {
            topic: Arc::clone(&self.inner.other),
        });
    }

    /// The row `topic` counts in, admitting it if it may be.
    fn with_row<R>(&self, topic: Option<&str>, f: impl FnOnce(&Arc<str>, &mut Rolling) -> R) -> R {
        let mut table = self.inner.table.lock();
        let name = match topic {
            Some(t) if t != OTHER => t,
            _ => OTHER,
        };
        let found = table.get_key_value(name).map(|(k, _)| Arc::clone(k));
        if let Some(k) = found
            && let Some(row) = table.get_mut(&k)
        {
            return f(&k, row);
        }
        let admitted = self
            .inner
            .admission
            .read()
            .as_ref()
            .is_none_or(|admit| admit(name));
        if admitted && table.len() <= self.inner.max_topics {
            let k: Arc<str> = Arc::from(name);
            self.inner.admitted.set(table.len() as i64);
            let row = table.entry(Arc::clone(&k)).or_default();
            return f(&k, row);
        }
        if admitted {
            self.inner.folded.inc();
        }
        let k = Arc::clone(&self.inner.other);
        let row = table.entry(Arc::clone(&k)).or_default();
        f(&k, row)
    }

    /// `n` times `event` for `topic` at `now` (ms since the epoch).
    pub fn record(&self, topic: Option<&str>, event: Event, n: u64, now: u64) {
        if n == 0 {
            return;
        }
        let label = self.with_row(topic, |k, row| {
            row.record(event, n, now);
            Arc::clone(k)
        });
        self.inner
            .events
            .get_or_create(&TopicEventLabels {
                topic: label,
                event: event.as_str(),
            })
            .inc_by(n);
        self.inner.totals[event as usize].fetch_add(n, Ordering::Relaxed);
    }

    /// Every topic's events since the process started (no lateness).
    pub fn totals(&self) -> Counts {
        let mut c = Counts::default();
        for (i, t) in self.inner.totals.iter().enumerate() {
            c.events[i] = t.load(Ordering::Relaxed);
        }
        c
    }

    /// A notification of `topic` fired `late_ms` after its due time.
    pub fn lateness(&self, topic: Option<&str>, late_ms: u64, now: u64) {
        let label = self.with_row(topic, |k, row| {
            row.lateness(late_ms, now);
            Arc::clone(k)
        });
        self.inner
            .lateness
            .get_or_create(&TopicLabels { topic: label })
            .observe(late_ms as f64 / 1000.0);
    }

    /// Every row's windows as of `now`, by name (`other` included).
    pub fn windows(&self, now: u64) -> BTreeMap<String, Windows> {
        self.inner
            .table
            .lock()
            .iter()
            .map(|(k, row)| (k.to_string(), row.windows(now)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_800_000_000_000;

    #[test]
    fn registered_topics_get_rows_and_the_rest_fold_into_other() {
        let stats = TopicStats::new(2);
        stats.admit_with(Arc::new(|t: &str| t.starts_with("reg")));
        stats.record(Some("reg-a"), Event::Accepted, 2, T0);
        stats.record(Some("stranger"), Event::Accepted, 1, T0);
        stats.record(None, Event::Accepted, 1, T0);
        stats.record(Some("reg-b"), Event::Accepted, 1, T0);
        // The table is full (two names): a third registered topic folds.
        stats.record(Some("reg-c"), Event::Accepted, 5, T0);
        let w = stats.windows(T0);
        let names: Vec<&str> = w.keys().map(String::as_str).collect();
        assert_eq!(names, ["other", "reg-a", "reg-b"]);
        assert_eq!(w["other"].last_minute.get(Event::Accepted), 7);
        assert_eq!(w["reg-a"].last_minute.get(Event::Accepted), 2);
        assert_eq!(stats.inner.folded.get(), 1);
        assert_eq!(stats.inner.admitted.get(), 2);
        let counted = stats
            .inner
            .events
            .get_or_create(&TopicEventLabels {
                topic: Arc::from("reg-a"),
                event: "accepted",
            })
            .get();
        assert_eq!(counted, 2);
    }

    #[test]
    fn without_admission_every_name_is_admitted_up_to_the_bound() {
        let stats = TopicStats::new(1);
        stats.record(Some("a"), Event::Delivered, 1, T0);
        stats.record(Some("b"), Event::Delivered, 1, T0);
        stats.lateness(Some("a"), 30, T0);
        let w = stats.windows(T0);
        assert_eq!(w.len(), 2);
        assert_eq!(w["other"].last_minute.get(Event::Delivered), 1);
        assert_eq!(w["a"].last_minute.lateness.count(), 1);
    }
}
