//! What the SockJS HTTP transports carry: which transport receives
//! ([`Kind`]), and the messages waiting for a receiver ([`Pending`]), which
//! the application writes into and the driver ([`super::session`]) sends.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use herald_protocol::envelope::Notification;
use herald_protocol::sockjs;
use herald_protocol::stomp::{Command, Version};

use crate::metrics::Transport;
use crate::session::core::Sink;
use crate::session::sockjs_frame;

/// The receiving transports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Streaming lines: `frame\n`.
    XhrStreaming,
    /// Server-sent events: `data: frame\r\n\r\n`.
    Eventsource,
    /// One frame per request.
    XhrPolling,
}

impl Kind {
    /// The session gauge this transport counts in.
    pub fn transport(self) -> Transport {
        match self {
            Kind::XhrStreaming => Transport::XhrStreaming,
            Kind::Eventsource => Transport::Eventsource,
            Kind::XhrPolling => Transport::XhrPolling,
        }
    }

    /// Wrap one SockJS frame (given as pieces) for this transport.
    pub(super) fn wrap(self, pieces: Vec<Bytes>) -> Vec<Bytes> {
        let mut out = Vec::with_capacity(pieces.len() + 2);
        if self == Kind::Eventsource {
            out.push(Bytes::from_static(b"data: "));
        }
        out.extend(pieces);
        out.push(Bytes::from_static(if self == Kind::Eventsource {
            b"\r\n\r\n"
        } else {
            b"\n"
        }));
        out
    }
}

/// Escaped SockJS messages waiting for a receiver, each as pieces.
#[derive(Debug, Default)]
pub struct Pending {
    pub(super) messages: VecDeque<Vec<Bytes>>,
    pub(super) bytes: usize,
}

impl Pending {
    /// Queue one message, given as text.
    pub fn push_text(&mut self, text: &str) {
        let mut e = BytesMut::with_capacity(sockjs::escaped_len(text));
        sockjs::escape_into(text, &mut e);
        self.push(vec![e.freeze()]);
    }

    pub(super) fn push(&mut self, pieces: Vec<Bytes>) {
        self.bytes += pieces.iter().map(Bytes::len).sum::<usize>();
        self.messages.push_back(pieces);
    }

    /// All pending messages as one `a[...]` frame.
    pub(super) fn take_frame(&mut self) -> Option<Vec<Bytes>> {
        if self.messages.is_empty() {
            return None;
        }
        let mut out = vec![Bytes::from_static(b"a[")];
        for (i, m) in self.messages.drain(..).enumerate() {
            out.push(Bytes::from_static(if i == 0 { b"\"" } else { b",\"" }));
            out.extend(m);
            out.push(Bytes::from_static(b"\""));
        }
        out.push(Bytes::from_static(b"]"));
        self.bytes = 0;
        self.messages = VecDeque::new();
        Some(out)
    }
}

impl Sink for Pending {
    fn frame(&mut self, command: Command, headers: &[(&str, &str)], body: &[u8], v: Version) {
        self.push(vec![sockjs_frame::control(command, headers, body, v)]);
    }

    fn message(&mut self, subscription: &str, seq: u64, epoch: u64, n: &Notification, v: Version) {
        self.push(sockjs_frame::message(subscription, seq, epoch, n, v).to_vec());
    }

    fn heartbeat(&mut self) {
        self.push(vec![sockjs_frame::HEARTBEAT_ESCAPED]);
    }

    fn queued(&self) -> usize {
        self.bytes
    }
}
