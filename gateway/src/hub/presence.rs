//! Who is online on this gateway, read from the mailboxes: a user's live
//! sessions by site and transport ([`Hub::sessions_of`]: the presence API
//! standalone, and what an edge reports to its routers), and users and
//! sessions per client company ([`Hub::client_counts`]).
//!
//! Online means a live session: a mailbox waiting out its TTL counts for
//! nothing. Each call takes the shard locks one at a time, briefly; the
//! counts per company walk every shard's company index, so they cost in
//! proportion to the users online (an operator's request, not a hot path).

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use herald_engine::presence::view::{
    ClientCount, ClientPage, MAX_SITES_PER_USER, MailboxSessions, UserSessions,
};

use super::mailbox::Mailbox;
use super::{Hub, Shard, shard_of};

/// A mailbox's sessions by transport (none while it waits out its TTL).
fn mailbox_sessions(m: &Mailbox) -> MailboxSessions {
    let mut by_transport = BTreeMap::new();
    for outbox in &m.sessions {
        *by_transport
            .entry(outbox.transport().as_str().to_owned())
            .or_insert(0u32) += 1;
    }
    MailboxSessions {
        site: m.site.to_string(),
        client: m.client.as_deref().map(str::to_owned),
        since_ms: m.online_since_ms,
        by_transport,
    }
}

/// The earliest `missed_since_ms` of `mailboxes` that says one (0: none).
fn missed_since<'a>(mailboxes: impl Iterator<Item = &'a Mailbox>) -> u64 {
    mailboxes
        .map(|m| m.missed_since_ms)
        .filter(|&ms| ms > 0)
        .min()
        .unwrap_or(0)
}

impl Hub {
    /// `user`'s mailboxes with a live session here, with their sessions
    /// by transport; at most [`MAX_SITES_PER_USER`] (those with the most
    /// sessions).
    pub fn sessions_of(&self, user: &str) -> Vec<MailboxSessions> {
        self.user_sessions(user).mailboxes
    }

    /// `user` as an edge reports them: [`Hub::sessions_of`], and since
    /// when a live session of theirs that came from another mailbox may
    /// have missed notifications (`missed_since_ms`).
    pub fn user_sessions(&self, user: &str) -> UserSessions {
        let shard = self.shards[shard_of(user)].lock();
        let Some(list) = shard.users.get(user) else {
            return UserSessions {
                user: user.to_owned(),
                ..UserSessions::default()
            };
        };
        let live = || list.iter().filter(|m| !m.sessions.is_empty());
        let mut mailboxes: Vec<MailboxSessions> = live().map(mailbox_sessions).collect();
        let missed_since_ms = missed_since(live());
        drop(shard);
        if mailboxes.len() > MAX_SITES_PER_USER {
            mailboxes.sort_by_key(|m| std::cmp::Reverse(m.total()));
            mailboxes.truncate(MAX_SITES_PER_USER);
        }
        UserSessions {
            user: user.to_owned(),
            mailboxes,
            missed_since_ms,
        }
    }

    /// Every user with a mailbox here, live or waiting out its TTL (with
    /// no session), at most [`MAX_SITES_PER_USER`] mailboxes each (the
    /// live first): an edge's presence snapshot, which routers routing by
    /// edge read. Takes each shard's lock once.
    pub fn held(&self) -> Vec<UserSessions> {
        let mut out = Vec::new();
        for lock in self.shards.iter() {
            let shard = lock.lock();
            for (user, list) in &shard.users {
                let mut mailboxes: Vec<MailboxSessions> =
                    list.iter().map(mailbox_sessions).collect();
                if mailboxes.len() > MAX_SITES_PER_USER {
                    mailboxes.sort_by_key(|m| std::cmp::Reverse(m.total()));
                    mailboxes.truncate(MAX_SITES_PER_USER);
                }
                // A snapshot does not say it: routers catch up on what a
                // snapshot shows them anew whatever it says.
                out.push(UserSessions {
                    user: user.to_string(),
                    mailboxes,
                    missed_since_ms: 0,
                });
            }
        }
        out
    }

    /// Users with a live session and their sessions, per client company:
    /// every company, or only `only`.
    fn client_counts(&self, only: Option<&str>) -> BTreeMap<Arc<str>, (u64, u64)> {
        let mut out: BTreeMap<Arc<str>, (u64, u64)> = BTreeMap::new();
        for lock in self.shards.iter() {
            let shard = lock.lock();
            match only {
                Some(c) => {
                    if let Some((client, users)) = shard.by_client.get_key_value(c) {
                        count_client(&shard, client, users.iter(), &mut out);
                    }
                }
                None => {
                    for (client, users) in &shard.by_client {
                        count_client(&shard, client, users.iter(), &mut out);
                    }
                }
            }
        }
        out
    }

    /// One page of companies with users online, in name order after
    /// `after`.
    pub fn client_page(&self, after: Option<&str>, limit: usize) -> ClientPage {
        let all = self.client_counts(None);
        let start = match after {
            Some(a) => Bound::Excluded(a),
            None => Bound::Unbounded,
        };
        let mut rest =
            all.range::<str, _>((start, Bound::Unbounded))
                .map(|(client, &(users, sessions))| ClientCount {
                    client: client.to_string(),
                    users,
                    sessions,
                });
        let items: Vec<ClientCount> = rest.by_ref().take(limit).collect();
        let next = match rest.next() {
            Some(_) => items.last().map(|c| c.client.clone()),
            None => None,
        };
        ClientPage { items, next }
    }

    /// One company's users online and their sessions.
    pub fn client_count(&self, client: &str) -> ClientCount {
        let (users, sessions) = self
            .client_counts(Some(client))
            .into_values()
            .next()
            .unwrap_or_default();
        ClientCount {
            client: client.to_owned(),
            users,
            sessions,
        }
    }
}

/// Add `client`'s users in `shard` with a live session in one of their
/// mailboxes of that company to `out`.
fn count_client<'a>(
    shard: &Shard,
    client: &Arc<str>,
    users: impl Iterator<Item = &'a Arc<str>>,
    out: &mut BTreeMap<Arc<str>, (u64, u64)>,
) {
    let mut counted = (0u64, 0u64);
    for user in users {
        let sessions: usize = shard
            .users
            .get(user)
            .map(|ms| {
                ms.iter()
                    .filter(|m| m.client.as_ref() == Some(client))
                    .map(|m| m.sessions.len())
                    .sum()
            })
            .unwrap_or(0);
        if sessions > 0 {
            counted.0 += 1;
            counted.1 += sessions as u64;
        }
    }
    if counted.0 > 0 {
        let entry = out.entry(Arc::clone(client)).or_default();
        entry.0 += counted.0;
        entry.1 += counted.1;
    }
}
