//! The little HTTP/1.1 client side the SockJS xhr transports need: a `POST` request, the
//! response head, and a chunked body decoder. Pure: bytes in, results out; the I/O is in
//! [`crate::client::session::xhr_streaming`].
//!
//! Why not an HTTP client crate: a worker holds up to 19,000 streaming responses open, and each
//! should cost a socket, a small parser state and a read buffer, nothing more; and the xhr_send
//! requests of a whole worker share one keep-alive connection that the bench drives itself.
//!
//! [`parse_head`] returns `Ok(None)` until the head is complete and consumes nothing;
//! [`ChunkedDecoder`] takes the body in pieces of any size (every split point is tested).

/// Longest response head accepted; a SockJS response head is a few hundred bytes.
pub(crate) const MAX_HEAD_BYTES: usize = 8 * 1024;
/// Longest chunk-size line (with extensions) accepted.
const MAX_SIZE_LINE_BYTES: usize = 1024;
/// Longest trailer section accepted.
const MAX_TRAILER_BYTES: usize = 8 * 1024;

/// Why a response could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HttpError {
    #[error("malformed response head")]
    MalformedHead,
    #[error("response head over {MAX_HEAD_BYTES} bytes")]
    HeadTooLong,
    #[error("bad content-length {0:?}")]
    BadContentLength(String),
    #[error("bad chunk size line")]
    BadChunkSize,
    #[error("chunk not followed by CRLF")]
    BadChunkEnd,
    #[error("trailer over {MAX_TRAILER_BYTES} bytes")]
    TrailerTooLong,
}

/// The request for `POST path` with `body` (`Content-Length` always set, as SockJS servers
/// want even for an empty body).
pub(crate) fn post_request(host: &str, path: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: {content_type}\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// How the body of a response is delimited (RFC 9112 section 6.3, for responses to `POST`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyLength {
    /// No body: status 1xx, 204 or 304.
    None,
    /// `Content-Length: n`.
    Fixed(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the server closes the connection (HTTP/1.0 style streaming).
    UntilClose,
}

/// A parsed response head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) status: u16,
    /// Bytes of the head, including the blank line.
    pub(crate) len: usize,
    pub(crate) body: BodyLength,
    /// Whether the connection may carry another request after this response.
    pub(crate) keep_alive: bool,
}

/// Parses a response head at the start of `input`. `Ok(None)`: not complete yet.
pub(crate) fn parse_head(input: &[u8]) -> Result<Option<Head>, HttpError> {
    let Some(end) = input.windows(4).position(|w| w == b"\r\n\r\n") else {
        if input.len() > MAX_HEAD_BYTES {
            return Err(HttpError::HeadTooLong);
        }
        return Ok(None);
    };
    let len = end + 4;
    if len > MAX_HEAD_BYTES {
        return Err(HttpError::HeadTooLong);
    }
    let head = std::str::from_utf8(&input[..end]).map_err(|_| HttpError::MalformedHead)?;
    let mut lines = head.split("\r\n");
    let mut status_line = lines
        .next()
        .ok_or(HttpError::MalformedHead)?
        .split_whitespace();
    let http10 = match status_line.next() {
        Some("HTTP/1.1") => false,
        Some("HTTP/1.0") => true,
        _ => return Err(HttpError::MalformedHead),
    };
    let status: u16 = status_line
        .next()
        .and_then(|s| s.parse().ok())
        .filter(|s| (100..1000).contains(s))
        .ok_or(HttpError::MalformedHead)?;

    let mut chunked = false;
    let mut content_length = None;
    let mut connection_close = http10;
    for line in lines {
        let (name, value) = line.split_once(':').ok_or(HttpError::MalformedHead)?;
        let value = value.trim();
        let tokens = || value.split(',').map(str::trim);
        match name.trim().to_ascii_lowercase().as_str() {
            "transfer-encoding" => {
                chunked = tokens()
                    .next_back()
                    .is_some_and(|t| t.eq_ignore_ascii_case("chunked"));
            }
            "content-length" => {
                let n = value
                    .parse::<u64>()
                    .map_err(|_| HttpError::BadContentLength(value.to_owned()))?;
                content_length = Some(n);
            }
            "connection" => {
                if tokens().any(|t| t.eq_ignore_ascii_case("close")) {
                    connection_close = true;
                } else if tokens().any(|t| t.eq_ignore_ascii_case("keep-alive")) {
                    connection_close = false;
                }
            }
            _ => {}
        }
    }
    let body = if status < 200 || status == 204 || status == 304 {
        BodyLength::None
    } else if chunked {
        BodyLength::Chunked
    } else if let Some(n) = content_length {
        BodyLength::Fixed(n)
    } else {
        BodyLength::UntilClose
    };
    Ok(Some(Head {
        status,
        len,
        body,
        keep_alive: !connection_close && body != BodyLength::UntilClose,
    }))
}

/// What one call to [`ChunkedDecoder::decode`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Chunk<'a> {
    /// Body bytes (part of a chunk).
    Data(&'a [u8]),
    /// The input ended before anything else: feed more.
    NeedMore,
    /// The last chunk and the trailer are done: the body has ended.
    End,
}

/// Decodes a `Transfer-Encoding: chunked` body (RFC 9112 section 7.1). Chunk extensions and
/// trailer fields are skipped. The state is a few words, so an idle stream costs nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct ChunkedDecoder {
    state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading the hex size; `line` counts the bytes of the size line so far.
    Size {
        value: u64,
        digits: u8,
        line: usize,
    },
    /// Skipping a chunk extension up to the LF.
    Extension {
        value: u64,
        line: usize,
    },
    /// After the size line's CR.
    SizeLf {
        value: u64,
    },
    Data {
        remaining: u64,
    },
    /// After the data: CR, then LF.
    DataCr,
    DataLf,
    /// In the trailer section; `line` bytes of the current field line so far, `total` overall.
    Trailer {
        line: usize,
        total: usize,
    },
    /// After a CR in the trailer section.
    TrailerLf {
        line: usize,
        total: usize,
    },
    Done,
}

impl Default for State {
    fn default() -> Self {
        State::Size {
            value: 0,
            digits: 0,
            line: 0,
        }
    }
}

impl ChunkedDecoder {
    /// Decodes from the start of `input`; returns how many bytes it used and what it found.
    /// Call again with the rest until it reports [`Chunk::NeedMore`] or [`Chunk::End`].
    pub(crate) fn decode<'a>(&mut self, input: &'a [u8]) -> Result<(usize, Chunk<'a>), HttpError> {
        let mut used = 0;
        loop {
            if let State::Data { remaining } = self.state {
                if used == input.len() {
                    return Ok((used, Chunk::NeedMore));
                }
                let take = usize::try_from(remaining)
                    .unwrap_or(usize::MAX)
                    .min(input.len() - used);
                let data = &input[used..used + take];
                let left = remaining - take as u64;
                self.state = if left == 0 {
                    State::DataCr
                } else {
                    State::Data { remaining: left }
                };
                return Ok((used + take, Chunk::Data(data)));
            }
            if self.state == State::Done {
                return Ok((used, Chunk::End));
            }
            let Some(&byte) = input.get(used) else {
                return Ok((used, Chunk::NeedMore));
            };
            used += 1;
            self.state = self.step(byte)?;
        }
    }

    /// Whether the last chunk and trailer have been read.
    #[cfg(test)]
    fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// The state after one byte of framing (anything but chunk data).
    fn step(&self, byte: u8) -> Result<State, HttpError> {
        let after_size = |value: u64| {
            if value == 0 {
                State::Trailer { line: 0, total: 0 }
            } else {
                State::Data { remaining: value }
            }
        };
        Ok(match self.state {
            State::Size {
                value,
                digits,
                line,
            } => {
                if line >= MAX_SIZE_LINE_BYTES {
                    return Err(HttpError::BadChunkSize);
                }
                match byte {
                    b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                        // 15 hex digits is far beyond any chunk; more would overflow.
                        if digits >= 15 {
                            return Err(HttpError::BadChunkSize);
                        }
                        let nibble = u64::from((byte as char).to_digit(16).unwrap_or(0));
                        State::Size {
                            value: value << 4 | nibble,
                            digits: digits + 1,
                            line: line + 1,
                        }
                    }
                    _ if digits == 0 => return Err(HttpError::BadChunkSize),
                    b';' | b' ' | b'\t' => State::Extension {
                        value,
                        line: line + 1,
                    },
                    b'\r' => State::SizeLf { value },
                    b'\n' => after_size(value),
                    _ => return Err(HttpError::BadChunkSize),
                }
            }
            State::Extension { value, line } => match byte {
                _ if line >= MAX_SIZE_LINE_BYTES => return Err(HttpError::BadChunkSize),
                b'\n' => after_size(value),
                _ => State::Extension {
                    value,
                    line: line + 1,
                },
            },
            State::SizeLf { value } => match byte {
                b'\n' => after_size(value),
                _ => return Err(HttpError::BadChunkSize),
            },
            State::DataCr => match byte {
                b'\r' => State::DataLf,
                b'\n' => State::default(),
                _ => return Err(HttpError::BadChunkEnd),
            },
            State::DataLf => match byte {
                b'\n' => State::default(),
                _ => return Err(HttpError::BadChunkEnd),
            },
            State::Trailer { line, total } => {
                if total >= MAX_TRAILER_BYTES {
                    return Err(HttpError::TrailerTooLong);
                }
                match byte {
                    b'\r' => State::TrailerLf { line, total },
                    b'\n' if line == 0 => State::Done,
                    b'\n' => State::Trailer {
                        line: 0,
                        total: total + 1,
                    },
                    _ => State::Trailer {
                        line: line + 1,
                        total: total + 1,
                    },
                }
            }
            State::TrailerLf { line, total } => match byte {
                b'\n' if line == 0 => State::Done,
                b'\n' => State::Trailer {
                    line: 0,
                    total: total + 2,
                },
                _ => return Err(HttpError::BadChunkEnd),
            },
            State::Data { .. } | State::Done => self.state,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn post_request_has_a_content_length() {
        let r = post_request("127.0.0.1:80", "/s/1/a/xhr_send", "text/plain", b"[\"x\"]");
        assert_eq!(
            r,
            b"POST /s/1/a/xhr_send HTTP/1.1\r\nHost: 127.0.0.1:80\r\nContent-Type: text/plain\r\n\
              Content-Length: 5\r\n\r\n[\"x\"]"
                .to_vec()
        );
        let empty = post_request("h", "/x", "text/plain", b"");
        assert!(empty.ends_with(b"Content-Length: 0\r\n\r\n"));
    }

    fn head(input: &str) -> Head {
        parse_head(input.as_bytes()).unwrap().unwrap()
    }

    #[test]
    fn heads() {
        let h = head(
            "HTTP/1.1 200 OK\r\nContent-Type: application/javascript;charset=UTF-8\r\n\
             Transfer-Encoding: chunked\r\n\r\nextra",
        );
        assert_eq!(
            (h.status, h.body, h.keep_alive),
            (200, BodyLength::Chunked, true)
        );
        assert_eq!(h.len, 99, "the head ends after the blank line");

        let h = head("HTTP/1.1 204 No Content\r\ncontent-type: text/plain\r\n\r\n");
        assert_eq!(
            (h.status, h.body, h.keep_alive),
            (204, BodyLength::None, true)
        );

        let h = head("HTTP/1.1 404 Not Found\r\ncontent-length: 9\r\n\r\nnot found");
        assert_eq!(h.body, BodyLength::Fixed(9));

        let h = head("HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        assert!(!h.keep_alive);

        // HTTP/1.0 streaming: until close, never kept alive.
        let h = head("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n");
        assert_eq!((h.body, h.keep_alive), (BodyLength::UntilClose, false));
        let h = head("HTTP/1.0 204 No Content\r\nConnection: keep-alive\r\n\r\n");
        assert_eq!((h.body, h.keep_alive), (BodyLength::None, true));
    }

    #[test]
    fn incomplete_and_bad_heads() {
        let full = "HTTP/1.1 204 No Content\r\nA: b\r\n\r\n";
        for cut in 0..full.len() {
            assert_eq!(parse_head(&full.as_bytes()[..cut]), Ok(None), "cut {cut}");
        }
        assert_eq!(
            parse_head(b"SSH-2.0-x\r\n\r\n"),
            Err(HttpError::MalformedHead)
        );
        assert_eq!(
            parse_head(b"HTTP/1.1 abc OK\r\n\r\n"),
            Err(HttpError::MalformedHead)
        );
        assert_eq!(
            parse_head(b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n"),
            Err(HttpError::MalformedHead)
        );
        assert_eq!(
            parse_head(b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n"),
            Err(HttpError::BadContentLength("x".into()))
        );
        assert_eq!(
            parse_head(&vec![b'x'; MAX_HEAD_BYTES + 1]),
            Err(HttpError::HeadTooLong)
        );
    }

    /// Decodes `input` fed in pieces of `step` bytes; returns the body and whether it ended.
    fn decode_in_steps(input: &[u8], step: usize) -> Result<(Vec<u8>, bool, usize), HttpError> {
        let mut decoder = ChunkedDecoder::default();
        let mut body = Vec::new();
        let mut fed = 0;
        let mut pending: Vec<u8> = Vec::new();
        while fed < input.len() || !pending.is_empty() {
            let end = (fed + step).min(input.len());
            pending.extend_from_slice(&input[fed..end]);
            fed = end;
            let mut pos = 0;
            loop {
                let (used, chunk) = decoder.decode(&pending[pos..])?;
                pos += used;
                match chunk {
                    Chunk::Data(d) => body.extend_from_slice(d),
                    Chunk::NeedMore => break,
                    Chunk::End => return Ok((body, true, fed - pending.len() + pos)),
                }
            }
            pending.drain(..pos);
            if fed == input.len() {
                break;
            }
        }
        Ok((body, decoder.is_done(), fed))
    }

    #[test]
    fn chunked_bodies_at_every_split() {
        let input = b"5\r\nhello\r\n1;ext=1\r\n \r\nA\r\n0123456789\r\n0\r\nTrailer: x\r\n\r\nNEXT";
        let body_end = input.len() - 4;
        for step in 1..=input.len() {
            let (body, done, end) = decode_in_steps(input, step).unwrap();
            assert_eq!(body, b"hello 0123456789", "step {step}");
            assert!(done, "step {step}");
            assert_eq!(
                end, body_end,
                "step {step}: the bytes after the body are left"
            );
        }
    }

    #[test]
    fn sockjs_style_stream() {
        // What an xhr_streaming response looks like: prelude chunk, open chunk, then frames.
        let mut input = format!("801\r\n{}\n\r\n", "h".repeat(2048)).into_bytes();
        input.extend_from_slice(b"2\r\no\n\r\n");
        let (body, done, _) = decode_in_steps(&input, 7).unwrap();
        assert_eq!(body.len(), 2051);
        assert!(body.ends_with(b"h\no\n"));
        assert!(!done);
    }

    #[test]
    fn bare_lf_and_no_trailer() {
        let (body, done, _) = decode_in_steps(b"3\nabc\n0\n\n", 1).unwrap();
        assert_eq!((body.as_slice(), done), (&b"abc"[..], true));
    }

    #[test]
    fn bad_chunked_bodies() {
        assert_eq!(decode_in_steps(b"x\r\n", 1), Err(HttpError::BadChunkSize));
        assert_eq!(decode_in_steps(b"\r\n", 1), Err(HttpError::BadChunkSize));
        assert_eq!(
            decode_in_steps(b"3\r\nabcX", 100),
            Err(HttpError::BadChunkEnd)
        );
        assert_eq!(
            decode_in_steps(b"1000000000000000\r\n", 100),
            Err(HttpError::BadChunkSize)
        );
        let long_ext = format!("1;{}\r\n", "e".repeat(MAX_SIZE_LINE_BYTES));
        assert_eq!(
            decode_in_steps(long_ext.as_bytes(), 100),
            Err(HttpError::BadChunkSize)
        );
        let long_trailer = format!("0\r\nT: {}\r\n\r\n", "t".repeat(MAX_TRAILER_BYTES));
        assert_eq!(
            decode_in_steps(long_trailer.as_bytes(), 100),
            Err(HttpError::TrailerTooLong)
        );
    }
}
