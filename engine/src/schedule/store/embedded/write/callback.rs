//! The callback transitions (issue 17): retry_wait, finish, the attempt
//! log and its bound, steps, and replay of a dead letter. Same
//! transaction, same tables as the rest of [`Tables`].

use redb::ReadableTable;

use super::*;
use crate::callback::attempt::Attempt;
use crate::schedule::entry::Step;
use crate::schedule::store::{
    FIRST_ATTEMPTS_KEPT, Finish, MAX_ATTEMPTS_KEPT, Replay, RetryWait, Settled,
};

impl Tables<'_> {
    /// Firing entries whose callback waits for another attempt; a counted
    /// attempt adds one to the entry's calls.
    pub(in super::super) fn retry_wait(
        &mut self,
        items: Vec<RetryWait>,
        now: Millis,
    ) -> R<Settled> {
        let mut out = Settled::default();
        for item in items {
            let settled = self.settle_one(
                &item.id,
                now,
                |_| true,
                |s, _| {
                    s.header.state = State::RetryWait;
                    s.header.deadline = 0;
                    s.header.fire = item.at_ms;
                    if item.counted {
                        s.header.calls = s.header.calls.saturating_add(1);
                    }
                },
            )?;
            let record = Attempt::encode_all(item.recheck.iter().chain(&item.attempt));
            out.count(settled, record.as_deref(), |seq, a| {
                self.log_attempt(seq, a)
            })?;
        }
        Ok(out)
    }

    /// Firing entries that end: delivered, declined or dead.
    pub(in super::super) fn finish(&mut self, items: Vec<Finish>, now: Millis) -> R<Settled> {
        let mut out = Settled::default();
        for item in items {
            let state = item.ending.state();
            let settled = self.settle_one(&item.id, now, |_| true, |s, _| s.finish(state, now))?;
            let record = Attempt::encode_all(item.recheck.iter().chain(&item.attempt));
            out.count(settled, record.as_deref(), |seq, a| {
                self.log_attempt(seq, a)
            })?;
        }
        Ok(out)
    }

    /// Append `a` to the attempt log of the entry at `seq`; when the log is
    /// full, drop the oldest record after the first
    /// [`FIRST_ATTEMPTS_KEPT`] (numbers only grow, so the records kept are
    /// `0..FIRST` and the latest `MAX - FIRST`). Returns whether one was
    /// dropped.
    fn log_attempt(&mut self, seq: u64, record: &[u8]) -> R<bool> {
        self.wrote = true;
        let (first, last) = (attempt_key(seq, 0), attempt_key(seq, u32::MAX));
        let next = match self
            .attempts
            .range(first.as_slice()..=last.as_slice())
            .map_err(io)?
            .next_back()
        {
            Some(kv) => {
                let (k, _) = kv.map_err(io)?;
                attempt_number(k.value()).map_or(0, |n| n.saturating_add(1))
            }
            None => 0,
        };
        let (max, keep) = (MAX_ATTEMPTS_KEPT as u32, FIRST_ATTEMPTS_KEPT as u32);
        let trimmed = next >= max;
        if trimmed {
            self.attempts
                .remove(attempt_key(seq, next - (max - keep)).as_slice())
                .map_err(io)?;
        }
        self.attempts
            .insert(attempt_key(seq, next).as_slice(), record)
            .map_err(io)?;
        Ok(trimmed)
    }

    /// Forget the attempt log of the entry at `seq`.
    pub(super) fn drop_attempts(&mut self, seq: u64) -> R<()> {
        let (first, last) = (attempt_key(seq, 0), attempt_key(seq, u32::MAX));
        let mut keys = Vec::new();
        for kv in self
            .attempts
            .range(first.as_slice()..=last.as_slice())
            .map_err(io)?
        {
            let (k, _) = kv.map_err(io)?;
            keys.push(k.value().to_vec());
        }
        for k in keys {
            self.attempts.remove(k.as_slice()).map_err(io)?;
        }
        Ok(())
    }

    /// Mark claimed entries at `step` (in their claims: nothing is
    /// written; a claim ends with its process, and the step with it).
    pub(in super::super) fn mark_step(
        &mut self,
        ids: Vec<String>,
        step: Step,
        now: Millis,
    ) -> R<()> {
        let claims = self.claims;
        let mut claims = claims.lock();
        for id in ids {
            if let Some(seq) = self.recent.seq_of(&self.ids, &id)?
                && let Some(c) = claims.get_mut(seq)
            {
                c.step = Some(step);
                c.at = now;
            }
        }
        Ok(())
    }

    /// A dead letter goes back to retry_wait, due now, attempts and calls
    /// 0.
    pub(in super::super) fn replay(&mut self, id: &str, now: Millis) -> R<Replay> {
        let Some((seq, mut s)) = self.get(id)? else {
            return Ok(Replay::NotFound);
        };
        if s.header.state != State::Dead {
            let status = self.claims.lock().status(seq, s.status(id));
            return Ok(Replay::NotDead(status));
        }
        self.leave(id, seq, &s)?;
        s.header.state = State::RetryWait;
        s.header.attempts = 0;
        s.header.calls = 0;
        s.header.updated = now;
        s.header.deadline = 0;
        s.header.fire = now;
        self.enter(id, seq, &s)?;
        Ok(Replay::Replayed(s.status(id)))
    }
}

impl Settled {
    /// Count an entry that moved (`seq` is `Some`) and log its attempt
    /// with `log`, counting a record the log's bound dropped.
    fn count(
        &mut self,
        seq: Option<u64>,
        attempt: Option<&[u8]>,
        log: impl FnOnce(u64, &[u8]) -> R<bool>,
    ) -> R<()> {
        let Some(seq) = seq else {
            return Ok(());
        };
        self.moved += 1;
        if let Some(a) = attempt
            && log(seq, a)?
        {
            self.trimmed += 1;
        }
        Ok(())
    }
}
