//! The fuzz targets' properties on stable Rust: arbitrary bytes fed in
//! arbitrary chunks never make a decoder panic, `Ok(None)` consumes nothing
//! (WebSocket: nothing but whole fragments), buffers stay within their
//! limits, and every STOMP 1.2 frame decoded re-encodes to itself. SockJS
//! payloads (`sockjs_decode`): only empty input is `Empty`, decoded
//! messages re-encode to themselves, and escaped UTF-8 decodes back.
//! Bundles (`bundle_decode`): what decodes re-encodes to a bundle of the
//! same notifications.
//!
//! Besides random bytes, the inputs are frame-shaped "soups" built from
//! mostly well-formed pieces, so that they get past the first line or the
//! first two bytes (SockJS: the JSON punctuation) and reach the deeper
//! states.

use bytes::{Bytes, BytesMut};
use herald_protocol::bundle;
use herald_protocol::sockjs::{
    self, DecodeError, decode_messages, encode_array, encoded_array_len, escaped_len,
};
use herald_protocol::stomp::{self, Decoded, Limits, Version};
use herald_protocol::websocket::Decoder;
use proptest::prelude::*;

/// Pieces of STOMP: right and wrong.
fn piece(options: &'static [&'static [u8]]) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        15 => prop::sample::select(options).prop_map(<[u8]>::to_vec),
        1 => prop::collection::vec(any::<u8>(), 0..4),
    ]
}

const COMMANDS: &[&[u8]] = &[
    b"SEND",
    b"CONNECT",
    b"STOMP",
    b"CONNECTED",
    b"MESSAGE",
    b"SUBSCRIBE",
    b"ERROR",
    b"send",
];
const EOLS: &[&[u8]] = &[b"\n", b"\r\n", b"\n", b"\r\n", b"\n", b"\r"];
const NAMES: &[&[u8]] = &[b"content-length", b"id", b"id", b"a\\c", b"x\\t", b""];
const VALUES: &[&[u8]] = &[
    b"0",
    b"3",
    b"12",
    b"99999999999999999999",
    b"-1",
    b"v\\n\\c\\r\\\\",
    b"\\",
    b"\xc3\xa9",
    b"\xc3",
    b"",
];
const BODIES: &[&[u8]] = &[b"", b"abc", b"a\0b", b"\n\n", b"\xff"];
const ENDS: &[&[u8]] = &[b"\0", b"\0\n", b"", b"x\0"];

/// Frame-shaped bytes: a command, header lines, a blank line, a body and a
/// NUL, each piece usually well-formed, sometimes not, sometimes random.
fn stomp_soup() -> impl Strategy<Value = Vec<u8>> {
    let header = (
        piece(NAMES),
        prop::bool::weighted(0.9),
        piece(VALUES),
        piece(EOLS),
    )
        .prop_map(|(n, colon, v, eol)| {
            [n, if colon { b":".to_vec() } else { vec![] }, v, eol].concat()
        });
    let frame = (
        prop_oneof![3 => Just(vec![]), 1 => piece(EOLS)],
        piece(COMMANDS),
        piece(EOLS),
        prop::collection::vec(header, 0..5),
        piece(EOLS),
        piece(BODIES),
        piece(ENDS),
    )
        .prop_map(|(hb, c, eol, headers, blank, body, end)| {
            [hb, c, eol, headers.concat(), blank, body, end].concat()
        });
    prop::collection::vec(frame, 0..6).prop_map(|f| f.concat())
}

/// Frame-shaped bytes: mostly known opcodes, rarely RSV bits, the mask bit
/// usually set and a length that is usually honest, a mask, a payload.
fn websocket_soup() -> impl Strategy<Value = Vec<u8>> {
    let opcode = prop_oneof![
        9 => prop::sample::select(&[0u8, 1, 2, 8, 9, 10][..]),
        1 => 0u8..16,
    ];
    let frame = (
        any::<bool>(),
        opcode,
        prop_oneof![49 => Just(0u8), 1 => 0u8..8],
        prop::bool::weighted(0.95),
        prop_oneof![
            9 => prop::collection::vec(any::<u8>(), 0..40),
            1 => Just(b"\x03\xe8ok".to_vec()),
            1 => Just(b"\xc3".to_vec()),
        ],
        prop::bool::weighted(0.97),
        any::<u8>(),
        any::<[u8; 4]>(),
    )
        .prop_map(|(fin, opcode, rsv, masked, payload, honest, len, mask)| {
            let len = if honest {
                payload.len() as u8
            } else {
                len & 0x7f
            };
            let mut f = vec![
                u8::from(fin) << 7 | rsv << 4 | opcode,
                u8::from(masked) << 7 | len,
            ];
            f.extend_from_slice(&mask);
            // Mask the payload so that text and close payloads arrive intact.
            f.extend(payload.iter().zip(mask.iter().cycle()).map(|(b, m)| b ^ m));
            f
        });
    prop::collection::vec(frame, 0..12).prop_map(|f| f.concat())
}

const OPENS: &[&[u8]] = &[b"[", b"[", b" [", b"\n[ ", b"", b"[["];
const QUOTES: &[&[u8]] = &[b"\"", b"\"", b"\"", b"\"", b"\"", b"\"", b"", b"'"];
const CONTENTS: &[&[u8]] = &[
    b"a",
    b"MESSAGE",
    b"\xc3\xa9",
    b"\xe2\x80\xa8",
    b"\xef\xbf\xbf",
    b"\xf0\x9f\x98\x80",
    b"\\\"",
    b"\\\\",
    b"\\n",
    b"\\/",
    b"\\u0000",
    b"\\u0041",
    b"\\uD83D\\uDE00",
    b"\\ud83d",
    b"\\ude00",
    b"\\u2028",
    b"\\u12",
    b"\\x",
    b"\"",
    b"\x01",
    b"\xc3",
    b"\xed\xa0\x80",
];
const SEPARATORS: &[&[u8]] = &[b",", b",", b" , ", b"", b",,"];
const CLOSES: &[&[u8]] = &[b"]", b"]", b"] \n", b"", b"]]", b"] x", b",]"];
const OTHERS: &[&[u8]] = &[b"", b" ", b"null", b"1", b"{}", b"[1]", b"[null]", b"true"];

/// A JSON string, usually.
fn json_string() -> impl Strategy<Value = Vec<u8>> {
    (
        piece(QUOTES),
        prop::collection::vec(piece(CONTENTS), 0..6),
        piece(QUOTES),
    )
        .prop_map(|(open, content, close)| [open, content.concat(), close].concat())
}

/// JSON-shaped bytes: an array of strings or a single string, each piece
/// usually well-formed, sometimes not, sometimes random.
fn sockjs_soup() -> impl Strategy<Value = Vec<u8>> {
    let item = (json_string(), piece(SEPARATORS)).prop_map(|(s, sep)| [s, sep].concat());
    let array = (
        piece(OPENS),
        prop::collection::vec(item, 0..5),
        piece(CLOSES),
    )
        .prop_map(|(open, items, close)| {
            // The last separator is usually dropped, as it should be.
            let mut items = items.concat();
            if items.last() == Some(&b',') {
                items.pop();
            }
            [open, items, close].concat()
        });
    prop_oneof![6 => array, 2 => json_string(), 1 => piece(OTHERS)]
}

/// The body of the `sockjs_decode` fuzz target.
fn check_sockjs(data: &[u8]) {
    let strict = decode_messages(data, false);
    let loose = decode_messages(data, true);
    if data.is_empty() {
        assert_eq!(strict, Err(DecodeError::Empty));
        assert_eq!(loose, Err(DecodeError::Empty));
        return;
    }
    assert_ne!(strict, Err(DecodeError::Empty));
    assert_ne!(loose, Err(DecodeError::Empty));
    if strict.is_ok() {
        assert_eq!(loose, strict);
    }
    if let Ok(messages) = &loose {
        let refs: Vec<&str> = messages.iter().map(String::as_str).collect();
        let mut out = BytesMut::new();
        encode_array(&refs, &mut out);
        assert_eq!(out.len(), encoded_array_len(&refs));
        assert_eq!(decode_messages(&out[1..], false).as_ref(), Ok(messages));
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let mut out = BytesMut::from(&b"\""[..]);
        sockjs::escape_into(text, &mut out);
        assert_eq!(out.len() - 1, escaped_len(text));
        out.extend_from_slice(b"\"");
        assert_eq!(decode_messages(&out, true), Ok(vec![text.to_owned()]));
    }
}

fn chunk_sizes() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..40, 1..8)
}

fn check_stomp(data: &[u8], sizes: &[usize], version: Version, limits: &Limits) {
    let mut buf = BytesMut::new();
    let mut rest = data;
    for &size in sizes.iter().cycle() {
        if rest.is_empty() {
            return;
        }
        let (chunk, tail) = rest.split_at(size.min(rest.len()));
        rest = tail;
        buf.extend_from_slice(chunk);
        loop {
            let before = buf.len();
            match stomp::decode(&mut buf, version, limits) {
                Ok(Some(Decoded::Frame(frame))) => {
                    assert!(buf.len() < before);
                    check_reencode(&frame, version);
                }
                Ok(Some(Decoded::Heartbeat)) => assert!(buf.len() < before),
                Ok(None) => {
                    assert_eq!(buf.len(), before, "Ok(None) consumed bytes");
                    assert!(buf.len() <= limits.max_frame_bytes);
                    break;
                }
                Err(_) => {
                    assert_eq!(buf.len(), before, "an error consumed bytes");
                    return;
                }
            }
        }
    }
}

/// In 1.2 every header of an escaped frame survives re-encoding.
fn check_reencode(frame: &stomp::Frame, version: Version) {
    if version != Version::V1_2 || !frame.command.escapes_headers() {
        return;
    }
    let mut out = BytesMut::new();
    stomp::encode(frame, version, &mut out);
    let roomy = Limits {
        max_frame_bytes: usize::MAX,
        max_headers: usize::MAX,
        max_header_bytes: usize::MAX,
    };
    let mut expected = frame.clone();
    if !frame.body.is_empty() && frame.header("content-length").is_none() {
        expected
            .headers
            .push(("content-length".into(), frame.body.len().to_string()));
    }
    assert_eq!(
        stomp::decode(&mut out, version, &roomy),
        Ok(Some(Decoded::Frame(expected)))
    );
    assert!(out.is_empty());
}

fn check_websocket(data: &[u8], sizes: &[usize], max: usize) {
    let mut decoder = Decoder::new(max);
    let mut buf = BytesMut::new();
    let mut rest = data;
    for &size in sizes.iter().cycle() {
        if rest.is_empty() {
            return;
        }
        let (chunk, tail) = rest.split_at(size.min(rest.len()));
        rest = tail;
        buf.extend_from_slice(chunk);
        loop {
            let before = buf.len();
            match decoder.decode(&mut buf) {
                Ok(Some(_)) => assert!(buf.len() < before),
                Ok(None) => break,
                Err(_) => return,
            }
            assert!(decoder.buffered() <= max);
        }
    }
}

/// Bundle-shaped input: a version byte, a small count, then notification
/// pieces: flags, scope codes, short lengths and bytes.
fn bundle_soup() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        4 => prop::sample::select(&[0u8, 1, 2, 4, 8, 14, 15, 255][..]).prop_map(|b| vec![b]),
        4 => (0u8..6).prop_map(|n| vec![n, 0]),
        2 => (0u8..6).prop_map(|n| vec![n, 0, 0, 0]),
        2 => prop::collection::vec(b'a'..=b'z', 0..6),
        1 => prop::collection::vec(any::<u8>(), 0..4),
    ];
    (0u8..4, prop::collection::vec(piece, 0..40)).prop_map(|(count, pieces)| {
        let mut out = vec![bundle::VERSION, count, 0, 0, 0];
        out.extend(pieces.concat());
        out
    })
}

fn check_bundle(data: &[u8]) {
    if let Ok(batch) = bundle::decode(Bytes::copy_from_slice(data)) {
        let again = bundle::encode(&batch);
        assert_eq!(again.len(), bundle::encoded_len(&batch));
        assert_eq!(bundle::decode(again).as_ref(), Ok(&batch));
    }
}

fn small_limits() -> Limits {
    Limits {
        max_frame_bytes: 64,
        max_headers: 3,
        max_header_bytes: 16,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn stomp_never_panics(data in stomp_soup(), sizes in chunk_sizes()) {
        for version in [Version::V1_0, Version::V1_1, Version::V1_2] {
            check_stomp(&data, &sizes, version, &Limits::default());
            check_stomp(&data, &sizes, version, &small_limits());
        }
    }

    #[test]
    fn stomp_random_bytes_never_panic(
        data in prop::collection::vec(any::<u8>(), 0..300),
        sizes in chunk_sizes(),
    ) {
        check_stomp(&data, &sizes, Version::V1_2, &small_limits());
    }

    #[test]
    fn websocket_never_panics(data in websocket_soup(), sizes in chunk_sizes()) {
        check_websocket(&data, &sizes, 1 << 16);
        check_websocket(&data, &sizes, 50);
    }

    #[test]
    fn websocket_random_bytes_never_panic(
        data in prop::collection::vec(any::<u8>(), 0..300),
        sizes in chunk_sizes(),
    ) {
        check_websocket(&data, &sizes, 64);
    }

    #[test]
    fn sockjs_never_panics(data in sockjs_soup()) {
        check_sockjs(&data);
    }

    #[test]
    fn sockjs_random_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..300)) {
        check_sockjs(&data);
    }

    #[test]
    fn bundles_never_panic(data in bundle_soup()) {
        check_bundle(&data);
    }

    #[test]
    fn bundle_random_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..300)) {
        check_bundle(&data);
    }
}
