//! A session's outbound queue: bounded, with a named policy when full.
//!
//! Mailboxes push into it (under their shard lock); the session task pops
//! from it when its socket can take more. The queue holds `Arc`s of shared
//! notifications, so a queued 400 KB message costs a pointer, not a copy.
//! Subscriptions live here too, so a message no subscription wants is never
//! queued.

use std::collections::VecDeque;
use std::sync::Arc;

use herald_protocol::envelope::Notification;
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::config::WhenFull;
use crate::filter::EventFilter;

/// Bounds of one outbox.
#[derive(Debug, Clone, Copy)]
pub struct QueueLimits {
    /// Most queued messages.
    pub messages: usize,
    /// Most queued payload bytes. A single message larger than this is still
    /// queued when the queue is empty, so it is never undeliverable.
    pub bytes: usize,
    /// Policy when full.
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
    /// The session's queue dropped messages (`drop-oldest`).
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
        /// The sequence after which live messages continue.
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
    /// Queued after dropping this many older messages (`drop-oldest`).
    DroppedOldest(usize),
    /// The queue was full and the session is now cut (`disconnect`).
    Cut,
    /// The session is already closing.
    Closed,
}

/// A popped item with the subscription ids it goes to.
#[derive(Debug)]
pub struct Popped {
    /// The item.
    pub item: Item,
    /// Subscription ids to write it for (one MESSAGE each).
    pub subscriptions: Vec<Arc<str>>,
}

#[derive(Debug, Default)]
struct State {
    queue: VecDeque<Item>,
    bytes: usize,
    subs: Vec<Subscription>,
    cut: bool,
    /// Sequence of the last message dropped by `drop-oldest`, not yet signalled.
    dropped_upto: Option<u64>,
}

/// The queue between mailboxes and one session.
#[derive(Debug)]
pub struct Outbox {
    state: Mutex<State>,
    notify: Notify,
    limits: QueueLimits,
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
        }
    }

    /// Wait until something was pushed (or the outbox was cut).
    pub async fn notified(&self) {
        self.notify.notified().await;
    }

    /// Whether the queue policy cut this session.
    pub fn is_cut(&self) -> bool {
        self.state.lock().cut
    }

    /// Queue a live message for every subscription whose filter matches.
    pub fn push(&self, seq: u64, n: &Arc<Notification>) -> Pushed {
        let mut st = self.state.lock();
        if st.cut {
            return Pushed::Closed;
        }
        if !st.subs.iter().any(|s| s.filter.matches(&n.event)) {
            return Pushed::Filtered;
        }
        let size = n.payload.len();
        let fits = |st: &State| {
            st.queue.is_empty()
                || (st.queue.len() < self.limits.messages && st.bytes + size <= self.limits.bytes)
        };
        let mut dropped = 0;
        if !fits(&st) {
            match self.limits.when_full {
                WhenFull::Disconnect => {
                    st.cut = true;
                    st.queue = VecDeque::new();
                    st.bytes = 0;
                    drop(st);
                    self.notify.notify_one();
                    return Pushed::Cut;
                }
                WhenFull::DropOldest => {
                    while !fits(&st) {
                        let Some(old) = st.queue.pop_front() else {
                            break;
                        };
                        st.bytes -= item_bytes(&old);
                        if let Item::Deliver { seq, .. } = old {
                            st.dropped_upto = Some(seq);
                            dropped += 1;
                        }
                    }
                }
            }
        }
        st.bytes += size;
        st.queue.push_back(Item::Deliver {
            seq,
            n: Arc::clone(n),
            only: None,
        });
        drop(st);
        self.notify.notify_one();
        if dropped > 0 {
            Pushed::DroppedOldest(dropped)
        } else {
            Pushed::Queued
        }
    }

    /// Add a subscription and queue its replay (or gap marker) in one step,
    /// so no live message can slip between the two. Replays are bounded by
    /// the mailbox buffer, which configuration keeps within the queue bounds.
    pub fn subscribe(&self, sub: Subscription, replay: impl IntoIterator<Item = Item>) {
        let mut st = self.state.lock();
        if st.subs.is_empty() {
            st.subs.reserve_exact(1);
        }
        st.subs.push(sub);
        let mut any = false;
        for item in replay {
            st.bytes += item_bytes(&item);
            st.queue.push_back(item);
            any = true;
        }
        drop(st);
        if any {
            self.notify.notify_one();
        }
    }

    /// Remove a subscription by client id; whether it existed.
    pub fn unsubscribe(&self, id: &str) -> bool {
        let mut st = self.state.lock();
        let before = st.subs.len();
        st.subs.retain(|s| &*s.id != id);
        st.subs.len() != before
    }

    /// Take the next item with the subscriptions it goes to. A pending
    /// `drop-oldest` gap comes first.
    pub fn pop(&self) -> Option<Popped> {
        let mut st = self.state.lock();
        if st.cut {
            return None;
        }
        loop {
            let item = if let Some(seq) = st.dropped_upto.take() {
                Item::Gap {
                    seq,
                    reason: GapReason::QueueOverflow,
                    only: None,
                }
            } else {
                let item = st.queue.pop_front()?;
                st.bytes -= item_bytes(&item);
                if st.queue.is_empty() && st.queue.capacity() > 16 {
                    st.queue = VecDeque::new();
                }
                item
            };
            let subscriptions: Vec<Arc<str>> = match &item {
                Item::Deliver { n, only, .. } => st
                    .subs
                    .iter()
                    .filter(|s| match only {
                        Some(k) => s.key == *k,
                        None => s.filter.matches(&n.event),
                    })
                    .map(|s| Arc::clone(&s.id))
                    .collect(),
                Item::Gap { only, .. } => st
                    .subs
                    .iter()
                    .filter(|s| only.is_none_or(|k| s.key == k))
                    .map(|s| Arc::clone(&s.id))
                    .collect(),
            };
            if !subscriptions.is_empty() {
                return Some(Popped {
                    item,
                    subscriptions,
                });
            }
        }
    }

    /// Queued message count (tests and introspection).
    pub fn len(&self) -> usize {
        self.state.lock().queue.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use herald_protocol::envelope::Scope;

    fn note(event: &str, size: usize) -> Arc<Notification> {
        Arc::new(Notification {
            id: "n".into(),
            scope: Scope::Global,
            users: vec![],
            clients: vec![],
            sites: vec![],
            event: event.into(),
            topic: None,
            content_type: "text/plain".into(),
            payload: Bytes::from(vec![b'x'; size]),
            payload_is_utf8: true,
            ttl: None,
            encodings: Default::default(),
        })
    }

    fn outbox(messages: usize, bytes: usize, when_full: WhenFull) -> Outbox {
        let o = Outbox::new(QueueLimits {
            messages,
            bytes,
            when_full,
        });
        o.subscribe(
            Subscription {
                key: 0,
                id: "s".into(),
                filter: EventFilter::default(),
            },
            [],
        );
        o
    }

    #[test]
    fn nothing_is_queued_without_a_matching_subscription() {
        let o = Outbox::new(QueueLimits {
            messages: 4,
            bytes: 100,
            when_full: WhenFull::Disconnect,
        });
        assert_eq!(o.push(1, &note("a", 1)), Pushed::Filtered);
        o.subscribe(
            Subscription {
                key: 0,
                id: "s".into(),
                filter: EventFilter::parse("chat.*").unwrap(),
            },
            [],
        );
        assert_eq!(o.push(2, &note("order.x", 1)), Pushed::Filtered);
        assert_eq!(o.push(3, &note("chat.x", 1)), Pushed::Queued);
        assert_eq!(o.len(), 1);
    }

    #[test]
    fn disconnect_policy_cuts_when_full() {
        let o = outbox(2, 1000, WhenFull::Disconnect);
        assert_eq!(o.push(1, &note("a", 1)), Pushed::Queued);
        assert_eq!(o.push(2, &note("a", 1)), Pushed::Queued);
        assert_eq!(o.push(3, &note("a", 1)), Pushed::Cut);
        assert!(o.is_cut());
        assert!(o.pop().is_none());
        assert_eq!(o.push(4, &note("a", 1)), Pushed::Closed);
    }

    #[test]
    fn drop_oldest_signals_a_gap_first() {
        let o = outbox(2, 1000, WhenFull::DropOldest);
        for seq in 1..=4 {
            o.push(seq, &note("a", 1));
        }
        let first = o.pop().unwrap();
        assert!(matches!(
            first.item,
            Item::Gap {
                seq: 2,
                reason: GapReason::QueueOverflow,
                ..
            }
        ));
        let seqs: Vec<u64> = std::iter::from_fn(|| o.pop())
            .map(|p| match p.item {
                Item::Deliver { seq, .. } => seq,
                Item::Gap { .. } => 0,
            })
            .collect();
        assert_eq!(seqs, vec![3, 4]);
    }

    #[test]
    fn byte_bound_applies_but_one_big_message_still_fits() {
        let o = outbox(100, 10, WhenFull::Disconnect);
        assert_eq!(o.push(1, &note("a", 50)), Pushed::Queued);
        assert_eq!(o.push(2, &note("a", 1)), Pushed::Cut);
    }

    #[test]
    fn replay_targets_only_the_new_subscription() {
        let o = outbox(10, 1000, WhenFull::Disconnect);
        o.subscribe(
            Subscription {
                key: 1,
                id: "t".into(),
                filter: EventFilter::default(),
            },
            [Item::Deliver {
                seq: 7,
                n: note("a", 1),
                only: Some(1),
            }],
        );
        let p = o.pop().unwrap();
        assert_eq!(p.subscriptions, vec![Arc::<str>::from("t")]);
        o.push(8, &note("a", 1));
        assert_eq!(o.pop().unwrap().subscriptions.len(), 2);
    }
}
