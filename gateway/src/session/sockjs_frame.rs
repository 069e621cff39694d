//! STOMP frames as SockJS messages: each STOMP frame is one JSON string,
//! escaped at the byte level. A MESSAGE is three pieces: the escaped head
//! (per recipient), the escaped payload (made once per notification and
//! shared by every SockJS recipient, see `Notification::encodings`), and
//! an escaped NUL. Sinks add the framing: `a["…"]` in a WebSocket message,
//! a line on xhr-streaming, a `data:` event on EventSource, or several
//! strings in one array for polling.
//!
//! This is all of SockJS that `session` knows: [`crate::sockjs`] (the HTTP
//! transports) builds on it and on the core, never the other way round.

use base64::Engine;
use bytes::{Bytes, BytesMut};
use herald_protocol::envelope::Notification;
use herald_protocol::sockjs;
use herald_protocol::stomp::{self, Command, Version};

use herald_protocol::websocket::OpCode;

use super::core::Sink;
use super::message_head::{escape_stomp, recipient_lines, sockjs_shared_lines};
use super::writer::WriteQueue;

/// The escaped NUL that ends every STOMP frame.
pub const NUL_ESCAPED: Bytes = Bytes::from_static(b"\\u0000");
/// The end of a SockJS message array holding one MESSAGE: the escaped
/// NUL, the string's and the array's close.
const MESSAGE_END: Bytes = Bytes::from_static(b"\\u0000\"]");
/// A STOMP heart-beat, escaped.
pub const HEARTBEAT_ESCAPED: Bytes = Bytes::from_static(b"\\n");

/// The payload as SockJS carries it, computed once per notification.
pub fn payload(n: &Notification) -> &Bytes {
    n.encodings.sockjs.get_or_init(|| {
        let mut out = BytesMut::new();
        if n.payload_is_utf8 {
            let text = std::str::from_utf8(&n.payload).unwrap_or_default();
            out.reserve(sockjs::escaped_len(text));
            sockjs::escape_into(text, &mut out);
        } else {
            let text = base64::engine::general_purpose::STANDARD.encode(&n.payload);
            sockjs::escape_into(&text, &mut out);
        }
        out.freeze()
    })
}

/// A whole control frame, escaped (one piece).
pub fn control(command: Command, headers: &[(&str, &str)], body: &[u8], v: Version) -> Bytes {
    let mut frame = BytesMut::with_capacity(64 + body.len());
    stomp::encode_frame(command, headers, body, v, &mut frame);
    let mut out = BytesMut::new();
    escape_stomp(&frame, &mut out);
    out.freeze()
}

/// A MESSAGE: escaped head, shared escaped payload, escaped NUL.
pub fn message(
    subscription: &str,
    seq: u64,
    epoch: u64,
    n: &Notification,
    v: Version,
) -> [Bytes; 3] {
    let mut head = BytesMut::new();
    message_head(subscription, seq, epoch, n, v, &mut head);
    [head.freeze(), payload(n).clone(), NUL_ESCAPED]
}

/// A MESSAGE's head, escaped, appended to `out`: this recipient's lines
/// escaped here, then the lines every recipient shares, escaped once per
/// notification.
pub fn message_head(
    subscription: &str,
    seq: u64,
    epoch: u64,
    n: &Notification,
    v: Version,
    out: &mut BytesMut,
) {
    let shared = sockjs_shared_lines(n, v);
    let mut raw = BytesMut::with_capacity(RECIPIENT_LINES + subscription.len());
    recipient_lines(subscription, seq, epoch, v, &mut raw);
    // Room for the shared lines too, so the head is one allocation (the
    // escapes of a recipient's lines fit in the slack of RECIPIENT_LINES).
    out.reserve(RECIPIENT_LINES + subscription.len() + shared.len());
    escape_stomp(&raw, out);
    out.extend_from_slice(shared);
}

/// Room for a recipient's lines but the subscription: the command, the
/// names and two 20-digit numbers.
const RECIPIENT_LINES: usize = 80;

/// `a["<pieces>"]` as a list of chunks.
pub fn array(pieces: &[Bytes]) -> Vec<Bytes> {
    let mut v = Vec::with_capacity(pieces.len() + 2);
    v.push(Bytes::from_static(sockjs::ARRAY_OPEN));
    v.extend(pieces.iter().cloned());
    v.push(Bytes::from_static(sockjs::ARRAY_CLOSE));
    v
}

/// STOMP frames as SockJS messages inside WebSocket frames (the SockJS
/// websocket transport).
pub struct WsSockjs<'a>(pub &'a mut WriteQueue);

impl Sink for WsSockjs<'_> {
    fn frame(&mut self, command: Command, headers: &[(&str, &str)], body: &[u8], v: Version) {
        let pieces = array(&[control(command, headers, body, v)]);
        let parts: Vec<&[u8]> = pieces.iter().map(|p| &p[..]).collect();
        self.0.control_frame(OpCode::Text, &parts);
    }

    fn message(&mut self, subscription: &str, seq: u64, epoch: u64, n: &Notification, v: Version) {
        self.0.message_frame(
            OpCode::Text,
            |head| {
                head.extend_from_slice(sockjs::ARRAY_OPEN);
                message_head(subscription, seq, epoch, n, v, head);
            },
            payload(n),
            MESSAGE_END,
        );
        self.0.mark_delivery(n.accepted);
    }

    fn heartbeat(&mut self) {
        let pieces = array(&[HEARTBEAT_ESCAPED]);
        let parts: Vec<&[u8]> = pieces.iter().map(|p| &p[..]).collect();
        self.0.control_frame(OpCode::Text, &parts);
    }

    fn queued(&self) -> usize {
        self.0.len()
    }

    fn take_overflow(&mut self) -> bool {
        self.0.take_overflow()
    }
}

/// The SockJS close frame for a WebSocket-style close code.
pub fn close_reason(code: u16) -> &'static str {
    match code {
        1000 => "Normal closure",
        1001 => "Going away",
        1007 => "Invalid data",
        1008 => "Policy violation",
        1009 => "Message too big",
        _ => "Protocol error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_protocol::envelope::Scope;
    use herald_protocol::stomp::{Decoded, Limits};

    fn note(payload: &'static [u8], utf8: bool) -> Notification {
        Notification {
            id: "n1".into(),
            scope: Scope::User,
            users: vec!["u".into()],
            clients: vec![],
            sites: vec![],
            event: "e".into(),
            topic: None,
            content_type: "text/plain".into(),
            payload: Bytes::from_static(payload),
            payload_is_utf8: utf8,
            ttl: None,
            encodings: Default::default(),
            accepted: Default::default(),
        }
    }

    fn concat(pieces: &[Bytes]) -> Vec<u8> {
        pieces.iter().flat_map(|p| p.iter().copied()).collect()
    }

    #[test]
    fn message_decodes_back_through_json_and_stomp() {
        let n = note(
            "quote \" backslash \\ nul \u{0} line\n \u{2028} é".as_bytes(),
            true,
        );
        let frame = concat(&array(&message("s-1", 3, 9, &n, Version::V1_2)));
        assert!(frame.starts_with(b"a[\""));
        let strings: Vec<String> = serde_json::from_slice(&frame[1..]).unwrap();
        let mut buf = BytesMut::from(strings[0].as_bytes());
        let Some(Decoded::Frame(f)) =
            stomp::decode(&mut buf, Version::V1_2, &Limits::default()).unwrap()
        else {
            panic!()
        };
        assert_eq!(f.header("seq"), Some("3"));
        assert_eq!(f.body, n.payload);
    }

    #[test]
    fn the_escaped_payload_is_made_once_and_shared() {
        let n = note(b"hello", true);
        let a = message("a", 1, 1, &n, Version::V1_2);
        let b = message("b", 1, 1, &n, Version::V1_2);
        assert_eq!(a[1].as_ptr(), b[1].as_ptr());
    }

    #[test]
    fn binary_payloads_travel_as_base64() {
        let n = note(b"\xff\x00\xfe", false);
        let frame = concat(&array(&message("s", 1, 1, &n, Version::V1_2)));
        let strings: Vec<String> = serde_json::from_slice(&frame[1..]).unwrap();
        assert!(strings[0].contains("content-transfer-encoding:base64"));
        assert!(strings[0].contains("content-length:4\n"));
        assert!(strings[0].ends_with("/wD+\0"));
    }
}
