//! Deadlines of idle mailboxes: a min-heap ordered by `(deadline, seq)`.
//!
//! An entry is pushed each time a mailbox loses its last session. Entries
//! are checked lazily when they come due: a mailbox that got a session back
//! (or a newer deadline) no longer matches and the entry is discarded. No
//! scan over all mailboxes ever happens.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use tokio::time::Instant;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Entry {
    pub(crate) deadline: Instant,
    seq: u64,
    pub(crate) user: Arc<str>,
    pub(crate) site: Arc<str>,
}

#[derive(Debug, Default)]
pub(crate) struct ExpiryQueue {
    heap: BinaryHeap<Reverse<Entry>>,
    seq: u64,
}

impl ExpiryQueue {
    pub(crate) fn push(&mut self, deadline: Instant, user: Arc<str>, site: Arc<str>) {
        self.seq += 1;
        self.heap.push(Reverse(Entry {
            deadline,
            seq: self.seq,
            user,
            site,
        }));
    }

    /// The earliest deadline, stale or not.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse(e)| e.deadline)
    }

    /// Pop the earliest entry if it is due at `now`.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<Entry> {
        if self.next_deadline()? <= now {
            self.heap.pop().map(|Reverse(e)| e)
        } else {
            None
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }

    /// Replace the contents (used to shed stale entries when the heap has
    /// grown far past the number of idle mailboxes).
    pub(crate) fn rebuild(
        &mut self,
        live: impl IntoIterator<Item = (Instant, Arc<str>, Arc<str>)>,
    ) {
        self.heap.clear();
        for (deadline, user, site) in live {
            self.push(deadline, user, site);
        }
        self.heap.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn pops_in_deadline_then_insertion_order() {
        let t0 = Instant::now();
        let mut q = ExpiryQueue::default();
        q.push(t0 + Duration::from_secs(2), "b".into(), "".into());
        q.push(t0 + Duration::from_secs(1), "a".into(), "".into());
        q.push(t0 + Duration::from_secs(1), "c".into(), "".into());
        assert!(q.pop_due(t0).is_none());
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(&*q.pop_due(t1).unwrap().user, "a");
        assert_eq!(&*q.pop_due(t1).unwrap().user, "c");
        assert!(q.pop_due(t1).is_none());
        assert_eq!(q.next_deadline(), Some(t0 + Duration::from_secs(2)));
    }
}
