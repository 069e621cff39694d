//! Decoder tests on raw bytes: every happy path and every error variant.

use bytes::{Bytes, BytesMut};

use super::*;

fn limits() -> Limits {
    Limits::default()
}

/// Decodes everything in `input`, which must end on an item boundary.
fn decode_all(input: &[u8], version: Version) -> Vec<Decoded> {
    let mut buf = BytesMut::from(input);
    let mut items = Vec::new();
    while let Some(item) = decode(&mut buf, version, &limits()).unwrap() {
        items.push(item);
    }
    assert!(buf.is_empty(), "left over: {buf:?}");
    items
}

fn decode_one(input: &[u8], version: Version) -> Frame {
    match decode_all(input, version).as_slice() {
        [Decoded::Frame(f)] => f.clone(),
        other => panic!("expected one frame, got {other:?}"),
    }
}

fn decode_err(input: &[u8], version: Version, limits: &Limits) -> DecodeError {
    let mut buf = BytesMut::from(input);
    let len = buf.len();
    let err = decode(&mut buf, version, limits).unwrap_err();
    assert_eq!(buf.len(), len, "an error consumes nothing");
    err
}

fn headers(f: &Frame) -> Vec<(&str, &str)> {
    f.headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect()
}

#[test]
fn connect_without_content_length() {
    let f = decode_one(
        b"CONNECT\naccept-version:1.1,1.2\nhost:herald\nheart-beat:10000,10000\n\n\0",
        Version::V1_0,
    );
    assert_eq!(f.command, Command::Connect);
    assert_eq!(
        headers(&f),
        [
            ("accept-version", "1.1,1.2"),
            ("host", "herald"),
            ("heart-beat", "10000,10000")
        ]
    );
    assert!(f.body.is_empty());
}

#[test]
fn connect_with_content_length() {
    let f = decode_one(b"STOMP\ncontent-length:0\nlogin:a\n\n\0", Version::V1_2);
    assert_eq!(f.command, Command::Stomp);
    assert_eq!(f.header("login"), Some("a"));
    assert_eq!(f.header("content-length"), Some("0"));
}

#[test]
fn nul_terminated_body_may_contain_newlines() {
    let f = decode_one(
        b"SEND\ndestination:/q\n\nline 1\nline 2\r\n\n\0",
        Version::V1_2,
    );
    assert_eq!(f.body, Bytes::from_static(b"line 1\nline 2\r\n\n"));
}

#[test]
fn content_length_body_may_contain_nul() {
    let f = decode_one(b"SEND\ncontent-length:5\n\n\0\x01\xff\0x\0", Version::V1_1);
    assert_eq!(f.body, Bytes::from_static(b"\0\x01\xff\0x"));
}

#[test]
fn crlf_line_endings_are_accepted_for_every_version() {
    for v in [Version::V1_0, Version::V1_1, Version::V1_2] {
        let f = decode_one(b"SUBSCRIBE\r\nid:0\r\ndestination:/t\r\n\r\n\0", v);
        assert_eq!(f.command, Command::Subscribe);
        assert_eq!(headers(&f), [("id", "0"), ("destination", "/t")]);
    }
}

#[test]
fn escapes_follow_the_version() {
    let raw = b"SEND\na\\cb:x\\ny\\\\z\n\n\0";
    let f = decode_one(raw, Version::V1_0);
    assert_eq!(headers(&f), [("a\\cb", "x\\ny\\\\z")]);
    let f = decode_one(raw, Version::V1_1);
    assert_eq!(headers(&f), [("a:b", "x\ny\\z")]);
    let f = decode_one(b"SEND\nk:a\\rb\n\n\0", Version::V1_2);
    assert_eq!(headers(&f), [("k", "a\rb")]);
}

#[test]
fn carriage_return_escape_is_undefined_in_1_1() {
    let err = decode_err(b"SEND\nk:a\\rb\n\n\0", Version::V1_1, &limits());
    assert_eq!(err, DecodeError::InvalidEscape { line: 2 });
}

#[test]
fn connect_frames_are_never_unescaped() {
    for c in ["CONNECT", "STOMP", "CONNECTED"] {
        let raw = format!("{c}\npasscode:a\\tb\\c\n\n\0");
        let f = decode_one(raw.as_bytes(), Version::V1_2);
        assert_eq!(f.header("passcode"), Some("a\\tb\\c"));
    }
}

#[test]
fn repeated_headers_first_wins() {
    let f = decode_one(b"MESSAGE\nfoo:1\nfoo:2\n\n\0", Version::V1_2);
    assert_eq!(f.header("foo"), Some("1"));
    assert_eq!(f.headers.len(), 2);
}

#[test]
fn first_content_length_wins() {
    let f = decode_one(
        b"SEND\ncontent-length:1\ncontent-length:x\n\na\0",
        Version::V1_2,
    );
    assert_eq!(f.body, Bytes::from_static(b"a"));
}

#[test]
fn values_may_contain_colons_and_be_empty() {
    let f = decode_one(b"SEND\nurl:http://x:1\nempty:\n\n\0", Version::V1_0);
    assert_eq!(headers(&f), [("url", "http://x:1"), ("empty", "")]);
}

#[test]
fn heartbeats_between_frames() {
    let items = decode_all(
        b"\n\r\nSEND\n\na\0\n\r\n\nDISCONNECT\nreceipt:1\n\n\0\n",
        Version::V1_2,
    );
    let kinds: Vec<&str> = items
        .iter()
        .map(|i| match i {
            Decoded::Heartbeat => "hb",
            Decoded::Frame(f) => f.command.as_str(),
        })
        .collect();
    assert_eq!(
        kinds,
        ["hb", "hb", "SEND", "hb", "hb", "hb", "DISCONNECT", "hb"]
    );
}

#[test]
fn incomplete_input_consumes_nothing() {
    let whole = b"SEND\ncontent-length:3\n\nabc\0";
    for cut in 0..whole.len() {
        let mut buf = BytesMut::from(&whole[..cut]);
        assert_eq!(
            decode(&mut buf, Version::V1_2, &limits()),
            Ok(None),
            "cut {cut}"
        );
        assert_eq!(buf.len(), cut);
    }
    let mut buf = BytesMut::from(&b"\r"[..]);
    assert_eq!(decode(&mut buf, Version::V1_2, &limits()), Ok(None));
}

#[test]
fn a_complete_frame_leaves_the_next_one_in_the_buffer() {
    let mut buf = BytesMut::from(&b"SEND\n\na\0SE"[..]);
    assert!(matches!(
        decode(&mut buf, Version::V1_2, &limits()),
        Ok(Some(Decoded::Frame(_)))
    ));
    assert_eq!(&buf[..], b"SE");
}

#[test]
fn frame_too_large_without_a_terminator() {
    let small = Limits {
        max_frame_bytes: 16,
        ..limits()
    };
    let mut buf = BytesMut::from(&b"SEND\n\n0123456789"[..]);
    assert_eq!(decode(&mut buf, Version::V1_2, &small), Ok(None));
    buf.extend_from_slice(b"x");
    assert_eq!(
        decode(&mut buf, Version::V1_2, &small),
        Err(DecodeError::FrameTooLarge { limit: 16 })
    );
}

#[test]
fn frame_too_large_when_complete() {
    let small = Limits {
        max_frame_bytes: 8,
        ..limits()
    };
    // Exactly 8 bytes is fine; 9 is not.
    let mut buf = BytesMut::from(&b"SEND\n\na\0"[..]);
    assert!(decode(&mut buf, Version::V1_2, &small).unwrap().is_some());
    let err = decode_err(b"SEND\n\nab\0", Version::V1_2, &small);
    assert_eq!(err, DecodeError::FrameTooLarge { limit: 8 });
}

#[test]
fn frame_too_large_from_content_length_before_the_body_arrives() {
    let err = decode_err(b"SEND\ncontent-length:65536\n\n", Version::V1_2, &limits());
    assert_eq!(err, DecodeError::FrameTooLarge { limit: 65536 });
    let err = decode_err(
        b"SEND\ncontent-length:18446744073709551615\n\n",
        Version::V1_2,
        &limits(),
    );
    assert_eq!(err, DecodeError::FrameTooLarge { limit: 65536 });
}

#[test]
fn too_many_headers() {
    let few = Limits {
        max_headers: 2,
        ..limits()
    };
    let mut buf = BytesMut::from(&b"SEND\na:1\nb:2\n\n\0"[..]);
    assert!(decode(&mut buf, Version::V1_2, &few).unwrap().is_some());
    let err = decode_err(b"SEND\na:1\nb:2\nc:3\n\n\0", Version::V1_2, &few);
    assert_eq!(err, DecodeError::TooManyHeaders { limit: 2 });
    // Detected as soon as a third header line starts.
    let err = decode_err(b"SEND\na:1\nb:2\nc", Version::V1_2, &few);
    assert_eq!(err, DecodeError::TooManyHeaders { limit: 2 });
    let mut buf = BytesMut::from(&b"SEND\na:1\nb:2\n\r"[..]);
    assert_eq!(decode(&mut buf, Version::V1_2, &few), Ok(None));
}

#[test]
fn header_too_long() {
    let short = Limits {
        max_header_bytes: 8,
        ..limits()
    };
    let mut buf = BytesMut::from(&b"SEND\nabc:1234\r\n\n\0"[..]);
    assert!(decode(&mut buf, Version::V1_2, &short).unwrap().is_some());
    let err = decode_err(b"SEND\nabc:12345\n\n\0", Version::V1_2, &short);
    assert_eq!(err, DecodeError::HeaderTooLong { limit: 8 });
    // Detected before the line ends.
    let err = decode_err(b"SEND\nabc:123456", Version::V1_2, &short);
    assert_eq!(err, DecodeError::HeaderTooLong { limit: 8 });
}

#[test]
fn unknown_command() {
    let err = decode_err(b"send\n\n\0", Version::V1_2, &limits());
    assert_eq!(
        err,
        DecodeError::UnknownCommand {
            command: "send".into()
        }
    );
    assert_eq!(err.to_string(), "unknown command \"send\"");
    // Detected without waiting for the end of a long first line.
    let err = decode_err(b"GET / HTTP/1.1", Version::V1_2, &limits());
    assert_eq!(
        err,
        DecodeError::UnknownCommand {
            command: "GET / HTTP/1.1".into()
        }
    );
    // Truncated to 32 characters.
    let long = "X".repeat(100);
    let DecodeError::UnknownCommand { command } =
        decode_err(long.as_bytes(), Version::V1_2, &limits())
    else {
        panic!()
    };
    assert_eq!(command.len(), 32);
    // A bare CR that does not start a CRLF heart-beat is not a command.
    let err = decode_err(b"\rSEND\n\n\0", Version::V1_2, &limits());
    assert!(matches!(err, DecodeError::UnknownCommand { .. }));
}

#[test]
fn malformed_headers() {
    let err = decode_err(b"SEND\nok:1\nnocolon\n\n\0", Version::V1_2, &limits());
    assert_eq!(err, DecodeError::MalformedHeader { line: 3 });
    let err = decode_err(b"SEND\n:empty-name\n\n\0", Version::V1_2, &limits());
    assert_eq!(err, DecodeError::MalformedHeader { line: 2 });
    assert_eq!(
        err.to_string(),
        "malformed header on line 2: expected name:value"
    );
}

#[test]
fn invalid_escapes() {
    for raw in [
        &b"SEND\nk:\\t\n\n\0"[..],
        b"SEND\nk:trailing\\\n\n\0",
        b"SEND\nk\\x:v\n\n\0",
    ] {
        let err = decode_err(raw, Version::V1_2, &limits());
        assert_eq!(err, DecodeError::InvalidEscape { line: 2 });
    }
    // 1.0 has no escapes, so nothing is invalid.
    assert_eq!(
        decode_one(b"SEND\nk:\\t\n\n\0", Version::V1_0).header("k"),
        Some("\\t")
    );
}

#[test]
fn invalid_utf8() {
    let err = decode_err(b"SEND\nk:\xff\n\n\0", Version::V1_2, &limits());
    assert_eq!(err, DecodeError::InvalidUtf8 { line: 2 });
    let err = decode_err(b"SE\xffND\n\n\0", Version::V1_2, &limits());
    assert_eq!(err, DecodeError::InvalidUtf8 { line: 1 });
    // Bodies are bytes: no UTF-8 requirement.
    assert_eq!(
        decode_one(b"SEND\n\n\xff\0", Version::V1_2).body,
        Bytes::from_static(b"\xff")
    );
}

#[test]
fn invalid_utf8_says_where() {
    let err = decode_err(b"SUBSCRIBE\nid:\xff\n\n\0", Version::V1_2, &limits());
    assert_eq!(err.to_string(), "the header on line 2 is not valid UTF-8");
    let err = decode_err(b"\xffSEND\n\n\0", Version::V1_2, &limits());
    assert_eq!(err.to_string(), "the command line is not valid UTF-8");
}

#[test]
fn a_body_on_a_bodiless_command_is_refused() {
    for command in Command::ALL.into_iter().filter(|c| !c.allows_body()) {
        for version in [Version::V1_0, Version::V1_1, Version::V1_2] {
            let raw = format!("{command}\nid:0\n\nbody\0");
            let err = decode_err(raw.as_bytes(), version, &limits());
            assert_eq!(err, DecodeError::UnexpectedBody { command }, "{raw:?}");
            // Empty is fine, with or without a content-length of 0.
            let f = decode_one(format!("{command}\nid:0\n\n\0").as_bytes(), version);
            assert!(f.body.is_empty());
            let raw = format!("{command}\ncontent-length:0\n\n\0");
            assert!(decode_one(raw.as_bytes(), version).body.is_empty());
        }
    }
    let err = decode_err(b"SUBSCRIBE\nid:0\n\nx\0", Version::V1_2, &limits());
    assert_eq!(
        err.to_string(),
        "SUBSCRIBE frames must not have a body (only SEND, MESSAGE and ERROR may)"
    );
    // SEND, MESSAGE and ERROR may.
    for command in ["SEND", "MESSAGE", "ERROR"] {
        let raw = format!("{command}\n\nbody\0");
        assert_eq!(&decode_one(raw.as_bytes(), Version::V1_2).body[..], b"body");
    }
}

#[test]
fn a_bodiless_frame_without_its_nul_does_not_swallow_the_next() {
    // The SUBSCRIBE lacks its NUL: read up to the next NUL, the UNSUBSCRIBE
    // would become its body and vanish.
    let err = decode_err(
        b"SUBSCRIBE\nid:0\ndestination:/q\n\nUNSUBSCRIBE\nid:0\n\n\0",
        Version::V1_2,
        &limits(),
    );
    assert_eq!(
        err,
        DecodeError::UnexpectedBody {
            command: Command::Subscribe
        }
    );
    // Refused at the first body byte, without waiting for a NUL...
    let err = decode_err(b"DISCONNECT\n\nx", Version::V1_2, &limits());
    assert_eq!(
        err,
        DecodeError::UnexpectedBody {
            command: Command::Disconnect
        }
    );
    // ... or at the header that announces one.
    let err = decode_err(b"ACK\ncontent-length:1\n\n", Version::V1_2, &limits());
    assert_eq!(
        err,
        DecodeError::UnexpectedBody {
            command: Command::Ack
        }
    );
    // Until then it is an incomplete frame.
    let mut buf = BytesMut::from(&b"SUBSCRIBE\nid:0\n\n"[..]);
    assert_eq!(decode(&mut buf, Version::V1_2, &limits()), Ok(None));
}

#[test]
fn bad_content_length() {
    for value in [
        "",
        "abc",
        "-1",
        "+1",
        " 1",
        "1 ",
        "0x10",
        "99999999999999999999999",
    ] {
        let raw = format!("SEND\ncontent-length:{value}\n\n\0");
        let err = decode_err(raw.as_bytes(), Version::V1_2, &limits());
        assert_eq!(
            err,
            DecodeError::BadContentLength {
                value: value.into()
            },
            "{value:?}"
        );
    }
}

#[test]
fn missing_nul_after_content_length() {
    let err = decode_err(b"SEND\ncontent-length:2\n\nabc\0", Version::V1_2, &limits());
    assert_eq!(err, DecodeError::MissingNul);
}

#[test]
fn error_messages_are_single_lines() {
    let errors = [
        DecodeError::FrameTooLarge { limit: 65536 },
        DecodeError::TooManyHeaders { limit: 32 },
        DecodeError::HeaderTooLong { limit: 4096 },
        DecodeError::UnknownCommand {
            command: "A\nB\rC".into(),
        },
        DecodeError::MalformedHeader { line: 2 },
        DecodeError::InvalidEscape { line: 2 },
        DecodeError::InvalidUtf8 { line: 1 },
        DecodeError::BadContentLength {
            value: "x\n".into(),
        },
        DecodeError::MissingNul,
        DecodeError::UnexpectedBody {
            command: Command::Subscribe,
        },
    ];
    for e in errors {
        let msg = e.to_string();
        assert!(!msg.contains(['\n', '\r']), "{msg:?}");
    }
    assert_eq!(
        DecodeError::FrameTooLarge { limit: 65536 }.to_string(),
        "frame exceeds 65536 bytes"
    );
}
