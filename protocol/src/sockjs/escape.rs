//! JSON string escaping with the characters SockJS requires escaped, at the
//! byte level.
//!
//! # The escape set
//! - `"` and `\`, as `\"` and `\\` (JSON).
//! - U+0000..=U+001F (JSON), as `\b` `\t` `\n` `\f` `\r` where JSON has a
//!   short form and `\u00xx` otherwise: byte for byte what `JSON.stringify`,
//!   and so sockjs-node, writes. The short forms keep STOMP frames, which are
//!   full of `\n`, a third the size.
//! - U+200C..=U+200F, U+2028..=U+202F, U+2060..=U+206F and U+FFF0..=U+FFFF,
//!   as `\uxxxx` with lowercase hex: browsers mangle these on some
//!   transports. This is `escapable_by_server` in sockjs-protocol 0.3.3's
//!   `sockjs-protocol.py`, whose `JSONEncoding.test_xhr_server_encodes`
//!   expects exactly `\u%04x` for each of them.
//!
//! Everything else, U+007F..=U+009F, U+200B and characters outside the BMP
//! included, is copied as raw UTF-8. (sockjs-node also escapes every UTF-16
//! surrogate code unit, so it writes characters outside the BMP as
//! `\ud83d\ude00`; its strings are UTF-16 and may hold lone surrogates.
//! A `&str` cannot, and the protocol suite does not ask for it.)
//!
//! In UTF-8 every escaped character is one byte below 0x80, or three bytes
//! starting 0xE2 or 0xEF, so the scan looks at single bytes and only
//! decodes at those two lead bytes.

use bytes::{BufMut, BytesMut};

/// Lowercase hex digits, as sockjs-node writes them.
const HEX: &[u8; 16] = b"0123456789abcdef";

/// Bytes that start a character that may need escaping: controls, `"`,
/// `\`, and the UTF-8 lead bytes of U+2000..=U+2FFF and U+F000..=U+FFFF.
const CANDIDATE: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = true;
        b += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table[0xE2] = true;
    table[0xEF] = true;
    table
};

/// Append the JSON-string escaping of `text`, without the surrounding
/// quotes, scanning bytes and copying unescaped runs as raw UTF-8.
///
/// Escaped: `"` and `\` (as `\"`, `\\`); U+0000..=U+001F (as `\b` `\t`
/// `\n` `\f` `\r` where JSON has a short form, `\u00xx` otherwise, like
/// `JSON.stringify`); U+200C..=U+200F, U+2028..=U+202F, U+2060..=U+206F and
/// U+FFF0..=U+FFFF (as `\uxxxx`, lowercase), sockjs-protocol's
/// `escapable_by_server`. Everything else, characters outside the BMP
/// included, is copied raw.
///
/// The output between two `"` is a JSON string that parses back to `text`,
/// so a body escaped once can be shared by every recipient's frame.
pub fn escape_into(text: &str, out: &mut BytesMut) {
    let mut rest = text.as_bytes();
    out.reserve(rest.len());
    while let Some((at, width, unit)) = next_escape(rest) {
        out.extend_from_slice(&rest[..at]);
        write_escape(unit, out);
        rest = &rest[at + width..];
    }
    out.extend_from_slice(rest);
}

/// Exactly how many bytes [`escape_into`] appends for `text`, so callers can
/// size buffers and content lengths without escaping twice.
pub fn escaped_len(text: &str) -> usize {
    let mut rest = text.as_bytes();
    let mut len = rest.len();
    while let Some((at, width, unit)) = next_escape(rest) {
        len = len - width + escape_len(unit);
        rest = &rest[at + width..];
    }
    len
}

/// The next character to escape in `bytes`: its offset, its UTF-8 width and
/// its code point (always in the BMP).
fn next_escape(bytes: &[u8]) -> Option<(usize, usize, u16)> {
    let mut from = 0;
    while let Some(found) = bytes[from..]
        .iter()
        .position(|&b| CANDIDATE[usize::from(b)])
    {
        let at = from + found;
        let b0 = bytes[at];
        if b0 < 0x80 {
            return Some((at, 1, u16::from(b0)));
        }
        // A 3-byte sequence: the text is UTF-8, so both continuation bytes
        // are there; `get` keeps this total anyway.
        if let (Some(&b1), Some(&b2)) = (bytes.get(at + 1), bytes.get(at + 2)) {
            let escape = match (b0, b1) {
                // U+200C..=U+200F and U+2028..=U+202F.
                (0xE2, 0x80) => matches!(b2, 0x8C..=0x8F | 0xA8..=0xAF),
                // U+2060..=U+206F.
                (0xE2, 0x81) => matches!(b2, 0xA0..=0xAF),
                // U+FFF0..=U+FFFF.
                (0xEF, 0xBF) => matches!(b2, 0xB0..=0xBF),
                _ => false,
            };
            if escape {
                let unit =
                    u16::from(b0 & 0x0F) << 12 | u16::from(b1 & 0x3F) << 6 | u16::from(b2 & 0x3F);
                return Some((at, 3, unit));
            }
        }
        from = at + 1;
    }
    None
}

/// The JSON short escape for `unit`, if it has one.
fn short_escape(unit: u16) -> Option<u8> {
    Some(match unit {
        0x22 => b'"',
        0x5C => b'\\',
        0x08 => b'b',
        0x09 => b't',
        0x0A => b'n',
        0x0C => b'f',
        0x0D => b'r',
        _ => return None,
    })
}

fn escape_len(unit: u16) -> usize {
    if short_escape(unit).is_some() { 2 } else { 6 }
}

fn write_escape(unit: u16, out: &mut BytesMut) {
    match short_escape(unit) {
        Some(c) => out.extend_from_slice(&[b'\\', c]),
        None => {
            out.extend_from_slice(b"\\u");
            for shift in [12, 8, 4, 0] {
                out.put_u8(HEX[usize::from(unit >> shift & 0xF)]);
            }
        }
    }
}

#[cfg(test)]
mod tests;
