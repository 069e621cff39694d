//! Incremental, bounded STOMP frame decoding.
//!
//! [`decode`] works in two passes over the buffered bytes. The first finds
//! where the frame ends and checks every limit and every header line without
//! allocating, so an incomplete frame costs a rescan and nothing else. Only
//! when the whole frame is present does the second pass build a [`Frame`].

use std::borrow::Cow;

use bytes::{Buf, BytesMut};

use super::{Command, Frame, Version};

/// Bounds on what a peer may make Herald buffer for one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest frame, from the command through the NUL. Default 64 KiB: the
    /// frames browsers send Herald are CONNECT, SUBSCRIBE, ACK and small
    /// SENDs, and this bounds the per-connection read buffer.
    pub max_frame_bytes: usize,
    /// Most header lines in one frame, repeats included. Default 32: a
    /// CONNECT carries about six, and this bounds the header `Vec`.
    pub max_headers: usize,
    /// Longest header line (`name:value` as sent, escaped, without its EOL).
    /// Default 4096: room for a JWT in `passcode` or `Authorization`.
    pub max_header_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_frame_bytes: 64 * 1024,
            max_headers: 32,
            max_header_bytes: 4096,
        }
    }
}

/// Why bytes are not a STOMP frame. The `Display` text is a sentence fit for
/// the `message` header of a STOMP ERROR frame (it never contains an EOL).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The frame is, or will be, longer than [`Limits::max_frame_bytes`].
    #[error("frame exceeds {limit} bytes")]
    FrameTooLarge {
        /// The limit.
        limit: usize,
    },
    /// The frame has more than [`Limits::max_headers`] header lines.
    #[error("frame has more than {limit} headers")]
    TooManyHeaders {
        /// The limit.
        limit: usize,
    },
    /// A header line is longer than [`Limits::max_header_bytes`].
    #[error("header line exceeds {limit} bytes")]
    HeaderTooLong {
        /// The limit.
        limit: usize,
    },
    /// The first line is not a STOMP command.
    #[error("unknown command {command:?}")]
    UnknownCommand {
        /// What was sent instead (lossy UTF-8, at most 32 characters).
        command: String,
    },
    /// A header line has no colon, or an empty name.
    #[error("malformed header on line {line}: expected name:value")]
    MalformedHeader {
        /// Line number in the frame; the command is line 1.
        line: usize,
    },
    /// A header uses an escape sequence its version does not define.
    #[error("undefined escape sequence in header on line {line}")]
    InvalidEscape {
        /// Line number in the frame; the command is line 1.
        line: usize,
    },
    /// The command or a header line is not UTF-8.
    #[error("{} is not valid UTF-8", utf8_subject(*line))]
    InvalidUtf8 {
        /// Line number in the frame; the command is line 1.
        line: usize,
    },
    /// The `content-length` header is not a byte count.
    #[error("content-length {value:?} is not a byte count")]
    BadContentLength {
        /// The value sent (at most 32 characters).
        value: String,
    },
    /// The `content-length` bytes of body are not followed by a NUL.
    #[error("frame body is not followed by a NUL after content-length bytes")]
    MissingNul,
    /// A frame of a command that takes no body ([`Command::allows_body`])
    /// has one: bytes other than the NUL after the blank line, or a
    /// non-zero `content-length`. Reported as soon as the first body byte
    /// (or the header) arrives, so the frames after it are not swallowed.
    #[error("{command} frames must not have a body (only SEND, MESSAGE and ERROR may)")]
    UnexpectedBody {
        /// The frame's command.
        command: Command,
    },
}

/// What an [`DecodeError::InvalidUtf8`] line is, in words.
fn utf8_subject(line: usize) -> String {
    if line == 1 {
        "the command line".to_owned()
    } else {
        format!("the header on line {line}")
    }
}

/// One item from the front of a STOMP byte stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// A complete frame.
    Frame(Frame),
    /// A lone EOL between frames: a heart-beat.
    Heartbeat,
}

/// Decode one item from the front of `buf`.
///
/// On `Ok(Some)` exactly that item's bytes are consumed; on `Ok(None)`
/// nothing is consumed. A heart-beat is a single EOL (`\n` or `\r\n`) seen
/// where a frame could start.
///
/// Header escaping follows `version` (1.0: none; 1.1: `\n` `\c` `\\`; 1.2:
/// also `\r`), except that CONNECT, STOMP and CONNECTED frames are never
/// unescaped. `\r\n` line endings are accepted for every version.
///
/// Body: if `content-length` is present (first occurrence), exactly that many
/// bytes then a NUL (else [`DecodeError::MissingNul`]); otherwise up to the
/// first NUL. A command that takes no body ([`Command::allows_body`]) must
/// have the NUL right after the blank line (and no `content-length` but 0),
/// else [`DecodeError::UnexpectedBody`].
///
/// Returns [`DecodeError::FrameTooLarge`] as soon as `buf` holds more than
/// `max_frame_bytes` without a complete frame, or a `content-length` makes
/// the frame too large; header limits are reported as soon as a line
/// crosses them. After an error the stream cannot be resynchronised: close
/// the connection.
pub fn decode(
    buf: &mut BytesMut,
    version: Version,
    limits: &Limits,
) -> Result<Option<Decoded>, DecodeError> {
    match scan(buf, version, limits)? {
        Scan::NeedMore if buf.len() > limits.max_frame_bytes => Err(DecodeError::FrameTooLarge {
            limit: limits.max_frame_bytes,
        }),
        Scan::NeedMore => Ok(None),
        Scan::Heartbeat(len) => {
            buf.advance(len);
            Ok(Some(Decoded::Heartbeat))
        }
        Scan::Frame(layout) => {
            let headers = build_headers(&buf[layout.headers_start..layout.body_start], &layout)?;
            buf.advance(layout.body_start);
            let body = buf.split_to(layout.body_len).freeze();
            buf.advance(1);
            Ok(Some(Decoded::Frame(Frame {
                command: layout.command,
                headers,
                body,
            })))
        }
    }
}

/// Longest possible command line: `UNSUBSCRIBE\r`.
const MAX_COMMAND_LINE: usize = Command::MAX_LEN + 1;

/// Longest excerpt of bad input kept in an error, in characters.
const MAX_ERROR_EXCERPT: usize = 32;

/// What the first pass found at the front of the buffer.
enum Scan {
    NeedMore,
    /// A heart-beat of this many bytes.
    Heartbeat(usize),
    Frame(Layout),
}

/// Where a complete, validated frame lies in the buffer.
struct Layout {
    command: Command,
    /// Escaping to undo, or `None` for verbatim headers.
    unescape: Option<Version>,
    /// Offset of the first header line.
    headers_start: usize,
    /// Offset of the body, just past the blank line.
    body_start: usize,
    body_len: usize,
}

fn scan(buf: &[u8], version: Version, limits: &Limits) -> Result<Scan, DecodeError> {
    match buf {
        [] | [b'\r'] => return Ok(Scan::NeedMore),
        [b'\n', ..] => return Ok(Scan::Heartbeat(1)),
        [b'\r', b'\n', ..] => return Ok(Scan::Heartbeat(2)),
        _ => {}
    }

    let Some(eol) = find(buf, b'\n') else {
        if buf.len() > MAX_COMMAND_LINE {
            return Err(unknown_command(buf));
        }
        return Ok(Scan::NeedMore);
    };
    let command = parse_command(strip_cr(&buf[..eol]))?;
    let unescape = match version {
        Version::V1_1 | Version::V1_2 if command.escapes_headers() => Some(version),
        _ => None,
    };
    let headers_start = eol + 1;

    let mut pos = headers_start;
    let mut line_no = 1;
    let mut count = 0;
    let mut content_length = None;
    let body_start = loop {
        line_no += 1;
        let rest = &buf[pos..];
        let Some(eol) = find(rest, b'\n') else {
            // A partial line: report the limits it has already crossed.
            if rest.len() > limits.max_header_bytes.saturating_add(1) {
                return Err(DecodeError::HeaderTooLong {
                    limit: limits.max_header_bytes,
                });
            }
            if count >= limits.max_headers && rest.first().is_some_and(|&b| b != b'\r') {
                return Err(DecodeError::TooManyHeaders {
                    limit: limits.max_headers,
                });
            }
            return Ok(Scan::NeedMore);
        };
        pos += eol + 1;
        let line = strip_cr(&rest[..eol]);
        if line.is_empty() {
            break pos;
        }
        if line.len() > limits.max_header_bytes {
            return Err(DecodeError::HeaderTooLong {
                limit: limits.max_header_bytes,
            });
        }
        count += 1;
        if count > limits.max_headers {
            return Err(DecodeError::TooManyHeaders {
                limit: limits.max_headers,
            });
        }
        let (name, value) = split_header(line, line_no)?;
        if let Some(v) = unescape {
            unescape_str(name, v, line_no)?;
            unescape_str(value, v, line_no)?;
        }
        // An escaped name equals "content-length" only if sent verbatim.
        if content_length.is_none() && name == super::headers::CONTENT_LENGTH {
            content_length = Some(parse_content_length(value)?);
        }
    };

    let too_large = || DecodeError::FrameTooLarge {
        limit: limits.max_frame_bytes,
    };
    // `body_end` is the offset of the NUL; the frame is `body_end + 1` bytes.
    let body_end = match content_length {
        // The NUL must come next. Looking further for one would let a frame
        // whose NUL is missing swallow the frames after it.
        _ if !command.allows_body() => {
            if content_length.is_some_and(|len| len > 0) {
                return Err(DecodeError::UnexpectedBody { command });
            }
            match buf.get(body_start) {
                None => return Ok(Scan::NeedMore),
                Some(0) => body_start,
                Some(_) => return Err(DecodeError::UnexpectedBody { command }),
            }
        }
        Some(len) => {
            let body_end = body_start.checked_add(len).ok_or_else(too_large)?;
            if body_end >= limits.max_frame_bytes {
                return Err(too_large());
            }
            match buf.get(body_end) {
                None => return Ok(Scan::NeedMore),
                Some(0) => body_end,
                Some(_) => return Err(DecodeError::MissingNul),
            }
        }
        None => match find(&buf[body_start..], 0) {
            Some(len) => body_start + len,
            None => return Ok(Scan::NeedMore),
        },
    };
    if body_end >= limits.max_frame_bytes {
        return Err(too_large());
    }
    Ok(Scan::Frame(Layout {
        command,
        unescape,
        headers_start,
        body_start,
        body_len: body_end - body_start,
    }))
}

/// Second pass: the header block of a frame [`scan`] accepted, as strings.
fn build_headers(block: &[u8], layout: &Layout) -> Result<Vec<(String, String)>, DecodeError> {
    let mut headers = Vec::new();
    let mut line_no = 1;
    for line in block.split(|&b| b == b'\n') {
        line_no += 1;
        let line = strip_cr(line);
        if line.is_empty() {
            break;
        }
        let (name, value) = split_header(line, line_no)?;
        let (name, value) = match layout.unescape {
            Some(v) => (
                unescape_str(name, v, line_no)?.into_owned(),
                unescape_str(value, v, line_no)?.into_owned(),
            ),
            None => (name.to_owned(), value.to_owned()),
        };
        headers.push((name, value));
    }
    Ok(headers)
}

fn find(haystack: &[u8], needle: u8) -> Option<usize> {
    haystack.iter().position(|&b| b == needle)
}

fn strip_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn excerpt(bytes: &[u8]) -> String {
    // 32 characters are at most 128 bytes.
    let bytes = &bytes[..bytes.len().min(4 * MAX_ERROR_EXCERPT)];
    String::from_utf8_lossy(bytes)
        .chars()
        .take(MAX_ERROR_EXCERPT)
        .collect()
}

fn unknown_command(line: &[u8]) -> DecodeError {
    DecodeError::UnknownCommand {
        command: excerpt(line),
    }
}

fn parse_command(line: &[u8]) -> Result<Command, DecodeError> {
    if let Some(command) = Command::parse(line) {
        return Ok(command);
    }
    if simdutf8::basic::from_utf8(line).is_err() {
        return Err(DecodeError::InvalidUtf8 { line: 1 });
    }
    Err(unknown_command(line))
}

/// Splits `name:value` at the first colon; the value may contain more.
fn split_header(line: &[u8], line_no: usize) -> Result<(&str, &str), DecodeError> {
    let line =
        simdutf8::basic::from_utf8(line).map_err(|_| DecodeError::InvalidUtf8 { line: line_no })?;
    match line.split_once(':') {
        Some((name, value)) if !name.is_empty() => Ok((name, value)),
        _ => Err(DecodeError::MalformedHeader { line: line_no }),
    }
}

fn parse_content_length(value: &str) -> Result<usize, DecodeError> {
    let bad = || DecodeError::BadContentLength {
        value: excerpt(value.as_bytes()),
    };
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    value.parse().map_err(|_| bad())
}

/// Undoes 1.1/1.2 header escaping. Borrows when there is nothing to undo.
fn unescape_str(raw: &str, version: Version, line_no: usize) -> Result<Cow<'_, str>, DecodeError> {
    let Some(first) = raw.find('\\') else {
        return Ok(Cow::Borrowed(raw));
    };
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    let mut next = Some(first);
    while let Some(i) = next {
        out.push_str(&rest[..i]);
        let c = match rest.as_bytes().get(i + 1) {
            Some(b'n') => '\n',
            Some(b'c') => ':',
            Some(b'\\') => '\\',
            Some(b'r') if version >= Version::V1_2 => '\r',
            _ => return Err(DecodeError::InvalidEscape { line: line_no }),
        };
        out.push(c);
        // The escape is two ASCII bytes, so `i + 2` is a char boundary.
        rest = &rest[i + 2..];
        next = rest.find('\\');
    }
    out.push_str(rest);
    Ok(Cow::Owned(out))
}

#[cfg(test)]
mod tests;
