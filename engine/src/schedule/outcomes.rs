//! [`Outcomes`]: recording what came of firing callbacks
//! ([`Store::retry_wait`], [`Store::finish`]) with what goes with it, in
//! one place for the service's API (a retried or replayed notification)
//! and the firer's sender and dead letters: a failed store call is
//! counted, attempt records dropped by the log's bound are counted, and
//! retries due within the horizon go back to the firer's window at once,
//! as accepted entries do.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::entry::Millis;
use super::metrics::DelayedMetrics;
use super::store::{Finish, RetryWait, Settled, Store, StoreError};

/// Records callback outcomes. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Outcomes {
    store: Arc<dyn Store>,
    metrics: DelayedMetrics,
    /// The firer's hints: (fire time, id).
    hint: mpsc::Sender<(Millis, String)>,
    /// Retries due within this many ms are hinted.
    horizon_ms: u64,
}

impl Outcomes {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        metrics: DelayedMetrics,
        hint: mpsc::Sender<(Millis, String)>,
        horizon_ms: u64,
    ) -> Outcomes {
        Outcomes {
            store,
            metrics,
            hint,
            horizon_ms,
        }
    }

    /// Firing callbacks to be tried again, recorded at `now`; those due
    /// within the horizon are hinted (a full hint queue drops the hint,
    /// counted: the refill finds the entry).
    pub(crate) async fn retry_wait(
        &self,
        items: Vec<RetryWait>,
        now: Millis,
    ) -> Result<Settled, StoreError> {
        let horizon = now.saturating_add(self.horizon_ms);
        let soon: Vec<(Millis, String)> = items
            .iter()
            .filter(|i| i.at_ms <= horizon)
            .map(|i| (i.at_ms, i.id.clone()))
            .collect();
        let settled = self
            .store
            .retry_wait(items, now)
            .await
            .inspect_err(|_| self.metrics.store_error("retry_wait"))?;
        self.metrics.attempt_log_trimmed.inc_by(settled.trimmed);
        for hint in soon {
            if self.hint.try_send(hint).is_err() {
                self.metrics.hints_dropped.inc();
            }
        }
        Ok(settled)
    }

    /// Firing callbacks that end, recorded at `now`.
    pub(crate) async fn finish(
        &self,
        items: Vec<Finish>,
        now: Millis,
    ) -> Result<Settled, StoreError> {
        let settled = self
            .store
            .finish(items, now)
            .await
            .inspect_err(|_| self.metrics.store_error("finish"))?;
        self.metrics.attempt_log_trimmed.inc_by(settled.trimmed);
        Ok(settled)
    }
}
