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

/// The layout this code writes (`meta["format"]`): 4 has `calls` in each
/// entry's header; 3 added the callback states and the `retry` and
/// `attempts` tables.
pub(super) const FORMAT: u64 = 4;
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

/// `topic ++ 0 ++ state`: every list key of one (topic, state).
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
mod tests {
    use super::*;
    use herald_protocol::envelope::{Notification, Scope};

    fn entry() -> Entry {
        Entry {
            notification: Notification {
                id: "n1".into(),
                scope: Scope::User,
                users: vec!["u".into()],
                clients: vec![],
                sites: vec![],
                event: "e".into(),
                topic: Some("t".into()),
                content_type: "application/json".into(),
                payload: Bytes::from_static(b"{}"),
                payload_is_utf8: true,
                ttl: None,
                encodings: Default::default(),
                accepted: Default::default(),
            },
            due_ms: 50,
            accepted_ms: 10,
            when_online: true,
            attempts: 0,
            phase: Phase::Deliver,
            fire_ms: 0,
            calls: 0,
            target: Default::default(),
        }
    }

    #[test]
    fn live_and_final_entries_round_trip() {
        let mut s = Stored::new(entry(), 10);
        s.header.attempts = 3;
        s.header.calls = 2;
        let back = Stored::decode("n1", &s.encode("n1")).unwrap();
        assert_eq!(stored_id(&s.encode("n1")), Some("n1"));
        assert_eq!(back.header, s.header);
        let e = back.entry().unwrap();
        assert_eq!((e.attempts, e.calls), (3, 2));
        s.finish(State::Delivered, 99);
        let back = Stored::decode("n1", &s.encode("n1")).unwrap();
        assert_eq!(stored_id(&s.encode("n1")), Some("n1"), "final keeps its id");
        let status = back.status("n1");
        assert_eq!(
            (
                status.state,
                status.updated_ms,
                status.due_ms,
                status.accepted_ms
            ),
            (State::Delivered, 99, 50, 10)
        );
        assert_eq!(status.topic.as_deref(), Some("t"));
        assert!(back.entry().is_none());
        assert_eq!(back.header.calls, 2, "a final entry keeps its calls");
    }

    /// What format 3 wrote: `state, attempts, updated, deadline, fire`
    /// (29 bytes), the id, then `rest`.
    fn format_3(state: State, id: &str, rest: &[u8]) -> Vec<u8> {
        let mut out = vec![state.code()];
        out.extend(4u32.to_be_bytes());
        out.extend(10u64.to_be_bytes());
        out.extend(0u64.to_be_bytes());
        out.extend(700u64.to_be_bytes());
        out.extend((id.len() as u16).to_be_bytes());
        out.extend(id.as_bytes());
        out.extend(rest);
        out
    }

    #[test]
    fn a_value_of_format_3_reads_with_no_calls_and_is_written_in_format_4() {
        let e = entry();
        let old = format_3(State::RetryWait, "n1", &record::encode(&e));
        assert_eq!(stored_id(&old), Some("n1"));
        let mut s = Stored::decode("n1", &old).unwrap();
        assert_eq!(
            s.header,
            Header {
                state: State::RetryWait,
                attempts: 4,
                calls: 0,
                updated: 10,
                deadline: 0,
                fire: 700,
            }
        );
        let back = s.entry().unwrap();
        assert_eq!((back.notification, back.calls), (e.notification, 0));
        s.header.calls = 1;
        let new = s.encode("n1");
        assert_eq!(new.len(), old.len() + 4, "the header gained calls");
        assert_eq!(new[0], State::RetryWait.code() | HEADER_4);
        assert_eq!(Stored::decode("n1", &new).unwrap().header, s.header);
        // A final value of format 3 (no record) reads too.
        let mut fin = 50u64.to_be_bytes().to_vec();
        fin.extend(10u64.to_be_bytes());
        fin.push(0);
        let old = format_3(State::Declined, "n1", &fin);
        let s = Stored::decode("n1", &old).unwrap();
        assert_eq!(
            (s.header.state, s.header.calls, s.status("n1").due_ms),
            (State::Declined, 0, 50)
        );
    }

    #[test]
    fn a_dead_letter_keeps_its_body_and_retry_wait_is_the_callback_phase() {
        let mut s = Stored::new(entry(), 10);
        s.header.state = State::RetryWait;
        s.header.fire = 700;
        let back = Stored::decode("n1", &s.encode("n1")).unwrap();
        assert_eq!(back.entry().unwrap().phase, Phase::Callback);
        assert_eq!(back.status("n1").next_attempt_ms, Some(700));
        s.finish(State::Dead, 99);
        let back = Stored::decode("n1", &s.encode("n1")).unwrap();
        let e = back.entry().expect("a dead letter keeps its body");
        assert_eq!(e.notification, entry().notification);
        assert_eq!(back.status("n1").state, State::Dead);
        assert_eq!(back.status("n1").next_attempt_ms, None);
        for st in [State::Declined, State::Cancelled] {
            let mut s = Stored::new(entry(), 10);
            s.finish(st, 99);
            let back = Stored::decode("n1", &s.encode("n1")).unwrap();
            assert!(back.entry().is_none(), "{st} drops its body");
        }
    }

    #[test]
    fn attempt_keys_sort_by_entry_then_number() {
        assert!(attempt_key(1, u32::MAX) < attempt_key(2, 0));
        assert!(attempt_key(1, 9) < attempt_key(1, 10));
        assert!(attempt_key(1, 0).starts_with(&1u64.to_be_bytes()));
        assert_eq!(attempt_number(&attempt_key(3, 77)), Some(77));
        assert_eq!(attempt_number(&[0; 11]), None);
    }

    #[test]
    fn damaged_values_are_corrupt_not_panics() {
        let raw = Stored::new(entry(), 10).encode("n1");
        for cut in 0..raw.len() {
            let _ = Stored::decode("n1", &raw[..cut]);
            let _ = stored_id(&raw[..cut]);
        }
        assert!(matches!(
            Stored::decode("n2", &raw),
            Err(StoreError::Corrupt { .. })
        ));
        assert!(matches!(
            Stored::decode("n1", &[9; 40]),
            Err(StoreError::Corrupt { .. })
        ));
        assert!(matches!(
            Stored::decode("n1", &[HEADER_4 | 9; 40]),
            Err(StoreError::Corrupt { .. })
        ));
    }

    #[test]
    fn keys_sort_in_time_then_id_order() {
        assert!(time_key(5, "b") < time_key(6, "a"));
        assert!(time_key(5, "a") < time_key(5, "b"));
        assert!(time_key(5, "zzz") < time_bound(5));
        assert!(time_bound(5) <= time_key(6, ""));
        assert_eq!(split_time_key(&time_key(7, "x")), Some((7, "x")));
        assert!(
            queue_key(5, 9, "a") < queue_key(5, 10, "a"),
            "seq breaks ties"
        );
        assert!(queue_key(5, u64::MAX, "z") < time_bound(5));
        assert!(queue_key(5, 2, "b") < queue_key(6, 1, "a"));
        assert_eq!(split_queue_key(&queue_key(7, 3, "x")), Some((7, 3, "x")));
        assert_eq!(split_queue_key(&[0; 15]), None);
        let p = list_prefix(Some("t"), State::Held);
        assert!(list_key(Some("t"), State::Held, 1, 0, "a") > p);
        assert!(list_key(Some("t"), State::Held, u64::MAX, u64::MAX, "zz") < prefix_end(&p));
        assert!(list_key(None, State::Held, 1, 2, "a") < list_key(None, State::Held, 1, 3, "0"));
        assert_eq!(prefix_end(&[1, 0xff]), vec![2]);
    }
}
