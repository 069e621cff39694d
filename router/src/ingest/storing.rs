//! [`Storing`]: the delayed publications being stored, by id, so that a
//! cancel waits for the store of the publication it cancels.
//!
//! Forwards run concurrently, and a store goes through the store's insert
//! batching while a cancel goes straight to the store: a cancel published
//! right behind its notification (on one channel, so the broker delivers
//! them in that order) could reach the store first, find nothing, be
//! dead-lettered, and leave the notification to fire. Each store in flight
//! registers here; a cancel for an id being stored waits until that store
//! has finished (or was dropped with its session).
//!
//! Bound: an entry lives exactly as long as its store forward, and at most
//! `prefetch` forwards are in flight per session.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;

/// The stores in flight of one intake. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub(super) struct Storing {
    inner: Arc<Mutex<Table>>,
}

#[derive(Debug, Default)]
struct Table {
    /// Generation of the next store, so a finished store removes only its
    /// own entry (two stores of one id may be in flight: duplicates).
    next: u64,
    by_id: HashMap<String, (u64, watch::Receiver<()>)>,
}

/// Held by a store forward while it runs; dropping it says the store is
/// done.
#[derive(Debug)]
pub(super) struct Stored {
    storing: Storing,
    id: String,
    generation: u64,
    /// Dropped with the guard: every waiter's `changed()` then returns.
    _done: watch::Sender<()>,
}

impl Storing {
    /// The table (never poisoned: nothing panics while holding it).
    fn table(&self) -> MutexGuard<'_, Table> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A store of `id` starts.
    pub(super) fn start(&self, id: &str) -> Stored {
        let (done, waiter) = watch::channel(());
        let mut table = self.table();
        let generation = table.next;
        table.next = table.next.wrapping_add(1);
        table.by_id.insert(id.to_owned(), (generation, waiter));
        Stored {
            storing: self.clone(),
            id: id.to_owned(),
            generation,
            _done: done,
        }
    }

    /// Until the store of `id` in flight now (if any) is done.
    pub(super) fn finished(&self, id: &str) -> impl Future<Output = ()> + Send + 'static {
        let waiter = self.table().by_id.get(id).map(|(_, w)| w.clone());
        async move {
            if let Some(mut waiter) = waiter {
                // Never sent to: returns once the sender is dropped.
                let _ = waiter.changed().await;
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.table().by_id.len()
    }
}

impl Drop for Stored {
    fn drop(&mut self) {
        let mut table = self.storing.table();
        if table
            .by_id
            .get(&self.id)
            .is_some_and(|(g, _)| *g == self.generation)
        {
            table.by_id.remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    fn poll_once(f: &mut std::pin::Pin<&mut impl Future<Output = ()>>) -> Poll<()> {
        f.as_mut().poll(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn a_cancel_waits_for_the_store_of_its_id_only() {
        let storing = Storing::default();
        let guard = storing.start("a");
        let mut waits = pin!(storing.finished("a"));
        let mut other = pin!(storing.finished("b"));
        assert_eq!(poll_once(&mut waits), Poll::Pending);
        assert_eq!(poll_once(&mut other), Poll::Ready(()));
        drop(guard);
        assert_eq!(poll_once(&mut waits), Poll::Ready(()));
        assert_eq!(storing.len(), 0);
    }

    #[test]
    fn an_older_store_finishing_leaves_the_newer_one_of_the_same_id() {
        let storing = Storing::default();
        let first = storing.start("a");
        let second = storing.start("a");
        drop(first);
        assert_eq!(storing.len(), 1);
        let mut waits = pin!(storing.finished("a"));
        assert_eq!(poll_once(&mut waits), Poll::Pending);
        drop(second);
        assert_eq!(poll_once(&mut waits), Poll::Ready(()));
        assert_eq!(storing.len(), 0);
    }
}
