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
//!
//! When its notifications were accepted ([`Accepted`]) travels beside the
//! bundle, not in it, so the layout above (and every edge that reads it)
//! stays as it is; [`encode_accepted`] makes the table, 8 bytes plus 4 a
//! notification:
//!
//! ```text
//! u64 base: microseconds after the Unix epoch (the earliest time known)
//! count × u32: microseconds after base, in bundle order (u32::MAX: unknown)
//! ```

use bytes::{BufMut, Bytes, BytesMut};

use crate::binary::{self, DecodeError};
use crate::envelope::{Accepted, Notification};

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

/// An offset in the acceptance table meaning "not known".
const UNKNOWN_OFFSET: u32 = u32::MAX;

/// The acceptance table of `notifications` (see the module docs); `None`
/// when no time is known (nothing to carry).
pub fn encode_accepted<'a, I>(notifications: I) -> Option<Bytes>
where
    I: IntoIterator<Item = &'a Notification>,
    I::IntoIter: Clone,
{
    let iter = notifications.into_iter();
    let base = iter
        .clone()
        .filter_map(|n| n.accepted.unix_micros())
        .min()?;
    let mut out = BytesMut::with_capacity(8 + 4 * iter.clone().count());
    out.put_u64_le(base);
    for n in iter {
        // An offset past u32 (71 minutes after the earliest) is not a
        // bundle's spread; it is said as unknown rather than wrong.
        let offset = n
            .accepted
            .unix_micros()
            .and_then(|at| u32::try_from(at - base).ok())
            .filter(|&o| o != UNKNOWN_OFFSET)
            .unwrap_or(UNKNOWN_OFFSET);
        out.put_u32_le(offset);
    }
    Some(out.freeze())
}

/// Set the acceptance times of `batch` (a decoded bundle) from `table`
/// (made by [`encode_accepted`] for the same bundle). A table that does
/// not fit the batch sets nothing and returns false: the notifications are
/// delivered all the same, only not measured.
pub fn apply_accepted(table: &[u8], batch: &mut [Notification]) -> bool {
    if table.len() != 8 + 4 * batch.len() {
        return false;
    }
    let (base, offsets) = table.split_at(8);
    let base = u64::from_le_bytes(base.try_into().unwrap_or_default());
    for (n, o) in batch.iter_mut().zip(offsets.chunks_exact(4)) {
        let offset = u32::from_le_bytes([o[0], o[1], o[2], o[3]]);
        n.accepted = match offset {
            UNKNOWN_OFFSET => Accepted::UNKNOWN,
            _ => Accepted::from_unix_micros(base.saturating_add(u64::from(offset))),
        };
    }
    true
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
            accepted: Default::default(),
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

    #[test]
    fn acceptance_times_travel_beside_the_bundle() {
        let mut batch: Vec<Notification> = (0..4).map(sample).collect();
        batch[0].accepted = Accepted::from_unix_micros(1_000_000);
        batch[1].accepted = Accepted::from_unix_micros(999_000);
        batch[3].accepted = Accepted::from_unix_micros(999_000 + (1 << 33));
        let table = encode_accepted(&batch).unwrap();
        assert_eq!(table.len(), 8 + 4 * 4);
        let body = encode(&batch);
        let mut back = decode(body).unwrap();
        assert!(apply_accepted(&table, &mut back));
        let times: Vec<_> = back.iter().map(|n| n.accepted.unix_micros()).collect();
        assert_eq!(times, vec![Some(1_000_000), Some(999_000), None, None]);
        assert!(
            !apply_accepted(&table, &mut back[..3]),
            "a table of another size"
        );
        assert!(encode_accepted(&[sample(1)]).is_none(), "nothing known");
    }
}
