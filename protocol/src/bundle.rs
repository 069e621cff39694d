//! Several notifications in one message: how a router hands a batch to the
//! edges as one AMQP message instead of one message each (a herd of
//! 200,000 delayed notifications is 200 messages of 1,000, not 200,000
//! messages, for the broker and for every edge).
//!
//! ```text
//! u8  version (1) | u32 count
//! count notifications, back to back, in the binary form (crate::binary),
//! with the caller's flag clear
//! ```
//!
//! A bundle travels with content type [`CONTENT_TYPE`]; its notifications
//! arrive in order and are validated one by one by the receiver, as any
//! publication is.

use bytes::{BufMut, Bytes, BytesMut};

use crate::binary::{self, DecodeError};
use crate::envelope::Notification;

/// The content type of a bundle message.
pub const CONTENT_TYPE: &str = "application/vnd.herald.bundle";

/// The layout version this code writes and reads.
pub const VERSION: u8 = 1;

/// Bytes of a bundle before its first notification.
pub const HEADER_LEN: usize = 5;

/// Bytes [`encode`] makes for these notifications.
pub fn encoded_len<'a>(notifications: impl IntoIterator<Item = &'a Notification>) -> usize {
    HEADER_LEN
        + notifications
            .into_iter()
            .map(binary::encoded_len)
            .sum::<usize>()
}

/// Encode `notifications` as one bundle.
pub fn encode<'a, I>(notifications: I) -> Bytes
where
    I: IntoIterator<Item = &'a Notification>,
    I::IntoIter: Clone,
{
    let iter = notifications.into_iter();
    let mut out = BytesMut::with_capacity(encoded_len(iter.clone()));
    out.put_u8(VERSION);
    let count = out.len();
    out.put_u32_le(0);
    let mut n: u32 = 0;
    for notification in iter {
        binary::put(&mut out, notification, 0);
        n += 1;
    }
    out[count..count + 4].copy_from_slice(&n.to_le_bytes());
    out.freeze()
}

/// Decode a bundle made by [`encode`]. Each payload is copied out of
/// `body` ([`binary::get`] does), so a notification kept in a mailbox holds
/// its own bytes, not the whole bundle. The notifications are not
/// validated.
pub fn decode(mut body: Bytes) -> Result<Vec<Notification>, DecodeError> {
    let r = &mut body;
    let version = binary::u8_(r, "version")?;
    if version != VERSION {
        return Err(DecodeError::Version {
            found: version,
            reads: VERSION,
        });
    }
    let count = binary::u32_(r, "count")? as usize;
    // A notification takes at least 18 bytes: never trust `count` for
    // more room than the body could fill.
    let mut out = Vec::with_capacity(count.min(r.len() / 18));
    for _ in 0..count {
        let (n, _) = binary::get(r)?;
        out.push(n);
    }
    if !r.is_empty() {
        return Err(DecodeError::Trailing(r.len()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::Scope;
    use std::time::Duration;

    fn sample(i: usize) -> Notification {
        Notification {
            id: format!("n-{i}"),
            scope: Scope::User,
            users: vec![format!("user-{i}")],
            clients: vec![],
            sites: vec![],
            event: "coupon.due".into(),
            topic: i.is_multiple_of(2).then(|| "coupons".to_owned()),
            content_type: "application/json".into(),
            payload: Bytes::from(format!("{{\"i\":{i}}}")),
            payload_is_utf8: true,
            ttl: i.is_multiple_of(3).then(|| Duration::from_secs(60)),
            encodings: Default::default(),
        }
    }

    #[test]
    fn round_trips_in_order() {
        let batch: Vec<Notification> = (0..50).map(sample).collect();
        let body = encode(&batch);
        assert_eq!(body.len(), encoded_len(&batch));
        assert_eq!(decode(body).unwrap(), batch);
    }

    #[test]
    fn a_decoded_payload_does_not_hold_the_bundle() {
        let batch: Vec<Notification> = (0..50).map(sample).collect();
        let body = encode(&batch);
        let range = body.as_ptr_range();
        for n in decode(body.clone()).unwrap() {
            assert!(!range.contains(&n.payload.as_ptr()), "{}", n.id);
        }
    }

    #[test]
    fn an_empty_bundle_is_five_bytes() {
        let body = encode(&[] as &[Notification]);
        assert_eq!(&body[..], &[VERSION, 0, 0, 0, 0]);
        assert_eq!(decode(body).unwrap(), vec![]);
    }

    #[test]
    fn every_truncation_and_trailing_byte_is_an_error() {
        let batch: Vec<Notification> = (0..3).map(sample).collect();
        let full = encode(&batch);
        for cut in 0..full.len() {
            assert!(decode(full.slice(..cut)).is_err(), "cut at {cut}");
        }
        let mut long = full.to_vec();
        long.push(7);
        assert_eq!(decode(Bytes::from(long)), Err(DecodeError::Trailing(1)));
    }

    #[test]
    fn an_unknown_version_is_refused() {
        let mut raw = encode(&[sample(1)]).to_vec();
        raw[0] = 2;
        assert_eq!(
            decode(Bytes::from(raw)),
            Err(DecodeError::Version { found: 2, reads: 1 })
        );
    }

    #[test]
    fn a_huge_count_does_not_allocate_for_it() {
        let raw = Bytes::from_static(&[VERSION, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(decode(raw), Err(DecodeError::Truncated("flags")));
    }
}
