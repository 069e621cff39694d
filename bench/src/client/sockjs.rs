//! SockJS 0.3 framing, client side. Pure: no I/O.
//!
//! Server to client, one frame per WebSocket text message, or per `\n`-terminated line of an
//! xhr_streaming body (whose every response starts with a prelude line of 2048 `h`):
//!
//! | frame | meaning |
//! |---|---|
//! | `o` | the session is open |
//! | `h` | heartbeat |
//! | `a["m1","m2"]` | messages: a JSON array of strings |
//! | `c[3000,"Go away!"]` | the session is closed, with a code and a reason |
//!
//! Client to server: a JSON array of strings, `["m1"]`, as a WebSocket text message or as the
//! body of `POST .../xhr_send`. Here every message is one STOMP frame, NUL included (JSON writes
//! it `\u0000`).
//!
//! Session URLs are `{prefix}/{server}/{session}/{transport}`: `server` is three digits (for
//! load balancers), `session` a random string.

use rand::Rng as _;
use rand::distr::Alphanumeric;

/// Longest frame (line) accepted; larger is a broken or hostile server, refused rather than
/// buffered without end. As large as the bench's largest WebSocket message.
pub(crate) const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;
/// Characters of a generated session id.
const SESSION_ID_LEN: usize = 16;
/// Buffer capacity above which an emptied [`LineBuffer`] gives its memory back.
const KEEP_CAPACITY: usize = 256;

/// One frame from the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Frame {
    Open,
    Heartbeat,
    Messages(Vec<String>),
    Close { code: u16, reason: String },
}

/// Why bytes are not a SockJS frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SockJsError {
    #[error("empty frame")]
    Empty,
    #[error("unknown frame type {0:?}")]
    UnknownType(char),
    #[error("frame {0:?} has trailing bytes")]
    Trailing(char),
    #[error("bad message array: {0}")]
    BadArray(String),
    #[error("bad close frame: {0}")]
    BadClose(String),
    #[error("frame over {MAX_FRAME_BYTES} bytes")]
    TooLong,
    #[error("bad xhr_streaming prelude")]
    BadPrelude,
}

/// Parses one frame (without the `\n` of the xhr transports).
pub(crate) fn parse(frame: &[u8]) -> Result<Frame, SockJsError> {
    let (&kind, rest) = frame.split_first().ok_or(SockJsError::Empty)?;
    match kind {
        b'o' | b'h' if !rest.is_empty() => Err(SockJsError::Trailing(kind as char)),
        b'o' => Ok(Frame::Open),
        b'h' => Ok(Frame::Heartbeat),
        b'a' => serde_json::from_slice::<Vec<String>>(rest)
            .map(Frame::Messages)
            .map_err(|e| SockJsError::BadArray(e.to_string())),
        b'c' => serde_json::from_slice::<(u16, String)>(rest)
            .map(|(code, reason)| Frame::Close { code, reason })
            .map_err(|e| SockJsError::BadClose(e.to_string())),
        other => Err(SockJsError::UnknownType(other as char)),
    }
}

/// The client's messages as a JSON array of strings: `["CONNECT\n...\u0000"]`.
pub(crate) fn encode(messages: &[&str]) -> String {
    // Serializing a slice of strings cannot fail.
    serde_json::to_string(messages).unwrap_or_default()
}

/// How many STOMP frames and heart-beats a frame carries, without parsing it: one for a SockJS
/// heartbeat, one per NUL (escaped `\u0000` in JSON) in a message array.
pub(crate) fn count_stomp_frames(frame: &[u8]) -> u64 {
    match frame.first() {
        Some(b'h') => 1,
        Some(b'a') => frame.windows(6).filter(|w| w == b"\\u0000").count() as u64,
        _ => 0,
    }
}

/// The session part of the URLs of a new session: `/{server}/{session}`, with a random
/// three-digit server id and a random session id.
pub(crate) fn new_session_path() -> String {
    let mut rng = rand::rng();
    let server: u16 = rng.random_range(0..1000);
    let session: String = (&mut rng)
        .sample_iter(&Alphanumeric)
        .take(SESSION_ID_LEN)
        .map(char::from)
        .collect();
    format!("/{server:03}/{session}")
}

/// Splits an xhr_streaming body into frames: bytes go in as they arrive, whole lines come out.
/// Each response begins with a prelude line of `h` that is checked and dropped.
#[derive(Debug, Default)]
pub(crate) struct LineBuffer {
    buffer: Vec<u8>,
    /// Bytes at the start of `buffer` already handed out.
    consumed: usize,
    /// The next line is a response's prelude.
    expect_prelude: bool,
}

impl LineBuffer {
    /// A new response begins: its first line is the prelude.
    pub(crate) fn start_response(&mut self) {
        self.clear();
        self.expect_prelude = true;
    }

    /// Appends body bytes. Fails if a line grows over [`MAX_FRAME_BYTES`].
    pub(crate) fn push(&mut self, bytes: &[u8]) -> Result<(), SockJsError> {
        if self.buffer.len() - self.consumed + bytes.len() > MAX_FRAME_BYTES + 1 {
            return Err(SockJsError::TooLong);
        }
        if self.consumed > 0 && self.consumed == self.buffer.len() {
            self.clear();
        }
        self.buffer.extend_from_slice(bytes);
        Ok(())
    }

    /// The next complete frame (without its `\n`), or `None` until one is complete.
    pub(crate) fn next_frame(&mut self) -> Result<Option<&[u8]>, SockJsError> {
        loop {
            let pending = &self.buffer[self.consumed..];
            let Some(n) = pending.iter().position(|&b| b == b'\n') else {
                if pending.len() > MAX_FRAME_BYTES {
                    return Err(SockJsError::TooLong);
                }
                return Ok(None);
            };
            let start = self.consumed;
            self.consumed += n + 1;
            if self.expect_prelude {
                self.expect_prelude = false;
                if n == 0 || !self.buffer[start..start + n].iter().all(|&b| b == b'h') {
                    return Err(SockJsError::BadPrelude);
                }
                continue;
            }
            return Ok(Some(&self.buffer[start..start + n]));
        }
    }

    /// Drops everything handed out, and the memory of a large buffer once it is empty (an idle
    /// stream should hold no buffer).
    pub(crate) fn compact(&mut self) {
        self.buffer.drain(..self.consumed);
        self.consumed = 0;
        if self.buffer.is_empty() && self.buffer.capacity() > KEEP_CAPACITY {
            self.buffer = Vec::new();
        }
    }

    fn clear(&mut self) {
        self.buffer.clear();
        self.consumed = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_frame_type() {
        assert_eq!(parse(b"o"), Ok(Frame::Open));
        assert_eq!(parse(b"h"), Ok(Frame::Heartbeat));
        assert_eq!(
            parse(br#"a["CONNECTED\nversion:1.2\n\n\u0000","x"]"#),
            Ok(Frame::Messages(vec![
                "CONNECTED\nversion:1.2\n\n\0".into(),
                "x".into()
            ]))
        );
        assert_eq!(parse(b"a[]"), Ok(Frame::Messages(vec![])));
        assert_eq!(
            parse(br#"c[3000,"Go away!"]"#),
            Ok(Frame::Close {
                code: 3000,
                reason: "Go away!".into()
            })
        );
        // Escapes SockJS servers use for characters browsers mangle.
        assert_eq!(
            parse(br#"a["\u2028\ud83d\ude00"]"#),
            Ok(Frame::Messages(vec!["\u{2028}\u{1F600}".into()]))
        );
    }

    #[test]
    fn refuses_what_is_not_a_frame() {
        assert_eq!(parse(b""), Err(SockJsError::Empty));
        assert_eq!(parse(b"x"), Err(SockJsError::UnknownType('x')));
        assert_eq!(parse(b"oo"), Err(SockJsError::Trailing('o')));
        assert_eq!(parse(b"h\n"), Err(SockJsError::Trailing('h')));
        assert!(matches!(parse(br#"a["x"#), Err(SockJsError::BadArray(_))));
        assert!(matches!(parse(b"a[1]"), Err(SockJsError::BadArray(_))));
        assert!(matches!(parse(b"c[3000]"), Err(SockJsError::BadClose(_))));
        assert!(matches!(
            parse(br#"c["a","b"]"#),
            Err(SockJsError::BadClose(_))
        ));
    }

    #[test]
    fn encodes_stomp_frames_as_a_json_array() {
        let connect = "CONNECT\naccept-version:1.2\npasscode:a.b.c\n\n\0";
        let encoded = encode(&[connect]);
        assert_eq!(
            encoded,
            r#"["CONNECT\naccept-version:1.2\npasscode:a.b.c\n\n\u0000"]"#
        );
        assert_eq!(
            parse(format!("a{encoded}").as_bytes()),
            Ok(Frame::Messages(vec![connect.into()]))
        );
        assert_eq!(encode(&["a\"b\\c"]), r#"["a\"b\\c"]"#);
    }

    #[test]
    fn counts_stomp_frames() {
        assert_eq!(count_stomp_frames(b"h"), 1);
        assert_eq!(count_stomp_frames(b"o"), 0);
        assert_eq!(
            count_stomp_frames(br#"a["MESSAGE\n\n{}\u0000","MESSAGE\n\nx\u0000"]"#),
            2
        );
        assert_eq!(count_stomp_frames(br#"c[3000,"x"]"#), 0);
    }

    #[test]
    fn session_paths() {
        let p = new_session_path();
        let parts: Vec<&str> = p.split('/').collect();
        assert_eq!(parts.len(), 3, "{p}");
        assert_eq!(parts[1].len(), 3);
        assert!(parts[1].bytes().all(|b| b.is_ascii_digit()));
        assert_eq!(parts[2].len(), SESSION_ID_LEN);
        assert_ne!(p, new_session_path());
    }

    fn frames(lines: &mut LineBuffer) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while let Some(f) = lines.next_frame().unwrap() {
            out.push(f.to_vec());
        }
        lines.compact();
        out
    }

    #[test]
    fn splits_a_stream_at_every_point() {
        let stream = format!(
            "{}\no\nh\na[\"x\"]\nc[3000,\"Go away!\"]\n",
            "h".repeat(2048)
        );
        for step in 1..=stream.len() {
            let mut lines = LineBuffer::default();
            lines.start_response();
            let mut got = Vec::new();
            for piece in stream.as_bytes().chunks(step) {
                lines.push(piece).unwrap();
                got.extend(frames(&mut lines));
            }
            let expected: Vec<Vec<u8>> = ["o", "h", "a[\"x\"]", "c[3000,\"Go away!\"]"]
                .iter()
                .map(|s| s.as_bytes().to_vec())
                .collect();
            assert_eq!(got, expected, "step {step}");
        }
    }

    #[test]
    fn each_response_has_its_prelude() {
        let mut lines = LineBuffer::default();
        lines.start_response();
        lines.push(b"hhhh\no\na[\"1\"]\n").unwrap();
        assert_eq!(
            frames(&mut lines),
            vec![b"o".to_vec(), b"a[\"1\"]".to_vec()]
        );
        // The server ended the response; a new one starts with its own prelude, no `o`.
        lines.start_response();
        lines.push(b"hhhh\nh\n").unwrap();
        assert_eq!(frames(&mut lines), vec![b"h".to_vec()]);

        let mut bad = LineBuffer::default();
        bad.start_response();
        bad.push(b"o\n").unwrap();
        assert_eq!(bad.next_frame(), Err(SockJsError::BadPrelude));
    }

    #[test]
    fn an_idle_stream_gives_its_buffer_back() {
        let mut lines = LineBuffer::default();
        lines.start_response();
        lines
            .push(format!("{}\no\n", "h".repeat(2048)).as_bytes())
            .unwrap();
        assert_eq!(frames(&mut lines), vec![b"o".to_vec()]);
        assert_eq!(lines.buffer.capacity(), 0);
        lines.push(b"h\n").unwrap();
        assert_eq!(frames(&mut lines), vec![b"h".to_vec()]);
        assert!(lines.buffer.capacity() <= KEEP_CAPACITY);
    }

    #[test]
    fn refuses_endless_lines() {
        let mut lines = LineBuffer::default();
        lines.push(&vec![b'a'; MAX_FRAME_BYTES]).unwrap();
        assert_eq!(lines.next_frame(), Ok(None));
        assert_eq!(lines.push(b"aa"), Err(SockJsError::TooLong));
    }
}
