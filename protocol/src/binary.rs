//! The binary form of a [`Notification`]: compact, length-prefixed. One layout serves the delayed store's
//! records (which put their own fields in front) and the [`bundle`]s
//! routers hand to edges. Integers are little-endian:
//!
//! ```text
//! u8  flags: 1 the caller's, 2 payload_is_utf8, 4 has topic, 8 has ttl
//! u8  scope: 0 user, 1 client, 2 global
//! str id | str event | str content_type | [str topic] | [u64 ttl_ms]
//! list users | list clients | list sites      (list = u16 count, then strs)
//! u32 payload length, payload bytes           (str = u16 length, then UTF-8)
//! ```
//!
//! [`bundle`]: crate::bundle

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::envelope::{Notification, Scope};

/// The flag bit left to the caller (the store's "when online").
pub const CALLER_FLAG: u8 = 1;
const UTF8: u8 = 2;
const HAS_TOPIC: u8 = 4;
const HAS_TTL: u8 = 8;

/// Bytes that cannot be read as what they claim to be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Fewer bytes than the layout needs.
    #[error("truncated while reading {0}")]
    Truncated(&'static str),
    /// A layout version this code does not know.
    #[error("version {found} is not supported (this build reads {reads})")]
    Version {
        /// The version in the bytes.
        found: u8,
        /// The version this code reads.
        reads: u8,
    },
    /// A string field that is not UTF-8.
    #[error("field {0} is not UTF-8")]
    Utf8(&'static str),
    /// An unknown scope code.
    #[error("scope code {0} is unknown")]
    Scope(u8),
    /// Bytes left after the last field.
    #[error("{0} bytes after the end")]
    Trailing(usize),
}

/// Bytes [`put`] writes for `n`.
pub fn encoded_len(n: &Notification) -> usize {
    let strs: usize = [&n.id, &n.event, &n.content_type]
        .iter()
        .map(|s| 2 + s.len())
        .sum::<usize>()
        + n.topic.as_ref().map_or(0, |t| 2 + t.len())
        + [&n.users, &n.clients, &n.sites]
            .iter()
            .map(|l| 2 + l.iter().map(|s| 2 + s.len()).sum::<usize>())
            .sum::<usize>();
    2 + strs + n.ttl.map_or(0, |_| 8) + 4 + n.payload.len()
}

/// Append `n` to `out`, with `caller_flag` (0 or [`CALLER_FLAG`]) set in
/// the flags byte.
pub fn put(out: &mut BytesMut, n: &Notification, caller_flag: u8) {
    let mut flags = caller_flag & CALLER_FLAG;
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
    put_str(out, &n.id);
    put_str(out, &n.event);
    put_str(out, &n.content_type);
    if let Some(topic) = &n.topic {
        put_str(out, topic);
    }
    if let Some(ttl) = n.ttl {
        out.put_u64_le(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
    }
    for list in [&n.users, &n.clients, &n.sites] {
        // Validation caps lists at far fewer than 65,535 entries and
        // identifiers at far fewer than 65,535 bytes.
        out.put_u16_le(list.len() as u16);
        for s in list.iter() {
            put_str(out, s);
        }
    }
    out.put_u32_le(n.payload.len() as u32);
    out.put_slice(&n.payload);
}

fn put_str(out: &mut BytesMut, s: &str) {
    out.put_u16_le(s.len() as u16);
    out.put_slice(s.as_bytes());
}

/// Read one notification written by [`put`] from the front of `r`, and
/// the caller's flag bit (0 or [`CALLER_FLAG`]). The notification is not
/// validated.
///
/// The payload is copied into an allocation of its own length rather than
/// sliced out of `r`: `r` is a whole store record or a bundle of many
/// notifications, and a slice would keep all of it alive for as long as a
/// mailbox, an outbox or the firer keeps the notification.
pub fn get(r: &mut Bytes) -> Result<(Notification, u8), DecodeError> {
    let flags = u8_(r, "flags")?;
    let scope = match u8_(r, "scope")? {
        0 => Scope::User,
        1 => Scope::Client,
        2 => Scope::Global,
        other => return Err(DecodeError::Scope(other)),
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
    let payload = Bytes::copy_from_slice(&r[..len]);
    r.advance(len);
    let notification = Notification {
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
        accepted: Default::default(),
    };
    Ok((notification, flags & CALLER_FLAG))
}

fn need<'a>(r: &'a mut Bytes, n: usize, what: &'static str) -> Result<&'a mut Bytes, DecodeError> {
    if r.remaining() < n {
        Err(DecodeError::Truncated(what))
    } else {
        Ok(r)
    }
}

/// A `u8` from the front of `r`.
pub fn u8_(r: &mut Bytes, what: &'static str) -> Result<u8, DecodeError> {
    need(r, 1, what).map(|r| r.get_u8())
}

/// A little-endian `u32` from the front of `r`.
pub fn u32_(r: &mut Bytes, what: &'static str) -> Result<u32, DecodeError> {
    need(r, 4, what).map(|r| r.get_u32_le())
}

/// A little-endian `u64` from the front of `r`.
pub fn u64_(r: &mut Bytes, what: &'static str) -> Result<u64, DecodeError> {
    need(r, 8, what).map(|r| r.get_u64_le())
}

fn str_(r: &mut Bytes, what: &'static str) -> Result<String, DecodeError> {
    let len = need(r, 2, what).map(|r| r.get_u16_le())? as usize;
    need(r, len, what)?;
    let raw = r.split_to(len);
    String::from_utf8(raw.to_vec()).map_err(|_| DecodeError::Utf8(what))
}

fn list(r: &mut Bytes, what: &'static str) -> Result<Vec<String>, DecodeError> {
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

    fn sample(payload: Vec<u8>, topic: Option<String>, ttl: Option<u64>) -> Notification {
        Notification {
            id: "n-1".into(),
            scope: Scope::Client,
            users: vec!["u".into()],
            clients: vec!["acme".into()],
            sites: vec!["s1".into(), "s2".into()],
            event: "coupon.open".into(),
            topic,
            content_type: "application/octet-stream".into(),
            payload: Bytes::from(payload),
            payload_is_utf8: false,
            ttl: ttl.map(Duration::from_millis),
            encodings: Default::default(),
            accepted: Default::default(),
        }
    }

    proptest! {
        #[test]
        fn round_trips_with_the_callers_flag(
            payload in proptest::collection::vec(any::<u8>(), 0..300),
            topic in proptest::option::of("[a-z.]{1,20}"),
            ttl in proptest::option::of(1u64..1_000_000),
            flag in 0u8..2,
        ) {
            let n = sample(payload, topic, ttl);
            let mut out = BytesMut::new();
            put(&mut out, &n, flag);
            prop_assert_eq!(out.len(), encoded_len(&n));
            let mut bytes = out.freeze();
            prop_assert_eq!(get(&mut bytes).unwrap(), (n, flag));
            prop_assert!(bytes.is_empty());
        }
    }

    #[test]
    fn the_payload_owns_its_bytes_not_the_record() {
        let mut out = BytesMut::new();
        put(&mut out, &sample(vec![7; 100], None, None), 0);
        out.extend_from_slice(&[0; 4096]);
        let record = out.freeze();
        let range = record.as_ptr_range();
        let (n, _) = get(&mut record.clone()).unwrap();
        assert_eq!(&n.payload[..], &[7; 100][..]);
        assert!(
            !range.contains(&n.payload.as_ptr()),
            "the payload is a slice of the record: it keeps all {} bytes alive",
            record.len()
        );
        // Its allocation is its own length: nothing else rides along.
        let owned = n.payload.try_into_mut().expect("the only handle");
        assert_eq!(owned.capacity(), 100);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let mut out = BytesMut::new();
        put(
            &mut out,
            &sample(b"payload".to_vec(), Some("t".into()), Some(5)),
            0,
        );
        let full = out.freeze();
        for cut in 0..full.len() {
            assert!(get(&mut full.slice(..cut)).is_err(), "cut at {cut}");
        }
    }
}
