//! Claimed entries waiting for their time: what the firer claimed ahead
//! (`schedule.claim_ahead_ms` before they are due, so the claim's commit is
//! not part of their lateness) and sends postponed by less than that.
//!
//! Pure: takes `now`, no I/O. Bounded by `max` entries: when full, the
//! firer stops claiming until entries leave (policy: backpressure). Each
//! entry keeps whether it was released by its user coming online (those
//! are not asked about presence again).

use std::collections::BTreeMap;

use super::entry::{Entry, Millis};

/// Claimed entries by the time they may go.
#[derive(Debug)]
pub(crate) struct Ready {
    by_time: BTreeMap<Millis, Vec<(Entry, bool)>>,
    len: usize,
    max: usize,
}

/// Entries whose time has come, split by how they were claimed.
#[derive(Debug, Default)]
pub(crate) struct Due {
    /// Claimed because they fell due.
    pub(crate) scheduled: Vec<Entry>,
    /// Released by their user coming online.
    pub(crate) from_hold: Vec<Entry>,
}

impl Ready {
    pub(crate) fn new(max: usize) -> Ready {
        Ready {
            by_time: BTreeMap::new(),
            len: 0,
            max: max.max(1),
        }
    }

    /// Hold `entry` until `at`.
    pub(crate) fn push(&mut self, at: Millis, entry: Entry, from_hold: bool) {
        self.by_time.entry(at).or_default().push((entry, from_hold));
        self.len += 1;
    }

    /// The latest time an entry waits for: claims come in due order, so
    /// the next claim's entries are due no earlier.
    pub(crate) fn last_at(&self) -> Option<Millis> {
        self.by_time.last_key_value().map(|(t, _)| *t)
    }

    /// Whether the firer should stop claiming.
    pub(crate) fn is_full(&self) -> bool {
        self.len >= self.max
    }

    /// When the earliest entry may go.
    pub(crate) fn next_at(&self) -> Option<Millis> {
        self.by_time.first_key_value().map(|(t, _)| *t)
    }

    /// Take every entry whose time is `<= now`, earliest first.
    pub(crate) fn take_due(&mut self, now: Millis) -> Due {
        let later = self.by_time.split_off(&now.saturating_add(1));
        let due = std::mem::replace(&mut self.by_time, later);
        let mut out = Due::default();
        for (entry, from_hold) in due.into_values().flatten() {
            self.len -= 1;
            if from_hold {
                out.from_hold.push(entry);
            } else {
                out.scheduled.push(entry);
            }
        }
        out
    }

    /// Take everything (at shutdown): (time it was waiting for, entry).
    pub(crate) fn drain(&mut self) -> Vec<(Millis, Entry)> {
        self.len = 0;
        std::mem::take(&mut self.by_time)
            .into_iter()
            .flat_map(|(t, v)| v.into_iter().map(move |(e, _)| (t, e)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use herald_protocol::envelope::{Notification, Scope};

    fn entry(id: &str, due: Millis) -> Entry {
        Entry {
            notification: Notification {
                id: id.into(),
                scope: Scope::User,
                users: vec!["u".into()],
                clients: vec![],
                sites: vec![],
                event: "e".into(),
                topic: None,
                content_type: "application/json".into(),
                payload: Bytes::from_static(b"{}"),
                payload_is_utf8: true,
                ttl: None,
                encodings: Default::default(),
                accepted: Default::default(),
            },
            due_ms: due,
            accepted_ms: 0,
            when_online: false,
            attempts: 1,
            phase: crate::schedule::entry::Phase::Deliver,
            fire_ms: 0,
            calls: 0,
            target: Default::default(),
        }
    }

    fn ids(v: &[Entry]) -> Vec<&str> {
        v.iter().map(|e| e.id()).collect()
    }

    #[test]
    fn nothing_leaves_before_its_time_and_everything_due_leaves_in_order() {
        let mut r = Ready::new(10);
        r.push(30, entry("c", 30), false);
        r.push(10, entry("a", 10), false);
        r.push(20, entry("b", 20), true);
        assert_eq!(r.next_at(), Some(10));
        let none = r.take_due(9);
        assert!(none.scheduled.is_empty() && none.from_hold.is_empty());
        let due = r.take_due(20);
        assert_eq!(ids(&due.scheduled), ["a"]);
        assert_eq!(ids(&due.from_hold), ["b"]);
        assert_eq!((r.len, r.next_at()), (1, Some(30)));
    }

    #[test]
    fn full_means_stop_claiming_and_drain_empties() {
        let mut r = Ready::new(2);
        r.push(5, entry("a", 5), false);
        assert!(!r.is_full());
        r.push(5, entry("b", 5), false);
        assert!(r.is_full());
        let all = r.drain();
        assert_eq!(all.len(), 2);
        assert_eq!((r.len, r.is_full(), r.next_at()), (0, false, None));
    }
}
