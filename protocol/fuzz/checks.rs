//! The properties each fuzz target checks, one function per target, shared
//! by the cargo-fuzz targets (`fuzz_targets/*.rs`, nightly) and the corpus
//! replay that runs on stable in the workspace's tests
//! (`protocol/tests/fuzz_corpus.rs` replays every file of `corpus/<target>/`
//! through the function of the same name).

#![allow(dead_code)]

use bytes::{Bytes, BytesMut};
use herald_protocol::bundle::{decode, encode, encoded_len};
use herald_protocol::sockjs::{
    DecodeError, decode_messages, encode_array, encoded_array_len, escape_into, escaped_len,
};
use herald_protocol::stomp::{self, Decoded, Frame, Limits, Version};
use herald_protocol::utf8::{Utf8Stream, validate};
use herald_protocol::websocket::Decoder;

/// Arbitrary bytes, fed to the STOMP decoder in arbitrary chunks, never make
/// it panic; `Ok(None)` and errors consume nothing; the buffer stays within
/// the frame limit; every 1.2 frame decoded re-encodes to itself.
///
/// The first input byte picks the version, the limits and the chunk size.
pub(crate) fn stomp_decode(data: &[u8]) {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let version = match control % 3 {
        0 => Version::V1_0,
        1 => Version::V1_1,
        _ => Version::V1_2,
    };
    let limits = if control & 0x04 != 0 {
        Limits {
            max_frame_bytes: 128,
            max_headers: 4,
            max_header_bytes: 32,
        }
    } else {
        Limits::default()
    };
    let chunk = usize::from(control >> 3) + 1;

    let mut buf = BytesMut::new();
    for piece in rest.chunks(chunk) {
        buf.extend_from_slice(piece);
        loop {
            let before = buf.len();
            match stomp::decode(&mut buf, version, &limits) {
                Ok(Some(item)) => {
                    assert!(buf.len() < before);
                    if let Decoded::Frame(frame) = item {
                        check_reencode(&frame, version);
                    }
                }
                Ok(None) => {
                    assert_eq!(buf.len(), before);
                    assert!(buf.len() <= limits.max_frame_bytes);
                    break;
                }
                Err(_) => {
                    assert_eq!(buf.len(), before);
                    return;
                }
            }
        }
    }
}

fn check_reencode(frame: &Frame, version: Version) {
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

/// Arbitrary bytes, fed to the WebSocket decoder in arbitrary chunks, never
/// make it panic, every message consumes bytes, and the partial message
/// never exceeds the limit.
///
/// The first input byte picks the message limit and the chunk size.
pub(crate) fn websocket_decode(data: &[u8]) {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let max = if control & 1 != 0 { 64 } else { 1 << 16 };
    let chunk = usize::from(control >> 1) + 1;

    let mut decoder = Decoder::new(max);
    let mut buf = BytesMut::new();
    for piece in rest.chunks(chunk) {
        buf.extend_from_slice(piece);
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

/// Arbitrary bytes given to the SockJS `decode_messages` never make it
/// panic; only an empty input is `Empty`; allowing a single string only
/// widens what is accepted; decoded messages re-encode (`encode_array`) to
/// a frame that decodes to them again; and UTF-8 input, escaped with
/// `escape_into`, decodes back to itself with `escaped_len` exact.
pub(crate) fn sockjs_decode(data: &[u8]) {
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
        escape_into(text, &mut out);
        assert_eq!(out.len() - 1, escaped_len(text));
        out.extend_from_slice(b"\"");
        assert_eq!(decode_messages(&out, true), Ok(vec![text.to_owned()]));
    }
}

/// Arbitrary bytes given to the bundle `decode` never make it panic, and
/// whatever it decodes encodes to a bundle that decodes to the same
/// notifications.
pub(crate) fn bundle_decode(data: &[u8]) {
    if let Ok(batch) = decode(Bytes::copy_from_slice(data)) {
        let again = encode(&batch);
        assert_eq!(again.len(), encoded_len(&batch));
        assert_eq!(decode(again).as_ref(), Ok(&batch));
    }
}

/// Arbitrary bytes, fed to [`Utf8Stream`] in up to three pieces, get the
/// verdict [`validate`] gives the whole.
///
/// The first two input bytes pick where the rest is cut.
pub(crate) fn utf8_stream(data: &[u8]) {
    let [a, b, rest @ ..] = data else {
        return;
    };
    let i = usize::from(*a).min(rest.len());
    let j = (i + usize::from(*b)).min(rest.len());
    let mut stream = Utf8Stream::new();
    let streamed = stream.feed(&rest[..i]).is_ok()
        && stream.feed(&rest[i..j]).is_ok()
        && stream.feed(&rest[j..]).is_ok()
        && stream.finish().is_ok();
    assert_eq!(streamed, validate(rest).is_ok());
}

/// Arbitrary bytes given to the PROXY header parser never make it panic;
/// it never asks for more bytes than its limit; a header it accepts fits
/// the limit and the bytes, parses the same from exactly its own bytes, and
/// a TCP header's addresses survive a v2 re-encoding.
///
/// The first input byte picks the limit (16 to 16 + 255 * 4 bytes).
pub(crate) fn proxy_header(data: &[u8]) {
    use herald_protocol::proxy::{Addresses, encode_v2, parse};
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let max = 16 + usize::from(control) * 4;
    match parse(rest, max) {
        Ok(None) => assert!(rest.len() < max, "asked for more than {max} bytes"),
        Ok(Some(header)) => {
            assert!(header.len <= max && header.len <= rest.len());
            assert_eq!(parse(&rest[..header.len], max), Ok(Some(header)));
            if let Addresses::Tcp {
                source,
                destination,
            } = header.addresses
            {
                let again = encode_v2(source, destination);
                let reparsed = parse(&again, again.len()).unwrap().unwrap();
                match reparsed.addresses {
                    Addresses::Tcp {
                        source: s,
                        destination: d,
                    } if source.is_ipv4() == destination.is_ipv4() => {
                        assert_eq!((s, d), (source, destination));
                    }
                    Addresses::Tcp { .. } => {}
                    Addresses::Unknown => panic!("a TCP header re-encoded as unknown"),
                }
            }
        }
        Err(_) => {}
    }
}
