//! A round: the sends of one claimed batch, ordered for the link and cut
//! into batches of the link's limit.
//!
//! A round of more than one batch (a herd) is ordered by recipient
//! (stable: a recipient's own keep their (due, id) order): everything in a
//! round is due already, so the order among recipients is free, and
//! grouped, a recipient's notifications that fall due together travel in
//! the same bundle and reach the edge at once, where its session writes
//! them with one write instead of one each (a herd of 200,000 to 10,000
//! users: 20 per write instead of 1; the edge's CPU for the herd halved).
//! A steady stream's rounds (a few entries each) keep their order. Sorts
//! small records, not the entries.
//!
//! Pure: takes the time each batch is sent, no I/O.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use herald_protocol::envelope::{Accepted, Notification, Scope};

use super::merge::ToSend;
use crate::schedule::entry::Millis;
use crate::schedule::sender::{Call, Resolved};

/// One send of a round, ready for the link.
#[derive(Debug)]
pub(super) struct Out {
    /// Who it goes to (a hash: equal for the same recipient), in a round
    /// that is grouped; 0 in one that keeps its order.
    recipient: u64,
    notification: Arc<Notification>,
    /// The entries it stands for (several when merged).
    ids: Vec<String>,
    /// Its due time when this is its first attempt (for the lateness
    /// histogram; refires and released holds are not counted).
    first_due: Option<Millis>,
    /// Its callback and the attempts made before, if it calls out once
    /// the link took it.
    call: Option<(Resolved, u32)>,
}

/// One batch for the link.
#[derive(Debug, Default)]
pub(super) struct Batch {
    pub(super) notifications: Vec<Arc<Notification>>,
    /// The ids of the entries it stands for, but those with a callback.
    pub(super) ids: Vec<String>,
    /// The lateness of its first attempts as of its sending.
    pub(super) lateness: Vec<Millis>,
    /// The topic of each of `lateness`, in its order.
    pub(super) lateness_topics: Vec<Option<String>>,
    /// The callbacks to make once the link took it (their entries stay
    /// firing until the sender records them).
    pub(super) calls: Vec<Call>,
}

/// A round's sends, handed out in batches of at most `limit`.
#[derive(Debug)]
pub(super) struct Round {
    outs: std::iter::Peekable<std::vec::IntoIter<Out>>,
    limit: usize,
    /// When the claim's lease of its entries ends, at the earliest.
    lease_until: Millis,
}

impl Round {
    /// The round of `send` (released by an online event when `from_hold`),
    /// for a link taking at most `limit` per batch; the claims of its
    /// entries last until `lease_until` at least. Its notifications fired
    /// `fired`: what their delivery latency is measured from.
    pub(super) fn new(
        send: Vec<ToSend>,
        from_hold: bool,
        limit: usize,
        lease_until: Millis,
        fired: Accepted,
    ) -> Round {
        let limit = limit.max(1);
        Round {
            outs: outs(send, from_hold, limit, fired).into_iter().peekable(),
            limit,
            lease_until,
        }
    }

    /// Whether every batch has been handed out.
    pub(super) fn is_done(&mut self) -> bool {
        self.outs.peek().is_none()
    }

    /// The next batch, sent at `sending`: lateness is as of each batch (a
    /// herd's last batches go out later than its first).
    pub(super) fn batch(&mut self, sending: Millis) -> Batch {
        let mut batch = Batch::default();
        for out in self.outs.by_ref().take(self.limit) {
            if let Some(due) = out.first_due {
                batch.lateness.push(sending.saturating_sub(due));
                batch.lateness_topics.push(out.notification.topic.clone());
            }
            match out.call {
                Some((resolved, calls)) => batch.calls.push(Call {
                    notification: Arc::clone(&out.notification),
                    resolved,
                    calls,
                    lease_until: self.lease_until,
                }),
                None => batch.ids.extend(out.ids),
            }
            batch.notifications.push(out.notification);
        }
        batch
    }
}

/// The sends of a round in the order they go: grouped by recipient when
/// there are more than `limit`.
fn outs(send: Vec<ToSend>, from_hold: bool, limit: usize, fired: Accepted) -> Vec<Out> {
    let herd = send.len() > limit;
    let mut out: Vec<Out> = send
        .into_iter()
        .map(
            |ToSend {
                 entry: mut e,
                 ids,
                 call,
             }| {
                e.notification.accepted = fired;
                Out {
                    recipient: if herd { recipient(&e.notification) } else { 0 },
                    first_due: (e.attempts == 1 && !from_hold).then_some(e.due_ms),
                    call: call.map(|c| (c, e.calls)),
                    notification: Arc::new(e.notification),
                    ids,
                }
            },
        )
        .collect();
    if herd {
        out.sort_by_key(|o| o.recipient);
    }
    out
}

/// A hash of who `n` goes to: equal for the same recipient.
fn recipient(n: &Notification) -> u64 {
    let who = match n.scope {
        Scope::User => n.users.first(),
        Scope::Client => n.clients.first(),
        Scope::Global => None,
    };
    let mut h = std::hash::DefaultHasher::new();
    (n.scope, who).hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::firer::sample;

    fn entry(id: &str, user: &str, attempts: u32) -> ToSend {
        ToSend::one(sample::entry(id, user, attempts))
    }

    fn ids(outs: &[Out]) -> Vec<&str> {
        outs.iter().map(|o| o.notification.id.as_str()).collect()
    }

    #[test]
    fn a_round_larger_than_a_batch_goes_grouped_by_recipient_in_order() {
        let round = vec![
            entry("a1", "alice", 1),
            entry("b1", "bob", 1),
            entry("a2", "alice", 1),
            entry("c1", "carol", 2),
            entry("b2", "bob", 1),
            entry("a3", "alice", 1),
        ];
        let out = outs(round, false, 4, Accepted::UNKNOWN);
        let got = ids(&out);
        // Each recipient's sends are adjacent and keep their order.
        for user in ["a", "b", "c"] {
            let at: Vec<usize> = (0..got.len())
                .filter(|&i| got[i].starts_with(user))
                .collect();
            assert!(at.windows(2).all(|w| w[1] == w[0] + 1), "{got:?}");
            let mine: Vec<&str> = at.iter().map(|&i| got[i]).collect();
            let mut sorted = mine.clone();
            sorted.sort();
            assert_eq!(mine, sorted, "{got:?}");
        }
        // Lateness is counted for first attempts only.
        let c1 = out.iter().find(|o| o.notification.id == "c1").unwrap();
        assert_eq!(c1.first_due, None);
        assert!(
            out.iter()
                .filter(|o| o.notification.id != "c1")
                .all(|o| o.first_due == Some(1_000))
        );
    }

    #[test]
    fn a_round_of_one_batch_keeps_its_order_and_released_holds_are_not_timed() {
        let round = vec![
            entry("a1", "alice", 1),
            entry("b1", "bob", 1),
            entry("a2", "alice", 1),
        ];
        let out = outs(round, true, 4, Accepted::UNKNOWN);
        assert_eq!(ids(&out), ["a1", "b1", "a2"]);
        assert!(out.iter().all(|o| o.first_due.is_none()));
    }

    #[test]
    fn batches_carry_their_ids_and_the_lateness_as_of_their_sending() {
        // One recipient: grouping keeps the order.
        let mut merged = entry("m1", "alice", 1);
        merged.ids.push("m2".into());
        let mut round = Round::new(
            vec![merged, entry("r1", "alice", 2), entry("c1", "alice", 1)],
            false,
            2,
            u64::MAX,
            Accepted::from_unix_micros(7),
        );
        let first = round.batch(1_250);
        assert!(!round.is_done());
        assert!(
            first
                .notifications
                .iter()
                .all(|n| n.accepted.unix_micros() == Some(7)),
            "a fired notification is measured from its firing"
        );
        let second = round.batch(1_400);
        assert!(round.is_done());
        assert_eq!(first.notifications.len(), 2);
        assert_eq!(
            first.ids,
            ["m1", "m2", "r1"],
            "a merged send stands for its ids"
        );
        assert_eq!(first.lateness, [250], "the refire is not timed");
        assert_eq!(second.ids, ["c1"]);
        assert_eq!(second.lateness, [400]);
    }
}
