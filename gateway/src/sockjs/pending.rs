//! What the SockJS HTTP transports carry: which transport receives
//! ([`Kind`]), and the messages waiting for a receiver ([`Pending`]), which
//! the application writes into and the driver ([`super::session`]) sends.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use herald_protocol::envelope::{Accepted, Notification};
use herald_protocol::sockjs;
use herald_protocol::stomp::{Command, Version};

use crate::config::SessionConfig;
use crate::metrics::Transport;
use crate::session::core::Sink;
use crate::session::sockjs_frame;
use crate::session::writer::Budget;

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
///
/// Bounded like a WebSocket session's write queue
/// ([`crate::session::writer`], "Bound and policy"): messages the gateway
/// makes (RECEIPT, ERROR, CONNECTED, gap markers, heart-beats, the test
/// apps' echoes) are charged against `session.queue_bytes` until a receiver
/// takes them; one that does not fit is refused and the session is cut as a
/// slow consumer ([`Sink::take_overflow`]). MESSAGEs are pulled only below
/// `PULL_UNTIL` and are not charged. Once taken, a frame waits in the
/// receiver's queue, which holds at most a few frames.
#[derive(Debug)]
pub struct Pending {
    pub(super) messages: VecDeque<Vec<Bytes>>,
    pub(super) bytes: usize,
    /// Bytes of messages the gateway made (charged).
    control: usize,
    budget: Budget,
    /// When the notifications of the MESSAGE frames in `messages` were
    /// accepted (the known ones), observed as delivery latency when the
    /// driver hands the frame to a receiver.
    pub(super) accepted: Vec<Accepted>,
}

impl Default for Pending {
    /// A queue with the default `session.queue_bytes` bound.
    fn default() -> Self {
        Pending::new(SessionConfig::default().queue_bytes)
    }
}

impl Pending {
    /// An empty queue that charges control messages against `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Pending {
            messages: VecDeque::new(),
            bytes: 0,
            control: 0,
            budget: Budget::new(limit),
            accepted: Vec::new(),
        }
    }

    /// Queue one message, given as text (charged).
    pub fn push_text(&mut self, text: &str) {
        let mut e = BytesMut::with_capacity(sockjs::escaped_len(text));
        sockjs::escape_into(text, &mut e);
        self.push_control(vec![e.freeze()]);
    }

    /// Control bytes waiting.
    pub fn control_len(&self) -> usize {
        self.control
    }

    /// Queue a message the gateway made, if it fits in the bound.
    fn push_control(&mut self, pieces: Vec<Bytes>) {
        let n = pieces.iter().map(Bytes::len).sum::<usize>();
        if self.budget.admit(self.control, n) {
            self.control += n;
            self.push(pieces);
        }
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
        self.control = 0;
        self.messages = VecDeque::new();
        Some(out)
    }
}

impl Sink for Pending {
    fn frame(&mut self, command: Command, headers: &[(&str, &str)], body: &[u8], v: Version) {
        self.push_control(vec![sockjs_frame::control(command, headers, body, v)]);
    }

    fn message(&mut self, subscription: &str, seq: u64, epoch: u64, n: &Notification, v: Version) {
        self.push(sockjs_frame::message(subscription, seq, epoch, n, v).to_vec());
        if n.accepted.unix_micros().is_some() {
            self.accepted.push(n.accepted);
        }
    }

    fn heartbeat(&mut self) {
        self.push_control(vec![sockjs_frame::HEARTBEAT_ESCAPED]);
    }

    fn queued(&self) -> usize {
        self.bytes
    }

    fn take_overflow(&mut self) -> bool {
        self.budget.take_overflow()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receipts_past_the_bound_are_refused_and_overflow() {
        let mut p = Pending::new(200);
        let receipt =
            |p: &mut Pending| p.frame(Command::Receipt, &[("receipt-id", "r")], b"", Version::V1_2);
        for _ in 0..1000 {
            receipt(&mut p);
        }
        assert!(p.control_len() <= 200, "{}", p.control_len());
        assert!(p.take_overflow());
        // The ERROR that ends the session fits; the bound holds after it.
        p.frame(
            Command::Error,
            &[("message", "slow consumer")],
            b"",
            Version::V1_2,
        );
        assert!(p.control_len() > 200);
        assert!(p.control_len() <= 200 + crate::session::writer::CUT_RESERVE);
        // A receiver taking the frame frees the charge.
        assert!(p.take_frame().is_some());
        assert_eq!(p.control_len(), 0);
    }
}
