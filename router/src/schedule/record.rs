//! The stored form of an [`Entry`]: a small, versioned binary record.
//!
//! Pure (no I/O), shared by every store backend so that an entry written by
//! one release is read by the next. Layout (integers little-endian):
//!
//! ```text
//! u8  version (1)
//! u64 due_ms | u64 accepted_ms | u32 attempts
//! u8  flags: 1 when_online, 2 payload_is_utf8, 4 has topic, 8 has ttl
//! u8  scope: 0 user, 1 client, 2 global
//! str id | str event | str content_type | [str topic] | [u64 ttl_ms]
//! list users | list clients | list sites      (list = u16 count, then strs)
//! u32 payload length, payload bytes           (str = u16 length, then UTF-8)
//! ```

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use herald_protocol::envelope::{Notification, Scope};

use super::entry::Entry;

/// The record version this code writes.
pub const VERSION: u8 = 1;

const WHEN_ONLINE: u8 = 1;
const UTF8: u8 = 2;
const HAS_TOPIC: u8 = 4;
const HAS_TTL: u8 = 8;

/// A record that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Fewer bytes than the layout needs.
    #[error("record truncated while reading {0}")]
    Truncated(&'static str),
    /// A version this code does not know.
    #[error("record version {0} is not supported (this build reads {VERSION})")]
    Version(u8),
    /// A string field that is not UTF-8.
    #[error("record field {0} is not UTF-8")]
    Utf8(&'static str),
    /// An unknown scope code.
    #[error("record scope code {0} is unknown")]
    Scope(u8),
    /// Bytes left after the payload.
    #[error("record has {0} bytes after its payload")]
    Trailing(usize),
}

/// Encode `entry`.
pub fn encode(entry: &Entry) -> Bytes {
    let n = &entry.notification;
    let strs: usize = [&n.id, &n.event, &n.content_type]
        .iter()
        .map(|s| 2 + s.len())
        .sum::<usize>()
        + n.topic.as_ref().map_or(0, |t| 2 + t.len())
        + [&n.users, &n.clients, &n.sites]
            .iter()
            .map(|l| 2 + l.iter().map(|s| 2 + s.len()).sum::<usize>())
            .sum::<usize>();
    let mut out = BytesMut::with_capacity(1 + 20 + 2 + 8 + strs + 4 + n.payload.len());
    out.put_u8(VERSION);
    out.put_u64_le(entry.due_ms);
    out.put_u64_le(entry.accepted_ms);
    out.put_u32_le(entry.attempts);
    let mut flags = 0;
    if entry.when_online {
        flags |= WHEN_ONLINE;
    }
    if n.payload_is_utf8 {
        flags |= UTF8;
    }
    if n.topic.is_some() {
        flags |= HAS_TOPIC;
    }
    if n.ttl.is_some() {
        flags |= HAS_TTL;
    }
    out.put_u8(flags);
    out.put_u8(match n.scope {
        Scope::User => 0,
        Scope::Client => 1,
        Scope::Global => 2,
    });
    put_str(&mut out, &n.id);
    put_str(&mut out, &n.event);
    put_str(&mut out, &n.content_type);
    if let Some(topic) = &n.topic {
        put_str(&mut out, topic);
    }
    if let Some(ttl) = n.ttl {
        out.put_u64_le(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
    }
    for list in [&n.users, &n.clients, &n.sites] {
        // Validation caps lists at far fewer than 65,535 entries and
        // identifiers at far fewer than 65,535 bytes.
        out.put_u16_le(list.len() as u16);
        for s in list.iter() {
            put_str(&mut out, s);
        }
    }
    out.put_u32_le(n.payload.len() as u32);
    out.put_slice(&n.payload);
    out.freeze()
}

fn put_str(out: &mut BytesMut, s: &str) {
    out.put_u16_le(s.len() as u16);
    out.put_slice(s.as_bytes());
}

/// Decode a record made by [`encode`]. The payload shares `record`'s
/// memory.
pub fn decode(mut record: Bytes) -> Result<Entry, RecordError> {
    let r = &mut record;
    let version = u8_(r, "version")?;
    if version != VERSION {
        return Err(RecordError::Version(version));
    }
    let due_ms = u64_(r, "due_ms")?;
    let accepted_ms = u64_(r, "accepted_ms")?;
    let attempts = need(r, 4, "attempts").map(|r| r.get_u32_le())?;
    let flags = u8_(r, "flags")?;
    let scope = match u8_(r, "scope")? {
        0 => Scope::User,
        1 => Scope::Client,
        2 => Scope::Global,
        other => return Err(RecordError::Scope(other)),
    };
    let id = str_(r, "id")?;
    let event = str_(r, "event")?;
    let content_type = str_(r, "content_type")?;
    let topic = if flags & HAS_TOPIC != 0 {
        Some(str_(r, "topic")?)
    } else {
        None
    };
    let ttl = if flags & HAS_TTL != 0 {
        Some(Duration::from_millis(u64_(r, "ttl_ms")?))
    } else {
        None
    };
    let users = list(r, "users")?;
    let clients = list(r, "clients")?;
    let sites = list(r, "sites")?;
    let len = need(r, 4, "payload length").map(|r| r.get_u32_le())? as usize;
    need(r, len, "payload")?;
    let payload = r.split_to(len);
    if r.has_remaining() {
        return Err(RecordError::Trailing(r.remaining()));
    }
    Ok(Entry {
        notification: Notification {
            id,
            scope,
            users,
            clients,
            sites,
            event,
            topic,
            content_type,
            payload,
            payload_is_utf8: flags & UTF8 != 0,
            ttl,
            encodings: Default::default(),
        },
        due_ms,
        accepted_ms,
        when_online: flags & WHEN_ONLINE != 0,
        attempts,
    })
}

fn need<'a>(r: &'a mut Bytes, n: usize, what: &'static str) -> Result<&'a mut Bytes, RecordError> {
    if r.remaining() < n {
        Err(RecordError::Truncated(what))
    } else {
        Ok(r)
    }
}

fn u8_(r: &mut Bytes, what: &'static str) -> Result<u8, RecordError> {
    need(r, 1, what).map(|r| r.get_u8())
}

fn u64_(r: &mut Bytes, what: &'static str) -> Result<u64, RecordError> {
    need(r, 8, what).map(|r| r.get_u64_le())
}

fn str_(r: &mut Bytes, what: &'static str) -> Result<String, RecordError> {
    let len = need(r, 2, what).map(|r| r.get_u16_le())? as usize;
    need(r, len, what)?;
    let raw = r.split_to(len);
    String::from_utf8(raw.to_vec()).map_err(|_| RecordError::Utf8(what))
}

fn list(r: &mut Bytes, what: &'static str) -> Result<Vec<String>, RecordError> {
    let count = need(r, 2, what).map(|r| r.get_u16_le())? as usize;
    let mut out = Vec::with_capacity(count.min(r.remaining() / 2));
    for _ in 0..count {
        out.push(str_(r, what)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry(
        payload: Vec<u8>,
        topic: Option<String>,
        ttl: Option<u64>,
        users: Vec<String>,
    ) -> Entry {
        Entry {
            notification: Notification {
                id: "n-1".into(),
                scope: Scope::Client,
                users,
                clients: vec!["acme".into()],
                sites: vec![],
                event: "coupon.open".into(),
                topic,
                content_type: "application/octet-stream".into(),
                payload: Bytes::from(payload),
                payload_is_utf8: false,
                ttl: ttl.map(Duration::from_millis),
                encodings: Default::default(),
            },
            due_ms: 1_700_000_000_123,
            accepted_ms: 1_700_000_000_000,
            when_online: true,
            attempts: 2,
        }
    }

    proptest! {
        #[test]
        fn round_trips(
            payload in proptest::collection::vec(any::<u8>(), 0..300),
            topic in proptest::option::of("[a-z.]{1,20}"),
            ttl in proptest::option::of(1u64..1_000_000),
            users in proptest::collection::vec("\\PC{1,12}", 0..5),
        ) {
            let e = entry(payload, topic, ttl, users);
            prop_assert_eq!(decode(encode(&e)).unwrap(), e);
        }

        #[test]
        fn any_bytes_decode_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(Bytes::from(bytes));
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        let full = encode(&entry(
            b"payload".to_vec(),
            Some("t".into()),
            Some(5),
            vec!["u".into()],
        ));
        for cut in 0..full.len() {
            assert!(decode(full.slice(..cut)).is_err(), "cut at {cut}");
        }
        let mut long = full.to_vec();
        long.push(0);
        assert_eq!(decode(Bytes::from(long)), Err(RecordError::Trailing(1)));
    }

    #[test]
    fn unknown_version_is_refused() {
        let mut raw = encode(&entry(vec![], None, None, vec![])).to_vec();
        raw[0] = 9;
        assert_eq!(decode(Bytes::from(raw)), Err(RecordError::Version(9)));
    }
}
