//! One mailbox: a user's live sessions at one site, and a bounded buffer of
//! recent messages for replay.

use std::collections::VecDeque;
use std::sync::Arc;

use herald_protocol::envelope::Notification;

use super::retained::Retained;
use crate::outbox::{Backlog, Buffered, GapReason, Loss, Outbox};

/// Bounds of the replay buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BufferLimits {
    /// Most messages kept (`mailbox.buffer_messages`).
    pub(crate) messages: usize,
    /// Most payload bytes kept (`mailbox.buffer_bytes`).
    pub(crate) bytes: usize,
    /// Most bytes kept in all, packed messages and their bookkeeping,
    /// while a live session still needs the oldest (`mailbox.unsent_bytes`).
    pub(crate) unsent_bytes: usize,
}

/// Where a client says it left off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resume {
    /// The mailbox epoch the client saw.
    pub epoch: u64,
    /// The last sequence it saw.
    pub last_seq: u64,
}

/// A session resuming a mailbox that may not be this one (`offline-ms` on
/// its CONNECT or SUBSCRIBE): the epoch it resumes, and how long ago it
/// last heard from that session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Missed {
    /// The epoch of the mailbox the client resumes.
    pub epoch: u64,
    /// How long ago (ms) the client last heard from it.
    pub offline_ms: u64,
}

/// Longest `offline-ms` taken at its word: a longer absence counts as this
/// long (routers keep what they sent for seconds, not hours).
pub(crate) const MAX_OFFLINE_MS: u64 = 3_600_000;

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

/// A mailbox's buffer as a refill reads it at `now` (ns after the hub's
/// clock origin): sequences are contiguous, from the first still buffered
/// to the head. A message is unpacked only when the refill queues it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct View<'a> {
    mailbox: &'a Mailbox,
    now: i64,
}

impl View<'_> {
    fn at(&self, seq: u64) -> Option<&Retained> {
        let first = self.mailbox.evicted_upto + 1;
        let index = usize::try_from(seq.checked_sub(first)?).ok()?;
        self.mailbox.buffer.get(index)
    }
}

impl Backlog for View<'_> {
    fn head(&self) -> u64 {
        self.mailbox.head
    }

    fn get(&self, seq: u64) -> Option<Buffered<'_>> {
        let m = self.at(seq)?;
        Some(Buffered {
            event: m.event(),
            payload_len: m.payload_len(),
            expired: !m.is_live(self.now),
        })
    }

    fn notification(&self, seq: u64) -> Option<Arc<Notification>> {
        self.at(seq).map(|m| Arc::new(m.notification(self.now)))
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
    /// The messages after `evicted_upto`, in sequence order and without
    /// holes (only eviction removes, from the front): the one at index `i`
    /// has sequence `evicted_upto + 1 + i`, so none stores its own. One
    /// pointer each; the packed messages are shared with every other
    /// mailbox they reached.
    buffer: VecDeque<Retained>,
    /// Payload bytes in `buffer` (what `buffer_bytes` bounds).
    buffer_bytes: usize,
    /// What `buffer` holds in all ([`Retained::footprint`]: what
    /// `unsent_bytes` bounds).
    footprint: usize,
    pub(crate) sessions: Vec<Arc<Outbox>>,
    /// When the mailbox expires if nobody comes back; None while sessions live.
    pub(crate) idle_deadline: Option<tokio::time::Instant>,
    /// When its first live session began (wall clock, ms since the Unix
    /// epoch); 0 while it has none. For presence.
    pub(crate) online_since_ms: u64,
    /// The earliest moment a live session that came from another mailbox
    /// (not this one: another edge's, or one that expired) last heard from
    /// it (wall clock, ms since the Unix epoch); 0 when none did. Reported
    /// to the routers, which re-send what went elsewhere since.
    pub(crate) missed_since_ms: u64,
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
            footprint: 0,
            sessions: Vec::new(),
            idle_deadline: None,
            online_since_ms: 0,
            missed_since_ms: 0,
        }
    }

    /// A session that resumes `missed` began at `now_ms` (wall clock): when
    /// it came from another mailbox, what it may have missed since it last
    /// heard from there is remembered.
    pub(crate) fn note_missed(&mut self, missed: &Missed, now_ms: u64) {
        if missed.epoch == self.epoch {
            return;
        }
        let since = now_ms.saturating_sub(missed.offline_ms.min(MAX_OFFLINE_MS));
        if self.missed_since_ms == 0 || since < self.missed_since_ms {
            self.missed_since_ms = since;
        }
    }

    /// Add a session that began at `now_ms` (wall clock).
    pub(crate) fn add_session(&mut self, outbox: &Arc<Outbox>, now_ms: u64) {
        if self.sessions.is_empty() {
            self.sessions.reserve_exact(1);
            self.online_since_ms = now_ms;
        }
        self.sessions.push(Arc::clone(outbox));
    }

    /// Assign the next sequence and buffer the message at `now` (ns after
    /// the hub's clock origin), then [`Self::trim`] the buffer.
    pub(crate) fn append(&mut self, m: &Retained, now: i64, limits: BufferLimits) -> Appended {
        self.head += 1;
        self.buffer_bytes += m.payload_len();
        self.footprint += m.footprint();
        self.buffer.push_back(m.clone());
        Appended {
            seq: self.head,
            ..self.trim(now, limits)
        }
    }

    /// Evict the oldest messages beyond the replay bounds at `now` (ns
    /// after the hub's clock origin), except those a live session has not
    /// been sent yet: a burst for a user who reads waits here for the
    /// sessions to take it, however many messages it is, up to
    /// `unsent_bytes` in all. Past that, the oldest goes even so: a session
    /// still behind on it loses it ([`Outbox::evicted`]: `session.when_full`
    /// applies), and what that did is counted in the answer. Called when a
    /// message comes, when a session caught up or left.
    pub(crate) fn trim(&mut self, now: i64, limits: BufferLimits) -> Appended {
        let mut out = Appended::default();
        while self.buffer.len() > limits.messages
            || (self.buffer_bytes > limits.bytes && self.buffer.len() > 1)
        {
            let oldest = self.evicted_upto + 1;
            if self.footprint <= limits.unsent_bytes
                && self.sessions.iter().any(|s| s.needs(oldest))
            {
                break;
            }
            let Some(old) = self.buffer.pop_front() else {
                break;
            };
            self.buffer_bytes -= old.payload_len();
            self.footprint -= old.footprint();
            self.evicted_upto = oldest;
            out.evicted += 1;
            let expired = !old.is_live(now);
            for session in &self.sessions {
                if !session.needs(oldest) {
                    continue;
                }
                match session.evicted(oldest, old.event(), expired) {
                    Loss::None => {}
                    Loss::Dropped(k) => out.dropped += k,
                    Loss::Cut => out.cut += 1,
                }
            }
        }
        // A burst's slots go with it (amortized: halving needs a quarter).
        if self.buffer.capacity() > 1024 && self.buffer.len() < self.buffer.capacity() / 4 {
            self.buffer.shrink_to(self.buffer.len() * 2);
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

    /// How many buffered messages after `last_seq` `wants` takes (by
    /// event) and have not expired at `now` (ns after the hub's clock
    /// origin): the size of a replay.
    pub(crate) fn count_after(
        &self,
        last_seq: u64,
        wants: impl Fn(&str) -> bool,
        now: i64,
    ) -> usize {
        let skip =
            usize::try_from(last_seq.saturating_sub(self.evicted_upto)).unwrap_or(usize::MAX);
        self.buffer
            .iter()
            .skip(skip)
            .filter(|m| m.is_live(now) && wants(m.event()))
            .count()
    }

    /// The buffer as sessions refill from it at `now` (ns after the hub's
    /// clock origin).
    pub(crate) fn backlog(&self, now: i64) -> View<'_> {
        View { mailbox: self, now }
    }

    pub(crate) fn detach(&mut self, outbox: &Arc<Outbox>) -> bool {
        let before = self.sessions.len();
        self.sessions.retain(|s| !Arc::ptr_eq(s, outbox));
        if self.sessions.is_empty() {
            self.sessions = Vec::new();
            self.online_since_ms = 0;
            self.missed_since_ms = 0;
        }
        self.sessions.len() != before
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use herald_protocol::envelope::Scope;

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
            accepted: Default::default(),
        };
        Retained::pack(&n, expires)
    }

    const SEC: i64 = 1_000_000_000;

    /// The sequences a refill can read after `last_seq`, with `now`.
    fn buffered_after(m: &Mailbox, last_seq: u64, now: i64) -> Vec<u64> {
        let view = m.backlog(now);
        (last_seq + 1..=view.head())
            .filter(|&seq| view.get(seq).is_some_and(|b| !b.expired))
            .collect()
    }

    const LIMITS: BufferLimits = BufferLimits {
        messages: 3,
        bytes: 100,
        unsent_bytes: 64 << 20,
    };

    #[test]
    fn resumes_within_the_buffer_and_gaps_beyond_it() {
        let now = 0;
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
        let now = 0;
        let mut m = Mailbox::new("".into(), None, 1);
        m.append(&note(60, None), now, LIMITS);
        assert_eq!(m.append(&note(60, None), now, LIMITS).evicted, 1);
        let last = m.append(&note(500, None), now, LIMITS);
        assert_eq!((last.seq, last.evicted), (3, 1));
        assert_eq!(buffered_after(&m, 0, now), vec![3]);
    }

    #[test]
    fn expired_messages_are_not_replayed() {
        let now = 0;
        let mut m = Mailbox::new("".into(), None, 1);
        m.append(&note(1, Some(SEC)), now, LIMITS);
        m.append(&note(1, None), now, LIMITS);
        let later = now + 2 * SEC;
        assert_eq!(m.count_after(0, |_| true, later), 1);
        assert_eq!(buffered_after(&m, 0, later), vec![2]);
        assert_eq!(buffered_after(&m, 0, now), vec![1, 2]);
    }
}
