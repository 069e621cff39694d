//! The settler: marks delivered what the link took, a task beside the
//! confirmer, and [`Settle`], the confirmer's end of it.
//!
//! The confirmer hands it the ids of each batch the link took and goes on
//! without waiting for that commit. The settler lets ids pile up for
//! `settle_delay_ms` from the first (or until `max_unsettled` of them),
//! then marks them delivered, [`SETTLE_CHUNK`] ids per
//! [`Store::delivered`] call. While it is busy (its queue of
//! [`SETTLE_QUEUE`] messages is full), ids pile up on the confirmer's side
//! and go over as one message; past `max_unsettled` of them the confirmer
//! waits (policy: backpressure).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::schedule::metrics::DelayedMetrics;
use crate::schedule::store::Store;
use crate::schedule::timing::now_ms;

/// Messages waiting for the settler at most.
pub(super) const SETTLE_QUEUE: usize = 4;
/// Most ids the settler marks in one store call: a store call is one
/// commit, and other calls (the firer's claims) wait behind it.
pub(super) const SETTLE_CHUNK: usize = 2_000;

/// The confirmer's end of the settler: ids the link took, piled up while
/// the settler is busy.
#[derive(Debug)]
pub(super) struct Settle {
    tx: mpsc::Sender<Vec<String>>,
    pile: Vec<String>,
    /// `max_unsettled`: beyond this many ids, wait for the settler.
    max: usize,
}

impl Settle {
    /// The confirmer's end of the settler reading `tx`'s queue.
    pub(super) fn new(tx: mpsc::Sender<Vec<String>>, max: usize) -> Settle {
        Settle {
            tx,
            pile: Vec::new(),
            max,
        }
    }

    /// Whether ids wait on this side.
    pub(super) fn has_pile(&self) -> bool {
        !self.pile.is_empty()
    }

    /// Hand over `ids`, with the pile, if the settler has room; wait for
    /// room only once the pile holds `max` ids.
    pub(super) async fn hand(&mut self, ids: Vec<String>) {
        self.pile.extend(ids);
        match self.tx.try_send(std::mem::take(&mut self.pile)) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(pile)) => {
                self.pile = pile;
                if self.pile.len() >= self.max {
                    self.flush().await;
                }
            }
            Err(mpsc::error::TrySendError::Closed(pile)) => {
                tracing::warn!(
                    entries = pile.len(),
                    "the settler has stopped; these fire again after their lease"
                );
            }
        }
    }

    /// Hand over the pile, waiting for room. Cancel-safe: the pile is
    /// taken only once there is room.
    pub(super) async fn flush(&mut self) {
        if self.pile.is_empty() {
            return;
        }
        match self.tx.reserve().await {
            Ok(permit) => permit.send(std::mem::take(&mut self.pile)),
            Err(_) => tracing::warn!(
                entries = self.pile.len(),
                "the settler has stopped; these fire again after their lease"
            ),
        }
    }
}

/// Mark delivered what the firer hands over: what piled up over `delay`
/// from the first id (at most `max` ids at once), [`SETTLE_CHUNK`] per
/// store call, until the firer drops its end.
pub(super) async fn settler(
    store: Arc<dyn Store>,
    metrics: DelayedMetrics,
    mut queue: mpsc::Receiver<Vec<String>>,
    max: usize,
    delay: Duration,
) {
    while let Some(first) = queue.recv().await {
        let ids = gather(&mut queue, first, max, delay).await;
        for chunk in chunks(ids) {
            let n = chunk.len();
            metrics.settles.inc();
            if let Err(e) = store.delivered(chunk, now_ms()).await {
                metrics.store_error("delivered");
                tracing::warn!(error = %e, entries = n, "marking notifications delivered failed; they fire again after their lease");
            }
        }
    }
}

/// `ids` and what comes after them over `delay`, until there are `max`
/// (one message may bring more) or the firer is done; then whatever is
/// queued already, up to `max` again.
async fn gather(
    queue: &mut mpsc::Receiver<Vec<String>>,
    mut ids: Vec<String>,
    max: usize,
    delay: Duration,
) -> Vec<String> {
    let linger = tokio::time::sleep(delay);
    tokio::pin!(linger);
    while ids.len() < max {
        tokio::select! {
            more = queue.recv() => match more {
                Some(more) => ids.extend(more),
                // The firer is done: mark what is here, then end.
                None => break,
            },
            _ = &mut linger => break,
        }
    }
    while ids.len() < max {
        match queue.try_recv() {
            Ok(more) => ids.extend(more),
            Err(_) => break,
        }
    }
    ids
}

/// `ids` in store calls of [`SETTLE_CHUNK`], chunks off the end: splitting
/// off the front would move the rest each time (quadratic in a herd's
/// pile).
fn chunks(mut ids: Vec<String>) -> impl Iterator<Item = Vec<String>> {
    std::iter::from_fn(move || {
        (!ids.is_empty()).then(|| ids.split_off(ids.len().saturating_sub(SETTLE_CHUNK)))
    })
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;

    fn ids(range: std::ops::Range<usize>) -> Vec<String> {
        range.map(|i| i.to_string()).collect()
    }

    /// Long enough that a test passing does not wait for it.
    const NEVER: Duration = Duration::from_secs(3_600);

    #[test]
    fn a_pile_is_marked_in_chunks_off_the_end() {
        let sizes: Vec<usize> = chunks(ids(0..4_500)).map(|c| c.len()).collect();
        assert_eq!(sizes, [2_000, 2_000, 500]);
        let all: Vec<String> = chunks(ids(0..4_500)).flatten().collect();
        assert_eq!(all.len(), 4_500);
        assert_eq!(all[0], "2500", "the last chunk first");
        assert_eq!(chunks(Vec::new()).count(), 0);
    }

    #[tokio::test]
    async fn the_settler_gathers_until_max_or_the_end_without_waiting_out_its_delay() {
        let (tx, mut rx) = mpsc::channel(SETTLE_QUEUE);
        tx.send(ids(1..3)).await.unwrap();
        tx.send(ids(3..6)).await.unwrap();
        tx.send(ids(6..7)).await.unwrap();
        // Full at 4 ids: the second message goes over whole, the third
        // waits for the next round.
        assert_eq!(gather(&mut rx, ids(0..1), 4, NEVER).await, ids(0..6));
        drop(tx);
        // The firer is done: what is here goes at once.
        assert_eq!(gather(&mut rx, Vec::new(), 4, NEVER).await, ids(6..7));
    }

    #[tokio::test]
    async fn ids_pile_up_while_the_settler_is_busy_and_go_over_as_one() {
        let (tx, mut rx) = mpsc::channel(1);
        let mut settle = Settle::new(tx, 5);
        settle.hand(ids(0..2)).await;
        assert!(!settle.has_pile(), "room: handed over at once");
        settle.hand(ids(2..4)).await;
        assert!(settle.has_pile(), "the queue is full: piled up");
        assert_eq!(rx.recv().await, Some(ids(0..2)));
        settle.hand(ids(4..5)).await;
        assert!(!settle.has_pile());
        assert_eq!(rx.recv().await, Some(ids(2..5)), "the pile went with them");
    }

    #[tokio::test]
    async fn past_max_the_confirmer_waits_for_the_settler() {
        let (tx, mut rx) = mpsc::channel(1);
        let mut settle = Settle::new(tx, 3);
        settle.hand(ids(0..1)).await;
        assert!(
            settle.hand(ids(1..4)).now_or_never().is_none(),
            "3 ids waiting and the queue full: it waits"
        );
        assert!(settle.has_pile(), "waiting keeps the pile");
        assert_eq!(rx.recv().await, Some(ids(0..1)));
        assert_eq!(settle.flush().now_or_never(), Some(()));
        assert_eq!(rx.recv().await, Some(ids(1..4)));
    }

    #[tokio::test]
    async fn a_stopped_settler_drops_what_it_is_handed() {
        let (tx, rx) = mpsc::channel(1);
        let mut settle = Settle::new(tx, 3);
        drop(rx);
        settle.hand(ids(0..2)).await;
        assert!(!settle.has_pile());
    }
}
