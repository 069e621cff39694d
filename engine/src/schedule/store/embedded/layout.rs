//! What the embedded store writes: its tables, key encodings and the
//! stored value of an entry. Pure: no I/O.
//!
//! ```text
//! meta     name -> u64                          "format" (4), "next_seq", "tenants_since"
//! ids      id -> seq                            every stored entry
//! records  seq -> header (33 B) ++ id ++ record       (live: scheduled, firing, held,
//!                                                     retry_wait; and dead letters)
//!              -> header ++ id ++ due, accepted, topic (other final states:
//!                                                     delivered, cancelled, expired, declined)
//! sched    fire(8 BE) ++ seq(8 BE) ++ id        scheduled and retry_wait, by fire time
//! retry    fire(8 BE) ++ seq(8 BE) ++ id        retry_wait only (counts subtract it)
//! lease    lease_until(8 BE) ++ seq(8 BE) ++ id empty (firing entries of older stores,
//!                                               moved to sched at open: claims are in memory)
//! held     user ++ 0x00 ++ due(8 BE) ++ id      held, per user, (due, id) order
//! holdx    expires(8 BE) ++ id                  held, by hold expiry
//! list     topic ++ 0x00 ++ state ++ due(8 BE) ++ seq(8 BE) ++ id   per topic and state
//!                                               (firing and retry_wait entries under scheduled)
//! final    updated(8 BE) ++ id                  final, by when they became final
//! hist     fire minute -> count                 scheduled (not retry_wait), for the gauges
//! counts   state code -> count                  scheduled, held, retry_wait
//! attempts seq(8 BE) ++ n(4 BE) -> record       attempt log, n counting from 0
//!                                               (callback::attempt's record)
//! topics   name -> updated(8 LE) ++ settings    registered topics (JSON settings)
//! ```
//!
//! Entries are stored under their *seq*, the order of acceptance, and
//! found by id through the small `ids` table. New records go to the end of
//! `records`, and firing (in `sched` order: fire time, then seq) rewrites
//! records accepted together, so a commit touches few pages of the big
//! table. Ids are chosen by publishers, so an id index takes its inserts
//! at random places: new ids are kept in memory first (the writer's
//! `RecentIds`) and folded into `ids` in large sorted batches, so a fold
//! rewrites each page of `ids` once for many entries. `meta["folded"]` is
//! the first seq whose id is not in `ids` yet; opening the store reads the
//! records from there to know them again (each record carries its id).
//!
//! Big-endian times sort like numbers, so byte order is (time, id) order.
//! Users, topics and ids never contain 0x00 (validation refuses control
//! characters), so it separates fields. Header: state u8 (its code, with
//! bit 0x80 set: [`HEADER_4`]), attempts u32, calls u32 (callback attempts
//! counted under the retry policy), updated u64, deadline u64 (lease expiry
//! when firing, hold expiry when held), fire u64 (the queue time when
//! scheduled or in retry_wait). All big-endian.
//!
//! Format 4 added `calls` to the header. A value written by format 3 (or
//! 2) has a 29-byte header without it, and its state byte without the
//! 0x80 bit: it is read as it is (calls 0), and written in the new form
//! the next time its entry changes, so opening an older file rewrites
//! nothing.
//!
//! An entry in retry_wait has phase `Callback` when claimed: its state in
//! the tables says so, and a claim (in memory) leaves the tables alone, so
//! a claim again after a lease, or after a crash and a reopen, has it too.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use redb::TableDefinition;

use crate::schedule::entry::{Entry, Millis, Phase, State, Status};
use crate::schedule::record;
use crate::schedule::store::StoreError;

/// Store-wide numbers: the format and the next seq.
pub(super) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// Seq by id. The key is the id's UTF-8 bytes (ids are checked strings):
/// a `&str` key would make redb check UTF-8 at every comparison.
pub(super) const IDS: TableDefinition<&[u8], u64> = TableDefinition::new("ids");
/// Stored entries by seq.
pub(super) const RECORDS: TableDefinition<u64, &[u8]> = TableDefinition::new("records");
pub(super) const SCHED: TableDefinition<&[u8], ()> = TableDefinition::new("sched");
pub(super) const LEASE: TableDefinition<&[u8], ()> = TableDefinition::new("lease");
pub(super) const HELD: TableDefinition<&[u8], ()> = TableDefinition::new("held");
pub(super) const HOLDX: TableDefinition<&[u8], ()> = TableDefinition::new("holdx");
pub(super) const LIST: TableDefinition<&[u8], ()> = TableDefinition::new("list");
pub(super) const FINAL: TableDefinition<&[u8], ()> = TableDefinition::new("final");
pub(super) const HIST: TableDefinition<u64, u64> = TableDefinition::new("hist");
pub(super) const COUNTS: TableDefinition<u8, u64> = TableDefinition::new("counts");
/// Retry_wait entries by fire time (they are in `sched` too).
pub(super) const RETRY: TableDefinition<&[u8], ()> = TableDefinition::new("retry");
/// Attempt logs: `seq ++ n` -> record.
pub(super) const ATTEMPTS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("attempts");
/// Registered topics by name.
pub(super) const TOPICS: TableDefinition<&str, &[u8]> = TableDefinition::new("topics");

/// The layout this code writes (`meta["format"]`): 5 lists every entry
/// under no topic as well as under its own (so a list without a topic is
/// every entry of a state); 4 has `calls` in each entry's header; 3 added
/// the callback states and the `retry` and `attempts` tables.
pub(super) const FORMAT: u64 = 5;
/// The layout before 5: an entry with a topic listed under it alone,
/// which opening mends ([`all_topics_key`]).
pub(super) const FORMAT_4: u64 = 4;
/// The layout before 4: headers without `calls`, which this code reads as
/// they are (see the module docs), so a file of format 3 is stamped 4.
pub(super) const FORMAT_3: u64 = 3;
/// The layout before 3: format 3's tables less two, which opening creates,
/// and its headers, so a file of format 2 is read as it is and stamped 4.
pub(super) const FORMAT_2: u64 = 2;
/// `meta` key of the format.
pub(super) const FORMAT_KEY: &str = "format";
/// `meta` key of the topics version (bumped by every topic put or delete).
pub(super) const TOPICS_VERSION: &str = "topics_version";
/// `meta` key of the next seq.
pub(super) const NEXT_SEQ: &str = "next_seq";
/// `meta` key of the first seq whose id is not folded into `ids`.
pub(super) const FOLDED: &str = "folded";
/// `meta` key of the moment this file was first opened by a Herald that
/// keeps tenants' ids apart (`Store::tenants_since`).
pub(super) const TENANTS_SINCE: &str = "tenants_since";
/// The table that only the first layout (entries keyed by id) had.
pub(super) const FORMAT_1_TABLE: &str = "entries";

/// Width of a `hist` bucket.
pub(super) const MINUTE: Millis = 60_000;
/// Bytes of a header of format 4 (with `calls`).
const HEADER: usize = 33;
/// Bytes of a header of format 2 and 3 (no `calls`).
const HEADER_3: usize = 29;
/// Set in the state byte of a header of format 4, which has `calls`; clear
/// in an older one. State codes are far below it.
pub(super) const HEADER_4: u8 = 0x80;

/// `time ++ id`.
pub(super) fn time_key(t: Millis, id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + id.len());
    k.extend_from_slice(&t.to_be_bytes());
    k.extend_from_slice(id.as_bytes());
    k
}

/// The first key after every `time_key(t, _)` with time `<= t`.
pub(super) fn time_bound(t: Millis) -> Vec<u8> {
    t.saturating_add(1).to_be_bytes().to_vec()
}

/// Split a `time_key`.
pub(super) fn split_time_key(k: &[u8]) -> Option<(Millis, &str)> {
    let (t, id) = k.split_at_checked(8)?;
    let t = Millis::from_be_bytes(t.try_into().ok()?);
    Some((t, std::str::from_utf8(id).ok()?))
}

/// `time ++ seq ++ id`: a `sched` or `lease` key.
pub(super) fn queue_key(t: Millis, seq: u64, id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(16 + id.len());
    k.extend_from_slice(&t.to_be_bytes());
    k.extend_from_slice(&seq.to_be_bytes());
    k.extend_from_slice(id.as_bytes());
    k
}

/// Split a `queue_key` into (time, seq, id).
pub(super) fn split_queue_key(k: &[u8]) -> Option<(Millis, u64, &str)> {
    let (t, rest) = k.split_at_checked(8)?;
    let (seq, id) = rest.split_at_checked(8)?;
    Some((
        Millis::from_be_bytes(t.try_into().ok()?),
        u64::from_be_bytes(seq.try_into().ok()?),
        std::str::from_utf8(id).ok()?,
    ))
}

/// `user ++ 0 ++ due ++ id`.
pub(super) fn held_key(user: &str, due: Millis, id: &str) -> Vec<u8> {
    let mut k = held_prefix(user);
    k.extend_from_slice(&due.to_be_bytes());
    k.extend_from_slice(id.as_bytes());
    k
}

/// Every held key of `user` starts with this.
pub(super) fn held_prefix(user: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(user.len() + 9);
    k.extend_from_slice(user.as_bytes());
    k.push(0);
    k
}

/// The id in a held or list key, after `prefix_len` bytes and the due time.
pub(super) fn id_after(k: &[u8], prefix_len: usize) -> Option<(Millis, &str)> {
    split_time_key(k.get(prefix_len..)?)
}

/// The key listing under no topic, i.e. among every entry of its state,
/// the entry that `key` lists under its topic; `None` when `key` is under
/// no topic already. Topics never hold a 0 byte, so the first one ends
/// the topic.
pub(super) fn all_topics_key(key: &[u8]) -> Option<&[u8]> {
    match key.iter().position(|&b| b == 0)? {
        0 => None,
        end => Some(&key[end..]),
    }
}

/// The topics an entry with `topic` is listed under: no topic (every
/// entry), and its own.
pub(super) fn listed_under(topic: Option<&str>) -> impl Iterator<Item = Option<&str>> {
    std::iter::once(None).chain(topic.map(Some))
}

/// `topic ++ 0 ++ state`: every list key of one (topic, state). An entry
/// with a topic has two list keys, its topic's and no topic's
/// (`list_prefix(None, ..)` lists every entry of a state).
pub(super) fn list_prefix(topic: Option<&str>, state: State) -> Vec<u8> {
    let topic = topic.unwrap_or("");
    let mut k = Vec::with_capacity(topic.len() + 18);
    k.extend_from_slice(topic.as_bytes());
    k.push(0);
    k.push(state.code());
    k
}

/// The state whose list keys an entry in `state` has: a firing entry keeps
/// the key it had when scheduled, so claiming (the busiest transition of
/// all) leaves the list alone; a retry_wait entry has scheduled's too, so
/// a callback's retries leave it alone as well.
pub(super) fn list_state(state: State) -> State {
    match state {
        State::Firing | State::RetryWait => State::Scheduled,
        other => other,
    }
}

/// The key of attempt `n` (from 0) of the entry at `seq`.
pub(super) fn attempt_key(seq: u64, n: u32) -> [u8; 12] {
    let mut k = [0; 12];
    k[..8].copy_from_slice(&seq.to_be_bytes());
    k[8..].copy_from_slice(&n.to_be_bytes());
    k
}

/// The `n` of an attempt key.
pub(super) fn attempt_number(k: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(k.get(8..12)?.try_into().ok()?))
}

/// A list key: `topic ++ 0 ++ state ++ due ++ seq ++ id`, so entries due
/// at the same time (a herd) are in acceptance order, and their state
/// changes, made in that order, touch neighbouring keys.
pub(super) fn list_key(
    topic: Option<&str>,
    state: State,
    due: Millis,
    seq: u64,
    id: &str,
) -> Vec<u8> {
    let mut k = list_prefix(topic, state);
    k.extend_from_slice(&queue_key(due, seq, id));
    k
}

/// The first key after every key starting with `prefix`.
pub(super) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0xff; prefix.len() + 1]
}

/// The length of the header a stored value starts with (see
/// [`HEADER_4`]).
fn header_len(raw: &[u8]) -> usize {
    match raw.first() {
        Some(b) if b & HEADER_4 != 0 => HEADER,
        _ => HEADER_3,
    }
}

/// The id a stored value carries (after its header).
pub(super) fn stored_id(raw: &[u8]) -> Option<&str> {
    let rest = raw.get(header_len(raw)..)?;
    let (len, rest) = rest.split_at_checked(2)?;
    let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
    std::str::from_utf8(rest.get(..len)?).ok()
}

/// The fixed part of a stored entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Header {
    pub(super) state: State,
    pub(super) attempts: u32,
    /// Callback attempts counted under its retry policy ([`Entry::calls`]).
    pub(super) calls: u32,
    pub(super) updated: Millis,
    pub(super) deadline: Millis,
    pub(super) fire: Millis,
}

/// What follows the header.
#[derive(Debug, Clone)]
pub(super) enum Body {
    /// A live entry or a dead letter: its record.
    Live { record: Bytes, entry: Box<Entry> },
    /// Another final entry: what its status needs.
    Final {
        due: Millis,
        accepted: Millis,
        topic: Option<String>,
    },
}

/// A stored entry, decoded.
#[derive(Debug, Clone)]
pub(super) struct Stored {
    pub(super) header: Header,
    pub(super) body: Body,
}

impl Stored {
    /// A new scheduled entry.
    pub(super) fn new(entry: Entry, now: Millis) -> Stored {
        let record = record::encode(&entry);
        Stored {
            header: Header {
                state: State::Scheduled,
                attempts: 0,
                calls: 0,
                updated: now,
                deadline: 0,
                fire: entry.due_ms,
            },
            body: Body::Live {
                record,
                entry: Box::new(entry),
            },
        }
    }

    pub(super) fn due(&self) -> Millis {
        match &self.body {
            Body::Live { entry, .. } => entry.due_ms,
            Body::Final { due, .. } => *due,
        }
    }

    pub(super) fn topic(&self) -> Option<&str> {
        match &self.body {
            Body::Live { entry, .. } => entry.notification.topic.as_deref(),
            Body::Final { topic, .. } => topic.as_deref(),
        }
    }

    /// The entry with its current attempt count, calls and phase (entries
    /// that keep their body only).
    pub(super) fn entry(&self) -> Option<Entry> {
        match &self.body {
            Body::Live { entry, .. } => Some(Entry {
                attempts: self.header.attempts,
                calls: self.header.calls,
                phase: if self.header.state == State::RetryWait {
                    Phase::Callback
                } else {
                    Phase::Deliver
                },
                ..(**entry).clone()
            }),
            Body::Final { .. } => None,
        }
    }

    pub(super) fn status(&self, id: &str) -> Status {
        let (due, accepted, topic) = match &self.body {
            Body::Live { entry, .. } => (
                entry.due_ms,
                entry.accepted_ms,
                entry.notification.topic.clone(),
            ),
            Body::Final {
                due,
                accepted,
                topic,
            } => (*due, *accepted, topic.clone()),
        };
        Status {
            id: id.to_owned(),
            state: self.header.state,
            topic,
            accepted_ms: accepted,
            due_ms: due,
            updated_ms: self.header.updated,
            attempts: self.header.attempts,
            step: None,
            next_attempt_ms: (self.header.state == State::RetryWait).then_some(self.header.fire),
        }
    }

    /// Become final in `state` at `now`: the record goes (a dead letter
    /// keeps it).
    pub(super) fn finish(&mut self, state: State, now: Millis) {
        if !state.keeps_body()
            && let Body::Live { entry, .. } = &self.body
        {
            self.body = Body::Final {
                due: entry.due_ms,
                accepted: entry.accepted_ms,
                topic: entry.notification.topic.clone(),
            };
        }
        self.header.state = state;
        self.header.updated = now;
        self.header.deadline = 0;
    }

    /// The stored value of entry `id` (always a header of format 4).
    pub(super) fn encode(&self, id: &str) -> Vec<u8> {
        let h = &self.header;
        let mut out = BytesMut::with_capacity(HEADER + 2 + id.len() + 64);
        out.put_u8(h.state.code() | HEADER_4);
        out.put_u32(h.attempts);
        out.put_u32(h.calls);
        out.put_u64(h.updated);
        out.put_u64(h.deadline);
        out.put_u64(h.fire);
        // Ids are checked: far shorter than 65,535 bytes.
        out.put_u16(id.len() as u16);
        out.put_slice(id.as_bytes());
        match &self.body {
            Body::Live { record, .. } => out.put_slice(record),
            Body::Final {
                due,
                accepted,
                topic,
            } => {
                out.put_u64(*due);
                out.put_u64(*accepted);
                match topic {
                    Some(t) => {
                        out.put_u8(1);
                        out.put_u16(t.len() as u16);
                        out.put_slice(t.as_bytes());
                    }
                    None => out.put_u8(0),
                }
            }
        }
        out.to_vec()
    }

    pub(super) fn decode(id: &str, raw: &[u8]) -> Result<Stored, StoreError> {
        let corrupt = |reason: &str| StoreError::Corrupt {
            id: id.to_owned(),
            reason: reason.to_owned(),
        };
        if raw.len() < header_len(raw) {
            return Err(corrupt("shorter than its header"));
        }
        let mut b = Bytes::copy_from_slice(raw);
        let first = b.get_u8();
        let state = State::from_code(first & !HEADER_4).ok_or_else(|| corrupt("unknown state"))?;
        let attempts = b.get_u32();
        // A header of format 3 has no calls: none were counted.
        let calls = if first & HEADER_4 != 0 {
            b.get_u32()
        } else {
            0
        };
        let header = Header {
            state,
            attempts,
            calls,
            updated: b.get_u64(),
            deadline: b.get_u64(),
            fire: b.get_u64(),
        };
        if b.remaining() < 2 {
            return Err(corrupt("id truncated"));
        }
        let len = usize::from(b.get_u16());
        if b.remaining() < len {
            return Err(corrupt("id truncated"));
        }
        if b.split_to(len).as_ref() != id.as_bytes() {
            return Err(corrupt("the record holds another id"));
        }
        let body = if !state.keeps_body() {
            if b.remaining() < 17 {
                return Err(corrupt("final status truncated"));
            }
            let due = b.get_u64();
            let accepted = b.get_u64();
            let topic = match b.get_u8() {
                0 => None,
                _ => {
                    if b.remaining() < 2 {
                        return Err(corrupt("topic truncated"));
                    }
                    let len = b.get_u16() as usize;
                    if b.remaining() < len {
                        return Err(corrupt("topic truncated"));
                    }
                    Some(
                        String::from_utf8(b.split_to(len).to_vec())
                            .map_err(|_| corrupt("topic is not UTF-8"))?,
                    )
                }
            };
            Body::Final {
                due,
                accepted,
                topic,
            }
        } else {
            let record = b;
            let entry = record::decode(record.clone()).map_err(|e| corrupt(&e.to_string()))?;
            Body::Live {
                record,
                entry: Box::new(entry),
            }
        };
        Ok(Stored { header, body })
    }
}

#[cfg(test)]
mod tests;
