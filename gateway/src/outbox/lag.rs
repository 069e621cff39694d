//! A session behind its mailbox: refilling the window from the mailbox's
//! buffer, and what happens when the mailbox evicts a message the session
//! still needs (the module docs of [`super`] tell the whole rule).

use std::sync::Arc;

use herald_protocol::envelope::Notification;

use super::{GapReason, Item, Outbox, State};
use crate::config::WhenFull;

/// A buffered message as the refill decides on it: what filters and
/// bounds read, without unpacking it.
#[derive(Debug, Clone, Copy)]
pub struct Buffered<'a> {
    /// Its event (what subscription filters match).
    pub event: &'a str,
    /// Its payload's length (what the queue's byte bound counts).
    pub payload_len: usize,
    /// Its TTL has passed: it is skipped (counted as `expired`).
    pub expired: bool,
}

/// What an outbox refills from: its mailbox's buffer, read under the shard
/// lock.
pub trait Backlog {
    /// The last sequence the mailbox assigned.
    fn head(&self) -> u64;
    /// The message with sequence `seq`; `None` when the buffer no longer
    /// holds it.
    fn get(&self, seq: u64) -> Option<Buffered<'_>>;
    /// The message with sequence `seq` as a notification to queue (a
    /// mailbox keeps its messages packed and unpacks one here); `None`
    /// when the buffer no longer holds it.
    fn notification(&self, seq: u64) -> Option<Arc<Notification>>;
}

/// What a refill did, for the hub's metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Refilled {
    /// Messages queued.
    pub queued: usize,
    /// Of those, replayed to a resuming subscription.
    pub replayed: usize,
    /// Messages skipped because their TTL had passed.
    pub expired: usize,
    /// Messages lost because the buffer no longer held them (a gap marker
    /// took their place, or the session was cut).
    pub lost: Loss,
}

/// What the loss of a message the session still needed did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Loss {
    /// Nothing was lost.
    #[default]
    None,
    /// `drop-oldest`: a gap marker took the place of this many messages.
    Dropped(usize),
    /// `disconnect`: the session is cut as a slow consumer.
    Cut,
}

impl Loss {
    fn add(&mut self, other: Loss) {
        *self = match (*self, other) {
            (Loss::Cut, _) | (_, Loss::Cut) => Loss::Cut,
            (Loss::Dropped(a), Loss::Dropped(b)) => Loss::Dropped(a + b),
            (Loss::None, x) | (x, Loss::None) => x,
        };
    }
}

/// Queue a `queue-overflow` gap for `only` at `seq`, merged into one such
/// marker among the trailing gap markers (nothing for `only` was queued
/// after it, so moving its sequence on loses nothing).
fn queue_gap(st: &mut State, seq: u64, only: Option<u32>) {
    for item in st.queue.iter_mut().rev() {
        match item {
            Item::Gap {
                seq: at,
                reason: GapReason::QueueOverflow,
                only: o,
            } if *o == only => {
                *at = seq;
                return;
            }
            Item::Gap { .. } => {}
            Item::Deliver { .. } => break,
        }
    }
    st.push_back(Item::Gap {
        seq,
        reason: GapReason::QueueOverflow,
        only,
    });
}

impl Outbox {
    /// The session lost message `seq` (for one subscription's replay, or
    /// for every subscription): apply `session.when_full`.
    fn lose(&self, st: &mut State, seq: u64, only: Option<u32>) -> Loss {
        match self.limits.when_full {
            WhenFull::Disconnect => {
                st.cut = true;
                st.queue = Default::default();
                st.bytes = 0;
                st.replays = Vec::new();
                self.notify.notify_one();
                Loss::Cut
            }
            WhenFull::DropOldest => {
                queue_gap(st, seq, only);
                Loss::Dropped(1)
            }
        }
    }

    /// The mailbox evicts `seq` while this session still [`Self::needs`]
    /// it: if a subscription wanted it, it is lost to the session (counted
    /// once, however many subscriptions lost it). Called under the shard
    /// lock, in sequence order.
    pub fn evicted(&self, seq: u64, event: &str, expired: bool) -> Loss {
        let mut guard = self.state.lock();
        let st = &mut *guard;
        if st.cut || !st.behind {
            return Loss::None;
        }
        let mut loss = Loss::None;
        for i in 0..st.replays.len() {
            let r = st.replays[i];
            if r.done < seq && seq <= r.until {
                st.replays[i].done = seq;
                let wanted = !expired
                    && st
                        .subs
                        .iter()
                        .any(|s| s.sub.key == r.key && s.sub.filter.matches(event));
                if wanted {
                    loss = self.lose(st, seq, Some(r.key));
                    if st.cut {
                        break;
                    }
                }
            }
        }
        if !st.cut {
            st.replays.retain(|r| r.done < r.until);
            // Replays end at or before the cursor, so `seq` is not theirs.
            if st.cursor < seq {
                st.cursor = seq;
                if !expired && st.subs.iter().any(|s| s.wants(seq, event)) {
                    loss = self.lose(st, seq, None);
                }
            }
        }
        self.sync(st);
        loss
    }

    /// Fill the window from `backlog` (the mailbox): pending replays first,
    /// then the sequences after the cursor, each as far as the window takes.
    /// Reaching the head catches the session up: pushes queue again. Called
    /// under the shard lock.
    pub fn refill(&self, backlog: &impl Backlog) -> Refilled {
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let mut done = Refilled::default();
        if st.cut || !st.behind {
            return done;
        }
        let limits = self.limits;
        // Replays, oldest subscription first.
        'replays: while let Some(&r) = st.replays.first() {
            let mut at = r.done;
            while at < r.until {
                let seq = at + 1;
                let Some(b) = backlog.get(seq) else {
                    // Evicted before it was queued: a loss the eviction
                    // should have met; count it all the same.
                    at = seq;
                    done.lost.add(self.lose(st, seq, Some(r.key)));
                    if st.cut {
                        break 'replays;
                    }
                    continue;
                };
                let Some(sub) = st.subs.iter().find(|s| s.sub.key == r.key) else {
                    // Unsubscribed: its replay goes with it.
                    break;
                };
                let wanted = sub.sub.filter.matches(b.event);
                if wanted && b.expired {
                    done.expired += 1;
                } else if wanted {
                    if !st.fits(&limits, b.payload_len) {
                        st.replays[0].done = at;
                        break 'replays;
                    }
                    // `get` just found it under the same lock; were it
                    // gone, the next refill would meet the loss.
                    let Some(n) = backlog.notification(seq) else {
                        st.replays[0].done = at;
                        break 'replays;
                    };
                    st.push_back(Item::Deliver {
                        seq,
                        n,
                        only: Some(r.key),
                    });
                    done.queued += 1;
                    done.replayed += 1;
                }
                at = seq;
            }
            st.replays.remove(0);
        }
        if st.replays.is_empty() && !st.cut {
            st.replays = Vec::new();
            let head = backlog.head();
            while st.cursor < head {
                let seq = st.cursor + 1;
                let Some(b) = backlog.get(seq) else {
                    st.cursor = seq;
                    done.lost.add(self.lose(st, seq, None));
                    if st.cut {
                        break;
                    }
                    continue;
                };
                let wanted = st.subs.iter().any(|s| s.wants(seq, b.event));
                if wanted && b.expired {
                    done.expired += 1;
                } else if wanted {
                    if !st.fits(&limits, b.payload_len) {
                        break;
                    }
                    // As above: the next refill would meet the loss.
                    let Some(n) = backlog.notification(seq) else {
                        break;
                    };
                    st.push_back(Item::Deliver { seq, n, only: None });
                    done.queued += 1;
                }
                st.cursor = seq;
            }
            if st.cursor >= head {
                st.behind = false;
            }
        }
        self.sync(st);
        done
    }

    /// The session's mailbox is gone (it cannot be while the session is
    /// attached): nothing more can be read from it.
    pub fn abandon_backlog(&self) {
        let mut st = self.state.lock();
        st.replays = Vec::new();
        st.behind = false;
        self.sync(&st);
    }
}
