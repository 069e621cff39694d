//! A MESSAGE's head in two parts. The header lines every recipient of a
//! notification shares (`destination`, `message-id`, `event`, `scope`,
//! `topic`, `content-type`, `content-transfer-encoding`,
//! `content-length`) are encoded once per notification, framing and STOMP
//! version, kept in `Notification::encodings`, and copied whole into each
//! head. Before them go the lines of one recipient (`subscription`,
//! `seq`, `epoch`), written for each with the numbers on the stack: no
//! `core::fmt`, no allocation but the head's own buffer.

use bytes::{Bytes, BytesMut};
use herald_protocol::envelope::{Notification, names};
use herald_protocol::sockjs;
use herald_protocol::stomp::{self, Command, Version, headers};

/// The command line and one recipient's header lines, which the shared
/// lines ([`shared_lines`] or [`sockjs_shared_lines`]) follow.
pub fn recipient_lines(
    subscription: &str,
    seq: u64,
    epoch: u64,
    version: Version,
    out: &mut BytesMut,
) {
    let (mut seq_text, mut epoch_text) = (itoa::Buffer::new(), itoa::Buffer::new());
    let lines = [
        (headers::SUBSCRIPTION, subscription),
        (names::SEQ, seq_text.format(seq)),
        (names::EPOCH, epoch_text.format(epoch)),
    ];
    stomp::encode_head_start(Command::Message, &lines, version, out);
}

/// The header lines every recipient of `n` shares, as a raw STOMP session
/// of `version` writes them, ending the head; made once.
pub fn shared_lines(n: &Notification, version: Version) -> &Bytes {
    n.encodings.stomp_headers[version as usize].get_or_init(|| {
        let mut length = itoa::Buffer::new();
        let lines = shared(n, length.format(n.payload.len()), false);
        let mut out = BytesMut::with_capacity(lines_len(&lines) + 1);
        stomp::encode_header_lines(Command::Message, &lines, version, &mut out);
        out.freeze()
    })
}

/// The same lines as a SockJS session writes them, escaped into a JSON
/// string; made once. A payload that is not UTF-8 travels as base64, so
/// these lines say so, and `content-length` counts the base64 text (the
/// STOMP body; the JSON escaping on top is not STOMP's).
pub fn sockjs_shared_lines(n: &Notification, version: Version) -> &Bytes {
    n.encodings.sockjs_headers[version as usize].get_or_init(|| {
        let binary = !n.payload_is_utf8;
        let length = if binary {
            base64::encoded_len(n.payload.len(), true).unwrap_or(usize::MAX)
        } else {
            n.payload.len()
        };
        let mut length_text = itoa::Buffer::new();
        let lines = shared(n, length_text.format(length), binary);
        let mut raw = BytesMut::with_capacity(lines_len(&lines) + 1);
        stomp::encode_header_lines(Command::Message, &lines, version, &mut raw);
        let mut out = BytesMut::new();
        escape_stomp(&raw, &mut out);
        out.freeze()
    })
}

/// `raw` STOMP text (a head, or a whole control frame) escaped into a JSON
/// string, appended to `out`.
pub fn escape_stomp(raw: &[u8], out: &mut BytesMut) {
    // Headers are strings, escapes are ASCII and the gateway's control
    // frames have text bodies: never lossy.
    let text = String::from_utf8_lossy(raw);
    out.reserve(sockjs::escaped_len(&text));
    sockjs::escape_into(&text, out);
}

/// The shared headers, in order.
fn shared<'a>(n: &'a Notification, length: &'a str, base64: bool) -> Vec<(&'a str, &'a str)> {
    let mut lines = Vec::with_capacity(8);
    lines.extend([
        (headers::DESTINATION, super::stomp::DESTINATION),
        (names::MESSAGE_ID, herald_protocol::tenant::public_id(&n.id)),
        (names::EVENT, n.event.as_str()),
        (names::SCOPE, n.scope.as_str()),
    ]);
    if let Some(topic) = &n.topic {
        lines.push((names::TOPIC, topic.as_str()));
    }
    lines.push((headers::CONTENT_TYPE, n.content_type.as_str()));
    if base64 {
        lines.push(("content-transfer-encoding", "base64"));
    }
    lines.push((headers::CONTENT_LENGTH, length));
    lines
}

/// Room for `lines` unescaped (escaping grows a buffer when it must).
fn lines_len(lines: &[(&str, &str)]) -> usize {
    lines.iter().map(|(k, v)| k.len() + v.len() + 2).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_protocol::envelope::Scope;

    fn note(topic: Option<&str>, payload: &'static [u8], utf8: bool) -> Notification {
        Notification {
            id: "id:1\\2".into(),
            scope: Scope::Client,
            users: vec![],
            clients: vec!["c".into()],
            sites: vec![],
            event: "line\nbreak\r".into(),
            topic: topic.map(Into::into),
            content_type: "text/plain; charset=utf-8".into(),
            payload: Bytes::from_static(payload),
            payload_is_utf8: utf8,
            ttl: None,
            encodings: Default::default(),
            accepted: Default::default(),
        }
    }

    /// The head as one `encode_head` of every header would write it.
    fn whole_head(sub: &str, n: &Notification, length: &str, base64: bool, v: Version) -> BytesMut {
        let mut all = vec![
            (headers::SUBSCRIPTION, sub),
            (names::SEQ, "18446744073709551615"),
            (names::EPOCH, "7"),
        ];
        all.extend(shared(n, length, base64));
        let mut out = BytesMut::new();
        stomp::encode_head(Command::Message, &all, v, &mut out);
        out
    }

    #[test]
    fn the_two_parts_make_the_whole_head_in_every_version() {
        for topic in [None, Some("t:o\\p")] {
            let n = note(topic, b"hello", true);
            for v in [Version::V1_0, Version::V1_1, Version::V1_2] {
                let mut head = BytesMut::new();
                recipient_lines("s:1\n", u64::MAX, 7, v, &mut head);
                head.extend_from_slice(shared_lines(&n, v));
                assert_eq!(head, whole_head("s:1\n", &n, "5", false, v), "{v:?}");
            }
        }
    }

    #[test]
    fn sockjs_lines_are_the_escaped_head_with_the_base64_length() {
        let n = note(Some("t"), b"\xff\x00\xfe", false);
        let v = Version::V1_2;
        let mut raw = BytesMut::new();
        recipient_lines("s\"1", u64::MAX, 7, v, &mut raw);
        let mut out = BytesMut::new();
        sockjs::escape_into(std::str::from_utf8(&raw).unwrap(), &mut out);
        out.extend_from_slice(sockjs_shared_lines(&n, v));
        let mut whole = BytesMut::new();
        escape_stomp(&whole_head("s\"1", &n, "4", true, v), &mut whole);
        assert_eq!(out, whole);
    }

    #[test]
    fn shared_lines_are_made_once_per_version() {
        let n = note(None, b"x", true);
        let first = shared_lines(&n, Version::V1_2).as_ptr();
        assert_eq!(shared_lines(&n, Version::V1_2).as_ptr(), first);
        assert_ne!(shared_lines(&n, Version::V1_0).as_ptr(), first);
        let sockjs = sockjs_shared_lines(&n, Version::V1_2).as_ptr();
        assert_eq!(sockjs_shared_lines(&n, Version::V1_2).as_ptr(), sockjs);
    }
}
