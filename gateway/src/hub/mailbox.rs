//! One mailbox: a user's live sessions at one site, and a bounded buffer of
//! recent messages for replay.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::outbox::{GapReason, Item, Outbox};

use super::retained::Retained;

/// Bounds of the replay buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BufferLimits {
    pub(crate) messages: usize,
    pub(crate) bytes: usize,
}

/// Where a client says it left off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resume {
    /// The mailbox epoch the client saw.
    pub epoch: u64,
    /// The last sequence it saw.
    pub last_seq: u64,
}

#[derive(Debug)]
pub(crate) struct Mailbox {
    pub(crate) site: Arc<str>,
    pub(crate) client: Option<Arc<str>>,
    pub(crate) epoch: u64,
    /// Last sequence assigned.
    pub(crate) head: u64,
    /// Highest sequence evicted from the buffer: resumes before it have a gap.
    evicted_upto: u64,
    /// The messages after `evicted_upto`, in sequence order and without
    /// holes (only eviction removes, from the front): the one at index `i`
    /// has sequence `evicted_upto + 1 + i`, so none stores its own. One
    /// pointer each; the packed messages are shared with every other
    /// mailbox they reached.
    buffer: VecDeque<Retained>,
    buffer_bytes: usize,
    pub(crate) sessions: Vec<Arc<Outbox>>,
    /// When the mailbox expires if nobody comes back; None while sessions live.
    pub(crate) idle_deadline: Option<tokio::time::Instant>,
}

impl Mailbox {
    pub(crate) fn new(site: Arc<str>, client: Option<Arc<str>>, epoch: u64) -> Self {
        Mailbox {
            site,
            client,
            epoch,
            head: 0,
            evicted_upto: 0,
            buffer: VecDeque::new(),
            buffer_bytes: 0,
            sessions: Vec::new(),
            idle_deadline: None,
        }
    }

    pub(crate) fn add_session(&mut self, outbox: &Arc<Outbox>) {
        if self.sessions.is_empty() {
            self.sessions.reserve_exact(1);
        }
        self.sessions.push(Arc::clone(outbox));
    }

    /// Assign the next sequence and buffer the message; returns the sequence
    /// and how many old messages the bounds evicted.
    pub(crate) fn append(&mut self, m: &Retained, limits: BufferLimits) -> (u64, usize) {
        self.head += 1;
        let seq = self.head;
        self.buffer_bytes += m.payload_len();
        self.buffer.push_back(m.clone());
        let mut evicted = 0;
        while self.buffer.len() > limits.messages
            || (self.buffer_bytes > limits.bytes && self.buffer.len() > 1)
        {
            if let Some(old) = self.buffer.pop_front() {
                self.buffer_bytes -= old.payload_len();
                self.evicted_upto += 1;
                evicted += 1;
            }
        }
        (seq, evicted)
    }

    /// The replay for a subscription (key `sub`), or the gap marker when the
    /// buffer no longer covers the resume point. Messages expired at `now`
    /// (ns after the hub's clock origin) are skipped, and so are those whose
    /// event `wants` refuses; each replayed one is unpacked anew.
    pub(crate) fn replay(
        &self,
        resume: &Resume,
        sub: u32,
        wants: impl Fn(&str) -> bool,
        now: i64,
    ) -> Result<Vec<Item>, Item> {
        let gap = |reason| Item::Gap {
            seq: self.head,
            reason,
            only: Some(sub),
        };
        if resume.epoch != self.epoch {
            return Err(gap(GapReason::EpochChanged));
        }
        if resume.last_seq > self.head || resume.last_seq < self.evicted_upto {
            return Err(gap(GapReason::BufferExceeded));
        }
        // Sequences after the resume point start at this index.
        let skip = (resume.last_seq - self.evicted_upto) as usize;
        Ok(self
            .buffer
            .iter()
            .enumerate()
            .skip(skip)
            .filter(|(_, m)| m.is_live(now) && wants(m.event()))
            .map(|(i, m)| Item::Deliver {
                seq: self.evicted_upto + 1 + i as u64,
                n: Arc::new(m.notification(now)),
                only: Some(sub),
            })
            .collect())
    }

    pub(crate) fn detach(&mut self, outbox: &Arc<Outbox>) -> bool {
        let before = self.sessions.len();
        self.sessions.retain(|s| !Arc::ptr_eq(s, outbox));
        if self.sessions.is_empty() {
            self.sessions = Vec::new();
        }
        self.sessions.len() != before
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use herald_protocol::envelope::{Notification, Scope};

    /// A message of `size` payload bytes, expiring `expires` ns after the
    /// origin.
    fn note(size: usize, expires: Option<i64>) -> Retained {
        let n = Notification {
            id: "n".into(),
            scope: Scope::User,
            users: vec!["u".into()],
            clients: vec![],
            sites: vec![],
            event: "e".into(),
            topic: None,
            content_type: "text/plain".into(),
            payload: Bytes::from(vec![0; size]),
            payload_is_utf8: true,
            ttl: None,
            encodings: Default::default(),
        };
        Retained::pack(&n, expires)
    }

    const SEC: i64 = 1_000_000_000;

    fn seqs(items: &[Item]) -> Vec<u64> {
        items
            .iter()
            .map(|i| match i {
                Item::Deliver { seq, .. } | Item::Gap { seq, .. } => *seq,
            })
            .collect()
    }

    const LIMITS: BufferLimits = BufferLimits {
        messages: 3,
        bytes: 100,
    };

    #[test]
    fn replays_what_was_missed_and_signals_gaps() {
        let now = 0;
        let mut m = Mailbox::new("".into(), None, 9);
        for _ in 0..5 {
            m.append(&note(1, None), LIMITS);
        }
        let ok = m
            .replay(
                &Resume {
                    epoch: 9,
                    last_seq: 3,
                },
                0,
                |_| true,
                now,
            )
            .unwrap();
        assert_eq!(seqs(&ok), vec![4, 5]);
        // Seqs 1 and 2 were evicted (count bound 3): resuming from 1 misses 2.
        let gap = m
            .replay(
                &Resume {
                    epoch: 9,
                    last_seq: 1,
                },
                0,
                |_| true,
                now,
            )
            .unwrap_err();
        assert!(matches!(
            gap,
            Item::Gap {
                seq: 5,
                reason: GapReason::BufferExceeded,
                ..
            }
        ));
        assert!(
            m.replay(
                &Resume {
                    epoch: 9,
                    last_seq: 2
                },
                0,
                |_| true,
                now
            )
            .is_ok()
        );
        let gap = m
            .replay(
                &Resume {
                    epoch: 8,
                    last_seq: 5,
                },
                0,
                |_| true,
                now,
            )
            .unwrap_err();
        assert!(matches!(
            gap,
            Item::Gap {
                reason: GapReason::EpochChanged,
                ..
            }
        ));
        assert!(
            m.replay(
                &Resume {
                    epoch: 9,
                    last_seq: 6
                },
                0,
                |_| true,
                now
            )
            .is_err()
        );
    }

    #[test]
    fn byte_bound_evicts_but_keeps_the_newest() {
        let now = 0;
        let mut m = Mailbox::new("".into(), None, 1);
        m.append(&note(60, None), LIMITS);
        let (_, evicted) = m.append(&note(60, None), LIMITS);
        assert_eq!(evicted, 1);
        let (_, evicted) = m.append(&note(500, None), LIMITS);
        assert_eq!(evicted, 1);
        let all = m
            .replay(
                &Resume {
                    epoch: 1,
                    last_seq: 2,
                },
                0,
                |_| true,
                now,
            )
            .unwrap();
        assert_eq!(seqs(&all), vec![3]);
    }

    #[test]
    fn expired_messages_are_not_replayed() {
        let now = 0;
        let mut m = Mailbox::new("".into(), None, 1);
        m.append(&note(1, Some(SEC)), LIMITS);
        m.append(&note(1, None), LIMITS);
        let later = now + 2 * SEC;
        let items = m
            .replay(
                &Resume {
                    epoch: 1,
                    last_seq: 0,
                },
                0,
                |_| true,
                later,
            )
            .unwrap();
        assert_eq!(seqs(&items), vec![2]);
    }
}
