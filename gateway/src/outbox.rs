//! A session's outbound queue: a bounded window onto its mailbox.
//!
//! Mailboxes push into it (under their shard lock); the session task pops
//! from it when its socket can take more. The queue holds `Arc`s of shared
//! notifications, so a queued 400 KB message costs a pointer, not a copy.
//! Subscriptions live here too, so a message no subscription wants is never
//! queued.
//!
//! # Window, lag and policy
//!
//! The queue is a *window* bounded by `session.queue_messages` and
//! `session.queue_bytes`. Everything a session is sent also sits in its
//! mailbox's replay buffer, numbered, so a full window loses nothing and
//! cuts nobody: the session is then *behind*. Its cursor is the last
//! mailbox sequence it has queued (or had no use for); pushes stop queueing,
//! and the session refills the window from the mailbox's buffer as its
//! socket drains ([`Outbox::refill`], through `Hub::refill`), in sequence
//! order, without duplicates or gaps, its filters applied. When a refill
//! reaches the mailbox's head the session has caught up and pushes queue
//! again. A resume replays the same way: the subscription's replay is a
//! range of the mailbox the refill reads first.
//!
//! A behind session loses data only when its mailbox evicts a message it
//! has not been sent yet ([`Outbox::evicted`]), and the mailbox does that
//! only past `mailbox.unsent_bytes`: below it, what a live session still
//! needs stays buffered however far the burst goes past the replay bounds
//! (`buffer_messages`, `buffer_bytes`), so a client that reads is never cut
//! by a burst's message count. `session.when_full` decides past it:
//! `disconnect` cuts the session (ERROR "slow consumer", counted as
//! `slow_consumer`; the client resumes and replays what is still buffered,
//! and learns of the loss from a gap marker), `drop-oldest` skips the
//! message and queues a `queue-overflow` gap marker in its place (counted
//! as `queue_full_drop_oldest`). A session that makes no write progress
//! for `session.max_lag_ms` is cut by its core whatever the policy
//! (`session::core`): a client that stops reading is cut by bytes or by
//! time.
//!
//! What one session holds is the window, whatever the burst: the overflow
//! is the mailbox's, bounded by `mailbox.unsent_bytes` for all the user's
//! sessions together.
//!
//! Lock order: shard, then outbox. The cursor and replay ranges change only
//! under the shard lock, which lets the mailbox ask [`Outbox::needs`] with a
//! relaxed atomic load on its eviction path instead of taking every
//! session's lock.

mod lag;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use herald_protocol::envelope::Notification;
use parking_lot::Mutex;
use smallvec::SmallVec;
use tokio::sync::Notify;

use crate::config::WhenFull;
use crate::filter::EventFilter;
use crate::metrics::Transport;

pub use lag::{Backlog, Buffered, Loss, Refilled};

/// Bounds of one outbox's window.
#[derive(Debug, Clone, Copy)]
pub struct QueueLimits {
    /// Most queued messages.
    pub messages: usize,
    /// Most queued payload bytes. A single message larger than this is still
    /// queued when the queue is empty, so it is never undeliverable.
    pub bytes: usize,
    /// What happens when the mailbox evicts a message this session was not
    /// sent yet.
    pub when_full: WhenFull,
}

/// A subscription of the session.
#[derive(Debug, Clone)]
pub struct Subscription {
    /// Internal key, unique within the session.
    pub key: u32,
    /// The client's `id`.
    pub id: Arc<str>,
    /// Its event filter.
    pub filter: EventFilter,
}

/// Why a gap marker is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GapReason {
    /// The resume point is older than what the mailbox still buffers.
    BufferExceeded,
    /// The mailbox was created anew (its epoch changed) since the resume point.
    EpochChanged,
    /// The session fell so far behind that its mailbox evicted messages it
    /// had not been sent (`drop-oldest`).
    QueueOverflow,
}

impl GapReason {
    /// Wire name in the `reason` header.
    pub fn as_str(self) -> &'static str {
        match self {
            GapReason::BufferExceeded => "buffer-exceeded",
            GapReason::EpochChanged => "epoch-changed",
            GapReason::QueueOverflow => "queue-overflow",
        }
    }
}

/// A queued item.
#[derive(Debug, Clone)]
pub enum Item {
    /// A notification with its mailbox sequence; `only` limits it to one
    /// subscription (replays), otherwise every matching subscription gets it.
    Deliver {
        /// Mailbox sequence.
        seq: u64,
        /// The shared notification.
        n: Arc<Notification>,
        /// Target subscription, for replays.
        only: Option<u32>,
    },
    /// "You missed something": the app should reload its state.
    Gap {
        /// The sequence after which messages continue.
        seq: u64,
        /// Why.
        reason: GapReason,
        /// Target subscription, or every subscription.
        only: Option<u32>,
    },
}

/// What [`Outbox::push`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// Queued.
    Queued,
    /// No subscription wants it.
    Filtered,
    /// The window is full: the session fell behind with this message and
    /// reads on from the mailbox.
    Behind,
    /// The session was already behind: it reads this message from the
    /// mailbox when its turn comes.
    Deferred,
    /// The session is already closing.
    Closed,
}

/// A popped item with the subscription ids it goes to.
#[derive(Debug)]
pub struct Popped {
    /// The item.
    pub item: Item,
    /// Subscription ids to write it for (one MESSAGE each); inline up to
    /// two, since a pop is made for every delivery.
    pub subscriptions: SmallVec<[Arc<str>; 2]>,
}

/// A subscription and where it starts in the mailbox.
#[derive(Debug)]
struct Sub {
    sub: Subscription,
    /// It gets the messages after this sequence (replays aside, which are
    /// addressed to it alone).
    from: u64,
}

impl Sub {
    fn wants(&self, seq: u64, event: &str) -> bool {
        self.from < seq && self.sub.filter.matches(event)
    }
}

/// A subscription's replay still to read from the mailbox: the sequences
/// after `done` up to `until`.
#[derive(Debug, Clone, Copy)]
struct Replaying {
    key: u32,
    done: u64,
    until: u64,
}

#[derive(Debug, Default)]
struct State {
    queue: VecDeque<Item>,
    bytes: usize,
    subs: Vec<Sub>,
    cut: bool,
    /// Why an operator ended the session (`POST /v1/users/{uid}/disconnect`).
    kicked: Option<Arc<str>>,
    /// Every mailbox sequence up to this one is queued, sent, or of no use
    /// to the session (replays aside).
    cursor: u64,
    /// The window filled (or a replay is pending): the sequences after
    /// `cursor` wait in the mailbox, and pushes do not queue.
    behind: bool,
    /// Replays still to read, oldest subscription first (ahead of the
    /// sequences after `cursor`).
    replays: Vec<Replaying>,
}

impl State {
    /// Whether a message of `size` bytes fits in the window now.
    fn fits(&self, limits: &QueueLimits, size: usize) -> bool {
        self.queue.is_empty()
            || (self.queue.len() < limits.messages && self.bytes + size <= limits.bytes)
    }

    fn push_back(&mut self, item: Item) {
        self.bytes += item_bytes(&item);
        self.queue.push_back(item);
    }
}

/// The queue between mailboxes and one session.
#[derive(Debug)]
pub struct Outbox {
    state: Mutex<State>,
    notify: Notify,
    limits: QueueLimits,
    /// The session's transport, for presence (counted by the hub).
    transport: Transport,
    /// The lowest sequence the session still needs from its mailbox, minus
    /// one; `u64::MAX` while it needs none (it keeps up). Written under the
    /// outbox lock, always also under the shard lock; read under the shard
    /// lock (see the module's lock order).
    needs_after: AtomicU64,
}

fn item_bytes(item: &Item) -> usize {
    match item {
        Item::Deliver { n, .. } => n.payload.len(),
        Item::Gap { .. } => 0,
    }
}

impl Outbox {
    /// An empty outbox (allocates nothing until something is queued).
    pub fn new(limits: QueueLimits) -> Self {
        Outbox {
            state: Mutex::new(State::default()),
            notify: Notify::new(),
            limits,
            transport: Transport::Websocket,
            needs_after: AtomicU64::new(u64::MAX),
        }
    }

    /// The same outbox for a session over `transport` (a new outbox is a
    /// WebSocket session's).
    pub fn over(mut self, transport: Transport) -> Self {
        self.transport = transport;
        self
    }

    /// The session's transport.
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// Wait until there is something to pull: something was pushed, the
    /// session is behind (its mailbox holds more), or it was cut.
    pub async fn notified(&self) {
        if self.is_behind() {
            // Ready at once, but within the task's cooperative budget.
            tokio::task::coop::consume_budget().await;
            return;
        }
        self.notify.notified().await;
    }

    /// The wake-up behind [`Outbox::notified`], for a session task that
    /// keeps one across its waits and makes the next once it fires: it
    /// fires when something is pushed or the session is cut. Unlike
    /// `notified`, it does not fire for a session that is behind: check
    /// [`Outbox::has_work`] before waiting on it.
    pub fn wakeup(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }

    /// Whether the queue policy cut this session.
    pub fn is_cut(&self) -> bool {
        self.state.lock().cut
    }

    /// End the session for `reason` (an operator's disconnect): what is
    /// queued is dropped, and the session task, woken, closes the session
    /// with an ERROR that says why ([`Outbox::kicked`]).
    pub fn kick(&self, reason: Arc<str>) {
        let mut st = self.state.lock();
        st.kicked = Some(reason);
        st.queue = Default::default();
        st.bytes = 0;
        st.replays = Vec::new();
        drop(st);
        self.notify.notify_one();
    }

    /// Why an operator ended this session, if one did.
    pub fn kicked(&self) -> Option<Arc<str>> {
        self.state.lock().kicked.clone()
    }

    /// Whether the session reads from its mailbox until it catches up
    /// (the window filled, or a replay is pending).
    pub fn is_behind(&self) -> bool {
        self.needs_after.load(Ordering::Relaxed) != u64::MAX
    }

    /// Whether the mailbox's copy of `seq` is still needed by this session
    /// (it has not been queued yet). Called by the mailbox, under the shard
    /// lock, for each message it evicts.
    pub fn needs(&self, seq: u64) -> bool {
        seq > self.needs_after.load(Ordering::Relaxed)
    }

    /// The session joined a mailbox whose last sequence is `head`: it
    /// starts there.
    pub fn start(&self, head: u64) {
        self.state.lock().cursor = head;
    }

    /// Keep [`Self::needs_after`] in step with the state.
    fn sync(&self, st: &State) {
        let after = if st.cut || !st.behind {
            u64::MAX
        } else {
            st.replays.iter().map(|r| r.done).fold(st.cursor, u64::min)
        };
        self.needs_after.store(after, Ordering::Relaxed);
    }

    /// Queue a live message (mailbox sequence `seq`) for every subscription
    /// whose filter matches. Called under the shard lock, in sequence order.
    pub fn push(&self, seq: u64, n: &Arc<Notification>) -> Pushed {
        let mut st = self.state.lock();
        if st.cut {
            return Pushed::Closed;
        }
        let wanted = st.subs.iter().any(|s| s.wants(seq, &n.event));
        if st.behind {
            // The refill reads it from the mailbox (and skips it if unwanted).
            return if wanted {
                Pushed::Deferred
            } else {
                Pushed::Filtered
            };
        }
        debug_assert_eq!(st.cursor + 1, seq, "a live session sees every sequence");
        if !wanted {
            st.cursor = seq;
            return Pushed::Filtered;
        }
        let pushed = if st.fits(&self.limits, n.payload.len()) {
            st.push_back(Item::Deliver {
                seq,
                n: Arc::clone(n),
                only: None,
            });
            st.cursor = seq;
            Pushed::Queued
        } else {
            st.behind = true;
            self.sync(&st);
            Pushed::Behind
        };
        drop(st);
        self.notify.notify_one();
        pushed
    }

    /// Add a subscription. It gets the messages after `after` (a mailbox
    /// sequence): those the session has already queued or sent are
    /// replayed to it alone, from the mailbox, ahead of the rest. `None`
    /// starts it at the session's cursor. A `gap` marker, addressed to it,
    /// goes first: the mailbox could not cover the resume point. Called
    /// under the shard lock, so no live message slips in between; the hub
    /// refills right after.
    pub fn subscribe(&self, sub: Subscription, after: Option<u64>, gap: Option<GapReason>) {
        let mut st = self.state.lock();
        let key = sub.key;
        let cursor = st.cursor;
        let after = after.unwrap_or(cursor);
        let from = after.max(cursor);
        if st.subs.is_empty() {
            st.subs.reserve_exact(1);
        }
        st.subs.push(Sub { sub, from });
        if let Some(reason) = gap {
            st.push_back(Item::Gap {
                seq: from,
                reason,
                only: Some(key),
            });
        }
        if after < cursor && !st.cut {
            if st.replays.is_empty() {
                st.replays.reserve_exact(1);
            }
            st.replays.push(Replaying {
                key,
                done: after,
                until: cursor,
            });
            st.behind = true;
            self.sync(&st);
        }
        let any = !st.queue.is_empty();
        drop(st);
        if any {
            self.notify.notify_one();
        }
    }

    /// Tell every subscription, after what is queued now, that messages
    /// may be missing: the mailbox never got them ([`crate::hub::Hub::upstream_lost`]).
    /// Whether there was a subscription to tell.
    pub fn gap_now(&self, reason: GapReason) -> bool {
        let mut st = self.state.lock();
        if st.cut || st.subs.is_empty() {
            return false;
        }
        let seq = st.cursor;
        let keys: SmallVec<[u32; 2]> = st.subs.iter().map(|s| s.sub.key).collect();
        for key in keys {
            st.push_back(Item::Gap {
                seq,
                reason,
                only: Some(key),
            });
        }
        drop(st);
        self.notify.notify_one();
        true
    }

    /// Remove a subscription by client id; whether it existed. Its pending
    /// replay goes with it.
    pub fn unsubscribe(&self, id: &str) -> bool {
        let mut st = self.state.lock();
        let before = st.subs.len();
        let mut gone = Vec::new();
        st.subs.retain(|s| {
            let keep = &*s.sub.id != id;
            if !keep {
                gone.push(s.sub.key);
            }
            keep
        });
        if !gone.is_empty() && !st.replays.is_empty() {
            st.replays.retain(|r| !gone.contains(&r.key));
            self.sync(&st);
        }
        st.subs.len() != before
    }

    /// Take the next item with the subscriptions it goes to.
    pub fn pop(&self) -> Option<Popped> {
        let mut st = self.state.lock();
        if st.cut {
            return None;
        }
        loop {
            let item = st.queue.pop_front()?;
            st.bytes -= item_bytes(&item);
            if st.queue.is_empty() && st.queue.capacity() > 16 {
                st.queue = VecDeque::new();
            }
            let subscriptions: SmallVec<[Arc<str>; 2]> = st
                .subs
                .iter()
                .filter(|s| match &item {
                    Item::Deliver { only: Some(k), .. } | Item::Gap { only: Some(k), .. } => {
                        s.sub.key == *k
                    }
                    Item::Deliver { seq, n, .. } => s.wants(*seq, &n.event),
                    Item::Gap { seq, .. } => s.from < *seq,
                })
                .map(|s| Arc::clone(&s.sub.id))
                .collect();
            if !subscriptions.is_empty() {
                return Some(Popped {
                    item,
                    subscriptions,
                });
            }
        }
    }

    /// Queued items (tests and introspection).
    pub fn len(&self) -> usize {
        self.state.lock().queue.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the session has something to pull: queued items, or more in
    /// its mailbox.
    pub fn has_work(&self) -> bool {
        self.is_behind() || !self.is_empty()
    }
}
