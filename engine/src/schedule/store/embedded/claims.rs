//! Claims of the embedded store, held in memory.
//!
//! One process owns an embedded store (its lock file refuses a second), so
//! a claim only has to keep this process's own claims apart, and to come
//! back when its lease runs out: nothing of it needs to be on disk. A
//! claimed entry stays scheduled (or held, or retry_wait) in the tables
//! until it settles (delivered, held, released, retry_wait, finished),
//! which is the one write its firing costs. The step of a firing callback
//! (rechecking, calling) is part of the claim, so marking it writes nothing.
//! If the process dies, its claims go with it and every claimed entry is
//! due again when the store is next opened: at-least-once, as a lease
//! expiry would give, without waiting for the lease.
//!
//! The writer thread changes claims; readers (status, list, upcoming,
//! counts) look at them with their snapshot. The writer holds the lock
//! across each commit and the removal of the claims it settled, and a
//! reader holds it while it reads, so a reader sees a claim exactly as long
//! as its snapshot has the entry unsettled.
//!
//! Bounds: one claim per entry handed to the firer and not yet settled. The
//! firer bounds those (its ready queue, the confirmer's queue, the settle
//! pile), so there is no policy of its own here.

use std::collections::{BTreeSet, HashMap};

use crate::schedule::entry::{Millis, State, Status, Step};

/// One claimed entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Claim {
    pub(super) id: String,
    /// The state it has in the tables: scheduled, held or retry_wait.
    pub(super) from: State,
    /// Its `sched` time (scheduled, retry_wait) or due time (held).
    pub(super) fire: Millis,
    /// When the lease runs out: it is claimed again from then on.
    pub(super) deadline: Millis,
    /// Its attempts, this claim included.
    pub(super) attempts: u32,
    /// When it was claimed, or entered its step.
    pub(super) at: Millis,
    /// Where its callback is ([`super::Tables::mark_step`]).
    pub(super) step: Option<Step>,
}

/// The claims, by seq, with their lease order and how far `sched` has been
/// claimed.
#[derive(Debug, Default)]
pub(super) struct Claims {
    by_seq: HashMap<u64, Claim>,
    by_deadline: BTreeSet<(Millis, u64)>,
    /// Every `sched` key up to this (time, seq) is claimed: the next claim
    /// reads on from here. A scheduled entry put at or before it (a past
    /// due time, a release) clears it, so nothing before it is unclaimed.
    cursor: Option<(Millis, u64)>,
}

impl Claims {
    pub(super) fn get(&self, seq: u64) -> Option<&Claim> {
        self.by_seq.get(&seq)
    }

    pub(super) fn get_mut(&mut self, seq: u64) -> Option<&mut Claim> {
        self.by_seq.get_mut(&seq)
    }

    pub(super) fn len(&self) -> usize {
        self.by_seq.len()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &Claim> {
        self.by_seq.values()
    }

    /// Claim `seq` (again, if it was).
    pub(super) fn insert(&mut self, seq: u64, claim: Claim) {
        if let Some(old) = self.by_seq.get(&seq) {
            self.by_deadline.remove(&(old.deadline, seq));
        }
        self.by_deadline.insert((claim.deadline, seq));
        self.by_seq.insert(seq, claim);
    }

    pub(super) fn remove(&mut self, seq: u64) -> Option<Claim> {
        let claim = self.by_seq.remove(&seq)?;
        self.by_deadline.remove(&(claim.deadline, seq));
        Some(claim)
    }

    /// Up to `limit` seqs whose lease ran out by `now`, earliest first.
    pub(super) fn expired(&self, now: Millis, limit: usize) -> Vec<u64> {
        self.by_deadline
            .iter()
            .take_while(|(deadline, _)| *deadline <= now)
            .take(limit)
            .map(|(_, seq)| *seq)
            .collect()
    }

    pub(super) fn cursor(&self) -> Option<(Millis, u64)> {
        self.cursor
    }

    pub(super) fn set_cursor(&mut self, cursor: Option<(Millis, u64)>) {
        self.cursor = cursor;
    }

    /// A scheduled entry was put at `sched` key (`fire`, `seq`).
    pub(super) fn scheduled(&mut self, fire: Millis, seq: u64) {
        if self.cursor.is_some_and(|c| (fire, seq) <= c) {
            self.cursor = None;
        }
    }

    /// `status` of the entry at `seq`, as its claim makes it: firing, with
    /// the claim's attempts and step, since the claim (or the step).
    pub(super) fn status(&self, seq: u64, mut status: Status) -> Status {
        if let Some(c) = self.by_seq.get(&seq)
            && status.state == c.from
        {
            status.state = State::Firing;
            status.attempts = c.attempts;
            status.updated_ms = c.at;
            status.step = c.step;
            status.next_attempt_ms = None;
        }
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(id: &str, deadline: Millis) -> Claim {
        Claim {
            id: id.into(),
            from: State::Scheduled,
            fire: 10,
            deadline,
            attempts: 1,
            at: 5,
            step: None,
        }
    }

    #[test]
    fn leases_run_out_in_deadline_order_and_a_new_claim_replaces_the_old() {
        let mut c = Claims::default();
        c.insert(1, claim("a", 300));
        c.insert(2, claim("b", 100));
        c.insert(3, claim("c", 200));
        assert_eq!(c.expired(250, 10), vec![2, 3]);
        assert_eq!(c.expired(250, 1), vec![2]);
        c.insert(2, claim("b", 400));
        assert_eq!(c.expired(250, 10), vec![3]);
        assert_eq!(c.remove(3).map(|c| c.id), Some("c".into()));
        assert_eq!(c.expired(1000, 10), vec![1, 2]);
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn an_entry_scheduled_at_or_before_the_cursor_clears_it() {
        let mut c = Claims::default();
        c.set_cursor(Some((100, 7)));
        c.scheduled(100, 8);
        assert_eq!(c.cursor(), Some((100, 7)), "after it: kept");
        c.scheduled(100, 7);
        assert_eq!(c.cursor(), None);
        c.set_cursor(Some((100, 7)));
        c.scheduled(99, 50);
        assert_eq!(c.cursor(), None);
    }
}
