//! A tiny client-side STOMP 1.2 frame encoder and decoder.
//!
//! The bench only needs the handshake frames (`CONNECT`/`CONNECTED`, `SUBSCRIBE`/`RECEIPT`,
//! `ERROR`) and, later, `MESSAGE` headers, so this is deliberately small and independent of
//! `herald-protocol` (the server-side codec), which also keeps the bench honest: it tests the
//! server against a second implementation of the wire format.
//!
//! Wire format: `COMMAND\n` then `name:value\n` header lines, a blank line, the body, and a NUL
//! byte. Lines may end in `\r\n`. A lone end-of-line between frames is a heart-beat. Header
//! names and values are escaped (`\\`, `\n`, `\r`, `\c`) in every frame except `CONNECT` and
//! `CONNECTED`, as STOMP 1.2 requires. A `content-length` header, when present, sizes the body
//! (which may then contain NUL bytes).
//!
//! The decoder is pure: [`decode`] takes the bytes received so far and returns `Ok(None)` when
//! a frame is not complete yet, consuming nothing.

use std::fmt::Write as _;

/// Header section limit. Handshake frames carry a handful of short headers; anything larger is
/// a broken or hostile peer, and we refuse it rather than buffer without end.
pub(crate) const MAX_HEADER_BYTES: usize = 64 * 1024;

/// One decoded STOMP frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Frame {
    pub(crate) command: String,
    /// Headers in wire order; on repeats the first one wins (see [`Frame::header`]).
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl Frame {
    /// The value of the first header called `name`.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What one call to [`decode`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decoded {
    /// An end-of-line between frames.
    HeartBeat,
    Frame(Frame),
}

/// Why bytes are not a STOMP frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum StompError {
    #[error("frame has an empty command line")]
    EmptyCommand,
    #[error("header line {line:?} has no ':'")]
    HeaderWithoutColon { line: String },
    #[error("header line {line:?} has an invalid escape sequence")]
    BadEscape { line: String },
    #[error("content-length {value:?} is not a number")]
    BadContentLength { value: String },
    #[error("body of {len} bytes is not followed by NUL")]
    MissingNul { len: usize },
    #[error("header section exceeds {MAX_HEADER_BYTES} bytes")]
    HeadersTooLong,
    #[error("frame is not valid UTF-8")]
    NotUtf8,
}

/// Encodes one frame. `body` is written as is; a `content-length` header is added when the
/// body is not empty so that bodies may contain NUL bytes.
pub(crate) fn encode(command: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let escape = !matches!(command, "CONNECT" | "CONNECTED");
    let mut head = String::with_capacity(64 + body.len());
    head.push_str(command);
    head.push('\n');
    for (name, value) in headers {
        push_header_part(&mut head, name, escape);
        head.push(':');
        push_header_part(&mut head, value, escape);
        head.push('\n');
    }
    if !body.is_empty() {
        // Infallible: writing to a String.
        let _ = writeln!(head, "content-length:{}", body.len());
    }
    head.push('\n');
    let mut out = head.into_bytes();
    out.extend_from_slice(body);
    out.push(0);
    out
}

/// Encodes a frame whose body is text, as a `String` ready for a WebSocket text message.
pub(crate) fn encode_text(command: &str, headers: &[(&str, &str)], body: &str) -> String {
    // The encoder only writes the UTF-8 it was given plus ASCII, so this cannot fail.
    String::from_utf8(encode(command, headers, body.as_bytes())).unwrap_or_default()
}

fn push_header_part(out: &mut String, part: &str, escape: bool) {
    if !escape {
        out.push_str(part);
        return;
    }
    for c in part.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            ':' => out.push_str("\\c"),
            c => out.push(c),
        }
    }
}

/// Decodes the first frame or heart-beat in `input`.
///
/// Returns what was found and how many bytes it used, or `Ok(None)` if `input` holds only the
/// start of a frame (feed more bytes and call again with the same start).
pub(crate) fn decode(input: &[u8]) -> Result<Option<(Decoded, usize)>, StompError> {
    match input {
        [] => return Ok(None),
        [b'\n', ..] => return Ok(Some((Decoded::HeartBeat, 1))),
        [b'\r', b'\n', ..] => return Ok(Some((Decoded::HeartBeat, 2))),
        [b'\r'] => return Ok(None),
        _ => {}
    }

    let Some(head_len) = find_blank_line(input) else {
        if input.len() > MAX_HEADER_BYTES {
            return Err(StompError::HeadersTooLong);
        }
        return Ok(None);
    };
    let (head_end, body_start) = head_len;
    if head_end > MAX_HEADER_BYTES {
        return Err(StompError::HeadersTooLong);
    }
    let head = std::str::from_utf8(&input[..head_end]).map_err(|_| StompError::NotUtf8)?;
    let mut lines = head.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let command = lines.next().unwrap_or_default();
    if command.is_empty() {
        return Err(StompError::EmptyCommand);
    }
    let unescape = !matches!(command, "CONNECT" | "CONNECTED");
    let mut headers = Vec::new();
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err(StompError::HeaderWithoutColon { line: line.into() });
        };
        let (name, value) = if unescape {
            match (unescape_part(name), unescape_part(value)) {
                (Some(n), Some(v)) => (n, v),
                _ => return Err(StompError::BadEscape { line: line.into() }),
            }
        } else {
            (name.to_owned(), value.to_owned())
        };
        headers.push((name, value));
    }

    let rest = &input[body_start..];
    let content_length = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map(|(_, v)| {
            v.trim()
                .parse::<usize>()
                .map_err(|_| StompError::BadContentLength { value: v.clone() })
        })
        .transpose()?;
    let body_len = match content_length {
        Some(len) => {
            if rest.len() <= len {
                return Ok(None);
            }
            if rest[len] != 0 {
                return Err(StompError::MissingNul { len });
            }
            len
        }
        None => match rest.iter().position(|&b| b == 0) {
            Some(len) => len,
            None => return Ok(None),
        },
    };
    let frame = Frame {
        command: command.to_owned(),
        headers,
        body: rest[..body_len].to_vec(),
    };
    Ok(Some((Decoded::Frame(frame), body_start + body_len + 1)))
}

/// Finds the blank line that ends the header section: returns (end of the header text, start of
/// the body). Accepts `\n\n` and `\r\n\r\n` (and mixtures).
fn find_blank_line(input: &[u8]) -> Option<(usize, usize)> {
    let mut i = 0;
    while let Some(pos) = input[i..].iter().position(|&b| b == b'\n') {
        let nl = i + pos;
        let after = nl + 1;
        match &input[after..] {
            [b'\n', ..] => return Some((nl, after + 1)),
            [b'\r', b'\n', ..] => return Some((nl, after + 2)),
            _ => {}
        }
        i = after;
        if i >= input.len() {
            break;
        }
    }
    None
}

fn unescape_part(part: &str) -> Option<String> {
    if !part.contains('\\') {
        return Some(part.to_owned());
    }
    let mut out = String::with_capacity(part.len());
    let mut chars = part.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            '\\' => out.push('\\'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            'c' => out.push(':'),
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(input: &[u8]) -> (Frame, usize) {
        match decode(input) {
            Ok(Some((Decoded::Frame(f), used))) => (f, used),
            other => panic!("expected a frame, got {other:?}"),
        }
    }

    #[test]
    fn encodes_connect_without_escaping() {
        let out = encode_text(
            "CONNECT",
            &[
                ("accept-version", "1.2"),
                ("host", "herald"),
                ("passcode", "a.b:c"),
                ("heart-beat", "0,0"),
            ],
            "",
        );
        assert_eq!(
            out,
            "CONNECT\naccept-version:1.2\nhost:herald\npasscode:a.b:c\nheart-beat:0,0\n\n\0"
        );
    }

    #[test]
    fn encodes_subscribe_with_escaping_and_body_length() {
        let out = encode("SEND", &[("destination", "/a:b\\c\n")], b"hi\0there");
        assert_eq!(
            out,
            b"SEND\ndestination:/a\\cb\\\\c\\n\ncontent-length:8\n\nhi\0there\0".to_vec()
        );
        let (f, used) = frame(&out);
        assert_eq!(used, out.len());
        assert_eq!(f.header("destination"), Some("/a:b\\c\n"));
        assert_eq!(f.body, b"hi\0there");
    }

    #[test]
    fn round_trips_subscribe() {
        let headers = [
            ("id", "sub-0"),
            ("destination", "/user/notifications"),
            ("ack", "auto"),
            ("receipt", "r-0"),
        ];
        let out = encode("SUBSCRIBE", &headers, b"");
        let (f, _) = frame(&out);
        assert_eq!(f.command, "SUBSCRIBE");
        let got: Vec<(&str, &str)> = f
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        assert_eq!(got, headers);
        assert!(f.body.is_empty());
    }

    #[test]
    fn parses_connected_and_receipt() {
        let (f, used) = frame(
            b"CONNECTED\nversion:1.2\nheart-beat:0,0\nsession:s-1\nuser-name:u1\nepoch:7\nseq:0\n\n\0",
        );
        assert_eq!(used, 78);
        assert_eq!(f.command, "CONNECTED");
        assert_eq!(f.header("version"), Some("1.2"));
        assert_eq!(f.header("user-name"), Some("u1"));
        assert_eq!(f.header("missing"), None);

        let (f, _) = frame(b"RECEIPT\r\nreceipt-id:r-0\r\n\r\n\0");
        assert_eq!(f.command, "RECEIPT");
        assert_eq!(f.header("receipt-id"), Some("r-0"));
    }

    #[test]
    fn connected_values_are_not_unescaped() {
        let (f, _) = frame(b"CONNECTED\nserver:a\\cb\n\n\0");
        assert_eq!(f.header("server"), Some("a\\cb"));
    }

    #[test]
    fn first_repeated_header_wins() {
        let (f, _) = frame(b"MESSAGE\nfoo:1\nfoo:2\n\n\0");
        assert_eq!(f.header("foo"), Some("1"));
        assert_eq!(f.headers.len(), 2);
    }

    #[test]
    fn message_body_without_content_length_ends_at_nul() {
        let input = b"MESSAGE\nevent:bench.ping\nseq:3\n\n{\"n\":1}\0\n";
        let (f, used) = frame(input);
        assert_eq!(f.body, b"{\"n\":1}");
        assert_eq!(f.header("seq"), Some("3"));
        // The trailing EOL is left for the next call, which reports a heart-beat.
        assert_eq!(decode(&input[used..]), Ok(Some((Decoded::HeartBeat, 1))));
    }

    #[test]
    fn heart_beats() {
        assert_eq!(decode(b"\n"), Ok(Some((Decoded::HeartBeat, 1))));
        assert_eq!(decode(b"\r\nX"), Ok(Some((Decoded::HeartBeat, 2))));
        assert_eq!(decode(b"\r"), Ok(None));
        assert_eq!(decode(b""), Ok(None));
    }

    #[test]
    fn partial_frames_need_more() {
        let full = b"MESSAGE\ncontent-length:3\n\nabc\0";
        for cut in 1..full.len() {
            assert_eq!(decode(&full[..cut]), Ok(None), "cut at {cut}");
        }
        assert!(matches!(decode(full), Ok(Some((Decoded::Frame(_), 30)))));
    }

    #[test]
    fn two_frames_in_one_buffer() {
        let input = b"RECEIPT\nreceipt-id:r-0\n\n\0MESSAGE\nseq:1\n\nx\0";
        let (a, used) = frame(input);
        assert_eq!(a.command, "RECEIPT");
        let (b, used2) = frame(&input[used..]);
        assert_eq!(b.command, "MESSAGE");
        assert_eq!(used + used2, input.len());
    }

    #[test]
    fn errors() {
        assert_eq!(
            decode(b"MESSAGE\nnocolon\n\n\0"),
            Err(StompError::HeaderWithoutColon {
                line: "nocolon".into()
            })
        );
        assert!(matches!(
            decode(b"MESSAGE\nbad:\\x\n\n\0"),
            Err(StompError::BadEscape { .. })
        ));
        assert!(matches!(
            decode(b"MESSAGE\ncontent-length:zz\n\n\0"),
            Err(StompError::BadContentLength { .. })
        ));
        assert_eq!(
            decode(b"MESSAGE\ncontent-length:1\n\nab\0"),
            Err(StompError::MissingNul { len: 1 })
        );
        let long = vec![b'A'; MAX_HEADER_BYTES + 1];
        assert_eq!(decode(&long), Err(StompError::HeadersTooLong));
    }

    #[test]
    fn error_frame_message() {
        let (f, _) = frame(b"ERROR\nmessage:invalid token\\c expired\n\nThe token expired.\0");
        assert_eq!(f.command, "ERROR");
        assert_eq!(f.header("message"), Some("invalid token: expired"));
    }
}
