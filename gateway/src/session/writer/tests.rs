use super::*;
use herald_protocol::envelope::Scope;
use herald_protocol::stomp::{Decoded, Limits};
use herald_protocol::websocket::Message;

fn decode_server_frames(bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    // Server frames are unmasked; parse the simple header by hand.
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let op = bytes[i] & 0x0f;
        let len7 = (bytes[i + 1] & 0x7f) as usize;
        let (len, hdr) = match len7 {
            126 => (u16::from_be_bytes([bytes[i + 2], bytes[i + 3]]) as usize, 4),
            127 => (
                u64::from_be_bytes(bytes[i + 2..i + 10].try_into().unwrap()) as usize,
                10,
            ),
            n => (n, 2),
        };
        out.push((op, bytes[i + hdr..i + hdr + len].to_vec()));
        i += hdr + len;
    }
    out
}

#[test]
fn message_shares_the_payload_and_decodes() {
    let payload = Bytes::from(vec![b'x'; 70_000]);
    let n = Notification {
        id: "n1".into(),
        scope: Scope::Client,
        users: vec![],
        clients: vec!["acme".into()],
        sites: vec![],
        event: "chat.message".into(),
        topic: Some("chat".into()),
        content_type: "text/plain".into(),
        payload: payload.clone(),
        payload_is_utf8: true,
        ttl: None,
        encodings: Default::default(),
        accepted: Default::default(),
    };
    let mut q = WriteQueue::default();
    RawStomp(&mut q).message("sub:0", 7, 99, &n, Version::V1_2);
    // The payload chunk is the very same allocation, after one chunk holding
    // the WebSocket header and the STOMP head.
    assert_eq!(q.chunks[1].as_ptr(), payload.as_ptr());
    assert_eq!(q.chunks.len(), 3);
    let frames = decode_server_frames(&q.concat());
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].0, 1, "text frame");
    let mut buf = BytesMut::from(&frames[0].1[..]);
    let limits = Limits {
        max_frame_bytes: 1 << 20,
        ..Limits::default()
    };
    let Some(Decoded::Frame(f)) = stomp::decode(&mut buf, Version::V1_2, &limits).unwrap() else {
        panic!()
    };
    assert_eq!(f.command, Command::Message);
    assert_eq!(f.header("subscription"), Some("sub:0"));
    assert_eq!(f.header("seq"), Some("7"));
    assert_eq!(f.header("epoch"), Some("99"));
    assert_eq!(f.header("event"), Some("chat.message"));
    assert_eq!(f.header("scope"), Some("client"));
    assert_eq!(f.header("topic"), Some("chat"));
    assert_eq!(f.body.len(), 70_000);
}

#[test]
fn message_frames_of_every_header_size_decode() {
    // Frames whose whole length (head + payload + NUL) falls on each side of
    // the 2-, 4- and 10-byte WebSocket header sizes.
    for size in [0, 1, 60, 125, 126, 65_200, 65_535, 65_536, 70_000] {
        let n = note(Bytes::from(vec![b'y'; size]), true);
        let mut q = WriteQueue::default();
        RawStomp(&mut q).message("s", u64::MAX, 12, &n, Version::V1_2);
        let frames = decode_server_frames(&q.concat());
        assert_eq!(frames.len(), 1, "{size}");
        let mut buf = BytesMut::from(&frames[0].1[..]);
        let limits = Limits {
            max_frame_bytes: 1 << 20,
            ..Limits::default()
        };
        let Some(Decoded::Frame(f)) = stomp::decode(&mut buf, Version::V1_2, &limits).unwrap()
        else {
            panic!("{size}")
        };
        assert!(buf.is_empty(), "{size}: nothing after the frame");
        assert_eq!(f.header("seq"), Some(u64::MAX.to_string().as_str()));
        assert_eq!(f.header("content-length"), Some(size.to_string().as_str()));
        assert_eq!(f.body.len(), size);
    }
}

/// A user notification of `payload` (text when `utf8`).
fn note(payload: Bytes, utf8: bool) -> Notification {
    Notification {
        id: "n1".into(),
        scope: Scope::User,
        users: vec!["u".into()],
        clients: vec![],
        sites: vec![],
        event: "e".into(),
        topic: None,
        content_type: if utf8 {
            "text/plain"
        } else {
            "application/octet-stream"
        }
        .into(),
        payload,
        payload_is_utf8: utf8,
        ttl: None,
        encodings: Default::default(),
        accepted: Default::default(),
    }
}

#[test]
fn binary_payloads_go_in_binary_frames() {
    let n = note(Bytes::from_static(b"\xff\x00\xfe"), false);
    let mut q = WriteQueue::default();
    RawStomp(&mut q).message("s", 1, 1, &n, Version::V1_2);
    assert_eq!(decode_server_frames(&q.concat())[0].0, 2);
}

#[test]
fn control_frames() {
    let mut q = WriteQueue::default();
    RawStomp(&mut q).heartbeat();
    q.close(1000, "bye");
    q.pong(b"p");
    let frames = decode_server_frames(&q.concat());
    assert_eq!(frames[0], (1, b"\n".to_vec()));
    assert_eq!(frames[1].0, 8);
    assert_eq!(&frames[1].1[..2], &1000u16.to_be_bytes());
    assert_eq!(frames[2], (10, b"p".to_vec()));
    let _ = Message::Pong(Bytes::new());
}

#[test]
fn advance_splits_chunks() {
    let mut q = WriteQueue::default();
    q.push(Bytes::from_static(b"abc"));
    q.push(Bytes::from_static(b"def"));
    q.advance(4);
    assert_eq!(q.concat(), b"ef");
    assert_eq!(q.len(), 2);
}

/// Write `n` bytes from the front as if the socket took them.
fn take(q: &mut WriteQueue, n: usize) {
    q.seal();
    q.advance(n);
}

#[test]
fn a_pong_nobody_took_is_replaced_by_the_newest() {
    let mut q = WriteQueue::new(1024);
    q.pong(b"1");
    q.pong(b"22");
    q.pong(b"333");
    let frames = decode_server_frames(&q.concat());
    assert_eq!(
        frames,
        vec![(10, b"333".to_vec())],
        "only the latest ping is answered"
    );
    assert_eq!(q.len(), 5);
    assert_eq!(q.control_len(), 5);
    // The replaced pongs still count until the client takes one.
    assert_eq!(q.charged(), 5 + 3 + 4);
    take(&mut q, 5);
    assert!(q.is_empty());
    assert_eq!(q.charged(), 0);
}

#[test]
fn a_pong_already_going_out_is_not_touched() {
    let mut q = WriteQueue::new(1024);
    q.pong(b"first");
    take(&mut q, 3);
    q.pong(b"second");
    q.pong(b"third");
    // The rest of the first pong, then only the newest.
    let mut bytes = vec![0x8a, 5];
    bytes.extend_from_slice(b"first");
    let frames = decode_server_frames(&[&bytes[..3], &q.concat()[..]].concat());
    assert_eq!(
        frames,
        vec![(10, b"first".to_vec()), (10, b"third".to_vec())]
    );
}

#[test]
fn pongs_keep_their_place_among_other_frames() {
    let mut q = WriteQueue::new(1024);
    RawStomp(&mut q).heartbeat();
    q.pong(b"a");
    RawStomp(&mut q).heartbeat();
    q.pong(b"b");
    let frames = decode_server_frames(&q.concat());
    assert_eq!(
        frames,
        vec![
            (1, b"\n".to_vec()),
            (10, b"b".to_vec()),
            (1, b"\n".to_vec())
        ]
    );
}

#[test]
fn control_frames_past_the_bound_overflow_and_the_cut_has_a_reserve() {
    let mut q = WriteQueue::new(100);
    let receipt = |q: &mut WriteQueue| {
        RawStomp(q).frame(Command::Receipt, &[("receipt-id", "r")], b"", Version::V1_2)
    };
    receipt(&mut q);
    let one = q.len();
    while q.charged() + one <= 100 {
        receipt(&mut q);
    }
    assert!(!q.take_overflow());
    let before = q.concat();
    receipt(&mut q);
    q.pong(b"p");
    RawStomp(&mut q).heartbeat();
    assert_eq!(q.concat(), before, "nothing more is queued once full");
    assert!(q.take_overflow());
    assert!(!q.take_overflow(), "reported once");
    // The frames that end the session fit in the reserve, no more.
    RawStomp(&mut q).frame(
        Command::Error,
        &[("message", "slow")],
        b"slow",
        Version::V1_2,
    );
    q.close(1008, "");
    assert!(q.charged() <= 100 + CUT_RESERVE);
    for _ in 0..CUT_RESERVE {
        q.pong(b"p");
    }
    assert!(q.charged() <= 100 + CUT_RESERVE);
}

#[test]
fn a_ping_flood_without_reading_overflows() {
    let mut q = WriteQueue::new(10_000);
    let ping = [b'x'; 125];
    let mut pings = 0;
    while !q.take_overflow() {
        q.pong(&ping);
        pings += 1;
        assert!(q.control_len() <= 127, "one pong is held, not {pings}");
    }
    assert!(pings <= 10_000 / 127 + 1, "{pings} pings before the cut");
    // A client that reads is never charged for more than one pong.
    let mut q = WriteQueue::new(1000);
    for _ in 0..100 {
        q.pong(&ping);
        let n = q.len();
        take(&mut q, n);
    }
    assert!(!q.take_overflow());
    assert_eq!(q.charged(), 0);
}

#[test]
fn messages_are_not_charged() {
    let n = Notification {
        id: "n1".into(),
        scope: Scope::User,
        users: vec!["u".into()],
        clients: vec![],
        sites: vec![],
        event: "e".into(),
        topic: None,
        content_type: "text/plain".into(),
        payload: Bytes::from(vec![b'x'; 500]),
        payload_is_utf8: true,
        ttl: None,
        encodings: Default::default(),
        accepted: Default::default(),
    };
    let mut q = WriteQueue::new(100);
    RawStomp(&mut q).message("s", 1, 1, &n, Version::V1_2);
    assert!(q.len() > 500);
    assert_eq!(q.charged(), 0);
    assert!(!q.take_overflow());
}
