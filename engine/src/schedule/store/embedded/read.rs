//! The reads of the embedded store: each runs on its own snapshot (on the
//! blocking pool, see `EmbeddedStore::read`), with the claims where it
//! needs them, and is a range over the index it needs.

use redb::ReadTransaction;

use super::claims::Claims;
use super::io;
use super::layout::*;
use super::recent::RecentIds;
use crate::callback::attempt::Attempt;
use crate::schedule::entry::{Millis, State, Status};
use crate::schedule::store::{Counts, Cursor, ListFilter, Page, StoreError};

/// Most keys one list page reads beyond its items: a page of a rare
/// state listed among many entries of the other (firing among scheduled)
/// ends there, with a cursor to go on from.
const LIST_SCAN: usize = 10_000;

/// The items with a fire time in `from..=until`, in (fire time, id)
/// order, at most `limit`: scheduled entries not claimed at their fire
/// time, claimed ones at their lease's end.
pub(super) fn upcoming(
    txn: &ReadTransaction,
    claims: &Claims,
    from: Millis,
    until: Millis,
    limit: usize,
) -> Result<Vec<(Millis, String)>, StoreError> {
    if from > until {
        return Ok(Vec::new());
    }
    let start = from.to_be_bytes();
    let bound = time_bound(until);
    // Claimed entries come at their lease's end.
    let mut out: Vec<(Millis, String)> = claims
        .iter()
        .filter(|c| (from..=until).contains(&c.deadline))
        .map(|c| (c.deadline, c.id.clone()))
        .collect();
    let sched = txn.open_table(SCHED).map_err(io)?;
    let mut unclaimed = 0;
    for kv in sched
        .range(start.as_slice()..bound.as_slice())
        .map_err(io)?
    {
        if unclaimed == limit {
            break;
        }
        let (k, _) = kv.map_err(io)?;
        if let Some((t, seq, id)) = split_queue_key(k.value())
            && claims.get(seq).is_none()
        {
            out.push((t, id.to_owned()));
            unclaimed += 1;
        }
    }
    out.sort();
    out.truncate(limit);
    Ok(out)
}

/// Whether anything is held for `user`.
pub(super) fn any_held(txn: &ReadTransaction, user: &str) -> Result<bool, StoreError> {
    let held = txn.open_table(HELD).map_err(io)?;
    let prefix = held_prefix(user);
    let end = prefix_end(&prefix);
    Ok(held
        .range(prefix.as_slice()..end.as_slice())
        .map_err(io)?
        .next()
        .is_some())
}

/// A page of the entries in `filter`'s state, after the cursor.
pub(super) fn list(
    tables: &StatusTables<'_>,
    filter: &ListFilter,
    after: Option<&Cursor>,
    limit: usize,
) -> Result<Page, StoreError> {
    let list = &tables.list;
    let topic = filter.topic.as_deref();
    // Firing entries are listed under scheduled: a page of either
    // reads those keys and keeps the entries in the state asked.
    let keyed = list_state(filter.state);
    let prefix = list_prefix(topic, keyed);
    let end = prefix_end(&prefix);
    let start = match after {
        // Just after the cursor's own key; if the cursor's entry
        // has been purged since, from the start of its due time
        // (a page may then repeat entries, but never skips one).
        Some(c) => match tables.seq_of(&c.id)? {
            Some(seq) => {
                let mut k = list_key(topic, keyed, c.due_ms, seq, &c.id);
                k.push(0);
                k
            }
            None => {
                let mut k = prefix.clone();
                k.extend_from_slice(&c.due_ms.to_be_bytes());
                k
            }
        },
        None => prefix.clone(),
    };
    let mut items: Vec<Status> = Vec::new();
    // A page ends at `limit` items, or after LIST_SCAN keys (a page
    // of firing entries among many scheduled ones); when more keys
    // follow, its cursor is the last key it read.
    let mut stop: Option<Cursor> = None;
    let mut last: Option<Cursor> = None;
    let mut scanned = 0;
    for kv in list.range(start.as_slice()..end.as_slice()).map_err(io)? {
        let (k, _) = kv.map_err(io)?;
        let Some((due, seq, id)) = k.value().get(prefix.len()..).and_then(split_queue_key) else {
            continue;
        };
        if items.len() == limit || scanned == LIST_SCAN {
            stop = last.take();
            break;
        }
        scanned += 1;
        if let Some(s) = tables.status_at(id, seq)?
            && s.state == filter.state
        {
            items.push(s);
        }
        last = Some(Cursor {
            due_ms: due,
            id: id.to_owned(),
        });
    }
    Ok(Page { items, next: stop })
}

/// The pending counts at `now`: scheduled entries per fire-time bucket of
/// `bounds` (and beyond the last), firing, held.
pub(super) fn counts(
    txn: &ReadTransaction,
    claims: &Claims,
    now: Millis,
    bounds: &[u64],
) -> Result<Counts, StoreError> {
    let counts = txn.open_table(COUNTS).map_err(io)?;
    let get = |s: State| -> Result<u64, StoreError> {
        Ok(counts.get(s.code()).map_err(io)?.map_or(0, |v| v.value()))
    };
    let total = get(State::Scheduled)?;
    let sched = txn.open_table(SCHED).map_err(io)?;
    let retry = txn.open_table(RETRY).map_err(io)?;
    let hist_table = txn.open_table(HIST).map_err(io)?;
    let last_minute = bounds.last().map_or(0, |b| now.saturating_add(*b) / MINUTE);
    let mut hist = Vec::new();
    for kv in hist_table.range(..=last_minute).map_err(io)? {
        let (m, n) = kv.map_err(io)?;
        hist.push((m.value(), n.value()));
    }
    let mut scheduled = Vec::with_capacity(bounds.len() + 1);
    let mut below = 0;
    for b in bounds {
        let upto = scheduled_before(&hist, &sched, &retry, now.saturating_add(*b))?;
        scheduled.push(upto.saturating_sub(below));
        below = upto;
    }
    scheduled.push(total.saturating_sub(below));
    // Claimed entries are still scheduled (or held, or retry_wait) in the
    // tables: count them as firing instead.
    let (mut claimed_held, mut claimed_retry) = (0, 0);
    for c in claims.iter() {
        match c.from {
            State::Held => {
                claimed_held += 1;
                continue;
            }
            State::RetryWait => {
                claimed_retry += 1;
                continue;
            }
            _ => {}
        }
        let bucket = bounds
            .iter()
            .position(|b| c.fire < now.saturating_add(*b))
            .unwrap_or(bounds.len());
        scheduled[bucket] = scheduled[bucket].saturating_sub(1);
    }
    Ok(Counts {
        scheduled,
        firing: get(State::Firing)?.saturating_add(claims.len() as u64),
        held: get(State::Held)?.saturating_sub(claimed_held),
        retry_wait: get(State::RetryWait)?.saturating_sub(claimed_retry),
    })
}

/// What a read by id needs: the snapshot's tables and the recent ids.
pub(super) struct StatusTables<'r> {
    ids: redb::ReadOnlyTable<&'static [u8], u64>,
    records: redb::ReadOnlyTable<u64, &'static [u8]>,
    list: redb::ReadOnlyTable<&'static [u8], ()>,
    attempts: redb::ReadOnlyTable<&'static [u8], &'static [u8]>,
    recent: &'r RecentIds,
    claims: &'r Claims,
}

impl<'r> StatusTables<'r> {
    pub(super) fn open(
        txn: &redb::ReadTransaction,
        recent: &'r RecentIds,
        claims: &'r Claims,
    ) -> Result<Self, StoreError> {
        Ok(StatusTables {
            ids: txn.open_table(IDS).map_err(io)?,
            records: txn.open_table(RECORDS).map_err(io)?,
            list: txn.open_table(LIST).map_err(io)?,
            attempts: txn.open_table(ATTEMPTS).map_err(io)?,
            recent,
            claims,
        })
    }

    pub(super) fn seq_of(&self, id: &str) -> Result<Option<u64>, StoreError> {
        self.recent.seq_of(&self.ids, id)
    }

    pub(super) fn status(&self, id: &str) -> Result<Option<Status>, StoreError> {
        match self.seq_of(id)? {
            Some(seq) => self.status_at(id, seq),
            None => Ok(None),
        }
    }

    /// The attempt log of entry `id`, oldest first.
    pub(super) fn attempts(&self, id: &str) -> Result<Vec<Attempt>, StoreError> {
        let Some(seq) = self.seq_of(id)? else {
            return Ok(Vec::new());
        };
        let (first, last) = (attempt_key(seq, 0), attempt_key(seq, u32::MAX));
        let mut out = Vec::new();
        for kv in self
            .attempts
            .range(first.as_slice()..=last.as_slice())
            .map_err(io)?
        {
            let (_, v) = kv.map_err(io)?;
            out.extend(
                Attempt::decode_all(v.value()).map_err(|e| StoreError::Corrupt {
                    id: id.to_owned(),
                    reason: e.to_string(),
                })?,
            );
        }
        Ok(out)
    }

    /// The status of entry `id` at `seq`, firing if it is claimed.
    pub(super) fn status_at(&self, id: &str, seq: u64) -> Result<Option<Status>, StoreError> {
        match self.records.get(seq).map_err(io)? {
            Some(v) => {
                Stored::decode(id, v.value()).map(|s| Some(self.claims.status(seq, s.status(id))))
            }
            None => Ok(None),
        }
    }
}

/// Scheduled entries with fire time before `t`: whole minutes from the
/// histogram, the partial minute from the index (`sched` less the
/// retry_wait entries it also holds).
fn scheduled_before(
    hist: &[(u64, u64)],
    sched: &redb::ReadOnlyTable<&'static [u8], ()>,
    retry: &redb::ReadOnlyTable<&'static [u8], ()>,
    t: Millis,
) -> Result<u64, StoreError> {
    let minute = t / MINUTE;
    let whole: u64 = hist
        .iter()
        .take_while(|(m, _)| *m < minute)
        .map(|(_, n)| n)
        .sum();
    let from = (minute * MINUTE).to_be_bytes();
    let to = t.to_be_bytes();
    let partial = sched
        .range(from.as_slice()..to.as_slice())
        .map_err(io)?
        .count() as u64;
    let retrying = retry
        .range(from.as_slice()..to.as_slice())
        .map_err(io)?
        .count() as u64;
    Ok(whole + partial.saturating_sub(retrying))
}
