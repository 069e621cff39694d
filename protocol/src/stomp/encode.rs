//! STOMP frame encoding into a `BytesMut`.
//!
//! Herald writes a MESSAGE as a per-recipient head ([`encode_head`]) followed
//! by a body shared by every recipient and a NUL, so the body is never
//! copied per session. [`encode_frame`] writes a whole frame.

use std::fmt::Write as _;

use bytes::{BufMut, BytesMut};

use super::headers::CONTENT_LENGTH;
use super::{Command, Frame, Version};

/// Write the command line, the headers (escaped per version; never for
/// CONNECT/STOMP/CONNECTED) and the blank line.
///
/// The caller appends the body and a NUL. Used to write a per-recipient head
/// before a shared body. Header names must be non-empty; where headers are
/// not escaped, names must not contain `:` and any `\n` or `\r` is written
/// as a space (see [`escape_into`]).
pub fn encode_head(
    command: Command,
    headers: &[(&str, &str)],
    version: Version,
    out: &mut BytesMut,
) {
    encode_head_start(command, headers, version, out);
    out.put_u8(b'\n');
}

/// The start of a head: the command line and `headers`, without the blank
/// line. The caller appends the rest of the head, typically a block of
/// header lines made once by [`encode_header_lines`] and copied into many
/// heads, which ends with the blank line.
pub fn encode_head_start(
    command: Command,
    headers: &[(&str, &str)],
    version: Version,
    out: &mut BytesMut,
) {
    write_headers(command, headers.iter().copied(), version, out);
}

/// Header lines alone, escaped as `command`'s headers are in `version`,
/// then the blank line that ends a head: the end of a head begun by
/// [`encode_head_start`].
pub fn encode_header_lines(
    command: Command,
    headers: &[(&str, &str)],
    version: Version,
    out: &mut BytesMut,
) {
    write_lines(command, headers.iter().copied(), version, out);
    out.put_u8(b'\n');
}

/// A whole frame: head, body, NUL.
///
/// Adds `content-length` when the body is non-empty and the caller did not
/// give one, so bodies may contain NULs.
pub fn encode_frame(
    command: Command,
    headers: &[(&str, &str)],
    body: &[u8],
    version: Version,
    out: &mut BytesMut,
) {
    let has_length = headers.iter().any(|(n, _)| *n == CONTENT_LENGTH);
    write_frame(
        command,
        headers.iter().copied(),
        has_length,
        body,
        version,
        out,
    );
}

/// Convenience: encode a decoded [`Frame`] (round trip helper for tests).
///
/// Like [`encode_frame`], adds `content-length` to a non-empty body that has
/// none.
pub fn encode(frame: &Frame, version: Version, out: &mut BytesMut) {
    let headers = frame.headers.iter().map(|(n, v)| (n.as_str(), v.as_str()));
    let has_length = frame.header(CONTENT_LENGTH).is_some();
    write_frame(
        frame.command,
        headers,
        has_length,
        &frame.body,
        version,
        out,
    );
}

/// Escape one header name/value per version into out (exposed for the
/// gateway's prebuilt header blocks).
///
/// 1.1: `\` `\n` `:` become `\\` `\n` `\c`; a `\r` is written as is (1.1
/// cannot escape it; a trailing one is lost to the `\r\n` line ending).
/// 1.2: `\r` also becomes `\r`. 1.0 has no escaping: `\n` and `\r` are
/// written as spaces so a value can never end its line early and inject
/// headers.
pub fn escape_into(value: &str, version: Version, out: &mut BytesMut) {
    match version {
        Version::V1_0 => write_verbatim(value, out),
        Version::V1_1 | Version::V1_2 => write_escaped(value, version, out),
    }
}

fn write_frame<'a>(
    command: Command,
    headers: impl Iterator<Item = (&'a str, &'a str)>,
    has_length: bool,
    body: &[u8],
    version: Version,
    out: &mut BytesMut,
) {
    write_headers(command, headers, version, out);
    if !body.is_empty() && !has_length {
        out.extend_from_slice(CONTENT_LENGTH.as_bytes());
        // Writing to a BytesMut cannot fail.
        let _ = writeln!(out, ":{}", body.len());
    }
    out.reserve(body.len() + 2);
    out.put_u8(b'\n');
    out.extend_from_slice(body);
    out.put_u8(0);
}

/// The command line and header lines, without the blank line.
fn write_headers<'a>(
    command: Command,
    headers: impl Iterator<Item = (&'a str, &'a str)>,
    version: Version,
    out: &mut BytesMut,
) {
    out.extend_from_slice(command.as_str().as_bytes());
    out.put_u8(b'\n');
    write_lines(command, headers, version, out);
}

/// The header lines, escaped as `command`'s are in `version`.
fn write_lines<'a>(
    command: Command,
    headers: impl Iterator<Item = (&'a str, &'a str)>,
    version: Version,
    out: &mut BytesMut,
) {
    let escape = version != Version::V1_0 && command.escapes_headers();
    for (name, value) in headers {
        out.reserve(name.len() + value.len() + 2);
        if escape {
            write_escaped(name, version, out);
            out.put_u8(b':');
            write_escaped(value, version, out);
        } else {
            write_verbatim(name, out);
            out.put_u8(b':');
            write_verbatim(value, out);
        }
        out.put_u8(b'\n');
    }
}

/// Whether `value` holds a byte that escaping or the 1.0 substitution may
/// change (`\\`, `\n`, `:`, `\r`). No early exit, so the compiler can test
/// many bytes at once: header values are short and almost never have one,
/// and this runs for every header of every MESSAGE to every recipient.
fn may_need_escaping(value: &[u8]) -> bool {
    value.iter().fold(false, |found, &b| {
        found | matches!(b, b'\\' | b'\n' | b':' | b'\r')
    })
}

fn write_escaped(value: &str, version: Version, out: &mut BytesMut) {
    if !may_need_escaping(value.as_bytes()) {
        out.extend_from_slice(value.as_bytes());
        return;
    }
    write_replacing(value, out, |b| match b {
        b'\\' => Some(b"\\\\"),
        b'\n' => Some(b"\\n"),
        b':' => Some(b"\\c"),
        b'\r' if version >= Version::V1_2 => Some(b"\\r"),
        _ => None,
    });
}

fn write_verbatim(value: &str, out: &mut BytesMut) {
    if !may_need_escaping(value.as_bytes()) {
        out.extend_from_slice(value.as_bytes());
        return;
    }
    write_replacing(value, out, |b| match b {
        b'\n' | b'\r' => Some(b" "),
        _ => None,
    });
}

/// Copies `value` in runs, replacing the bytes `replace` maps.
fn write_replacing(value: &str, out: &mut BytesMut, replace: impl Fn(u8) -> Option<&'static [u8]>) {
    let bytes = value.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if let Some(with) = replace(b) {
            out.extend_from_slice(&bytes[start..i]);
            out.extend_from_slice(with);
            start = i + 1;
        }
    }
    out.extend_from_slice(&bytes[start..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(command: Command, headers: &[(&str, &str)], version: Version) -> BytesMut {
        let mut out = BytesMut::new();
        encode_head(command, headers, version, &mut out);
        out
    }

    #[test]
    fn a_head_in_two_parts_is_the_head_in_one() {
        let (first, rest) = ([("a", "1:\n")], [("b", "x\\y"), ("c", "")]);
        for version in [Version::V1_0, Version::V1_1, Version::V1_2] {
            for command in [Command::Message, Command::Connected] {
                let mut parts = BytesMut::new();
                encode_head_start(command, &first, version, &mut parts);
                encode_header_lines(command, &rest, version, &mut parts);
                let all = [first[0], rest[0], rest[1]];
                assert_eq!(
                    parts,
                    head(command, &all, version),
                    "{command:?} {version:?}"
                );
            }
        }
    }

    #[test]
    fn escaping_follows_the_version() {
        let h = [("a:b", "x\ny\\z\r")];
        assert_eq!(
            &head(Command::Message, &h, Version::V1_2)[..],
            b"MESSAGE\na\\cb:x\\ny\\\\z\\r\n\n"
        );
        assert_eq!(
            &head(Command::Message, &h, Version::V1_1)[..],
            b"MESSAGE\na\\cb:x\\ny\\\\z\r\n\n"
        );
        let h = [("a", "x\ny\\z:\r")];
        assert_eq!(
            &head(Command::Message, &h, Version::V1_0)[..],
            b"MESSAGE\na:x y\\z: \n\n"
        );
    }

    #[test]
    fn the_fast_path_sees_every_byte_that_escaping_changes() {
        for b in 0..=u8::MAX {
            let special = matches!(b, b'\\' | b'\n' | b':' | b'\r');
            for at in [0, 7, 31, 40] {
                let mut value = vec![b'a'; 41];
                value[at] = b;
                assert_eq!(may_need_escaping(&value), special, "{b} at {at}");
            }
        }
        // Plain values go through unchanged in every version.
        let h = [
            ("message-id", "0123456789abcdef"),
            ("event", "chat.message"),
        ];
        for v in [Version::V1_0, Version::V1_1, Version::V1_2] {
            assert_eq!(
                &head(Command::Message, &h, v)[..],
                b"MESSAGE\nmessage-id:0123456789abcdef\nevent:chat.message\n\n"
            );
        }
    }

    #[test]
    fn connected_is_never_escaped() {
        let h = [("server", "herald:1\\2\nx")];
        assert_eq!(
            &head(Command::Connected, &h, Version::V1_2)[..],
            b"CONNECTED\nserver:herald:1\\2 x\n\n"
        );
    }

    #[test]
    fn frames_get_a_content_length_unless_given_or_empty() {
        let mut out = BytesMut::new();
        encode_frame(
            Command::Send,
            &[("destination", "/q")],
            b"a\0b",
            Version::V1_2,
            &mut out,
        );
        assert_eq!(
            &out[..],
            b"SEND\ndestination:/q\ncontent-length:3\n\na\0b\0"
        );

        out.clear();
        encode_frame(
            Command::Send,
            &[("content-length", "1")],
            b"a",
            Version::V1_2,
            &mut out,
        );
        assert_eq!(&out[..], b"SEND\ncontent-length:1\n\na\0");

        out.clear();
        encode_frame(Command::Disconnect, &[], b"", Version::V1_2, &mut out);
        assert_eq!(&out[..], b"DISCONNECT\n\n\0");

        out.clear();
        encode(
            &Frame::new(Command::Error).with_body("oops"),
            Version::V1_0,
            &mut out,
        );
        assert_eq!(&out[..], b"ERROR\ncontent-length:4\n\noops\0");
    }

    #[test]
    fn escape_into_writes_only_the_value() {
        let mut out = BytesMut::new();
        escape_into("a:b", Version::V1_1, &mut out);
        assert_eq!(&out[..], b"a\\cb");
    }
}
