//! What the bench's notifications carry, and how a session finds them in what it receives
//! (pure): a payload is its sequence number and its publish time as text, then padding; a
//! [`Stamp`] is one found in a WebSocket message of any peer's framing.

use super::node_peer;
use crate::client::session::websocket::Framing;
use crate::client::stomp_client::{self, Decoded};
use crate::client::{socketio, sockjs};

/// The payload of publication `seq` published at `ns`: both as text, then padding.
pub(crate) fn payload(seq: u64, ns: u64, bytes: usize) -> Vec<u8> {
    let mut body = format!("{seq} {ns} ").into_bytes();
    body.resize(bytes.max(body.len()), b'x');
    body
}

/// `(seq, ns)` from a [`payload`].
pub(crate) fn parse_payload(body: &[u8]) -> Option<(u64, u64)> {
    let mut parts = body.splitn(3, |&b| b == b' ');
    let seq = std::str::from_utf8(parts.next()?).ok()?.parse().ok()?;
    let ns = std::str::from_utf8(parts.next()?).ok()?.parse().ok()?;
    Some((seq, ns))
}

/// The bench's notifications in one WebSocket message (the message itself for a raw session,
/// the body of each `MESSAGE` frame for STOMP, the text of each `n` event for Socket.IO, each
/// message of an `a[...]` frame for SockJS), each as [`Stamp`]: its `(seq, ns)` and whether
/// it arrived whole, that is `expect_len` bytes (any length when 0) of which every byte after
/// the stamp is the padding.
pub(crate) fn stamps(framing: Framing, message: &[u8], expect_len: usize) -> Vec<Stamp> {
    let stamp = |body: &[u8]| {
        parse_payload(body).map(|(seq, ns)| Stamp {
            seq,
            ns,
            intact: intact(body, expect_len),
        })
    };
    let sockjs_messages = || match sockjs::parse(message) {
        Ok(sockjs::Frame::Messages(messages)) => messages,
        _ => Vec::new(),
    };
    match framing {
        Framing::Raw => stamp(message).into_iter().collect(),
        Framing::Stomp => stomp_stamps(message, &stamp),
        Framing::SockJs => sockjs_messages()
            .iter()
            .flat_map(|m| stomp_stamps(m.as_bytes(), &stamp))
            .collect(),
        Framing::SockJsPlain => sockjs_messages()
            .iter()
            .filter_map(|m| stamp(m.as_bytes()))
            .collect(),
        Framing::SocketIo => socketio::parse(message)
            .map(|packet| socketio::event_texts(packet, node_peer::EVENT))
            .unwrap_or_default()
            .iter()
            .filter_map(|m| stamp(m.as_bytes()))
            .collect(),
    }
}

/// The stamps of the `MESSAGE` frames in STOMP bytes.
fn stomp_stamps(bytes: &[u8], stamp: &impl Fn(&[u8]) -> Option<Stamp>) -> Vec<Stamp> {
    let mut found = Vec::new();
    let mut rest = bytes;
    while let Ok(Some((decoded, used))) = stomp_client::decode(rest) {
        if let Decoded::Frame(frame) = decoded
            && frame.command == "MESSAGE"
            && let Some(s) = stamp(&frame.body)
        {
            found.push(s);
        }
        rest = &rest[used..];
    }
    found
}

/// One notification as received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub(crate) seq: u64,
    pub(crate) ns: u64,
    pub(crate) intact: bool,
}

/// Whether `body` is a whole [`payload`] of `expect_len` bytes (any length when 0).
fn intact(body: &[u8], expect_len: usize) -> bool {
    if expect_len == 0 {
        return true;
    }
    let Some(head) = body
        .iter()
        .enumerate()
        .filter(|&(_, &b)| b == b' ')
        .nth(1)
        .map(|(i, _)| i + 1)
    else {
        return false;
    };
    body.len() == expect_len && body[head..].iter().all(|&b| b == b'x')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_carry_their_seq_and_time() {
        let body = payload(42, 123_456_789, 100);
        assert_eq!(body.len(), 100);
        assert_eq!(parse_payload(&body), Some((42, 123_456_789)));
        let short = payload(1, 2, 0);
        assert_eq!(parse_payload(&short), Some((1, 2)));
        assert_eq!(parse_payload(b"not a payload"), None);
        assert_eq!(parse_payload(b""), None);
    }

    #[test]
    fn stamps_of_stomp_and_raw_messages() {
        let body = payload(7, 9, 60);
        let frame = stomp_client::encode("MESSAGE", &[("subscription", "sub-0")], &body);
        let mut two = frame.clone();
        two.extend_from_slice(b"\n");
        two.extend_from_slice(&stomp_client::encode("MESSAGE", &[], &payload(8, 10, 60)));
        let pairs = |found: Vec<Stamp>| -> Vec<(u64, u64)> {
            found.iter().map(|s| (s.seq, s.ns)).collect()
        };
        assert_eq!(pairs(stamps(Framing::Stomp, &frame, 0)), vec![(7, 9)]);
        assert_eq!(
            pairs(stamps(Framing::Stomp, &two, 0)),
            vec![(7, 9), (8, 10)]
        );
        let receipt = stomp_client::encode("RECEIPT", &[("receipt-id", "r")], b"");
        assert!(stamps(Framing::Stomp, &receipt, 0).is_empty());
        assert_eq!(pairs(stamps(Framing::Raw, &body, 0)), vec![(7, 9)]);
        assert!(stamps(Framing::Raw, b"hello", 0).is_empty());
    }

    #[test]
    fn stamps_of_socketio_and_sockjs_messages() {
        let pairs = |found: Vec<Stamp>| -> Vec<(u64, u64)> {
            found.iter().map(|s| (s.seq, s.ns)).collect()
        };
        let text = |seq, ns| String::from_utf8(payload(seq, ns, 60)).unwrap();
        let event = format!(r#"42["n","{}"]"#, text(7, 9));
        assert_eq!(
            pairs(stamps(Framing::SocketIo, event.as_bytes(), 0)),
            vec![(7, 9)]
        );
        let other = format!(r#"42["other","{}"]"#, text(7, 9));
        assert!(stamps(Framing::SocketIo, other.as_bytes(), 0).is_empty());
        assert!(stamps(Framing::SocketIo, b"2", 0).is_empty());
        let frame = format!("a{}", sockjs::encode(&[&text(1, 2), &text(3, 4)]));
        assert_eq!(
            pairs(stamps(Framing::SockJsPlain, frame.as_bytes(), 0)),
            vec![(1, 2), (3, 4)]
        );
        assert!(stamps(Framing::SockJsPlain, b"h", 0).is_empty());
        let stomp =
            String::from_utf8(stomp_client::encode("MESSAGE", &[], &payload(5, 6, 60))).unwrap();
        let frame = format!("a{}", sockjs::encode(&[&stomp]));
        assert_eq!(
            pairs(stamps(Framing::SockJs, frame.as_bytes(), 0)),
            vec![(5, 6)]
        );
        let large = format!(
            "a{}",
            sockjs::encode(&[&String::from_utf8(payload(8, 9, 1000)).unwrap()])
        );
        assert!(stamps(Framing::SockJsPlain, large.as_bytes(), 1000)[0].intact);
    }

    #[test]
    fn a_delivery_is_intact_at_its_full_length_with_its_padding() {
        let body = payload(3, 4, 1000);
        assert!(stamps(Framing::Raw, &body, 1000)[0].intact);
        assert!(stamps(Framing::Raw, &body, 0)[0].intact);
        assert!(!stamps(Framing::Raw, &body[..999], 1000)[0].intact);
        let mut bad = body.clone();
        bad[500] = b'y';
        assert!(!stamps(Framing::Raw, &bad, 1000)[0].intact);
        let frame = stomp_client::encode("MESSAGE", &[], &body);
        assert!(stamps(Framing::Stomp, &frame, 1000)[0].intact);
    }
}
