//! The stored form of an [`Entry`]: a small, versioned binary record.
//!
//! Pure (no I/O), shared by every store backend so that an entry written by
//! one release is read by the next. Layout (integers little-endian):
//!
//! ```text
//! u8  version (1)
//! u64 due_ms | u64 accepted_ms | u32 attempts
//! then the notification's binary form (herald_protocol::binary):
//! u8  flags: 1 when_online, 2 payload_is_utf8, 4 has topic, 8 has ttl
//! u8  scope: 0 user, 1 client, 2 global
//! str id | str event | str content_type | [str topic] | [u64 ttl_ms]
//! list users | list clients | list sites      (list = u16 count, then strs)
//! u32 payload length, payload bytes           (str = u16 length, then UTF-8)
//! ```

use bytes::{Buf, BufMut, Bytes, BytesMut};
use herald_protocol::binary::{self, CALLER_FLAG, DecodeError};

use super::entry::{Entry, Phase};

/// The record version this code writes.
pub const VERSION: u8 = 1;

/// Bytes of a record before its notification.
const HEADER_LEN: usize = 1 + 8 + 8 + 4;

/// A record that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("record {0}")]
pub struct RecordError(#[from] pub DecodeError);

/// Encode `entry`: its own fields, then the notification in its binary
/// form ([`herald_protocol::binary`]), `when_online` in the flag bit left
/// to the caller. Its `phase` is not part of the record: the store keeps
/// it with the entry's state and sets it on a claim.
pub fn encode(entry: &Entry) -> Bytes {
    let n = &entry.notification;
    let mut out = BytesMut::with_capacity(HEADER_LEN + binary::encoded_len(n));
    out.put_u8(VERSION);
    out.put_u64_le(entry.due_ms);
    out.put_u64_le(entry.accepted_ms);
    out.put_u32_le(entry.attempts);
    binary::put(&mut out, n, if entry.when_online { CALLER_FLAG } else { 0 });
    out.freeze()
}

/// Decode a record made by [`encode`]. The payload is copied out of
/// `record` into its own allocation ([`binary::get`]), so a fired
/// notification kept in a mailbox does not keep the whole stored value.
pub fn decode(mut record: Bytes) -> Result<Entry, RecordError> {
    let r = &mut record;
    let version = binary::u8_(r, "version")?;
    if version != VERSION {
        return Err(DecodeError::Version {
            found: version,
            reads: VERSION,
        }
        .into());
    }
    let due_ms = binary::u64_(r, "due_ms")?;
    let accepted_ms = binary::u64_(r, "accepted_ms")?;
    let attempts = binary::u32_(r, "attempts")?;
    let (notification, flag) = binary::get(r)?;
    if r.has_remaining() {
        return Err(DecodeError::Trailing(r.remaining()).into());
    }
    Ok(Entry {
        notification,
        due_ms,
        accepted_ms,
        when_online: flag == CALLER_FLAG,
        attempts,
        phase: Phase::Deliver,
        calls: 0,
        target: Default::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_protocol::envelope::{Notification, Scope};
    use proptest::prelude::*;
    use std::time::Duration;

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
            phase: Phase::Deliver,
            calls: 0,
            target: Default::default(),
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
        assert_eq!(
            decode(Bytes::from(long)),
            Err(RecordError(DecodeError::Trailing(1)))
        );
    }

    #[test]
    fn the_layout_is_the_one_stores_hold() {
        let mut e = entry(b"hi".to_vec(), Some("t".into()), Some(5), vec!["u".into()]);
        e.notification.id = "i".into();
        e.notification.event = "e".into();
        e.notification.content_type = "c".into();
        let mut want = vec![1u8];
        want.extend(1_700_000_000_123u64.to_le_bytes());
        want.extend(1_700_000_000_000u64.to_le_bytes());
        want.extend(2u32.to_le_bytes());
        want.extend([1 | 4 | 8, 1]); // when_online, topic, ttl; scope client
        for s in ["i", "e", "c", "t"] {
            want.extend([1, 0]);
            want.extend(s.as_bytes());
        }
        want.extend(5u64.to_le_bytes());
        want.extend([1, 0, 1, 0, b'u']); // users
        want.extend([1, 0, 4, 0]); // clients
        want.extend(b"acme");
        want.extend([0, 0]); // sites
        want.extend(2u32.to_le_bytes());
        want.extend(b"hi");
        assert_eq!(&encode(&e)[..], &want[..]);
        assert_eq!(decode(Bytes::from(want)).unwrap(), e);
    }

    #[test]
    fn unknown_version_is_refused() {
        let mut raw = encode(&entry(vec![], None, None, vec![])).to_vec();
        raw[0] = 9;
        assert_eq!(
            decode(Bytes::from(raw)),
            Err(RecordError(DecodeError::Version { found: 9, reads: 1 }))
        );
    }
}
