//! Decoder tests on raw bytes: every happy path and every error variant.

use bytes::{Bytes, BytesMut};

use super::*;
use crate::websocket::encode_masked_frame;

const MASK: [u8; 4] = [0xA1, 0xB2, 0xC3, 0xD4];

fn frame(fin: bool, opcode: OpCode, payload: &[u8]) -> BytesMut {
    let mut out = BytesMut::new();
    encode_masked_frame(fin, opcode, payload, MASK, &mut out);
    out
}

fn decode_err(decoder: &mut Decoder, raw: &[u8]) -> WsError {
    let mut buf = BytesMut::from(raw);
    decoder.decode(&mut buf).unwrap_err()
}

#[test]
fn single_frame_messages() {
    let mut d = Decoder::new(1024);
    let mut buf = frame(true, OpCode::Text, "héllo".as_bytes());
    buf.extend_from_slice(&frame(true, OpCode::Binary, b"\0\xff"));
    buf.extend_from_slice(&frame(true, OpCode::Ping, b"p"));
    buf.extend_from_slice(&frame(true, OpCode::Pong, b""));
    assert_eq!(
        d.decode(&mut buf),
        Ok(Some(Message::Text(Utf8Bytes::from_static("héllo"))))
    );
    assert_eq!(
        d.decode(&mut buf),
        Ok(Some(Message::Binary(Bytes::from_static(b"\0\xff"))))
    );
    assert_eq!(
        d.decode(&mut buf),
        Ok(Some(Message::Ping(Bytes::from_static(b"p"))))
    );
    assert_eq!(d.decode(&mut buf), Ok(Some(Message::Pong(Bytes::new()))));
    assert_eq!(d.decode(&mut buf), Ok(None));
    assert!(buf.is_empty());
}

#[test]
fn extended_lengths() {
    for len in [125, 126, 0xFFFF, 0x10000] {
        let payload = vec![7u8; len];
        let mut d = Decoder::new(1 << 20);
        let mut buf = frame(true, OpCode::Binary, &payload);
        assert_eq!(
            d.decode(&mut buf),
            Ok(Some(Message::Binary(Bytes::from(payload))))
        );
    }
}

#[test]
fn partial_frames_consume_nothing() {
    let whole = frame(true, OpCode::Text, &[b'x'; 300]);
    let mut d = Decoder::new(1024);
    for cut in 0..whole.len() {
        let mut buf = BytesMut::from(&whole[..cut]);
        assert_eq!(d.decode(&mut buf), Ok(None), "cut {cut}");
        assert_eq!(buf.len(), cut);
    }
}

#[test]
fn fragments_reassemble_with_control_frames_between() {
    let mut d = Decoder::new(1024);
    let mut buf = frame(false, OpCode::Text, b"he");
    buf.extend_from_slice(&frame(true, OpCode::Ping, b"1"));
    buf.extend_from_slice(&frame(false, OpCode::Continuation, b"l"));
    buf.extend_from_slice(&frame(false, OpCode::Continuation, b""));
    // A partial final fragment: whole fragments before it are absorbed.
    let last = frame(true, OpCode::Continuation, b"lo");
    buf.extend_from_slice(&last[..3]);

    assert_eq!(
        d.decode(&mut buf),
        Ok(Some(Message::Ping(Bytes::from_static(b"1"))))
    );
    assert_eq!(d.buffered(), 2);
    assert_eq!(d.decode(&mut buf), Ok(None));
    assert_eq!(d.buffered(), 3);
    assert_eq!(&buf[..], &last[..3]);
    buf.extend_from_slice(&last[3..]);
    assert_eq!(
        d.decode(&mut buf),
        Ok(Some(Message::Text(Utf8Bytes::from_static("hello"))))
    );
    assert_eq!(d.buffered(), 0);
}

#[test]
fn utf8_sequences_may_span_fragments() {
    // "é" split across two fragments is fine.
    let mut d = Decoder::new(1024);
    let mut buf = frame(false, OpCode::Text, b"\xc3");
    buf.extend_from_slice(&frame(true, OpCode::Continuation, b"\xa9"));
    assert_eq!(
        d.decode(&mut buf),
        Ok(Some(Message::Text(Utf8Bytes::from_static("é"))))
    );
    let err = decode_err(&mut d, &frame(true, OpCode::Text, b"\xff"));
    assert_eq!(err, WsError::InvalidUtf8);
    assert_eq!(err.close_code(), 1007);
}

/// Autobahn 6.4.1/6.4.2: invalid UTF-8 in the second fragment of three is
/// refused when that fragment arrives, not when the message completes.
#[test]
fn invalid_utf8_fails_fast_at_the_fragment() {
    let mut d = Decoder::new(1024);
    let mut buf = frame(false, OpCode::Text, "κόσμε".as_bytes());
    assert_eq!(d.decode(&mut buf), Ok(None));
    // A code point above U+10FFFF; the final fragment never comes.
    buf.extend_from_slice(&frame(false, OpCode::Continuation, b"\xf4\x90\x80\x80"));
    assert_eq!(d.decode(&mut buf), Err(WsError::InvalidUtf8));

    // A prefix that can never complete (a surrogate, ED A0) split across
    // fragments: refused at its second byte.
    let mut d = Decoder::new(1024);
    let mut buf = frame(false, OpCode::Text, b"ok\xed");
    assert_eq!(d.decode(&mut buf), Ok(None));
    buf.extend_from_slice(&frame(false, OpCode::Continuation, b"\xa0"));
    assert_eq!(d.decode(&mut buf), Err(WsError::InvalidUtf8));

    // Binary fragments are not checked.
    let mut d = Decoder::new(1024);
    let mut buf = frame(false, OpCode::Binary, b"\xff");
    buf.extend_from_slice(&frame(true, OpCode::Continuation, b"\xf4\x90"));
    assert_eq!(
        d.decode(&mut buf),
        Ok(Some(Message::Binary(Bytes::from_static(b"\xff\xf4\x90"))))
    );
}

/// Autobahn 6.4.3/6.4.4: a single text frame whose payload trickles in is
/// refused as soon as the invalid byte has arrived, with the frame still
/// incomplete; the bytes before it only wait.
#[test]
fn invalid_utf8_fails_fast_within_a_frame_in_transit() {
    let mut text = "κόσμε".as_bytes().to_vec();
    let bad_at = text.len();
    text.extend_from_slice(b"\xf4\x90\x80\x80edited");
    let whole = frame(true, OpCode::Text, &text);
    let header = whole.len() - text.len();
    for first_cut in header..header + bad_at {
        let mut d = Decoder::new(1024);
        let mut buf = BytesMut::from(&whole[..first_cut]);
        assert_eq!(d.decode(&mut buf), Ok(None), "cut at {first_cut}");
        assert_eq!(buf.len(), first_cut, "nothing consumed");
        // F4 may still start a valid sequence; F4 90 can not.
        buf.extend_from_slice(&whole[first_cut..header + bad_at + 1]);
        assert_eq!(d.decode(&mut buf), Ok(None), "cut at {first_cut}");
        buf.extend_from_slice(&whole[header + bad_at + 1..header + bad_at + 2]);
        assert_eq!(d.decode(&mut buf), Err(WsError::InvalidUtf8));
    }
}

/// Checking a frame in transit piece by piece gives the same message as
/// the whole frame at once, whatever the pieces.
#[test]
fn text_in_transit_decodes_the_same_in_any_pieces() {
    let text = "héllo wörld, 𝄞 and κόσμε ".repeat(100);
    let whole = frame(true, OpCode::Text, text.as_bytes());
    for step in [1, 2, 3, 5, 7, 1000, 1500] {
        let mut d = Decoder::new(1 << 16);
        let mut buf = BytesMut::new();
        let mut got = None;
        for piece in whole.chunks(step) {
            buf.extend_from_slice(piece);
            if let Some(message) = d.decode(&mut buf).unwrap() {
                got = Some(message);
            }
        }
        assert_eq!(
            got,
            Some(Message::Text(Utf8Bytes::from(text.clone()))),
            "step {step}"
        );
        assert!(buf.is_empty());
    }
}

#[test]
fn close_frames() {
    let mut d = Decoder::new(1024);
    let mut buf = frame(true, OpCode::Close, b"");
    assert_eq!(d.decode(&mut buf), Ok(Some(Message::Close(None))));
    let mut buf = frame(true, OpCode::Close, b"\x03\xe8bye");
    assert_eq!(
        d.decode(&mut buf),
        Ok(Some(Message::Close(Some((1000, "bye".into())))))
    );
    let mut buf = frame(true, OpCode::Close, b"\x0f\xa0");
    assert_eq!(
        d.decode(&mut buf),
        Ok(Some(Message::Close(Some((4000, String::new())))))
    );
}

#[test]
fn bad_close_payloads() {
    let mut d = Decoder::new(1024);
    for payload in [
        &b"\x03"[..],
        b"\x03\xed",     // 1005
        b"\x03\xee",     // 1006
        b"\x03\xf7",     // 1015
        b"\x00\x00",     // 0
        b"\x13\x88",     // 5000
        b"\x03\xe8\xff", // reason not UTF-8
    ] {
        let err = decode_err(&mut d, &frame(true, OpCode::Close, payload));
        assert_eq!(err, WsError::BadClosePayload, "{payload:?}");
        assert_eq!(err.close_code(), 1002);
    }
}

#[test]
fn unmasked_frames_are_refused() {
    let err = decode_err(&mut Decoder::new(1024), b"\x81\x02hi");
    assert_eq!(err, WsError::Unmasked);
    assert_eq!(err.close_code(), 1002);
}

#[test]
fn reserved_bits_are_refused() {
    for b0 in [0xC1, 0xA1, 0x91] {
        let err = decode_err(&mut Decoder::new(1024), &[b0, 0x80]);
        assert_eq!(err, WsError::ReservedBits);
    }
}

#[test]
fn unknown_opcodes_are_refused() {
    for op in [3, 7, 0xB, 0xF] {
        let err = decode_err(&mut Decoder::new(1024), &[0x80 | op, 0x80]);
        assert_eq!(err, WsError::UnknownOpcode { opcode: op });
        assert_eq!(err.close_code(), 1002);
    }
}

#[test]
fn bad_control_frames() {
    let mut d = Decoder::new(1 << 20);
    let err = decode_err(&mut d, &frame(false, OpCode::Ping, b""));
    assert_eq!(err, WsError::BadControlFrame);
    // Detected from the first two bytes.
    let err = decode_err(&mut d, &frame(true, OpCode::Pong, &[0; 126])[..2]);
    assert_eq!(err, WsError::BadControlFrame);
}

#[test]
fn continuation_state_is_checked() {
    let mut d = Decoder::new(1024);
    let err = decode_err(&mut d, &frame(true, OpCode::Continuation, b"x"));
    assert_eq!(err, WsError::UnexpectedContinuation);

    let mut d = Decoder::new(1024);
    let mut buf = frame(false, OpCode::Binary, b"x");
    buf.extend_from_slice(&frame(true, OpCode::Text, b"y"));
    assert_eq!(d.decode(&mut buf), Err(WsError::ExpectedContinuation));
}

#[test]
fn message_too_large_is_detected_from_the_header() {
    let mut d = Decoder::new(100);
    // Only the header of a 101-byte frame has arrived.
    let err = decode_err(&mut d, &frame(true, OpCode::Binary, &[0; 101])[..2]);
    assert_eq!(err, WsError::MessageTooLarge { limit: 100 });
    assert_eq!(err.close_code(), 1009);
    // An 8-byte length with the top bit set.
    let err = decode_err(&mut d, b"\x82\xff\xff\xff\xff\xff\xff\xff\xff\xff");
    assert_eq!(err, WsError::MessageTooLarge { limit: 100 });

    // Fragments count together.
    let mut d = Decoder::new(100);
    let mut buf = frame(false, OpCode::Binary, &[0; 60]);
    buf.extend_from_slice(&frame(true, OpCode::Continuation, &[0; 41])[..4]);
    assert_eq!(
        d.decode(&mut buf),
        Err(WsError::MessageTooLarge { limit: 100 })
    );

    // Exactly at the limit is fine.
    let mut d = Decoder::new(100);
    let mut buf = frame(true, OpCode::Binary, &[0; 100]);
    assert!(d.decode(&mut buf).unwrap().is_some());
}

#[test]
fn error_messages_fit_a_close_reason() {
    let errors = [
        WsError::Unmasked,
        WsError::ReservedBits,
        WsError::UnknownOpcode { opcode: 0xF },
        WsError::BadControlFrame,
        WsError::UnexpectedContinuation,
        WsError::ExpectedContinuation,
        WsError::MessageTooLarge { limit: usize::MAX },
        WsError::InvalidUtf8,
        WsError::BadClosePayload,
    ];
    for e in errors {
        assert!(e.to_string().len() <= 123, "{e}");
    }
}
