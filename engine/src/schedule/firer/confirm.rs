//! The confirmer: a task beside the firer's loop that waits, in order, for
//! the link to take each batch sent ([`Sent`]). What the link took it
//! counts and hands to the settler ([`Settle`]), but for the entries that
//! call out: those go to the sender ([`CallQueue`]), which records them
//! once their callback is made. What the link refused it releases to
//! retry after `retry_after_ms`. At most
//! [`CONFIRM_QUEUE`](super::CONFIRM_QUEUE) batches wait for it (policy:
//! backpressure, the firer waits for room).

use std::sync::Arc;

use tokio::sync::mpsc;

use super::released;
use super::settle::Settle;
use crate::link::Taken;
use crate::schedule::entry::Millis;
use crate::schedule::metrics::DelayedMetrics;
use crate::schedule::sender::{Call, CallQueue};
use crate::schedule::store::Store;
use crate::schedule::timing::now_ms;

/// The firer's end of the confirmer: the queue of batches sent, of at most
/// [`CONFIRM_QUEUE`](super::CONFIRM_QUEUE) (not to be confused with the
/// callback sender, [`crate::schedule::sender::Sender`]).
pub(super) type ConfirmQueue = mpsc::Sender<Sent>;

/// A batch sent to the link.
pub(super) struct Sent {
    /// Resolves when the link has taken it.
    pub(super) taken: Taken,
    /// The ids it stands for.
    pub(super) ids: Vec<String>,
    /// The lateness of its first attempts, to count once it is taken.
    pub(super) lateness: Vec<Millis>,
    /// The topic of each of `lateness`, in its order.
    pub(super) lateness_topics: Vec<Option<String>>,
    /// The callbacks to make once it is taken (their ids are not in
    /// `ids`).
    pub(super) calls: Vec<Call>,
}

/// Waits, in order, for the link to take each batch sent; counts and
/// settles what it took, releases what it refused.
pub(super) struct Confirmer {
    pub(super) store: Arc<dyn Store>,
    pub(super) metrics: DelayedMetrics,
    /// Where released entries go back to the firer's scheduler.
    pub(super) hint: mpsc::Sender<(Millis, String)>,
    pub(super) retry_after_ms: u64,
    pub(super) settle: Settle,
    /// Where the callbacks of what the link took go.
    pub(super) calls: CallQueue,
}

impl Confirmer {
    /// Until the firer drops its end and every batch sent is done.
    pub(super) async fn run(mut self, mut queue: mpsc::Receiver<Sent>) {
        loop {
            let sent = tokio::select! {
                biased;
                sent = queue.recv() => match sent {
                    Some(sent) => sent,
                    None => break,
                },
                // Hand over the pile while nothing else is to do.
                _ = self.settle.flush(), if self.settle.has_pile() => continue,
            };
            self.confirm(sent).await;
        }
        self.settle.flush().await;
    }

    async fn confirm(&mut self, sent: Sent) {
        match sent.taken.await {
            Ok(()) => {
                self.took(sent.ids, sent.lateness, sent.lateness_topics)
                    .await;
                self.call(sent.calls).await;
            }
            Err(e) => {
                let mut ids = sent.ids;
                ids.extend(sent.calls.iter().map(|c| c.id().to_owned()));
                tracing::warn!(error = %e, entries = ids.len(), retry_ms = self.retry_after_ms, "the link did not take due notifications; retrying");
                self.refused(ids).await;
            }
        }
    }

    /// The link took `ids`: count them and have them marked delivered.
    async fn took(&mut self, ids: Vec<String>, lateness: Vec<Millis>, topics: Vec<Option<String>>) {
        self.metrics.fired.inc_by(ids.len() as u64);
        let now = now_ms();
        for (late, topic) in lateness.into_iter().zip(topics) {
            self.metrics.lateness.observe(late as f64 / 1000.0);
            self.metrics.topics.lateness(topic.as_deref(), late, now);
        }
        self.settle.hand(ids).await;
    }

    /// The link took entries that call out: hand them to the sender,
    /// waiting for room (policy: backpressure).
    async fn call(&mut self, calls: Vec<Call>) {
        if calls.is_empty() {
            return;
        }
        self.metrics.fired.inc_by(calls.len() as u64);
        if let Err(e) = self.calls.send(calls).await {
            tracing::warn!(
                entries = e.0.len(),
                "the sender has stopped; these are called after their lease"
            );
        }
    }

    /// The link refused `ids`: release them to retry after
    /// `retry_after_ms`, and tell the firer's scheduler.
    async fn refused(&mut self, ids: Vec<String>) {
        let now = now_ms();
        let retry = now.saturating_add(self.retry_after_ms);
        for id in released(&*self.store, &self.metrics, ids, retry, now).await {
            // A hint that does not fit is found by the next refill.
            if self.hint.try_send((retry, id)).is_err() {
                self.metrics.hints_dropped.inc();
            }
        }
    }
}
