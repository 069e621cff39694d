//! The hub: every mailbox on this gateway, and the routing of notifications
//! to them. This is the one routing core: standalone Herald calls
//! [`Hub::deliver`] in-process; an edge calls it for what arrives from its
//! roots.
//!
//! Mailboxes are keyed by (site, user) and sharded by user under
//! `parking_lot` mutexes. A shard also indexes its users by client company,
//! so client-scope fan-out touches only that company's users. Lock order:
//! shard, then outbox; nothing else is locked inside.
//!
//! Live delivery queues the routed `Arc<Notification>` itself to the
//! sessions; the replay buffers keep each notification packed once
//! ([`retained`]: its MESSAGE fields and an exact copy of its payload in
//! one allocation, shared by every mailbox it reached), so what a mailbox
//! holds costs its payload plus a small constant, whatever buffer the
//! producer's payload shared and whichever transports took it.
//!
//! [`presence`] reads who is online here (sessions by transport, since
//! when, counts per client company) for the presence API standalone and
//! for an edge's presence reports.

mod expiry;
mod mailbox;
mod presence;
mod retained;

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use herald_protocol::envelope::{Notification, Scope};
use parking_lot::Mutex;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use mailbox::{Missed, Resume};

use crate::config::MailboxConfig;
use crate::metrics::{DropReason, Metrics};
use crate::outbox::{GapReason, Loss, Outbox, Pushed, Subscription};
use expiry::ExpiryQueue;
use mailbox::{Appended, BufferLimits, Mailbox};
use retained::{Origin, Retained};

const SHARDS: usize = 64;

/// Who a session is, from its verified token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// `sub`.
    pub user: Arc<str>,
    /// `client`, the user's company.
    pub client: Option<Arc<str>>,
    /// `site`; empty when the token names none.
    pub site: Arc<str>,
}

/// What a session learns when it attaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attached {
    /// The mailbox epoch.
    pub epoch: u64,
    /// The mailbox's last sequence.
    pub head: u64,
    /// The user had no live session on this gateway before this one (on
    /// any site): they just came online.
    pub came_online: bool,
}

/// The user already has as many sessions here as allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooManySessions {
    /// The limit (`session.max_per_user`).
    pub max: usize,
}

/// Result of a subscription's replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replay {
    /// No resume point was given.
    None,
    /// This many messages were queued.
    Replayed(usize),
    /// The buffer did not cover the resume point; a gap marker was queued.
    Gap,
}

/// Counts from one delivery.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Delivered {
    /// Mailboxes that took the message.
    pub mailboxes: usize,
    /// Sessions it was queued to.
    pub sessions: usize,
}

#[derive(Debug, Default)]
struct Shard {
    users: HashMap<Arc<str>, Vec<Mailbox>>,
    by_client: HashMap<Arc<str>, HashSet<Arc<str>>>,
    expiry: ExpiryQueue,
    idle: usize,
}

/// Every mailbox of this gateway.
#[derive(Debug)]
pub struct Hub {
    shards: Box<[Mutex<Shard>]>,
    ttl: Duration,
    buffer: BufferLimits,
    cursor: AtomicUsize,
    count: AtomicUsize,
    metrics: Arc<Metrics>,
    /// What packed expiries count from.
    origin: Origin,
}

/// A random mailbox epoch (52 bits: exact in a JavaScript number), not
/// `old`.
fn new_epoch(old: u64) -> u64 {
    loop {
        let epoch = rand::random::<u64>() >> 12;
        if epoch != old {
            return epoch;
        }
    }
}

fn shard_of(user: &str) -> usize {
    let mut h = DefaultHasher::new();
    user.hash(&mut h);
    (h.finish() as usize) % SHARDS
}

fn site_ok(n: &Notification, site: &str) -> bool {
    n.sites.is_empty() || n.sites.iter().any(|s| s == site)
}

impl Shard {
    fn unindex_client(&mut self, user: &Arc<str>, client: &Arc<str>) {
        let still = self
            .users
            .get(user)
            .is_some_and(|ms| ms.iter().any(|m| m.client.as_ref() == Some(client)));
        if let Some(set) = self.by_client.get_mut(client).filter(|_| !still) {
            set.remove(user);
            if set.is_empty() {
                self.by_client.remove(client);
            }
        }
    }
}

impl Hub {
    /// An empty hub.
    pub fn new(config: &MailboxConfig, metrics: Arc<Metrics>) -> Self {
        Hub {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            ttl: Duration::from_secs(config.ttl_secs),
            buffer: BufferLimits {
                messages: config.buffer_messages,
                bytes: config.buffer_bytes,
                unsent_bytes: config.unsent_bytes,
            },
            cursor: AtomicUsize::new(0),
            count: AtomicUsize::new(0),
            metrics,
            origin: Origin::new(Instant::now()),
        }
    }

    /// What was routed to this edge for a while is lost upstream (a root
    /// deleted its queue while the edge was away: `x-expires`), so no
    /// mailbox here can vouch for the stretch. Every mailbox takes a new
    /// epoch, so a session resuming from before gets an `epoch-changed`
    /// gap, and every live session gets that gap marker now, after what it
    /// already has. (A live session's messages keep the epoch it attached
    /// with, so its next resume gets one more gap: a second reload, never
    /// a silent loss.) Returns the number of mailboxes.
    pub fn upstream_lost(&self) -> usize {
        let mut mailboxes = 0;
        for shard in &self.shards {
            let mut shard = shard.lock();
            for list in shard.users.values_mut() {
                for mailbox in list.iter_mut() {
                    mailbox.epoch = new_epoch(mailbox.epoch);
                    for outbox in &mailbox.sessions {
                        if outbox.gap_now(GapReason::EpochChanged) {
                            self.metrics.gaps.inc();
                        }
                    }
                    mailboxes += 1;
                }
            }
        }
        mailboxes
    }

    /// Live mailboxes.
    pub fn mailbox_count(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// Join a session to its mailbox, creating the mailbox on first use;
    /// refused when the mailbox already holds `max_sessions` sessions (the
    /// user's limit: one mailbox per user and site). `missed`: the session
    /// resumes a mailbox that may be another one (its CONNECT's
    /// `offline-ms`), see [`Missed`].
    pub fn attach(
        &self,
        who: &Identity,
        outbox: &Arc<Outbox>,
        max_sessions: usize,
        missed: Option<&Missed>,
    ) -> Result<Attached, TooManySessions> {
        let mut shard = self.shards[shard_of(&who.user)].lock();
        let shard = &mut *shard;
        let full = shard.users.get(&who.user).is_some_and(|ms| {
            ms.iter()
                .any(|m| m.site == who.site && m.sessions.len() >= max_sessions)
        });
        if full {
            return Err(TooManySessions { max: max_sessions });
        }
        // Most users have one site: one mailbox, no spare capacity.
        let list = shard
            .users
            .entry(Arc::clone(&who.user))
            .or_insert_with(|| Vec::with_capacity(1));
        let came_online = list.iter().all(|m| m.sessions.is_empty());
        let index = match list.iter().position(|m| m.site == who.site) {
            Some(i) => i,
            None => {
                list.push(Mailbox::new(
                    Arc::clone(&who.site),
                    who.client.clone(),
                    new_epoch(0),
                ));
                self.count.fetch_add(1, Ordering::Relaxed);
                self.metrics.mailboxes.inc();
                list.len() - 1
            }
        };
        let mailbox = &mut list[index];
        if mailbox.idle_deadline.take().is_some() {
            shard.idle -= 1;
        }
        let now_ms = herald_engine::schedule::timing::now_ms();
        mailbox.add_session(outbox, now_ms);
        if let Some(missed) = missed {
            mailbox.note_missed(missed, now_ms);
        }
        outbox.start(mailbox.head);
        let attached = Attached {
            epoch: mailbox.epoch,
            head: mailbox.head,
            came_online,
        };
        let old_client = std::mem::replace(&mut mailbox.client, who.client.clone());
        if let Some(client) = &who.client {
            shard
                .by_client
                .entry(Arc::clone(client))
                .or_default()
                .insert(Arc::clone(&who.user));
        }
        if let Some(old) = old_client.filter(|c| Some(c) != who.client.as_ref()) {
            shard.unindex_client(&who.user, &old);
        }
        Ok(attached)
    }

    /// A session of `who` resumes `missed` after it joined its mailbox (a
    /// SUBSCRIBE's `offline-ms`): what [`Hub::attach`] does with a
    /// CONNECT's. True when it changed the mailbox's missed-since.
    pub fn note_missed(&self, who: &Identity, missed: &Missed) -> bool {
        let now_ms = herald_engine::schedule::timing::now_ms();
        let mut shard = self.shards[shard_of(&who.user)].lock();
        let Some(mailbox) = shard
            .users
            .get_mut(&who.user)
            .and_then(|list| list.iter_mut().find(|m| m.site == who.site))
        else {
            return false;
        };
        let before = mailbox.missed_since_ms;
        mailbox.note_missed(missed, now_ms);
        mailbox.missed_since_ms != before
    }

    /// End every live session of `user` here (at every site) with an
    /// ERROR that gives `reason` ([`Outbox::kick`]); the number of sessions
    /// told. The mailboxes stay: a session that comes back resumes.
    pub fn disconnect(&self, user: &str, reason: &str) -> usize {
        let reason: Arc<str> = Arc::from(reason);
        let shard = self.shards[shard_of(user)].lock();
        let mut told = 0;
        for mailbox in shard.users.get(user).into_iter().flatten() {
            for session in &mailbox.sessions {
                session.kick(Arc::clone(&reason));
                told += 1;
            }
        }
        told
    }

    /// Whether `user` has a live session here on one of `sites` (any site
    /// when empty).
    pub fn is_online(&self, user: &str, sites: &[String]) -> bool {
        let shard = self.shards[shard_of(user)].lock();
        shard.users.get(user).is_some_and(|ms| {
            ms.iter().any(|m| {
                !m.sessions.is_empty() && (sites.is_empty() || sites.iter().any(|s| **s == *m.site))
            })
        })
    }

    /// Add a subscription to a session, replaying from `resume` when given.
    /// Replay and subscription happen under the shard lock, so no live
    /// message is missed or duplicated between them. The replay is read
    /// from the mailbox through the session's window: what the window does
    /// not take now, the session reads as it drains ([`Hub::refill`]).
    pub fn subscribe(
        &self,
        who: &Identity,
        outbox: &Arc<Outbox>,
        sub: Subscription,
        resume: Option<&Resume>,
        now: Instant,
    ) -> Replay {
        let shard = self.shards[shard_of(&who.user)].lock();
        let Some(mailbox) = shard
            .users
            .get(&who.user)
            .and_then(|ms| ms.iter().find(|m| m.site == who.site))
        else {
            outbox.subscribe(sub, None, None);
            return Replay::None;
        };
        let Some(resume) = resume else {
            outbox.subscribe(sub, Some(mailbox.head), None);
            return Replay::None;
        };
        let now = self.origin.offset(now);
        match mailbox.check_resume(resume) {
            Ok(()) => {
                let count =
                    mailbox.count_after(resume.last_seq, |event| sub.filter.matches(event), now);
                outbox.subscribe(sub, Some(resume.last_seq), None);
                self.refill_from(mailbox, outbox, now);
                Replay::Replayed(count)
            }
            Err(reason) => {
                outbox.subscribe(sub, Some(mailbox.head), Some(reason));
                self.metrics.gaps.inc();
                Replay::Gap
            }
        }
    }

    /// Refill a session's window from its mailbox: the session is behind
    /// (its window filled, or a replay is pending) and its socket drained.
    /// A session that caught up unpins what it kept in the buffer beyond
    /// the replay bounds: the buffer is trimmed.
    pub fn refill(&self, who: &Identity, outbox: &Arc<Outbox>, now: Instant) {
        let mut shard = self.shards[shard_of(&who.user)].lock();
        match shard
            .users
            .get_mut(&who.user)
            .and_then(|ms| ms.iter_mut().find(|m| m.site == who.site))
        {
            Some(mailbox) => {
                let now = self.origin.offset(now);
                self.refill_from(mailbox, outbox, now);
                if !outbox.is_behind() {
                    self.trim(mailbox, now);
                }
            }
            None => outbox.abandon_backlog(),
        }
    }

    /// Trim `mailbox`'s buffer at `now` (ns after the clock origin) to its
    /// bounds ([`Mailbox::trim`]), counted.
    fn trim(&self, mailbox: &mut Mailbox, now: i64) {
        let trimmed = mailbox.trim(now, self.buffer);
        self.count_trim(&trimmed);
    }

    /// Count what a [`Mailbox::trim`] did.
    fn count_trim(&self, trimmed: &Appended) {
        for _ in 0..trimmed.evicted {
            self.metrics.drop_one(DropReason::MailboxBufferEvicted);
        }
        if trimmed.dropped > 0 {
            self.count_loss(Loss::Dropped(trimmed.dropped));
        }
        for _ in 0..trimmed.cut {
            self.count_loss(Loss::Cut);
        }
    }

    /// [`Hub::refill`] under the shard lock at `now` (ns after the clock
    /// origin), counted.
    fn refill_from(&self, mailbox: &Mailbox, outbox: &Outbox, now: i64) {
        let done = outbox.refill(&mailbox.backlog(now));
        self.metrics.replayed.inc_by(done.replayed as u64);
        for _ in 0..done.expired {
            self.metrics.drop_one(DropReason::Expired);
        }
        self.count_loss(done.lost);
    }

    /// Count what a loss did: a gap marker in place of messages
    /// (`drop-oldest`), or a cut session (`disconnect`).
    fn count_loss(&self, loss: Loss) {
        match loss {
            Loss::None => {}
            Loss::Dropped(k) => {
                for _ in 0..k {
                    self.metrics.drop_one(DropReason::QueueFullDropOldest);
                }
            }
            Loss::Cut => self.metrics.drop_one(DropReason::SlowConsumer),
        }
    }

    /// Take a session out of its mailbox; the last one out starts the TTL.
    /// True when the user has no live session left here (on any site):
    /// they went offline.
    pub fn detach(&self, who: &Identity, outbox: &Arc<Outbox>, now: Instant) -> bool {
        let mut guard = self.shards[shard_of(&who.user)].lock();
        let shard = &mut *guard;
        let went_offline = self.detach_locked(shard, who, outbox, now);
        went_offline
            && shard
                .users
                .get(&who.user)
                .is_none_or(|ms| ms.iter().all(|m| m.sessions.is_empty()))
    }

    /// [`Hub::detach`] under the shard lock: true when this was the
    /// mailbox's last session.
    fn detach_locked(
        &self,
        shard: &mut Shard,
        who: &Identity,
        outbox: &Arc<Outbox>,
        now: Instant,
    ) -> bool {
        let Some(mailbox) = shard
            .users
            .get_mut(&who.user)
            .and_then(|ms| ms.iter_mut().find(|m| m.site == who.site))
        else {
            return false;
        };
        let detached = mailbox.detach(outbox);
        if detached {
            // What it kept unsent for the session is free to go.
            self.trim(mailbox, self.origin.offset(now));
        }
        if detached && mailbox.sessions.is_empty() {
            let deadline = now + self.ttl;
            mailbox.idle_deadline = Some(deadline);
            shard.idle += 1;
            shard
                .expiry
                .push(deadline, Arc::clone(&who.user), Arc::clone(&who.site));
            if shard.expiry.len() > 2 * shard.idle + 1024 {
                let live: Vec<_> = shard
                    .users
                    .iter()
                    .flat_map(|(u, ms)| {
                        ms.iter().filter_map(move |m| {
                            m.idle_deadline
                                .map(|d| (d, Arc::clone(u), Arc::clone(&m.site)))
                        })
                    })
                    .collect();
                shard.expiry.rebuild(live);
            }
            return true;
        }
        false
    }

    /// Buffer `m` in `mailbox` at `now` (ns after the clock origin) and
    /// queue `n` (its live form) to the mailbox's sessions.
    fn push_to(
        &self,
        mailbox: &mut Mailbox,
        n: &Arc<Notification>,
        m: &Retained,
        now: i64,
    ) -> usize {
        let appended = mailbox.append(m, now, self.buffer);
        self.count_trim(&appended);
        let mut queued = 0;
        for outbox in &mailbox.sessions {
            match outbox.push(appended.seq, n) {
                Pushed::Queued | Pushed::Deferred => queued += 1,
                Pushed::Behind => {
                    queued += 1;
                    self.metrics.sessions_behind.inc();
                }
                Pushed::Filtered | Pushed::Closed => {}
            }
        }
        queued
    }

    /// Route one notification to every mailbox its scope and sites name.
    /// It is packed for the replay buffers once, when the first mailbox
    /// takes it.
    pub fn deliver(&self, n: &Arc<Notification>, now: Instant) -> Delivered {
        let mut out = Delivered::default();
        let mut packed: Option<Retained> = None;
        let expires = n.ttl.map(|ttl| self.origin.offset(now + ttl));
        let now = self.origin.offset(now);
        let mut take = |hub: &Hub, m: &mut Mailbox| {
            if site_ok(n, &m.site) {
                out.mailboxes += 1;
                let r = packed.get_or_insert_with(|| Retained::pack(n, expires));
                out.sessions += hub.push_to(m, n, r, now);
            }
        };
        match n.scope {
            Scope::User => {
                // Allocated only for a notification to several users.
                let mut seen: HashSet<&str> = HashSet::new();
                for user in &n.users {
                    if n.users.len() > 1 && !seen.insert(user) {
                        continue;
                    }
                    let mut shard = self.shards[shard_of(user)].lock();
                    if let Some(list) = shard.users.get_mut(user.as_str()) {
                        for m in list.iter_mut() {
                            take(self, m);
                        }
                    }
                }
            }
            Scope::Client => {
                for lock in self.shards.iter() {
                    let mut guard = lock.lock();
                    let shard = &mut *guard;
                    let mut users: Vec<Arc<str>> = Vec::new();
                    for c in &n.clients {
                        if let Some(set) = shard.by_client.get(c.as_str()) {
                            users.extend(set.iter().cloned());
                        }
                    }
                    if n.clients.len() > 1 {
                        users.sort_unstable();
                        users.dedup();
                    }
                    for user in users {
                        if let Some(list) = shard.users.get_mut(&user) {
                            for m in list.iter_mut() {
                                let wanted = m
                                    .client
                                    .as_deref()
                                    .is_some_and(|c| n.clients.iter().any(|x| x == c));
                                if wanted {
                                    take(self, m);
                                }
                            }
                        }
                    }
                }
            }
            Scope::Global => {
                for lock in self.shards.iter() {
                    let mut shard = lock.lock();
                    for list in shard.users.values_mut() {
                        for m in list.iter_mut() {
                            take(self, m);
                        }
                    }
                }
            }
        }
        self.metrics.deliveries.inc_by(out.sessions as u64);
        self.metrics.topics.record(
            n.topic.as_deref(),
            herald_engine::stats::Event::Delivered,
            out.sessions as u64,
            herald_engine::schedule::timing::now_ms(),
        );
        out
    }

    /// Remove up to `budget` mailboxes whose TTL has passed at `now`, taking
    /// shards in turn so no shard starves. Returns how many were removed.
    pub fn expire(&self, now: Instant, budget: usize) -> usize {
        let mut removed = 0;
        let start = self.cursor.fetch_add(1, Ordering::Relaxed);
        for i in 0..SHARDS {
            if removed >= budget {
                break;
            }
            let mut guard = self.shards[(start + i) % SHARDS].lock();
            let shard = &mut *guard;
            while removed < budget {
                let Some(entry) = shard.expiry.pop_due(now) else {
                    break;
                };
                let Some(list) = shard.users.get_mut(&entry.user) else {
                    continue;
                };
                let Some(pos) = list
                    .iter()
                    .position(|m| m.site == entry.site && m.idle_deadline == Some(entry.deadline))
                else {
                    continue;
                };
                let gone = list.swap_remove(pos);
                if list.is_empty() {
                    shard.users.remove(&entry.user);
                }
                shard.idle -= 1;
                if let Some(client) = &gone.client {
                    shard.unindex_client(&entry.user, client);
                }
                removed += 1;
            }
        }
        if removed > 0 {
            self.count.fetch_sub(removed, Ordering::Relaxed);
            self.metrics.mailboxes.dec_by(removed as i64);
            self.metrics.mailboxes_expired.inc_by(removed as u64);
        }
        removed
    }

    /// Run expiry every `tick`, at most `budget` removals per tick, until
    /// `shutdown`.
    pub async fn run_expiry(
        self: Arc<Self>,
        tick: Duration,
        budget: usize,
        shutdown: CancellationToken,
    ) {
        let mut every = herald_engine::task::Every::new(tick);
        while every.tick(&shutdown).await {
            let removed = self.expire(Instant::now(), budget);
            if removed > 0 {
                tracing::debug!(removed, "mailboxes expired");
            }
        }
    }
}

#[cfg(test)]
mod tests;
