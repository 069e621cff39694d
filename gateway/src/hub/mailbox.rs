//! One mailbox: a user's live sessions at one site, and a bounded buffer of
//! recent messages for replay.

use std::collections::VecDeque;
use std::sync::Arc;

use herald_protocol::envelope::Notification;
use tokio::time::Instant;

use crate::outbox::{Backlog, GapReason, Loss, Outbox};

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

/// What [`Mailbox::append`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Appended {
    /// The message's sequence.
    pub(crate) seq: u64,
    /// Old messages the bounds evicted.
    pub(crate) evicted: usize,
    /// Messages lagging sessions lost to the eviction (`drop-oldest`: a
    /// gap marker took their place).
    pub(crate) dropped: usize,
    /// Lagging sessions cut by the eviction (`disconnect`).
    pub(crate) cut: usize,
}

/// A mailbox's buffer as a refill reads it: sequences are contiguous, from
/// the first still buffered to the head.
#[derive(Debug, Clone, Copy)]
pub(crate) struct View<'a> {
    mailbox: &'a Mailbox,
    now: Instant,
}

impl Backlog for View<'_> {
    fn head(&self) -> u64 {
        self.mailbox.head
    }

    fn get(&self, seq: u64) -> Option<crate::outbox::Buffered<'_>> {
        let first = self.mailbox.buffer.front()?.seq;
        let b = self
            .mailbox
            .buffer
            .get(usize::try_from(seq.checked_sub(first)?).ok()?)?;
        debug_assert_eq!(b.seq, seq, "buffered sequences are contiguous");
        Some(crate::outbox::Buffered {
            n: &b.n,
            expired: b.expires_at.is_some_and(|t| t <= self.now),
        })
    }
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

    /// Assign the next sequence and buffer the message, evicting the
    /// oldest beyond the bounds. A session still behind on an evicted
    /// message loses it ([`Outbox::evicted`]); what that did is counted in
    /// the answer.
    pub(crate) fn append(
        &mut self,
        n: &Arc<Notification>,
        now: Instant,
        limits: BufferLimits,
    ) -> Appended {
        self.head += 1;
        let mut out = Appended {
            seq: self.head,
            ..Appended::default()
        };
        self.buffer_bytes += n.payload.len();
        self.buffer.push_back(Buffered {
            seq: self.head,
            n: Arc::clone(n),
            expires_at: n.ttl.map(|ttl| now + ttl),
        });
        while self.buffer.len() > limits.messages
            || (self.buffer_bytes > limits.bytes && self.buffer.len() > 1)
        {
            let Some(old) = self.buffer.pop_front() else {
                break;
            };
            self.buffer_bytes -= old.n.payload.len();
            self.evicted_upto = old.seq;
            out.evicted += 1;
            let expired = old.expires_at.is_some_and(|t| t <= now);
            for session in &self.sessions {
                if !session.needs(old.seq) {
                    continue;
                }
                match session.evicted(old.seq, &old.n, expired) {
                    Loss::None => {}
                    Loss::Dropped(k) => out.dropped += k,
                    Loss::Cut => out.cut += 1,
                }
            }
        }
        out
    }

    /// Whether a subscription may resume from `resume`: the gap reason
    /// when the buffer does not cover it.
    pub(crate) fn check_resume(&self, resume: &Resume) -> Result<(), GapReason> {
        if resume.epoch != self.epoch {
            return Err(GapReason::EpochChanged);
        }
        if resume.last_seq > self.head || resume.last_seq < self.evicted_upto {
            return Err(GapReason::BufferExceeded);
        }
        Ok(())
    }

    /// How many buffered messages after `last_seq` `wants` takes and have
    /// not expired: the size of a replay.
    pub(crate) fn count_after(
        &self,
        last_seq: u64,
        wants: impl Fn(&Notification) -> bool,
        now: Instant,
    ) -> usize {
        self.buffer
            .iter()
            .filter(|b| b.seq > last_seq)
            .filter(|b| b.expires_at.is_none_or(|t| t > now))
            .filter(|b| wants(&b.n))
            .count()
    }

    /// The buffer as sessions refill from it at `now`.
    pub(crate) fn backlog(&self, now: Instant) -> View<'_> {
        View { mailbox: self, now }
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

    /// The sequences a refill can read after `last_seq`, with `now`.
    fn buffered_after(m: &Mailbox, last_seq: u64, now: Instant) -> Vec<u64> {
        let view = m.backlog(now);
        (last_seq + 1..=view.head())
            .filter(|&seq| view.get(seq).is_some_and(|b| !b.expired))
            .collect()
    }

    const LIMITS: BufferLimits = BufferLimits {
        messages: 3,
        bytes: 100,
    };

    #[test]
    fn resumes_within_the_buffer_and_gaps_beyond_it() {
        let now = Instant::now();
        let mut m = Mailbox::new("".into(), None, 9);
        for _ in 0..5 {
            m.append(&note(1, None), now, LIMITS);
        }
        let resume = |last_seq| Resume { epoch: 9, last_seq };
        assert_eq!(m.check_resume(&resume(3)), Ok(()));
        assert_eq!(m.count_after(3, |_| true, now), 2);
        assert_eq!(buffered_after(&m, 3, now), vec![4, 5]);
        // Seqs 1 and 2 were evicted (count bound 3): resuming from 1 misses 2.
        assert_eq!(m.check_resume(&resume(1)), Err(GapReason::BufferExceeded));
        assert_eq!(m.check_resume(&resume(2)), Ok(()));
        assert_eq!(
            m.check_resume(&Resume {
                epoch: 8,
                last_seq: 5
            }),
            Err(GapReason::EpochChanged)
        );
        assert_eq!(m.check_resume(&resume(6)), Err(GapReason::BufferExceeded));
        assert!(m.backlog(now).get(2).is_none(), "evicted");
        assert!(m.backlog(now).get(6).is_none(), "not yet assigned");
    }

    #[test]
    fn byte_bound_evicts_but_keeps_the_newest() {
        let now = Instant::now();
        let mut m = Mailbox::new("".into(), None, 1);
        m.append(&note(60, None), now, LIMITS);
        assert_eq!(m.append(&note(60, None), now, LIMITS).evicted, 1);
        let last = m.append(&note(500, None), now, LIMITS);
        assert_eq!((last.seq, last.evicted), (3, 1));
        assert_eq!(buffered_after(&m, 0, now), vec![3]);
    }

    #[test]
    fn expired_messages_are_not_replayed() {
        let now = Instant::now();
        let mut m = Mailbox::new("".into(), None, 1);
        m.append(&note(1, Some(Duration::from_secs(1))), now, LIMITS);
        m.append(&note(1, None), now, LIMITS);
        let later = now + Duration::from_secs(2);
        assert_eq!(m.count_after(0, |_| true, later), 1);
        assert_eq!(buffered_after(&m, 0, later), vec![2]);
        assert_eq!(buffered_after(&m, 0, now), vec![1, 2]);
    }
}
