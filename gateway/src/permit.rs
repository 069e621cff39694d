//! Session slots: at most `session.max_sessions` sessions at once. Each
//! session holds a [`SessionPermit`] for its whole life; dropping the
//! permit gives the slot back, so no path can forget to (or release twice).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The gateway's session slots.
#[derive(Debug)]
pub struct SessionSlots {
    taken: Arc<AtomicUsize>,
    max: usize,
}

impl SessionSlots {
    /// `max` slots, all free.
    pub fn new(max: usize) -> Self {
        SessionSlots {
            taken: Arc::new(AtomicUsize::new(0)),
            max,
        }
    }

    /// Take a slot, or None when all `max` are taken.
    pub fn acquire(&self) -> Option<SessionPermit> {
        let max = self.max;
        self.taken
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| SessionPermit {
                taken: Arc::clone(&self.taken),
            })
    }

    /// Slots taken now.
    pub fn taken(&self) -> usize {
        self.taken.load(Ordering::Acquire)
    }
}

/// One taken session slot; dropping it gives the slot back.
#[derive(Debug)]
#[must_use = "the slot is given back as soon as the permit is dropped"]
pub struct SessionPermit {
    taken: Arc<AtomicUsize>,
}

impl Drop for SessionPermit {
    fn drop(&mut self) {
        self.taken.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_comes_back_when_its_permit_drops() {
        let slots = SessionSlots::new(2);
        let a = slots.acquire().expect("a first slot");
        let b = slots.acquire().expect("a second slot");
        assert!(slots.acquire().is_none(), "no third slot");
        assert_eq!(slots.taken(), 2);
        drop(a);
        assert_eq!(slots.taken(), 1);
        let c = slots.acquire().expect("the freed slot");
        drop((b, c));
        assert_eq!(slots.taken(), 0);
    }
}
