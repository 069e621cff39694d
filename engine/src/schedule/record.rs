//! The stored form of an [`Entry`]: a small, versioned binary record.
//!
//! Pure (no I/O), shared by every store backend so that an entry written by
//! one release is read by the next. Layout (integers little-endian):
//!
//! ```text
//! u8  version (2)
//! u64 due_ms | u64 accepted_ms | u32 attempts
//! then the notification's binary form (herald_protocol::binary):
//! u8  flags: 1 when_online, 2 payload_is_utf8, 4 has topic, 8 has ttl
//! u8  scope: 0 user, 1 client, 2 global
//! str id | str event | str content_type | [str topic] | [u64 ttl_ms]
//! list users | list clients | list sites      (list = u16 count, then strs)
//! u32 payload length, payload bytes           (str = u16 length, then UTF-8)
//! then its target (version 2):
//! u8  target flags: 1 has callback_url, 2 has recheck_url, 4 not browsers
//! [str callback_url] | [str recheck_url]
//! ```
//!
//! Version 1 is the same without the target: it is still read, with the
//! default target (no URLs of its own, browsers). [`encode`] writes version
//! 2 for an entry with a target of its own and version 1 for the others,
//! so that during a rolling upgrade the routers of the release before
//! (which read version 1 only) still fire every notification that does not
//! use the new fields. The entry's `phase` and `calls` are not in the record: the
//! stores keep them with its state.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use herald_protocol::binary::{self, CALLER_FLAG, DecodeError};

use super::entry::{Entry, Phase, Target};

/// The record version this code writes for an entry with a target of its
/// own (the others are written as [`VERSION_1`]).
pub const VERSION: u8 = 2;

/// The first version, without the target: still read.
pub const VERSION_1: u8 = 1;

/// Bytes of a record before its notification.
const HEADER_LEN: usize = 1 + 8 + 8 + 4;

/// Target flag: a `callback_url` follows.
const HAS_CALLBACK_URL: u8 = 1;
/// Target flag: a `recheck_url` follows (after the callback URL).
const HAS_RECHECK_URL: u8 = 2;
/// Target flag: not for its browser recipients (`browsers: false`).
const NOT_BROWSERS: u8 = 4;
const TARGET_FLAGS: u8 = HAS_CALLBACK_URL | HAS_RECHECK_URL | NOT_BROWSERS;

/// A record that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Its bytes are not a record of a version this code reads.
    #[error("record {0}")]
    Decode(#[from] DecodeError),
    /// Its target flags have bits this code does not know.
    #[error("record target flags {0:#04x} have unknown bits")]
    TargetFlags(u8),
}

/// Encode `entry` as a record of [`VERSION`]: its own fields, then the
/// notification in its binary form ([`herald_protocol::binary`]),
/// `when_online` in the flag bit left to the caller, then its target.
/// Its `phase` and `calls` are not part of the record: the store keeps
/// them with the entry's state.
pub fn encode(entry: &Entry) -> Bytes {
    let n = &entry.notification;
    let t = &entry.target;
    let urls = [t.callback_url.as_deref(), t.recheck_url.as_deref()];
    let target_len = 1 + urls.iter().flatten().map(|u| 2 + u.len()).sum::<usize>();
    let mut out = BytesMut::with_capacity(HEADER_LEN + binary::encoded_len(n) + target_len);
    // Without a target of its own, version 1 says it all, and a router
    // of the release before (which reads only version 1) can still fire
    // it during a rolling upgrade.
    let plain = *t == Target::default();
    out.put_u8(if plain { VERSION_1 } else { VERSION });
    out.put_u64_le(entry.due_ms);
    out.put_u64_le(entry.accepted_ms);
    out.put_u32_le(entry.attempts);
    binary::put(&mut out, n, if entry.when_online { CALLER_FLAG } else { 0 });
    if plain {
        return out.freeze();
    }
    let flags = if t.callback_url.is_some() {
        HAS_CALLBACK_URL
    } else {
        0
    } | if t.recheck_url.is_some() {
        HAS_RECHECK_URL
    } else {
        0
    } | if t.browsers { 0 } else { NOT_BROWSERS };
    out.put_u8(flags);
    for url in urls.into_iter().flatten() {
        // URLs are checked at most `MAX_URL_BYTES` (2048) long where they
        // come in: far below a u16 length.
        debug_assert!(url.len() <= crate::callback::destination::MAX_URL_BYTES);
        out.put_u16_le(url.len() as u16);
        out.put_slice(url.as_bytes());
    }
    out.freeze()
}

/// Decode a record made by [`encode`], of [`VERSION`] or [`VERSION_1`]
/// (whose entries have the default target). The payload is copied out of
/// `record` into its own allocation ([`binary::get`]), so a fired
/// notification kept in a mailbox does not keep the whole stored value.
pub fn decode(mut record: Bytes) -> Result<Entry, RecordError> {
    let r = &mut record;
    let version = binary::u8_(r, "version")?;
    if version != VERSION && version != VERSION_1 {
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
    let target = if version == VERSION_1 {
        Target::default()
    } else {
        target(r)?
    };
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
        fire_ms: 0,
        calls: 0,
        target,
    })
}

/// The target part of a version 2 record.
fn target(r: &mut Bytes) -> Result<Target, RecordError> {
    let flags = binary::u8_(r, "target flags")?;
    if flags & !TARGET_FLAGS != 0 {
        return Err(RecordError::TargetFlags(flags));
    }
    let callback_url = (flags & HAS_CALLBACK_URL != 0)
        .then(|| str_(r, "callback_url"))
        .transpose()?;
    let recheck_url = (flags & HAS_RECHECK_URL != 0)
        .then(|| str_(r, "recheck_url"))
        .transpose()?;
    Ok(Target {
        callback_url,
        recheck_url,
        browsers: flags & NOT_BROWSERS == 0,
    })
}

/// A string: u16 length (little-endian), then UTF-8, as the notification's.
fn str_(r: &mut Bytes, what: &'static str) -> Result<String, DecodeError> {
    if r.remaining() < 2 {
        return Err(DecodeError::Truncated(what));
    }
    let len = usize::from(r.get_u16_le());
    if r.remaining() < len {
        return Err(DecodeError::Truncated(what));
    }
    String::from_utf8(r.split_to(len).to_vec()).map_err(|_| DecodeError::Utf8(what))
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
                accepted: Default::default(),
            },
            due_ms: 1_700_000_000_123,
            accepted_ms: 1_700_000_000_000,
            when_online: true,
            attempts: 2,
            phase: Phase::Deliver,
            fire_ms: 0,
            calls: 0,
            target: Default::default(),
        }
    }

    fn target() -> impl Strategy<Value = Target> {
        let url = proptest::option::of("https://[a-z.]{1,30}/\\PC{0,40}");
        (url.clone(), url, any::<bool>()).prop_map(|(callback_url, recheck_url, browsers)| Target {
            callback_url,
            recheck_url,
            browsers,
        })
    }

    /// What a release writing version 1 stored for `e` (its target is not
    /// part of it).
    fn version_1(e: &Entry) -> Bytes {
        let mut out = BytesMut::new();
        out.put_u8(VERSION_1);
        out.put_u64_le(e.due_ms);
        out.put_u64_le(e.accepted_ms);
        out.put_u32_le(e.attempts);
        let flag = if e.when_online { CALLER_FLAG } else { 0 };
        binary::put(&mut out, &e.notification, flag);
        out.freeze()
    }

    proptest! {
        #[test]
        fn round_trips(
            payload in proptest::collection::vec(any::<u8>(), 0..300),
            topic in proptest::option::of("[a-z.]{1,20}"),
            ttl in proptest::option::of(1u64..1_000_000),
            users in proptest::collection::vec("\\PC{1,12}", 0..5),
            target in target(),
        ) {
            let e = Entry { target, ..entry(payload, topic, ttl, users) };
            prop_assert_eq!(decode(encode(&e)).unwrap(), e);
        }

        #[test]
        fn version_1_records_read_with_the_default_target(
            payload in proptest::collection::vec(any::<u8>(), 0..300),
            topic in proptest::option::of("[a-z.]{1,20}"),
            users in proptest::collection::vec("\\PC{1,12}", 0..5),
        ) {
            let e = entry(payload, topic, None, users);
            let back = decode(version_1(&e)).unwrap();
            prop_assert_eq!(&back.target, &Target::default());
            prop_assert_eq!(back, e);
        }

        #[test]
        fn any_bytes_decode_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(Bytes::from(bytes));
        }
    }

    fn full_target() -> Target {
        Target {
            callback_url: Some("https://cb.example/hook".into()),
            recheck_url: Some("https://cb.example/check?x=1".into()),
            browsers: false,
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        let e = entry(
            b"payload".to_vec(),
            Some("t".into()),
            Some(5),
            vec!["u".into()],
        );
        for full in [
            encode(&e),
            encode(&Entry {
                target: full_target(),
                ..e.clone()
            }),
            version_1(&e),
        ] {
            for cut in 0..full.len() {
                assert!(decode(full.slice(..cut)).is_err(), "cut at {cut}");
            }
            let mut long = full.to_vec();
            long.push(0);
            assert_eq!(
                decode(Bytes::from(long)),
                Err(RecordError::Decode(DecodeError::Trailing(1)))
            );
        }
    }

    #[test]
    fn the_layout_is_the_one_stores_hold() {
        let mut e = entry(b"hi".to_vec(), Some("t".into()), Some(5), vec!["u".into()]);
        e.notification.id = "i".into();
        e.notification.event = "e".into();
        e.notification.content_type = "c".into();
        let mut v1 = vec![1u8];
        v1.extend(1_700_000_000_123u64.to_le_bytes());
        v1.extend(1_700_000_000_000u64.to_le_bytes());
        v1.extend(2u32.to_le_bytes());
        v1.extend([1 | 4 | 8, 1]); // when_online, topic, ttl; scope client
        for s in ["i", "e", "c", "t"] {
            v1.extend([1, 0]);
            v1.extend(s.as_bytes());
        }
        v1.extend(5u64.to_le_bytes());
        v1.extend([1, 0, 1, 0, b'u']); // users
        v1.extend([1, 0, 4, 0]); // clients
        v1.extend(b"acme");
        v1.extend([0, 0]); // sites
        v1.extend(2u32.to_le_bytes());
        v1.extend(b"hi");
        assert_eq!(
            decode(Bytes::from(v1.clone())).unwrap(),
            e,
            "version 1 still reads"
        );

        // Without a target of its own it is written as version 1 (for
        // the routers of the release before, during an upgrade).
        assert_eq!(&encode(&e)[..], &v1[..]);
        // Version 2 of the same: then the target, here the default.
        let mut want = v1.clone();
        want[0] = 2;
        want.push(0); // no URLs, browsers
        assert_eq!(decode(Bytes::from(want)).unwrap(), e);

        e.target = full_target();
        let mut want = v1;
        want[0] = 2;
        want.push(1 | 2 | 4);
        for url in ["https://cb.example/hook", "https://cb.example/check?x=1"] {
            want.extend((url.len() as u16).to_le_bytes());
            want.extend(url.as_bytes());
        }
        assert_eq!(&encode(&e)[..], &want[..]);
        assert_eq!(decode(Bytes::from(want)).unwrap(), e);
    }

    #[test]
    fn each_target_field_alone_round_trips() {
        let base = entry(vec![], None, None, vec![]);
        let url = || Some("https://x.example/".to_owned());
        for target in [
            Target {
                callback_url: url(),
                ..Target::default()
            },
            Target {
                recheck_url: url(),
                ..Target::default()
            },
            Target {
                browsers: false,
                ..Target::default()
            },
            Target {
                callback_url: Some("h".repeat(crate::callback::destination::MAX_URL_BYTES)),
                recheck_url: url(),
                browsers: true,
            },
        ] {
            let e = Entry {
                target,
                ..base.clone()
            };
            assert_eq!(decode(encode(&e)).unwrap(), e);
        }
    }

    #[test]
    fn unknown_versions_and_target_flags_are_refused() {
        let e = entry(vec![], None, None, vec![]);
        // Version 2 with the default target (what encode writes as 1).
        let mut raw = encode(&e).to_vec();
        raw.push(0);
        raw[0] = 9;
        assert_eq!(
            decode(Bytes::from(raw.clone())),
            Err(RecordError::Decode(DecodeError::Version {
                found: 9,
                reads: 2
            }))
        );
        raw[0] = VERSION;
        *raw.last_mut().unwrap() = 8;
        assert_eq!(decode(Bytes::from(raw)), Err(RecordError::TargetFlags(8)));
        let mut raw = encode(&Entry {
            target: full_target(),
            ..e
        })
        .to_vec();
        let at = raw.len() - "https://cb.example/check?x=1".len();
        raw[at] = 0xff;
        assert_eq!(
            decode(Bytes::from(raw)),
            Err(RecordError::Decode(DecodeError::Utf8("recheck_url")))
        );
    }
}
