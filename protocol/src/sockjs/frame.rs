//! The frames a SockJS server sends: open, heartbeat, message array, close.
//!
//! Transports add their own delimiters: the XHR transports end each frame
//! with `\n`, the WebSocket transport sends each frame as one text message.

use std::fmt::Write as _;

use bytes::{BufMut, BytesMut};

use super::escape::{escape_into, escaped_len};

/// Open frame, sent once when a session starts.
pub const OPEN: &[u8] = b"o";

/// Heartbeat frame, sent when a session has been idle (typically 25 s).
pub const HEARTBEAT: &[u8] = b"h";

/// Start of a one-message array frame: `a["`.
///
/// With [`ARRAY_CLOSE`], lets a caller write `a["<head><body><tail>"]` from
/// a per-recipient head and a body that was escaped once (with
/// [`escape_into`]) and is shared by every recipient.
pub const ARRAY_OPEN: &[u8] = b"a[\"";

/// End of a one-message array frame: `"]`. See [`ARRAY_OPEN`].
pub const ARRAY_CLOSE: &[u8] = b"\"]";

/// Close frame `c[code,"reason"]`, the reason escaped like any string.
pub fn encode_close(code: u16, reason: &str, out: &mut BytesMut) {
    // "c[" + up to 5 digits + ",\"" + reason + "\"]"
    out.reserve(11 + reason.len());
    out.extend_from_slice(b"c[");
    // Writing to a BytesMut cannot fail.
    let _ = write!(out, "{code}");
    out.extend_from_slice(b",\"");
    escape_into(reason, out);
    out.extend_from_slice(b"\"]");
}

/// Array frame `a["m1","m2"]` for a list of messages (`a[]` for none).
pub fn encode_array(messages: &[&str], out: &mut BytesMut) {
    out.reserve(3 + messages.iter().map(|m| m.len() + 3).sum::<usize>());
    out.extend_from_slice(b"a[");
    for (i, message) in messages.iter().enumerate() {
        if i > 0 {
            out.put_u8(b',');
        }
        out.put_u8(b'"');
        escape_into(message, out);
        out.put_u8(b'"');
    }
    out.put_u8(b']');
}

/// Exactly how many bytes [`encode_array`] appends for `messages`.
pub fn encoded_array_len(messages: &[&str]) -> usize {
    let commas = messages.len().saturating_sub(1);
    let quoted: usize = messages.iter().map(|m| escaped_len(m) + 2).sum();
    3 + commas + quoted
}

/// Close codes and reasons SockJS servers send, as sockjs-protocol 0.3.3's
/// suite and sockjs-node spell them.
pub mod close {
    /// The application closed the session.
    pub const NORMAL: (u16, &str) = (1000, "Normal closure");
    /// The receiving request of a polling or streaming session was cut
    /// before the session closed.
    pub const INTERRUPTED: (u16, &str) = (1002, "Connection interrupted");
    /// The server is shutting down.
    pub const GOING_AWAY: (u16, &str) = (1001, "Going away");
    /// A second receiving request arrived while one is still open.
    pub const ANOTHER_CONNECTION: (u16, &str) = (2010, "Another connection still open");
    /// The server ended the session (the suite's example close).
    pub const GO_AWAY: (u16, &str) = (3000, "Go away!");
    /// The client sent a WebSocket message that is not a JSON string or
    /// array of strings.
    pub const BROKEN_FRAMING: (u16, &str) = (3000, "Broken framing.");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn array(messages: &[&str]) -> Vec<u8> {
        let mut out = BytesMut::new();
        encode_array(messages, &mut out);
        assert_eq!(encoded_array_len(messages), out.len(), "{messages:?}");
        out.to_vec()
    }

    #[test]
    fn close_frames() {
        let mut out = BytesMut::new();
        let (code, reason) = close::GO_AWAY;
        encode_close(code, reason, &mut out);
        assert_eq!(&out[..], br#"c[3000,"Go away!"]"#);

        out.clear();
        let (code, reason) = close::ANOTHER_CONNECTION;
        encode_close(code, reason, &mut out);
        assert_eq!(&out[..], br#"c[2010,"Another connection still open"]"#);

        out.clear();
        encode_close(u16::MAX, "a \"b\"\n\u{2028}", &mut out);
        assert_eq!(&out[..], br#"c[65535,"a \"b\"\n\u2028"]"#);
        out.clear();
        encode_close(0, "", &mut out);
        assert_eq!(&out[..], br#"c[0,""]"#);
    }

    #[test]
    fn array_frames() {
        assert_eq!(array(&[]), b"a[]");
        assert_eq!(array(&["a"]), br#"a["a"]"#);
        assert_eq!(array(&["m1", "m2", ""]), br#"a["m1","m2",""]"#);
        assert_eq!(
            array(&["CONNECTED\nversion:1.2\n\n\0", "é\"\\"]),
            r#"a["CONNECTED\nversion:1.2\n\n\u0000","é\"\\"]"#.as_bytes()
        );
    }

    #[test]
    fn shared_body_pieces_make_the_same_frame() {
        let (head, body) = ("MESSAGE\nsubscription:7\n\n", "{\"x\":1}\0");
        let mut pieces = BytesMut::from(ARRAY_OPEN);
        escape_into(head, &mut pieces);
        escape_into(body, &mut pieces);
        pieces.extend_from_slice(ARRAY_CLOSE);
        assert_eq!(&pieces[..], array(&[&format!("{head}{body}")]));
    }

    #[test]
    fn fixed_frames() {
        assert_eq!(OPEN, b"o");
        assert_eq!(HEARTBEAT, b"h");
    }
}
