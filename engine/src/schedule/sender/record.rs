//! Recording what came of callbacks: outcomes pile up for at most
//! [`RECORD_DELAY`] (or [`RECORD_BATCH`] of them) and go to the store in
//! one `retry_wait` and one `finish` call, so a busy sender makes a few
//! large writes instead of one per call.
//!
//! A store call that fails is counted and logged; its entries stay firing
//! and are claimed again when their lease ends (the call is repeated, with
//! the same `webhook-id`).

use std::time::Duration;

use tokio::time::Instant;

use super::{Call, put_back};
use crate::callback::alert::{Alerts, DeadLetter};
use crate::callback::attempt::{Attempt, Kind, Verdict};
use crate::callback::exchange::Outcome;
use crate::callback::step::Next;
use crate::schedule::entry::Millis;
use crate::schedule::metrics::DelayedMetrics;
use crate::schedule::outcomes::Outcomes;
use crate::schedule::store::{Ending, Finish, RetryWait};
use crate::schedule::timing::now_ms;
use crate::stats::Event;

/// Outcomes recorded in one go, at most.
pub(super) const RECORD_BATCH: usize = 500;

/// Longest an outcome waits to be recorded.
pub(super) const RECORD_DELAY: Duration = Duration::from_millis(5);

/// A call that came back.
#[derive(Debug)]
pub(super) struct Done {
    pub(super) call: Call,
    pub(super) outcome: Outcome,
}

/// Outcomes waiting to be recorded.
pub(super) struct Recorder {
    outcomes: Outcomes,
    metrics: DelayedMetrics,
    alerts: Alerts,
    waits: Vec<RetryWait>,
    finishes: Vec<Finish>,
    /// When the first of them came.
    since: Option<Instant>,
}

impl Recorder {
    pub(super) fn new(outcomes: Outcomes, metrics: DelayedMetrics, alerts: Alerts) -> Recorder {
        Recorder {
            outcomes,
            metrics,
            alerts,
            waits: Vec::new(),
            finishes: Vec::new(),
            since: None,
        }
    }

    fn len(&self) -> usize {
        self.waits.len() + self.finishes.len()
    }

    /// Whether outcomes wait.
    pub(super) fn has_pending(&self) -> bool {
        self.len() > 0
    }

    /// Whether enough wait to record them now.
    pub(super) fn is_full(&self) -> bool {
        self.len() >= RECORD_BATCH
    }

    /// Resolves when the oldest outcome has waited [`RECORD_DELAY`]
    /// (never when none waits).
    pub(super) async fn due(&self) {
        match self.since {
            Some(since) => tokio::time::sleep_until(since + RECORD_DELAY).await,
            None => std::future::pending().await,
        }
    }

    fn started(&mut self) {
        self.since.get_or_insert_with(Instant::now);
    }

    /// A call that came back: count it, log a dead letter, and keep its
    /// outcome for the next flush.
    pub(super) fn push(&mut self, done: Done) {
        let Done { call, outcome } = done;
        let callbacks = &self.metrics.callbacks;
        callbacks.requests(&outcome.attempts);
        let topic = call.notification.topic.as_deref();
        let count = |event: Event| self.metrics.topics.record(topic, event, 1, now_ms());
        let id = call.id().to_owned();
        // At most a recheck that said go, then its call: logged together.
        let mut requests = outcome.attempts;
        let last = requests.pop();
        let recheck = requests.pop();
        match outcome.next {
            Next::Delivered => {
                callbacks.outcome("delivered");
                count(Event::CallbacksSucceeded);
                self.finish(id, Ending::Delivered, recheck, last);
            }
            Next::Declined { reason } => {
                callbacks.outcome("declined");
                count(Event::CallbacksDeclined);
                tracing::info!(id, reason, "callback declined by its recheck");
                self.finish(id, Ending::Declined, recheck, last);
            }
            Next::RetryAt { at_ms, reason } => {
                callbacks.outcome(if outcome.counted { "retry" } else { "paused" });
                if outcome.counted {
                    count(Event::CallbacksFailed);
                    count(Event::CallbacksRetried);
                }
                tracing::debug!(id, reason, at_ms, "callback to be tried again");
                self.started();
                self.waits.push(RetryWait {
                    id,
                    at_ms,
                    recheck,
                    attempt: last,
                    counted: outcome.counted,
                });
            }
            Next::Dead { reason } => {
                count(Event::CallbacksFailed);
                count(Event::CallbacksDead);
                self.dead_letter(&call, &reason);
                self.finish(id, Ending::Dead, recheck, last);
            }
            Next::Call => {
                // `exchange::run` makes the call itself after a recheck
                // that says go; it never answers this. Should it, the
                // entry is tried again at once rather than lost.
                debug_assert!(false, "exchange::run answered Next::Call");
                self.put_back(call, now_ms());
            }
        }
    }

    /// A call that could not start: back to `retry_wait`, due `now`.
    pub(super) fn put_back(&mut self, call: Call, now: Millis) {
        self.metrics.callbacks.outcome("late");
        self.started();
        self.waits.push(put_back(call.id().to_owned(), now));
    }

    /// Count and raise a dead letter (the alert logs it).
    fn dead_letter(&self, call: &Call, reason: &str) {
        self.metrics.callbacks.outcome("dead");
        self.alerts.dead_letter(DeadLetter {
            id: call.id().to_owned(),
            topic: call.notification.topic.clone(),
            reason: reason.to_owned(),
            attempts: call.calls.saturating_add(1),
        });
    }

    fn finish(
        &mut self,
        id: String,
        ending: Ending,
        recheck: Option<Attempt>,
        attempt: Option<Attempt>,
    ) {
        self.started();
        self.finishes.push(Finish {
            id,
            ending,
            recheck,
            attempt,
        });
    }

    /// Record everything waiting.
    pub(super) async fn flush(&mut self) {
        self.since = None;
        let n = i64::try_from(self.len()).unwrap_or(i64::MAX);
        let now = now_ms();
        let waits = std::mem::take(&mut self.waits);
        if !waits.is_empty() {
            let count = waits.len();
            if let Err(e) = self.outcomes.retry_wait(waits, now).await {
                self.failed(count, &e);
            }
        }
        let finishes = std::mem::take(&mut self.finishes);
        if !finishes.is_empty() {
            let count = finishes.len();
            if let Err(e) = self.outcomes.finish(finishes, now).await {
                self.failed(count, &e);
            }
        }
        self.metrics.callbacks.in_flight.dec_by(n);
    }

    /// A store call that failed (counted as a store error already).
    fn failed(&self, entries: usize, e: &dyn std::fmt::Display) {
        self.metrics.callbacks.record_failures.inc();
        tracing::warn!(error = %e, entries, "recording callback outcomes failed; they are called again after their lease");
    }
}

/// The attempt record of a callback that could not be made at all (its
/// entry has no callback any more): `reason` as its error.
pub(crate) fn failed_attempt(reason: String, now: Millis) -> Attempt {
    Attempt {
        at_ms: now,
        duration_ms: 0,
        attempt: 0,
        kind: Kind::Call,
        status: None,
        verdict: Verdict::Failed,
        error: Some(reason),
        excerpt: String::new(),
    }
}
