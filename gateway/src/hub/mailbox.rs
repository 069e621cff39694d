//! One mailbox: a user's live sessions at one site, and a bounded buffer of
//! recent messages for replay.

use std::collections::VecDeque;
use std::sync::Arc;

use herald_protocol::envelope::Notification;
use tokio::time::Instant;

use crate::outbox::{GapReason, Item, Outbox};

/// Bounds of the replay buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BufferLimits {
    pub(crate) messages: usize,
    pub(crate) bytes: usize,
}

#[derive(Debug)]
struct Buffered {
    seq: u64,
    n: Arc<Notification>,
    expires_at: Option<Instant>,
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
    buffer: VecDeque<Buffered>,
    buffer_bytes: usize,
    pub(crate) sessions: Vec<Arc<Outbox>>,
    /// When the mailbox expires if nobody comes back; None while sessions live.
    pub(crate) idle_deadline: Option<Instant>,
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
    pub(crate) fn append(
        &mut self,
        n: &Arc<Notification>,
        now: Instant,
        limits: BufferLimits,
    ) -> (u64, usize) {
        self.head += 1;
        let seq = self.head;
        self.buffer_bytes += n.payload.len();
        self.buffer.push_back(Buffered {
            seq,
            n: Arc::clone(n),
            expires_at: n.ttl.map(|ttl| now + ttl),
        });
        let mut evicted = 0;
        while self.buffer.len() > limits.messages
            || (self.buffer_bytes > limits.bytes && self.buffer.len() > 1)
        {
            if let Some(old) = self.buffer.pop_front() {
                self.buffer_bytes -= old.n.payload.len();
                self.evicted_upto = old.seq;
                evicted += 1;
            }
        }
        (seq, evicted)
    }

    /// The replay for a subscription (key `sub`), or the gap marker when the
    /// buffer no longer covers the resume point. Expired messages are skipped.
    pub(crate) fn replay(
        &self,
        resume: &Resume,
        sub: u32,
        wants: impl Fn(&Notification) -> bool,
        now: Instant,
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
        Ok(self
            .buffer
            .iter()
            .filter(|b| b.seq > resume.last_seq)
            .filter(|b| b.expires_at.is_none_or(|t| t > now))
            .filter(|b| wants(&b.n))
            .map(|b| Item::Deliver {
                seq: b.seq,
                n: Arc::clone(&b.n),
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
    use herald_protocol::envelope::Scope;
    use std::time::Duration;

    fn note(size: usize, ttl: Option<Duration>) -> Arc<Notification> {
        Arc::new(Notification {
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
            ttl,
            encodings: Default::default(),
        })
    }

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
        let now = Instant::now();
        let mut m = Mailbox::new("".into(), None, 9);
        for _ in 0..5 {
            m.append(&note(1, None), now, LIMITS);
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
        let now = Instant::now();
        let mut m = Mailbox::new("".into(), None, 1);
        m.append(&note(60, None), now, LIMITS);
        let (_, evicted) = m.append(&note(60, None), now, LIMITS);
        assert_eq!(evicted, 1);
        let (_, evicted) = m.append(&note(500, None), now, LIMITS);
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
        let now = Instant::now();
        let mut m = Mailbox::new("".into(), None, 1);
        m.append(&note(1, Some(Duration::from_secs(1))), now, LIMITS);
        m.append(&note(1, None), now, LIMITS);
        let later = now + Duration::from_secs(2);
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
