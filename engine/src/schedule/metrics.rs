//! Metrics of delayed notifications (`herald_delayed_*`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

use crate::callback::metrics::CallbackMetrics;

/// Upper bounds (ms from now) of the `due` buckets of
/// `herald_delayed_pending`; the last bucket is everything later.
pub const DUE_BUCKETS_MS: [u64; 4] = [60_000, 3_600_000, 86_400_000, 7 * 86_400_000];
/// Label values of those buckets, one more than [`DUE_BUCKETS_MS`].
pub const DUE_BUCKET_NAMES: [&str; 5] = ["1m", "1h", "1d", "7d", "later"];

/// Label of `herald_delayed_pending`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DueLabels {
    /// Due within: `1m`, `1h`, `1d`, `7d`, `later` (overdue counts in `1m`).
    pub due: &'static str,
}

/// The store operations whose failures the stores count (the `op` of
/// `herald_delayed_store_errors_total`), created at zero by
/// [`DelayedMetrics::precreate`]. An operation missing here is still
/// counted, from its first failure.
pub const STORE_OPS: &[&str] = &[
    "attempts",
    "cancel",
    "claim_due",
    "claim_held",
    "counts",
    "delete_topic",
    "delivered",
    "expire",
    "finish",
    "hold",
    "insert",
    "list",
    "mark_step",
    "purge",
    "put_topic",
    "release",
    "replay",
    "retry_wait",
    "status",
    "topic",
    "topics",
    "upcoming",
];

/// Label of `herald_delayed_store_errors_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabels {
    /// The store operation.
    pub op: &'static str,
}

/// Label of `herald_delayed_refills_total` and
/// `herald_delayed_refill_items_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReadLabels {
    /// `whole` (the whole horizon, replacing the window) or `slice` (what
    /// came into the horizon since the last read).
    pub read: &'static str,
}

impl ReadLabels {
    /// The label of a whole read or a slice.
    pub fn of(whole: bool) -> Self {
        ReadLabels {
            read: if whole { "whole" } else { "slice" },
        }
    }
}

/// Counters, gauges and the lateness histogram.
#[derive(Debug, Clone)]
pub struct DelayedMetrics {
    /// Entries accepted into the store.
    pub accepted: Counter,
    /// Submissions of an id already stored (idempotent, nothing changed).
    pub duplicates: Counter,
    /// Entries handed to the link when due (or when their user came online).
    pub fired: Counter,
    /// Claims made (store calls that took due entries).
    pub claims: Counter,
    /// Store calls that marked fired notifications delivered.
    pub settles: Counter,
    /// Seconds the firer waited for the link: to hand it a batch, and for
    /// room among the batches waiting for it to take them (over AMQP: the
    /// broker's flow control and publisher confirms).
    pub link_wait: Counter<f64, AtomicU64>,
    /// Reads of upcoming entries into the scheduler's window.
    pub refills: Family<ReadLabels, Counter>,
    /// (fire time, id) pairs those reads returned.
    pub refill_items: Family<ReadLabels, Counter>,
    /// Firing lateness, seconds from due time to hand-off (first attempt of
    /// entries not held).
    pub lateness: Histogram,
    /// Entries put on hold because their user was offline.
    pub held: Counter,
    /// Entries cancelled.
    pub cancelled: Counter,
    /// Cancels that came after the claim (the notification is delivered).
    pub cancel_too_late: Counter,
    /// Held entries that expired.
    pub expired: Counter,
    /// Entries fired again after a lease expired (a firer crashed or stalled).
    pub refired: Counter,
    /// Held entries released by an online event whose user had no session
    /// (nor mailbox) after all: held again.
    pub rehold: Counter,
    /// Entries merged into another for the same user.
    pub merged: Counter,
    /// `when-online` sends postponed by the minimum interval.
    pub postponed: Counter,
    /// Scheduled entries by due bucket.
    pub pending: Family<DueLabels, Gauge>,
    /// Entries being fired (claimed, not yet delivered).
    pub firing: Gauge,
    /// Entries held for offline users.
    pub held_pending: Gauge,
    /// Callbacks waiting for their next attempt (retry_wait, not claimed).
    pub retry_wait_pending: Gauge,
    /// Dead letters sent again (`POST /v1/notifications/{id}/retry`).
    pub replayed: Counter,
    /// Replays refused: the notification was not a dead letter.
    pub replay_not_dead: Counter,
    /// Attempt records dropped because a notification's attempt log was
    /// full (the oldest after the first ten).
    pub attempt_log_trimmed: Counter,
    /// Store operations that failed.
    pub store_errors: Family<OpLabels, Counter>,
    /// "User online" events dropped because their queue was full.
    pub online_dropped: Counter,
    /// Accepted entries not handed to the in-memory window (queue full; the
    /// next refill reads them).
    pub hints_dropped: Counter,
    /// Users not tracked for the minimum interval (table full).
    pub untracked_users: Counter,
    /// Presence reports from edges recorded (distributed mode).
    pub presence_reports: Counter,
    /// Presence reports refused (dead-lettered).
    pub presence_rejected: Counter,
    /// The callbacks' metrics (`herald_callback_*`), registered with these.
    pub callbacks: CallbackMetrics,
    /// Per-topic statistics (held, cancelled, expired, callbacks,
    /// lateness); registered by its owner, shared with the publish API.
    pub topics: crate::stats::TopicStats,
}

impl Default for DelayedMetrics {
    fn default() -> Self {
        DelayedMetrics {
            accepted: Counter::default(),
            duplicates: Counter::default(),
            fired: Counter::default(),
            claims: Counter::default(),
            settles: Counter::default(),
            link_wait: Counter::default(),
            refills: Family::default(),
            refill_items: Family::default(),
            lateness: Histogram::new([
                0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ]),
            held: Counter::default(),
            cancelled: Counter::default(),
            cancel_too_late: Counter::default(),
            expired: Counter::default(),
            refired: Counter::default(),
            rehold: Counter::default(),
            merged: Counter::default(),
            postponed: Counter::default(),
            pending: Family::default(),
            firing: Gauge::default(),
            held_pending: Gauge::default(),
            retry_wait_pending: Gauge::default(),
            replayed: Counter::default(),
            replay_not_dead: Counter::default(),
            attempt_log_trimmed: Counter::default(),
            store_errors: Family::default(),
            online_dropped: Counter::default(),
            hints_dropped: Counter::default(),
            untracked_users: Counter::default(),
            presence_reports: Counter::default(),
            presence_rejected: Counter::default(),
            callbacks: CallbackMetrics::default(),
            topics: crate::stats::TopicStats::default(),
        }
    }
}

impl DelayedMetrics {
    /// The store's counts by due time as its last count left them in
    /// `herald_delayed_pending` (`7d` and `later` together are `later`),
    /// for `GET /v1/stats`.
    pub fn due(&self) -> crate::stats::part::Due {
        let due = |d: &'static str| {
            self.pending
                .get_or_create(&DueLabels { due: d })
                .get()
                .max(0) as u64
        };
        crate::stats::part::Due {
            next_minute: due("1m"),
            next_hour: due("1h"),
            next_day: due("1d"),
            later: due("7d") + due("later"),
        }
    }

    /// Register everything under `herald_delayed_*`.
    pub fn register(&self, registry: &mut Registry) {
        self.precreate();
        self.callbacks.register(registry);
        let r = registry.sub_registry_with_prefix("herald_delayed");
        r.register(
            "accepted",
            "Delayed notifications accepted into the store",
            self.accepted.clone(),
        );
        r.register(
            "duplicates",
            "Submissions of an id already stored (nothing changed)",
            self.duplicates.clone(),
        );
        r.register(
            "fired",
            "Delayed notifications handed to the link",
            self.fired.clone(),
        );
        r.register(
            "claims",
            "Claims of due notifications made (store calls)",
            self.claims.clone(),
        );
        r.register(
            "settles",
            "Store calls that marked fired notifications delivered",
            self.settles.clone(),
        );
        r.register(
            "link_wait_seconds",
            "Seconds the firer waited for the link (to hand it a batch, or for room among the batches it has not taken yet)",
            self.link_wait.clone(),
        );
        r.register(
            "refills",
            "Reads of upcoming notifications into the scheduler's window (read: whole horizon or the slice new since the last read)",
            self.refills.clone(),
        );
        r.register(
            "refill_items",
            "Upcoming notifications those reads returned",
            self.refill_items.clone(),
        );
        r.register(
            "lateness_seconds",
            "Time from due to hand-off, first attempt, not held",
            self.lateness.clone(),
        );
        r.register(
            "held",
            "Notifications held because their user was offline",
            self.held.clone(),
        );
        r.register(
            "cancelled",
            "Delayed notifications cancelled",
            self.cancelled.clone(),
        );
        r.register(
            "expired",
            "Held notifications that expired",
            self.expired.clone(),
        );
        r.register(
            "refired",
            "Notifications fired again after a lease expired",
            self.refired.clone(),
        );
        r.register(
            "rehold",
            "Held notifications released by an online event while their user had no session, held again",
            self.rehold.clone(),
        );
        r.register(
            "merged",
            "Notifications merged into another for the same user",
            self.merged.clone(),
        );
        r.register(
            "postponed",
            "Sends postponed by the per-user minimum interval",
            self.postponed.clone(),
        );
        r.register(
            "pending",
            "Scheduled notifications by due bucket",
            self.pending.clone(),
        );
        r.register(
            "firing",
            "Notifications claimed and not yet delivered",
            self.firing.clone(),
        );
        r.register(
            "held_pending",
            "Notifications held for offline users",
            self.held_pending.clone(),
        );
        r.register(
            "retry_wait_pending",
            "Callbacks waiting for their next attempt",
            self.retry_wait_pending.clone(),
        );
        r.register("replayed", "Dead letters sent again", self.replayed.clone());
        r.register(
            "replay_not_dead",
            "Replays refused because the notification was not a dead letter",
            self.replay_not_dead.clone(),
        );
        r.register(
            "attempt_log_trimmed",
            "Attempt records dropped because a notification's attempt log was full",
            self.attempt_log_trimmed.clone(),
        );
        r.register(
            "store_errors",
            "Store operations that failed",
            self.store_errors.clone(),
        );
        r.register(
            "online_events_dropped",
            "User-online events dropped (queue full)",
            self.online_dropped.clone(),
        );
        r.register(
            "hints_dropped",
            "Accepted entries left for the next refill (queue full)",
            self.hints_dropped.clone(),
        );
        r.register(
            "cancel_too_late",
            "Cancels that came after the claim (delivered anyway)",
            self.cancel_too_late.clone(),
        );
        r.register(
            "presence_reports",
            "Presence reports from edges recorded",
            self.presence_reports.clone(),
        );
        r.register(
            "presence_rejected",
            "Presence reports refused and dead-lettered",
            self.presence_rejected.clone(),
        );
        r.register(
            "untracked_users",
            "Users not tracked for the minimum interval (table full)",
            self.untracked_users.clone(),
        );
    }

    /// Create the store-error series of every operation the stores report
    /// at zero, so an alert's `rate` sees the first failure.
    pub fn precreate(&self) {
        for &op in STORE_OPS {
            let _ = self.store_errors.get_or_create(&OpLabels { op });
        }
    }

    /// Count a failed store operation.
    pub fn store_error(&self, op: &'static str) {
        self.store_errors.get_or_create(&OpLabels { op }).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every metric docs/delayed-notifications.md lists is registered.
    #[test]
    fn every_documented_metric_is_exported() {
        let m = DelayedMetrics::default();
        let mut registry = Registry::default();
        m.register(&mut registry);
        m.pending.get_or_create(&DueLabels { due: "1m" }).set(1);
        m.store_error("insert");
        m.refills.get_or_create(&ReadLabels::of(true)).inc();
        m.refill_items.get_or_create(&ReadLabels::of(false)).inc();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for name in [
            "herald_delayed_accepted_total",
            "herald_delayed_duplicates_total",
            "herald_delayed_fired_total",
            "herald_delayed_claims_total",
            "herald_delayed_settles_total",
            "herald_delayed_link_wait_seconds_total",
            "herald_delayed_refills_total{read=\"whole\"}",
            "herald_delayed_refill_items_total{read=\"slice\"}",
            "herald_delayed_lateness_seconds_bucket",
            "herald_delayed_pending{due=\"1m\"}",
            "herald_delayed_firing",
            "herald_delayed_held_pending",
            "herald_delayed_retry_wait_pending",
            "herald_delayed_replayed_total",
            "herald_delayed_replay_not_dead_total",
            "herald_delayed_attempt_log_trimmed_total",
            "herald_delayed_held_total",
            "herald_delayed_cancelled_total",
            "herald_delayed_cancel_too_late_total",
            "herald_delayed_expired_total",
            "herald_delayed_refired_total",
            "herald_delayed_rehold_total",
            "herald_delayed_merged_total",
            "herald_delayed_postponed_total",
            "herald_delayed_store_errors_total{op=\"insert\"}",
            "herald_delayed_online_events_dropped_total",
            "herald_delayed_hints_dropped_total",
            "herald_delayed_untracked_users_total",
            "herald_delayed_presence_reports_total",
            "herald_delayed_presence_rejected_total",
        ] {
            assert!(text.contains(name), "{name} missing:\n{text}");
        }
    }
}
