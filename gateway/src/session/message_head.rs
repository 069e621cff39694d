//! A MESSAGE's headers, built for each recipient of every notification
//! without touching the heap: the numbers as text on the stack, the headers
//! in a fixed array. Every framing (raw `/ws`, SockJS) writes them in this
//! order.

use herald_protocol::envelope::{Notification, names};
use herald_protocol::stomp::headers;

/// The MESSAGE headers every framing writes, in order.
pub fn message_headers<'a>(
    numbers: &'a mut Numbers,
    subscription: &'a str,
    seq: u64,
    epoch: u64,
    length: usize,
    n: &'a Notification,
    base64: bool,
) -> MessageHeaders<'a> {
    let Numbers {
        seq: seq_text,
        epoch: epoch_text,
        length: length_text,
    } = numbers;
    let (seq, epoch, length) = (
        seq_text.format(seq),
        epoch_text.format(epoch),
        length_text.format(length),
    );
    let mut h = MessageHeaders {
        list: [("", ""); MessageHeaders::MAX],
        len: 0,
    };
    for header in [
        (headers::SUBSCRIPTION, subscription),
        (headers::DESTINATION, super::stomp::DESTINATION),
        (names::MESSAGE_ID, n.id.as_str()),
        (names::SEQ, seq),
        (names::EPOCH, epoch),
        (names::EVENT, n.event.as_str()),
        (names::SCOPE, n.scope.as_str()),
    ] {
        h.push(header);
    }
    if let Some(topic) = &n.topic {
        h.push((names::TOPIC, topic));
    }
    h.push((headers::CONTENT_TYPE, &n.content_type));
    if base64 {
        h.push(("content-transfer-encoding", "base64"));
    }
    h.push((headers::CONTENT_LENGTH, length));
    h
}

/// The text of a MESSAGE's numbers (`seq`, `epoch`, `content-length`), on
/// the stack while its head is written: no `core::fmt`, no allocation.
#[derive(Default)]
pub struct Numbers {
    seq: itoa::Buffer,
    epoch: itoa::Buffer,
    length: itoa::Buffer,
}

/// A MESSAGE frame's headers, kept on the stack: they are made once per
/// recipient of every notification.
pub struct MessageHeaders<'a> {
    list: [(&'a str, &'a str); MessageHeaders::MAX],
    len: usize,
}

impl<'a> MessageHeaders<'a> {
    /// The most a MESSAGE carries: seven always, then `topic`,
    /// `content-type`, `content-transfer-encoding` and `content-length`.
    const MAX: usize = 11;

    fn push(&mut self, header: (&'a str, &'a str)) {
        self.list[self.len] = header;
        self.len += 1;
    }

    /// The headers, in order.
    pub fn as_slice(&self) -> &[(&'a str, &'a str)] {
        &self.list[..self.len]
    }
}
