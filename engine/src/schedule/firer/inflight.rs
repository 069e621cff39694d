//! The store calls that run beside the firer's loop: a claim
//! ([`Claiming`]) and a refill ([`Refilling`]), at most one of each. They
//! run as tasks so that entries already claimed go out on time while the
//! next claim commits, and a refill's window is indexed off the loop.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::{JoinError, JoinHandle};

use crate::schedule::entry::{Entry, Millis};
use crate::schedule::scheduler::{Read, Window};
use crate::schedule::store::{Store, StoreError};

/// What a claim returned, and how long it took.
pub(super) type Claimed = (Result<Vec<Entry>, StoreError>, Duration);

/// A claim running beside the firer's loop.
pub(super) struct Claiming {
    /// The time it claims up to (`claim_ahead_ms` ahead, or a pile's
    /// reach): everything due by then, when the claim comes back short.
    at: Millis,
    limit: usize,
    task: JoinHandle<Claimed>,
}

/// A claim that came back.
pub(super) struct ClaimDone {
    /// [`Claiming::at`].
    pub(super) at: Millis,
    /// The most entries it asked for.
    pub(super) limit: usize,
    pub(super) outcome: Result<Claimed, JoinError>,
}

impl Claiming {
    /// Claim up to `limit` entries due by `at`, leased for `lease_ms`.
    pub(super) fn start(
        store: Arc<dyn Store>,
        at: Millis,
        limit: usize,
        lease_ms: u64,
    ) -> Claiming {
        Claiming {
            at,
            limit,
            task: tokio::spawn(async move {
                let started = Instant::now();
                let claimed = store.claim_due(at, limit, lease_ms).await;
                (claimed, started.elapsed())
            }),
        }
    }

    /// Wait for it to come back.
    pub(super) async fn join(self) -> ClaimDone {
        ClaimDone {
            at: self.at,
            limit: self.limit,
            outcome: self.task.await,
        }
    }

    /// Wait for the claim in `slot` (forever if none), then take it out.
    /// Cancel-safe: the slot is emptied only once it came back.
    pub(super) async fn done(slot: &mut Option<Claiming>) -> ClaimDone {
        let Some(c) = slot.as_mut() else {
            return std::future::pending().await;
        };
        let outcome = (&mut c.task).await;
        let c = slot.take().expect("awaited just now");
        ClaimDone {
            at: c.at,
            limit: c.limit,
            outcome,
        }
    }
}

/// A refill running beside the firer's loop.
pub(super) struct Refilling {
    /// The scheduler's clock it reads at.
    at: Millis,
    read: Read,
    task: JoinHandle<Result<Window, StoreError>>,
}

/// A refill that came back.
pub(super) struct RefillDone {
    /// [`Refilling::at`].
    pub(super) at: Millis,
    pub(super) read: Read,
    pub(super) outcome: Result<Result<Window, StoreError>, JoinError>,
}

impl Refilling {
    /// Read what `read` asks for at `at` (the scheduler's clock), indexed
    /// into a window of at most `max_window` items.
    pub(super) fn start(
        store: Arc<dyn Store>,
        at: Millis,
        read: Read,
        max_window: usize,
    ) -> Refilling {
        Refilling {
            at,
            read,
            // Indexed in the task, off the loop.
            task: tokio::spawn(async move {
                let items = store.upcoming(read.from, read.until, read.limit).await?;
                Ok(Window::indexed(items, read.limit, max_window))
            }),
        }
    }

    /// Wait for the refill in `slot` (forever if none), then take it out.
    /// Cancel-safe: the slot is emptied only once it came back.
    pub(super) async fn done(slot: &mut Option<Refilling>) -> RefillDone {
        let Some(r) = slot.as_mut() else {
            return std::future::pending().await;
        };
        let outcome = (&mut r.task).await;
        let r = slot.take().expect("awaited just now");
        RefillDone {
            at: r.at,
            read: r.read,
            outcome,
        }
    }
}
