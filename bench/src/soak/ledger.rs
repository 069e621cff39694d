//! What the soak expects its steady sessions to receive, and what they did (pure).
//!
//! Every publication aimed at steady sessions is written down *before* it is published (its id,
//! its kind, the live sessions it must reach, when it is due), so a delivery can never outrun
//! its expectation. A session that receives it takes itself off the entry; an entry everyone
//! received stays a while longer ([`RETAIN_SECS`]) so that a second copy is recognised as a
//! duplicate rather than a stray. A session the server drops gives up what it still expected
//! (counted as abandoned: the drop itself is the failure). At the end whatever is still
//! expected is lost.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

/// How long (seconds) a fully received entry is kept to recognise duplicates.
pub(crate) const RETAIN_SECS: f64 = 120.0;
/// Examples of lost or unexpected notifications kept for the report.
const EXAMPLES: usize = 20;

/// A session instance (a steady user's session, numbered anew on each reconnect).
pub(crate) type SessionId = u64;

/// What a publication was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    UserHttp,
    UserAmqp,
    ClientHttp,
    ClientAmqp,
    GlobalHttp,
    GlobalAmqp,
    DelayedHttp,
    DelayedAmqp,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::UserHttp => "user, HTTP",
            Kind::UserAmqp => "user, AMQP",
            Kind::ClientHttp => "client, HTTP",
            Kind::ClientAmqp => "client, AMQP",
            Kind::GlobalHttp => "global, HTTP",
            Kind::GlobalAmqp => "global, AMQP",
            Kind::DelayedHttp => "delayed (user), HTTP",
            Kind::DelayedAmqp => "delayed (user), AMQP",
        }
    }
}

/// Per kind: publications, deliveries expected, made, lost.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct KindCounts {
    pub(crate) publications: u64,
    pub(crate) expected: u64,
    pub(crate) delivered: u64,
    pub(crate) lost: u64,
}

/// The ledger's totals.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Totals {
    pub(crate) by_kind: BTreeMap<Kind, KindCounts>,
    /// A session received an id it had already received.
    pub(crate) duplicates: u64,
    /// A session received a bench id it was not expected to receive.
    pub(crate) unexpected: u64,
    /// Deliveries a dropped session still owed (not counted as lost).
    pub(crate) abandoned: u64,
    /// Most deliveries overdue at one check (received later, or lost).
    pub(crate) most_overdue: u64,
    /// Some lost or unexpected ids (kind, id, what).
    pub(crate) examples: Vec<String>,
}

impl Totals {
    pub(crate) fn expected(&self) -> u64 {
        self.by_kind.values().map(|k| k.expected).sum()
    }
    pub(crate) fn delivered(&self) -> u64 {
        self.by_kind.values().map(|k| k.delivered).sum()
    }
    pub(crate) fn lost(&self) -> u64 {
        self.by_kind.values().map(|k| k.lost).sum()
    }
}

struct Entry {
    kind: Kind,
    /// When it is due (seconds since the start).
    due: f64,
    remaining: HashSet<SessionId>,
    got: HashSet<SessionId>,
}

/// See the module docs.
#[derive(Default)]
pub(crate) struct Ledger {
    entries: HashMap<String, Entry>,
    live: HashSet<SessionId>,
    totals: Totals,
}

impl Ledger {
    /// `session` is subscribed: publications from now on count for it.
    pub(crate) fn session_up(&mut self, session: SessionId) {
        self.live.insert(session);
    }

    /// `session` ended (dropped by the server, or closed by the bench at the end): what it still
    /// expected is abandoned.
    pub(crate) fn session_down(&mut self, session: SessionId) {
        if !self.live.remove(&session) {
            return;
        }
        for e in self.entries.values_mut() {
            if e.remaining.remove(&session) {
                self.totals.abandoned += 1;
            }
        }
    }

    /// Writes down publication `id` of `kind`, due at `due`, for those of `recipients` that are
    /// live. Call before publishing it.
    pub(crate) fn expect(&mut self, id: &str, kind: Kind, due: f64, recipients: &[SessionId]) {
        let remaining: HashSet<SessionId> = recipients
            .iter()
            .copied()
            .filter(|s| self.live.contains(s))
            .collect();
        let counts = self.totals.by_kind.entry(kind).or_default();
        counts.publications += 1;
        counts.expected += remaining.len() as u64;
        self.entries.insert(
            id.to_owned(),
            Entry {
                kind,
                due,
                remaining,
                got: HashSet::new(),
            },
        );
    }

    /// The publication `id` was refused or failed: nobody is to receive it.
    pub(crate) fn withdraw(&mut self, id: &str) {
        if let Some(e) = self.entries.remove(id) {
            let counts = self.totals.by_kind.entry(e.kind).or_default();
            counts.publications -= 1;
            counts.expected -= e.remaining.len() as u64 + e.got.len() as u64;
            counts.delivered -= e.got.len() as u64;
        }
    }

    /// `session` received bench publication `id`.
    pub(crate) fn received(&mut self, session: SessionId, id: &str) {
        let problem = match self.entries.get_mut(id) {
            Some(e) if e.remaining.contains(&session) => {
                e.remaining.remove(&session);
                e.got.insert(session);
                self.totals.by_kind.entry(e.kind).or_default().delivered += 1;
                None
            }
            Some(e) if e.got.contains(&session) => {
                Some((true, format!("{:?} {id}: a second copy", e.kind)))
            }
            _ => Some((false, format!("{id}: not expected by session {session}"))),
        };
        match problem {
            Some((true, what)) => {
                self.totals.duplicates += 1;
                self.example(what);
            }
            Some((false, what)) => {
                self.totals.unexpected += 1;
                self.example(what);
            }
            None => {}
        }
    }

    fn example(&mut self, what: String) {
        if self.totals.examples.len() < EXAMPLES {
            self.totals.examples.push(what);
        }
    }

    /// Deliveries more than `grace` seconds past due at `now`; forgets entries received in full
    /// more than [`RETAIN_SECS`] ago.
    pub(crate) fn check(&mut self, now: f64, grace: f64) -> u64 {
        self.entries
            .retain(|_, e| !(e.remaining.is_empty() && now > e.due + RETAIN_SECS));
        let overdue: u64 = self
            .entries
            .values()
            .filter(|e| now > e.due + grace)
            .map(|e| e.remaining.len() as u64)
            .sum();
        self.totals.most_overdue = self.totals.most_overdue.max(overdue);
        overdue
    }

    /// Deliveries still expected (due or not).
    pub(crate) fn outstanding(&self) -> u64 {
        self.entries
            .values()
            .map(|e| e.remaining.len() as u64)
            .sum()
    }

    /// The totals so far.
    pub(crate) fn totals(&self) -> &Totals {
        &self.totals
    }

    /// Ends the ledger: everything still expected is lost.
    pub(crate) fn finish(mut self) -> Totals {
        let mut lost: Vec<(Kind, String, usize)> = self
            .entries
            .iter()
            .filter(|(_, e)| !e.remaining.is_empty())
            .map(|(id, e)| (e.kind, id.clone(), e.remaining.len()))
            .collect();
        lost.sort();
        for (kind, id, n) in lost {
            self.totals.by_kind.entry(kind).or_default().lost += n as u64;
            self.example(format!("{kind:?} {id}: lost by {n} session(s)"));
        }
        self.totals
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deliveries_are_counted_once_and_a_second_copy_is_a_duplicate() {
        let mut l = Ledger::default();
        l.session_up(1);
        l.session_up(2);
        l.expect("soak-1", Kind::GlobalHttp, 0.0, &[1, 2, 3]);
        l.received(1, "soak-1");
        l.received(1, "soak-1");
        l.received(2, "soak-1");
        assert_eq!(l.outstanding(), 0);
        let t = l.finish();
        let k = &t.by_kind[&Kind::GlobalHttp];
        assert_eq!(
            (k.publications, k.expected, k.delivered, k.lost),
            (1, 2, 2, 0)
        );
        assert_eq!(t.duplicates, 1);
        assert_eq!(t.unexpected, 0);
    }

    #[test]
    fn what_never_arrives_is_lost_and_what_was_never_expected_is_unexpected() {
        let mut l = Ledger::default();
        l.session_up(1);
        l.session_up(2);
        l.expect("soak-1", Kind::UserAmqp, 0.0, &[1]);
        l.received(2, "soak-1");
        l.received(2, "soak-9");
        let t = l.finish();
        assert_eq!(t.by_kind[&Kind::UserAmqp].lost, 1);
        assert_eq!(t.unexpected, 2);
        assert_eq!(t.lost(), 1);
        assert!(!t.examples.is_empty());
    }

    #[test]
    fn a_dropped_session_abandons_what_it_expected() {
        let mut l = Ledger::default();
        l.session_up(1);
        l.session_up(2);
        l.expect("soak-1", Kind::ClientHttp, 0.0, &[1, 2]);
        l.session_down(2);
        l.received(1, "soak-1");
        let t = l.finish();
        assert_eq!(t.abandoned, 1);
        assert_eq!(t.lost(), 0);
    }

    #[test]
    fn overdue_counts_only_what_is_past_its_grace_and_old_entries_are_forgotten() {
        let mut l = Ledger::default();
        l.session_up(1);
        l.expect("early", Kind::UserHttp, 0.0, &[1]);
        l.expect("later", Kind::DelayedHttp, 100.0, &[1]);
        assert_eq!(l.check(40.0, 30.0), 1);
        assert_eq!(l.outstanding(), 2);
        l.received(1, "early");
        assert_eq!(l.check(41.0, 30.0), 0);
        // Kept for duplicates until RETAIN_SECS after due, then forgotten.
        l.received(1, "early");
        assert_eq!(l.totals().duplicates, 1);
        l.check(RETAIN_SECS + 1.0, 30.0);
        l.received(1, "early");
        assert_eq!(l.totals().unexpected, 1);
        assert_eq!(l.totals().most_overdue, 1);
    }

    #[test]
    fn a_withdrawn_publication_is_not_counted() {
        let mut l = Ledger::default();
        l.session_up(1);
        l.expect("soak-1", Kind::UserHttp, 0.0, &[1]);
        l.withdraw("soak-1");
        let t = l.finish();
        assert_eq!(t.expected(), 0);
        assert_eq!(t.lost(), 0);
    }
}
