//! What one edge holds: users and client companies with their holds (a
//! live session, or a mailbox waiting out its TTL), and how a report's
//! detail for one user changes them ([`set_user`]). Pure, taking `now`.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use herald_engine::presence::view::UserSessions;

use super::{Arrival, Key};

/// How an edge holds a user or a client company.
#[derive(Debug, Clone, Default)]
pub(super) struct Hold {
    /// Live mailboxes (a user's) or live users (a client's).
    pub(super) live: u32,
    /// While `live` is 0: held until then (the mailbox's TTL).
    pub(super) until_ms: u64,
    /// A user's: the clients of their live mailboxes.
    pub(super) clients: Vec<Box<str>>,
}

impl Hold {
    pub(super) fn held(&self, now: u64) -> bool {
        self.live > 0 || now < self.until_ms
    }
}

/// Users or clients with their holds, and the order their lingering
/// holds expire in (the TTL is one per edge, so the order is that of
/// insertion).
#[derive(Debug, Default)]
pub(super) struct Holds {
    pub(super) map: HashMap<Box<str>, Hold>,
    expiry: VecDeque<(u64, Box<str>)>,
}

impl Holds {
    pub(super) fn held(&self, key: &str, now: u64) -> bool {
        self.map.get(key).is_some_and(|h| h.held(now))
    }

    pub(super) fn linger(&mut self, key: &str, until_ms: u64) {
        if let Some(h) = self.map.get_mut(key) {
            h.until_ms = h.until_ms.max(until_ms);
            self.expiry.push_back((until_ms, key.into()));
        }
    }

    /// Forget what expired by `now`.
    pub(super) fn purge(&mut self, now: u64) {
        while let Some((until, _)) = self.expiry.front() {
            if *until > now {
                break;
            }
            let (_, key) = self.expiry.pop_front().unwrap_or_default();
            if self.map.get(&key).is_some_and(|h| !h.held(now)) {
                self.map.remove(&key);
            }
        }
    }
}

/// Record a user's mailboxes on an edge as `u` says (a mailbox with no
/// session is kept for its TTL; no mailbox at all: the user's last session
/// left, the mailboxes linger), pushing to `arrivals` the user and clients
/// the edge did not hold before, and the user again when a live session
/// of theirs says since when it may have missed notifications
/// (`missed_since_ms`: it came from another edge's mailbox).
pub(super) fn set_user(
    edge: &Arc<str>,
    users: &mut Holds,
    clients: &mut Holds,
    u: &UserSessions,
    now: u64,
    ttl_ms: u64,
    arrivals: Option<&mut Vec<Arrival>>,
) {
    let (user, mailboxes) = (u.user.as_str(), u.mailboxes.as_slice());
    let until = now.saturating_add(ttl_ms);
    let client_set = |live: bool| {
        let mut v: Vec<(&str, u64)> = mailboxes
            .iter()
            .filter(|m| (m.total() > 0) == live)
            .filter_map(|m| m.client.as_deref().map(|c| (c, m.since_ms)))
            .collect();
        v.sort_unstable();
        v.dedup_by(|a, b| a.0 == b.0);
        v
    };
    let live_clients = client_set(true);
    let lingering_clients = client_set(false);
    let live_mailboxes = mailboxes.iter().filter(|m| m.total() > 0).count();
    let since_ms = mailboxes
        .iter()
        .filter(|m| m.total() > 0)
        .map(|m| m.since_ms)
        .min()
        .unwrap_or(0);
    let was_held = users.held(user, now);
    let old_clients = users
        .map
        .get(user)
        .map(|h| h.clients.clone())
        .unwrap_or_default();
    let mut arrived = Vec::new();
    for &(c, since) in live_clients.iter().chain(&lingering_clients) {
        if !clients.held(c, now) {
            arrived.push(Arrival {
                edge: Arc::clone(edge),
                key: Key::Client(c.into()),
                since_ms: since,
            });
        }
    }
    // The user leaves the clients they have no live mailbox of any more
    // (those linger), and joins the new ones.
    for c in &old_clients {
        if !live_clients.iter().any(|(l, _)| **l == **c)
            && let Some(h) = clients.map.get_mut(c)
        {
            h.live = h.live.saturating_sub(1);
            if h.live == 0 {
                clients.linger(c, until);
            }
        }
    }
    for &(c, _) in &live_clients {
        if !old_clients.iter().any(|o| &**o == c) {
            let h = clients.map.entry(c.into()).or_default();
            h.live = h.live.saturating_add(1);
        }
    }
    for &(c, _) in &lingering_clients {
        if !clients.held(c, now) {
            clients.map.entry(c.into()).or_default();
            clients.linger(c, until);
        }
    }
    let hold = users.map.entry(user.into()).or_default();
    hold.live = u32::try_from(live_mailboxes).unwrap_or(u32::MAX);
    hold.clients = live_clients.iter().map(|(c, _)| Box::from(*c)).collect();
    if hold.live == 0 {
        // No live session (the last one left, or every mailbox of a
        // snapshot is idle): the mailboxes linger for the TTL.
        users.linger(user, until);
    }
    if let Some(a) = arrivals {
        // 0 is "unknown": everything the catch-up log keeps.
        let since_ms = match (u.missed_since_ms, since_ms) {
            (0, s) => s,
            (_, 0) => 0,
            (m, s) => m.min(s),
        };
        if !was_held || (u.missed_since_ms > 0 && live_mailboxes > 0) {
            a.push(Arrival {
                edge: Arc::clone(edge),
                key: Key::User(user.into()),
                since_ms,
            });
        }
        a.append(&mut arrived);
    }
}
