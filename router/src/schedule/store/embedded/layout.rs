//! What the embedded store writes: its tables, key encodings and the
//! stored value of an entry. Pure: no I/O.
//!
//! ```text
//! entries  id -> header (29 B) ++ record        (live: scheduled, firing, held)
//!             -> header ++ due, accepted, topic (final: delivered, cancelled, expired)
//! sched    fire(8 BE) ++ id                     scheduled, by fire time
//! lease    lease_until(8 BE) ++ id              firing, by lease expiry
//! held     user ++ 0x00 ++ due(8 BE) ++ id      held, per user, (due, id) order
//! holdx    expires(8 BE) ++ id                  held, by hold expiry
//! list     topic ++ 0x00 ++ state ++ due(8 BE) ++ id   per topic and state, (due, id)
//! final    updated(8 BE) ++ id                  final, by when they became final
//! hist     fire minute -> count                 scheduled, for the pending gauges
//! counts   state code -> count                  scheduled, firing, held
//! ```
//!
//! Big-endian times sort like numbers, so byte order is (time, id) order.
//! Users, topics and ids never contain 0x00 (validation refuses control
//! characters), so it separates fields. Header: state u8, attempts u32,
//! updated u64, deadline u64 (lease expiry when firing, hold expiry when
//! held), fire u64 (the queue time when scheduled).

use bytes::{Buf, BufMut, Bytes, BytesMut};
use redb::TableDefinition;

use crate::schedule::entry::{Entry, Millis, State, Status};
use crate::schedule::record;
use crate::schedule::store::StoreError;

/// Entries by id. The key is the id's UTF-8 bytes (ids are checked strings):
/// a `&str` key would make redb check UTF-8 at every comparison.
pub(super) const ENTRIES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("entries");
pub(super) const SCHED: TableDefinition<&[u8], ()> = TableDefinition::new("sched");
pub(super) const LEASE: TableDefinition<&[u8], ()> = TableDefinition::new("lease");
pub(super) const HELD: TableDefinition<&[u8], ()> = TableDefinition::new("held");
pub(super) const HOLDX: TableDefinition<&[u8], ()> = TableDefinition::new("holdx");
pub(super) const LIST: TableDefinition<&[u8], ()> = TableDefinition::new("list");
pub(super) const FINAL: TableDefinition<&[u8], ()> = TableDefinition::new("final");
pub(super) const HIST: TableDefinition<u64, u64> = TableDefinition::new("hist");
pub(super) const COUNTS: TableDefinition<u8, u64> = TableDefinition::new("counts");

/// Width of a `hist` bucket.
pub(super) const MINUTE: Millis = 60_000;
const HEADER: usize = 29;

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

/// A list key.
pub(super) fn list_key(topic: Option<&str>, state: State, due: Millis, id: &str) -> Vec<u8> {
    let mut k = list_prefix(topic, state);
    k.extend_from_slice(&due.to_be_bytes());
    k.extend_from_slice(id.as_bytes());
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

/// The fixed part of a stored entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Header {
    pub(super) state: State,
    pub(super) attempts: u32,
    pub(super) updated: Millis,
    pub(super) deadline: Millis,
    pub(super) fire: Millis,
}

/// What follows the header.
#[derive(Debug, Clone)]
pub(super) enum Body {
    /// A live entry: its record.
    Live { record: Bytes, entry: Box<Entry> },
    /// A final entry: what its status needs.
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

    /// The entry with its current attempt count (live entries only).
    pub(super) fn entry(&self) -> Option<Entry> {
        match &self.body {
            Body::Live { entry, .. } => Some(Entry {
                attempts: self.header.attempts,
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
        }
    }

    /// Become final in `state` at `now`: the record goes.
    pub(super) fn finish(&mut self, state: State, now: Millis) {
        if let Body::Live { entry, .. } = &self.body {
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

    pub(super) fn encode(&self) -> Vec<u8> {
        let h = &self.header;
        let mut out = BytesMut::with_capacity(HEADER + 64);
        out.put_u8(h.state.code());
        out.put_u32(h.attempts);
        out.put_u64(h.updated);
        out.put_u64(h.deadline);
        out.put_u64(h.fire);
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
        if raw.len() < HEADER {
            return Err(corrupt("shorter than its header"));
        }
        let mut b = Bytes::copy_from_slice(raw);
        let state = State::from_code(b.get_u8()).ok_or_else(|| corrupt("unknown state"))?;
        let header = Header {
            state,
            attempts: b.get_u32(),
            updated: b.get_u64(),
            deadline: b.get_u64(),
            fire: b.get_u64(),
        };
        let body = if state.is_final() {
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
            },
            due_ms: 50,
            accepted_ms: 10,
            when_online: true,
            attempts: 0,
        }
    }

    #[test]
    fn live_and_final_entries_round_trip() {
        let mut s = Stored::new(entry(), 10);
        s.header.attempts = 3;
        let back = Stored::decode("n1", &s.encode()).unwrap();
        assert_eq!(back.header, s.header);
        assert_eq!(back.entry().unwrap().attempts, 3);
        s.finish(State::Delivered, 99);
        let back = Stored::decode("n1", &s.encode()).unwrap();
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
    }

    #[test]
    fn damaged_values_are_corrupt_not_panics() {
        let raw = Stored::new(entry(), 10).encode();
        for cut in 0..raw.len() {
            let _ = Stored::decode("n1", &raw[..cut]);
        }
        assert!(matches!(
            Stored::decode("n1", &[9; 40]),
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
        let p = list_prefix(Some("t"), State::Held);
        assert!(list_key(Some("t"), State::Held, 1, "a") > p);
        assert!(list_key(Some("t"), State::Held, u64::MAX, "zz") < prefix_end(&p));
        assert_eq!(prefix_end(&[1, 0xff]), vec![2]);
    }
}
