//! The state transitions, applied inside one write transaction by the
//! writer thread. Each keeps every index in step with the entry's state.

use std::collections::{BTreeMap, HashSet};

use redb::{ReadableTable, Table, WriteTransaction};

use parking_lot::Mutex;

use super::claims::{Claim, Claims};
use super::held_users::HeldUsers;
use super::io;
use super::layout::*;
use super::recent::RecentIds;
use crate::schedule::entry::{Entry, Millis, State};
use crate::schedule::store::{Cancel, Insert, StoreError};

mod callback;
mod held;

pub(super) use self::held::Unheld;

/// Every table, open in one write transaction.
pub(super) struct Tables<'t> {
    meta: Table<'t, &'static str, u64>,
    ids: Table<'t, &'static [u8], u64>,
    records: Table<'t, u64, &'static [u8]>,
    sched: Table<'t, &'static [u8], ()>,
    retry: Table<'t, &'static [u8], ()>,
    lease: Table<'t, &'static [u8], ()>,
    held: Table<'t, &'static [u8], ()>,
    holdx: Table<'t, &'static [u8], ()>,
    list: Table<'t, &'static [u8], ()>,
    fin: Table<'t, &'static [u8], ()>,
    hist: Table<'t, u64, u64>,
    counts: Table<'t, u8, u64>,
    topics: Table<'t, &'static str, &'static [u8]>,
    attempts: Table<'t, &'static [u8], &'static [u8]>,
    /// Changes to `counts` by state code, and to `hist` by minute, made
    /// by this transaction: summed here and written once, by
    /// [`Tables::flush_counters`], instead of a read and a write of those
    /// tables for every entry.
    count_deltas: [i64; State::COUNT],
    hist_deltas: BTreeMap<u64, i64>,
    /// The seq the next new entry gets (`meta["next_seq"]`, written back
    /// by [`Tables::flush_counters`]).
    next_seq: u64,
    /// Ids not folded into `ids` yet.
    recent: &'t RecentIds,
    /// The claims (in memory).
    claims: &'t Mutex<Claims>,
    /// The users with something held (in memory), and those whose held
    /// keys this transaction removed: [`Tables::unheld`] says which of
    /// them have none left.
    held_users: &'t HeldUsers,
    unheld_users: Vec<String>,
    /// Seqs settled by this transaction: their claims go once it commits,
    /// and until then they settle nothing more.
    pub(super) settled: HashSet<u64>,
    /// Whether this transaction wrote anything (a group of claims alone
    /// does not: it is not committed).
    pub(super) wrote: bool,
    /// Ids this transaction added to `recent` (taken out again if it
    /// fails) and removed from the store (taken out of `recent` once it
    /// commits).
    pub(super) added: Vec<(Box<[u8]>, u64)>,
    pub(super) removed: Vec<(Box<[u8]>, u64)>,
}

type R<T> = Result<T, StoreError>;

impl<'t> Tables<'t> {
    pub(super) fn open(txn: &'t WriteTransaction, mem: &'t super::Memory) -> R<Tables<'t>> {
        let meta = txn.open_table(META).map_err(io)?;
        let next_seq = meta.get(NEXT_SEQ).map_err(io)?.map_or(0, |v| v.value());
        Ok(Tables {
            meta,
            ids: txn.open_table(IDS).map_err(io)?,
            records: txn.open_table(RECORDS).map_err(io)?,
            sched: txn.open_table(SCHED).map_err(io)?,
            retry: txn.open_table(RETRY).map_err(io)?,
            lease: txn.open_table(LEASE).map_err(io)?,
            held: txn.open_table(HELD).map_err(io)?,
            holdx: txn.open_table(HOLDX).map_err(io)?,
            list: txn.open_table(LIST).map_err(io)?,
            fin: txn.open_table(FINAL).map_err(io)?,
            hist: txn.open_table(HIST).map_err(io)?,
            counts: txn.open_table(COUNTS).map_err(io)?,
            topics: txn.open_table(TOPICS).map_err(io)?,
            attempts: txn.open_table(ATTEMPTS).map_err(io)?,
            count_deltas: [0; State::COUNT],
            hist_deltas: BTreeMap::new(),
            next_seq,
            recent: &mem.recent,
            claims: &mem.claims,
            held_users: &mem.held,
            unheld_users: Vec::new(),
            settled: HashSet::new(),
            wrote: false,
            added: Vec::new(),
            removed: Vec::new(),
        })
    }

    /// The topic tables, for a topic write (marks the transaction as
    /// writing).
    pub(super) fn topic_tables(&mut self) -> super::topics::TopicTables<'_, 't> {
        self.wrote = true;
        super::topics::TopicTables {
            topics: &mut self.topics,
            meta: &mut self.meta,
        }
    }

    /// Write every id of `recent` into `ids` (sorted: each page once) and
    /// record that seqs below the next one are folded. Returns that seq.
    pub(super) fn fold(&mut self) -> R<u64> {
        self.wrote = true;
        for (id, seq) in self.recent.sorted() {
            self.ids.insert(&*id, seq).map_err(io)?;
        }
        self.meta.insert(FOLDED, self.next_seq).map_err(io)?;
        Ok(self.next_seq)
    }

    /// Write the counter changes of the transaction; call once, before
    /// the commit.
    pub(super) fn flush_counters(&mut self) -> R<()> {
        if !self.wrote {
            return Ok(());
        }
        self.meta.insert(NEXT_SEQ, self.next_seq).map_err(io)?;
        for (code, delta) in self.count_deltas.iter_mut().enumerate() {
            if *delta == 0 {
                continue;
            }
            let code = code as u8;
            let was = self.counts.get(code).map_err(io)?.map_or(0, |v| v.value());
            self.counts
                .insert(code, was.saturating_add_signed(*delta))
                .map_err(io)?;
            *delta = 0;
        }
        for (minute, delta) in std::mem::take(&mut self.hist_deltas) {
            if delta == 0 {
                continue;
            }
            let was = self.hist.get(minute).map_err(io)?.map_or(0, |v| v.value());
            let next = was.saturating_add_signed(delta);
            if next == 0 {
                self.hist.remove(minute).map_err(io)?;
            } else {
                self.hist.insert(minute, next).map_err(io)?;
            }
        }
        Ok(())
    }

    /// The entry stored under `id`, with its seq.
    fn get(&self, id: &str) -> R<Option<(u64, Stored)>> {
        let Some(seq) = self.recent.seq_of(&self.ids, id)? else {
            return Ok(None);
        };
        Ok(self.get_at(id, seq)?.map(|s| (seq, s)))
    }

    /// The entry stored at `seq` (whose id is `id`).
    fn get_at(&self, id: &str, seq: u64) -> R<Option<Stored>> {
        match self.records.get(seq).map_err(io)? {
            Some(v) => Stored::decode(id, v.value()).map(Some),
            None => Ok(None),
        }
    }

    fn put(&mut self, id: &str, seq: u64, s: &Stored) -> R<()> {
        self.wrote = true;
        self.records
            .insert(seq, s.encode(id).as_slice())
            .map_err(io)?;
        Ok(())
    }

    fn count(&mut self, state: State, delta: i64) -> R<()> {
        self.count_deltas[usize::from(state.code())] += delta;
        Ok(())
    }

    fn hist(&mut self, fire: Millis, delta: i64) -> R<()> {
        *self.hist_deltas.entry(fire / MINUTE).or_default() += delta;
        Ok(())
    }

    /// Remove the list keys of an entry listed under `state`: its topic's
    /// and no topic's.
    fn unlist(
        &mut self,
        topic: Option<&str>,
        state: State,
        due: Millis,
        seq: u64,
        id: &str,
    ) -> R<()> {
        for topic in listed_under(topic) {
            self.list
                .remove(list_key(topic, state, due, seq, id).as_slice())
                .map_err(io)?;
        }
        Ok(())
    }

    /// Take `s` out of the indexes of its current state.
    fn leave(&mut self, id: &str, seq: u64, s: &Stored) -> R<()> {
        self.wrote = true;
        let h = s.header;
        self.unlist(s.topic(), list_state(h.state), s.due(), seq, id)?;
        match h.state {
            State::Scheduled => {
                self.sched
                    .remove(queue_key(h.fire, seq, id).as_slice())
                    .map_err(io)?;
                self.hist(h.fire, -1)?;
            }
            State::RetryWait => {
                let k = queue_key(h.fire, seq, id);
                self.sched.remove(k.as_slice()).map_err(io)?;
                self.retry.remove(k.as_slice()).map_err(io)?;
            }
            State::Firing => {
                self.lease
                    .remove(queue_key(h.deadline, seq, id).as_slice())
                    .map_err(io)?;
            }
            State::Held => {
                if let Some(user) = s
                    .entry()
                    .as_ref()
                    .and_then(|e| e.online_user().map(str::to_owned))
                {
                    self.held
                        .remove(held_key(&user, s.due(), id).as_slice())
                        .map_err(io)?;
                    self.unheld_users.push(user);
                }
                self.holdx
                    .remove(time_key(h.deadline, id).as_slice())
                    .map_err(io)?;
            }
            State::Delivered
            | State::Cancelled
            | State::Expired
            | State::Declined
            | State::Dead => {
                self.fin
                    .remove(time_key(h.updated, id).as_slice())
                    .map_err(io)?;
            }
        }
        if !h.state.is_final() {
            self.count(h.state, -1)?;
        }
        Ok(())
    }

    /// Put `s` into the indexes of its (new) state, and store it.
    fn enter(&mut self, id: &str, seq: u64, s: &Stored) -> R<()> {
        let h = s.header;
        let state = list_state(h.state);
        for topic in listed_under(s.topic()) {
            self.list
                .insert(list_key(topic, state, s.due(), seq, id).as_slice(), ())
                .map_err(io)?;
        }
        match h.state {
            State::Scheduled => {
                self.sched
                    .insert(queue_key(h.fire, seq, id).as_slice(), ())
                    .map_err(io)?;
                self.claims.lock().scheduled(h.fire, seq);
                self.hist(h.fire, 1)?;
            }
            State::RetryWait => {
                let k = queue_key(h.fire, seq, id);
                self.sched.insert(k.as_slice(), ()).map_err(io)?;
                self.retry.insert(k.as_slice(), ()).map_err(io)?;
                self.claims.lock().scheduled(h.fire, seq);
            }
            State::Firing => {
                self.lease
                    .insert(queue_key(h.deadline, seq, id).as_slice(), ())
                    .map_err(io)?;
            }
            State::Held => {
                if let Some(user) = s
                    .entry()
                    .as_ref()
                    .and_then(|e| e.online_user().map(str::to_owned))
                {
                    self.held_users.add(&user);
                    self.held
                        .insert(held_key(&user, s.due(), id).as_slice(), ())
                        .map_err(io)?;
                }
                self.holdx
                    .insert(time_key(h.deadline, id).as_slice(), ())
                    .map_err(io)?;
            }
            State::Delivered
            | State::Cancelled
            | State::Expired
            | State::Declined
            | State::Dead => {
                self.fin
                    .insert(time_key(h.updated, id).as_slice(), ())
                    .map_err(io)?;
            }
        }
        if !h.state.is_final() {
            self.count(h.state, 1)?;
        }
        self.put(id, seq, s)
    }

    pub(super) fn insert(&mut self, entries: Vec<Entry>, now: Millis) -> R<Vec<Insert>> {
        let mut out = Vec::with_capacity(entries.len());
        for e in entries {
            let id = e.id().to_owned();
            if let Some((_, existing)) = self.get(&id)? {
                out.push(Insert::Duplicate(existing.status(&id)));
                continue;
            }
            let seq = self.next_seq;
            self.next_seq += 1;
            self.recent.insert(id.as_bytes(), seq);
            self.added.push((id.as_bytes().into(), seq));
            let s = Stored::new(e, now);
            self.enter(&id, seq, &s)?;
            out.push(Insert::Accepted);
        }
        Ok(out)
    }

    /// Claim what is due at `now`, at most `limit`: first entries whose
    /// lease ran out, then scheduled ones in `sched` order from where the
    /// last claim stopped. Claims live in memory ([`Claims`]): the tables
    /// do not change.
    pub(super) fn claim_due(&mut self, now: Millis, limit: usize, lease_ms: u64) -> R<Vec<Entry>> {
        let claims = self.claims;
        let mut claims = claims.lock();
        let deadline = now.saturating_add(lease_ms);
        let mut out = Vec::new();
        for seq in claims.expired(now, limit) {
            let Some(c) = claims.get(seq).cloned() else {
                continue;
            };
            let live = self
                .get_at(&c.id, seq)?
                .filter(|s| s.header.state == c.from);
            let Some(mut e) = live.and_then(|s| s.entry()) else {
                // Settled or gone without its claim: nothing to fire.
                claims.remove(seq);
                continue;
            };
            e.attempts = c.attempts.saturating_add(1);
            // Its place in the queue: the end of the lease that ran out.
            e.fire_ms = c.deadline;
            claims.insert(
                seq,
                Claim {
                    deadline,
                    attempts: e.attempts,
                    at: now,
                    step: None,
                    ..c
                },
            );
            out.push(e);
        }
        let start = match claims.cursor() {
            // Just after the cursor's (time, seq): seqs are unique.
            Some((t, seq)) => queue_key(t, seq.saturating_add(1), ""),
            None => Vec::new(),
        };
        let bound = time_bound(now);
        let mut cursor = claims.cursor();
        let mut keys = Vec::new();
        for kv in self
            .sched
            .range(start.as_slice()..bound.as_slice())
            .map_err(io)?
        {
            if keys.len() + out.len() >= limit {
                break;
            }
            let (k, _) = kv.map_err(io)?;
            if let Some((t, seq, id)) = split_queue_key(k.value()) {
                cursor = Some((t, seq));
                if claims.get(seq).is_none() {
                    keys.push((seq, id.to_owned()));
                }
            }
        }
        claims.set_cursor(cursor);
        for (seq, id) in keys {
            let Some(s) = self.get_at(&id, seq)? else {
                continue;
            };
            if !matches!(s.header.state, State::Scheduled | State::RetryWait) || s.header.fire > now
            {
                continue;
            }
            let Some(e) = first_claim(&mut claims, seq, id, &s, now, deadline) else {
                continue;
            };
            out.push(e);
        }
        Ok(out)
    }

    /// Move a claimed entry to its next state (`to` gets it and the state
    /// it was claimed from: a final one, or scheduled/held/retry_wait with
    /// `deadline`/`fire`), with the attempts of its claim, unless `from`
    /// refuses the state it was claimed from. Its claim goes once the
    /// transaction commits, and it settles nothing more before: the same
    /// id twice in a batch, or in two requests of one group, moves once.
    /// Returns its seq when it moved.
    fn settle_one(
        &mut self,
        id: &str,
        now: Millis,
        from: impl Fn(State) -> bool,
        to: impl FnOnce(&mut Stored, State),
    ) -> R<Option<u64>> {
        let Some((seq, mut s)) = self.get(id)? else {
            return Ok(None);
        };
        if self.settled.contains(&seq) {
            return Ok(None);
        }
        let Some(c) = self.claims.lock().get(seq).cloned() else {
            return Ok(None);
        };
        if s.header.state != c.from || !from(c.from) {
            return Ok(None);
        }
        self.leave(id, seq, &s)?;
        s.header.attempts = c.attempts;
        s.header.updated = now;
        to(&mut s, c.from);
        self.enter(id, seq, &s)?;
        self.settled.insert(seq);
        Ok(Some(seq))
    }

    /// [`Tables::settle_one`] for each of `ids`, from any state.
    fn settle(&mut self, ids: Vec<String>, now: Millis, to: impl Fn(&mut Stored, State)) -> R<()> {
        for id in ids {
            self.settle_one(&id, now, |_| true, &to)?;
        }
        Ok(())
    }

    pub(super) fn delivered(&mut self, ids: Vec<String>, now: Millis) -> R<()> {
        self.settle(ids, now, |s, _| s.finish(State::Delivered, now))
    }

    /// Hold the claimed ids, except those claimed from retry_wait (their
    /// browser part is done: there is nothing to hold them for).
    pub(super) fn hold(&mut self, ids: Vec<String>, expires: Millis, now: Millis) -> R<()> {
        for id in ids {
            self.settle_one(
                &id,
                now,
                |from| from != State::RetryWait,
                |s, _| {
                    s.header.state = State::Held;
                    s.header.deadline = expires;
                },
            )?;
        }
        Ok(())
    }

    /// Back to where it was claimed from, at `at`: scheduled, or
    /// retry_wait for an entry claimed from there (it keeps its phase).
    pub(super) fn release(&mut self, ids: Vec<String>, at: Millis, now: Millis) -> R<()> {
        self.settle(ids, now, |s, from| {
            s.header.state = if from == State::RetryWait {
                State::RetryWait
            } else {
                State::Scheduled
            };
            s.header.deadline = 0;
            s.header.fire = at;
        })
    }

    /// Entries of the first layouts left firing (a crash) go back to
    /// scheduled, due when their lease runs out, and their list key moves
    /// to scheduled's. Claims are kept in memory now, so nothing else is
    /// ever firing in the tables. Returns how many.
    pub(super) fn unlease(&mut self) -> R<usize> {
        let mut leased = Vec::new();
        for kv in self.lease.iter().map_err(io)? {
            let (k, _) = kv.map_err(io)?;
            if let Some((_, seq, id)) = split_queue_key(k.value()) {
                leased.push((seq, id.to_owned()));
            }
        }
        let mut moved = 0;
        for (seq, id) in leased {
            let Some(mut s) = self.get_at(&id, seq)? else {
                continue;
            };
            if s.header.state != State::Firing {
                continue;
            }
            // Its list key may be firing's own (written before firing was
            // listed under scheduled) or scheduled's.
            self.unlist(s.topic(), State::Firing, s.due(), seq, &id)?;
            self.leave(&id, seq, &s)?;
            s.header.state = State::Scheduled;
            s.header.fire = s.header.deadline;
            s.header.deadline = 0;
            self.enter(&id, seq, &s)?;
            moved += 1;
        }
        Ok(moved)
    }

    pub(super) fn cancel(&mut self, id: &str, now: Millis) -> R<Cancel> {
        let Some((seq, mut s)) = self.get(id)? else {
            return Ok(Cancel::NotFound);
        };
        let status = self.claims.lock().status(seq, s.status(id));
        if status.state == State::Firing {
            return Ok(Cancel::TooLate(status));
        }
        match s.header.state {
            // A dead letter cancelled is one nobody will send again.
            State::Scheduled | State::Held | State::RetryWait | State::Dead => {
                self.leave(id, seq, &s)?;
                s.finish(State::Cancelled, now);
                self.enter(id, seq, &s)?;
                Ok(Cancel::Cancelled(s.status(id)))
            }
            State::Cancelled => Ok(Cancel::Cancelled(s.status(id))),
            State::Firing | State::Delivered | State::Expired | State::Declined => {
                Ok(Cancel::TooLate(s.status(id)))
            }
        }
    }

    pub(super) fn expire(&mut self, now: Millis, limit: usize) -> R<Vec<Option<String>>> {
        let bound = time_bound(now);
        let mut ids = Vec::new();
        for kv in self
            .holdx
            .range(..bound.as_slice())
            .map_err(io)?
            .take(limit)
        {
            let (k, _) = kv.map_err(io)?;
            if let Some((_, id)) = split_time_key(k.value()) {
                ids.push(id.to_owned());
            }
        }
        let mut topics = Vec::new();
        for id in ids {
            let Some((seq, mut s)) = self.get(&id)? else {
                continue;
            };
            if s.header.state != State::Held || self.claims.lock().get(seq).is_some() {
                continue;
            }
            let topic = s.topic().map(str::to_owned);
            self.leave(&id, seq, &s)?;
            s.finish(State::Expired, now);
            self.enter(&id, seq, &s)?;
            topics.push(topic);
        }
        Ok(topics)
    }

    pub(super) fn purge(&mut self, before: Millis, limit: usize) -> R<u64> {
        let bound = before.to_be_bytes();
        let mut ids = Vec::new();
        for kv in self.fin.range(..bound.as_slice()).map_err(io)?.take(limit) {
            let (k, _) = kv.map_err(io)?;
            if let Some((_, id)) = split_time_key(k.value()) {
                ids.push(id.to_owned());
            }
        }
        let mut n = 0;
        for id in ids {
            let Some((seq, s)) = self.get(&id)? else {
                continue;
            };
            if !s.header.state.is_final() {
                continue;
            }
            self.leave(&id, seq, &s)?;
            self.records.remove(seq).map_err(io)?;
            self.drop_attempts(seq)?;
            if self.recent.get(id.as_bytes()).is_some() {
                self.removed.push((id.as_bytes().into(), seq));
            } else {
                self.ids.remove(id.as_bytes()).map_err(io)?;
            }
            n += 1;
        }
        Ok(n)
    }
}

/// Claim the unclaimed live entry `s` (id `id`, at `seq`) until
/// `deadline`: its entry, with this claim counted in its attempts.
fn first_claim(
    claims: &mut Claims,
    seq: u64,
    id: String,
    s: &Stored,
    now: Millis,
    deadline: Millis,
) -> Option<Entry> {
    let mut e = s.entry()?;
    // Where it waits in the tables: its `sched` time, or its due time
    // when held.
    let fire = match s.header.state {
        State::Scheduled | State::RetryWait => s.header.fire,
        _ => s.due(),
    };
    e.attempts = s.header.attempts.saturating_add(1);
    e.fire_ms = fire;
    claims.insert(
        seq,
        Claim {
            id,
            from: s.header.state,
            fire,
            deadline,
            attempts: e.attempts,
            at: now,
            step: None,
        },
    );
    Some(e)
}
