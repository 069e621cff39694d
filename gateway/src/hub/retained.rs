//! How a mailbox keeps a notification for replay: one allocation holding
//! what a MESSAGE frame needs, and nothing else.
//!
//! Routing hands the hub an `Arc<Notification>`. Kept as it is in a
//! mailbox (minutes, until evicted or expired), it would cost far more than
//! its payload: a 280-byte struct, an allocation per name (`id`, `event`,
//! `content_type`, `topic`), the routing fields nobody reads after routing
//! (`users`, `clients`, `sites`: a `Vec` and a `String` each), the SockJS
//! encoding once a SockJS session took it, and a payload that may share a
//! larger buffer, whatever its producer made of it. So the hub packs each
//! notification it routes once into a [`Retained`], which every mailbox
//! it reaches shares; live delivery still hands the sessions the original
//! `Arc<Notification>`, which is freed once they have written it. A session
//! that reads from the buffer (a replay, or a backlog behind its window)
//! gets a fresh notification unpacked ([`Retained::notification`]) as it
//! queues it; its payload shares the packed bytes.
//!
//! Layout (integers little-endian), in one `Arc<[u8]>`:
//!
//! ```text
//! u8  flags: 1 payload_is_utf8, 2 has topic
//! u8  scope: 0 user, 1 client, 2 global
//! u16 id length | u16 event length | u16 content_type length | u16 topic length
//! i64 expiry: ns after the hub's clock origin (i64::MAX: never)
//! id | event | content_type | topic | payload
//! ```
//!
//! Names and content types are validated to at most 200 bytes long before
//! they reach the hub; a longer one (never seen) is cut at a character
//! boundary to fit its `u16` length rather than corrupt the layout.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use herald_protocol::envelope::{Notification, Scope};
use tokio::time::Instant;

const UTF8: u8 = 1;
const HAS_TOPIC: u8 = 2;
/// Bytes before the first name.
const HEADER_LEN: usize = 2 + 4 * 2 + 8;
/// The expiry of a notification without a TTL.
const NEVER: i64 = i64::MAX;

/// The hub's clock origin: expiries are kept as signed nanoseconds after
/// it, 8 bytes instead of an `Option<Instant>`'s 16.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Origin(Instant);

impl Origin {
    pub(crate) fn new(at: Instant) -> Self {
        Origin(at)
    }

    /// `t` as nanoseconds after the origin (negative before it).
    pub(crate) fn offset(self, t: Instant) -> i64 {
        let nanos = |d: Duration| i64::try_from(d.as_nanos()).unwrap_or(NEVER - 1);
        if t >= self.0 {
            nanos(t - self.0)
        } else {
            -nanos(self.0 - t)
        }
    }
}

/// A notification packed for a mailbox's replay buffer; cloning shares it.
#[derive(Debug, Clone)]
pub(crate) struct Retained(Arc<[u8]>);

/// Lengths of the names, in layout order: id, event, content type, topic.
type Lens = [usize; 4];

impl Retained {
    /// Pack `n`, which expires `expires` ns after the origin (`None`:
    /// never). The payload is copied: the packed form owns exactly its
    /// bytes, whatever buffer `n.payload` shares.
    pub(crate) fn pack(n: &Notification, expires: Option<i64>) -> Self {
        let topic = n.topic.as_deref().unwrap_or("");
        let names = [fit(&n.id), fit(&n.event), fit(&n.content_type), fit(topic)];
        let len = HEADER_LEN + names.iter().map(|s| s.len()).sum::<usize>() + n.payload.len();
        // One allocation, exactly `len` long (`Arc<[u8]>` collects an
        // iterator of known length in place), then filled.
        let mut packed: Arc<[u8]> = std::iter::repeat_n(0, len).collect();
        let Some(out) = Arc::get_mut(&mut packed) else {
            unreachable!("a new Arc has one handle");
        };
        let mut flags = 0;
        if n.payload_is_utf8 {
            flags |= UTF8;
        }
        if n.topic.is_some() {
            flags |= HAS_TOPIC;
        }
        out[0] = flags;
        out[1] = match n.scope {
            Scope::User => 0,
            Scope::Client => 1,
            Scope::Global => 2,
        };
        for (i, name) in names.iter().enumerate() {
            // `fit` made every name at most u16::MAX bytes long.
            out[2 + 2 * i..4 + 2 * i].copy_from_slice(&(name.len() as u16).to_le_bytes());
        }
        out[10..HEADER_LEN].copy_from_slice(&expires.unwrap_or(NEVER).to_le_bytes());
        let mut at = HEADER_LEN;
        for piece in names.iter().map(|s| s.as_bytes()).chain([&n.payload[..]]) {
            out[at..at + piece.len()].copy_from_slice(piece);
            at += piece.len();
        }
        Retained(packed)
    }

    fn lens(&self) -> Lens {
        let b = &self.0;
        let at = |i: usize| usize::from(u16::from_le_bytes([b[2 + 2 * i], b[3 + 2 * i]]));
        [at(0), at(1), at(2), at(3)]
    }

    /// The `i`th name (0 id, 1 event, 2 content type, 3 topic).
    fn name(&self, lens: &Lens, i: usize) -> &str {
        let start = HEADER_LEN + lens[..i].iter().sum::<usize>();
        // Packed from `&str`s cut at character boundaries.
        std::str::from_utf8(&self.0[start..start + lens[i]]).unwrap_or_default()
    }

    fn payload_start(&self, lens: &Lens) -> usize {
        HEADER_LEN + lens.iter().sum::<usize>()
    }

    /// The event name (what subscription filters match).
    pub(crate) fn event(&self) -> &str {
        self.name(&self.lens(), 1)
    }

    /// Payload bytes (what the replay buffer's byte bound counts).
    pub(crate) fn payload_len(&self) -> usize {
        self.0.len() - self.payload_start(&self.lens())
    }

    /// What keeping it costs a buffer: the packed bytes, the `Arc`'s
    /// counts and the buffer's slot (what `mailbox.unsent_bytes` counts).
    pub(crate) fn footprint(&self) -> usize {
        self.0.len() + 2 * std::mem::size_of::<usize>() + std::mem::size_of::<Self>()
    }

    /// When it expires, in ns after the origin; `None`: never.
    pub(crate) fn expires(&self) -> Option<i64> {
        let mut raw = [0; 8];
        raw.copy_from_slice(&self.0[10..18]);
        Some(i64::from_le_bytes(raw)).filter(|&e| e != NEVER)
    }

    /// Whether it is still worth delivering at `now` (ns after the origin).
    pub(crate) fn is_live(&self, now: i64) -> bool {
        self.expires().is_none_or(|e| e > now)
    }

    /// A notification to write from it at `now` (ns after the origin):
    /// the fields a MESSAGE frame carries, the TTL that is left, no routing
    /// fields (routing is done). The payload shares the packed bytes.
    pub(crate) fn notification(&self, now: i64) -> Notification {
        let lens = self.lens();
        let flags = self.0[0];
        let scope = match self.0[1] {
            1 => Scope::Client,
            2 => Scope::Global,
            _ => Scope::User,
        };
        let start = self.payload_start(&lens);
        Notification {
            id: self.name(&lens, 0).to_owned(),
            scope,
            users: Vec::new(),
            clients: Vec::new(),
            sites: Vec::new(),
            event: self.name(&lens, 1).to_owned(),
            topic: (flags & HAS_TOPIC != 0).then(|| self.name(&lens, 3).to_owned()),
            content_type: self.name(&lens, 2).to_owned(),
            payload: Bytes::from_owner(Payload {
                packed: Arc::clone(&self.0),
                start,
            }),
            payload_is_utf8: flags & UTF8 != 0,
            ttl: self
                .expires()
                .map(|e| Duration::from_nanos(e.saturating_sub(now).max(0) as u64)),
            encodings: Default::default(),
            accepted: Default::default(),
        }
    }

    /// Bytes of the packed allocation (its header and names included).
    #[cfg(test)]
    pub(crate) fn packed_len(&self) -> usize {
        self.0.len()
    }
}

/// The payload of a packed notification, as the owner of a [`Bytes`].
struct Payload {
    packed: Arc<[u8]>,
    start: usize,
}

impl AsRef<[u8]> for Payload {
    fn as_ref(&self) -> &[u8] {
        &self.packed[self.start..]
    }
}

/// `s`, cut at a character boundary to at most `u16::MAX` bytes.
fn fit(s: &str) -> &str {
    let mut end = s.len().min(usize::from(u16::MAX));
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(topic: Option<&str>, ttl: Option<Duration>) -> Notification {
        Notification {
            id: "n-1".into(),
            scope: Scope::Client,
            users: vec!["alice".into()],
            clients: vec!["acme".into()],
            sites: vec!["eu".into()],
            event: "chat.message".into(),
            topic: topic.map(Into::into),
            content_type: "text/plain; charset=utf-8".into(),
            payload: Bytes::from_static("héllo".as_bytes()),
            payload_is_utf8: true,
            ttl,
            encodings: Default::default(),
            accepted: Default::default(),
        }
    }

    #[test]
    fn unpacks_what_a_message_frame_needs() {
        for topic in [None, Some("chat"), Some("")] {
            let n = sample(topic, None);
            let r = Retained::pack(&n, None);
            assert_eq!(r.event(), "chat.message");
            assert_eq!(r.payload_len(), n.payload.len());
            assert_eq!(r.expires(), None);
            let back = r.notification(0);
            let routed_only = Notification {
                users: vec![],
                clients: vec![],
                sites: vec![],
                ..n.clone()
            };
            assert_eq!(back, routed_only, "topic {topic:?}");
        }
        let mut binary = sample(None, None);
        binary.payload = Bytes::from_static(b"\xff\x00");
        binary.payload_is_utf8 = false;
        binary.scope = Scope::Global;
        let back = Retained::pack(&binary, None).notification(0);
        assert!(!back.payload_is_utf8);
        assert_eq!(back.scope, Scope::Global);
        assert_eq!(&back.payload[..], b"\xff\x00");
    }

    #[test]
    fn the_ttl_left_is_what_remains_of_the_expiry() {
        let r = Retained::pack(&sample(None, Some(Duration::from_secs(5))), Some(5_000));
        assert_eq!(r.expires(), Some(5_000));
        assert!(r.is_live(4_999));
        assert!(!r.is_live(5_000));
        assert_eq!(r.notification(1_000).ttl, Some(Duration::from_nanos(4_000)));
        assert_eq!(r.notification(9_000).ttl, Some(Duration::ZERO));
    }

    #[test]
    fn one_allocation_of_names_and_payload_owns_the_bytes() {
        // The payload shares a 64 KiB buffer (a request's, a bundle's).
        let big = Bytes::from(vec![b'x'; 64 * 1024]);
        let mut n = sample(Some("t"), None);
        n.payload = big.slice(100..200);
        let r = Retained::pack(&n, None);
        let names = "n-1".len() + "chat.message".len() + n.content_type.len() + 1;
        assert_eq!(r.packed_len(), HEADER_LEN + names + 100);
        let back = r.notification(0);
        assert!(!big.as_ptr_range().contains(&back.payload.as_ptr()));
        assert_eq!(back.payload, n.payload);
    }

    #[test]
    fn offsets_are_signed_around_the_origin() {
        let t = Instant::now();
        let o = Origin::new(t + Duration::from_secs(1));
        assert_eq!(o.offset(t + Duration::from_secs(3)), 2_000_000_000);
        assert_eq!(o.offset(t), -1_000_000_000);
    }

    #[test]
    fn an_overlong_name_is_cut_not_corrupting() {
        let mut n = sample(None, None);
        n.event = "é".repeat(40_000);
        let r = Retained::pack(&n, None);
        assert!(r.event().len() <= usize::from(u16::MAX));
        assert!(r.event().chars().all(|c| c == 'é'));
        assert_eq!(&r.notification(0).payload[..], "héllo".as_bytes());
    }
}
