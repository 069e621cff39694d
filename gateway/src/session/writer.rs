//! What a session writes, as chunks of `Bytes` for a vectored write, and the
//! bound on what waits for the socket.
//!
//! A MESSAGE is three chunks: `[WebSocket header + STOMP head]` (small, per
//! recipient: it names the subscription and the mailbox sequence), the
//! payload (the notification's own `Bytes`, shared by every recipient, never
//! copied), and a static NUL. Server frames are unmasked, so the shared
//! payload goes to the socket as is.
//!
//! # Bound and policy
//!
//! Everything else a session writes is a *control frame*: CONNECTED,
//! RECEIPT, ERROR, gap markers, heart-beats, pongs, close frames and
//! SockJS's `o`, `h` and `c`. Control frames are made in answer to what the
//! client sends, so a client that sends and never reads could make the
//! gateway queue them without end. They are charged against the session's
//! bound (`session.queue_bytes`) until the socket takes them:
//!
//! - a run of control frames shares one buffer, so what is charged is what
//!   is held (give or take the buffer's growth);
//! - pongs coalesce: while a pong waits untouched, a newer ping replaces it
//!   (RFC 6455 5.5.3 lets an endpoint answer only the most recent ping). The
//!   replaced pong still counts against the bound until the socket takes the
//!   one that replaced it, so a client that floods pings and never reads
//!   runs out of room like any other slow reader;
//! - a control frame that does not fit is not queued, and the queue is
//!   *overflowed*: the session must be cut as a slow consumer
//!   ([`WriteQueue::take_overflow`]; the policy is always `disconnect`, since
//!   a RECEIPT or a pong cannot be dropped without the client noticing). The
//!   cut opens a small reserve ([`CUT_RESERVE`]) for the ERROR frame and the
//!   close frame that tell the client why, and the session reads nothing
//!   more.
//!
//! MESSAGE frames are not charged here: the session pulls them from its
//! outbox (a window bounded by `session.queue_messages` and `queue_bytes`,
//! beyond which the session reads on from its mailbox; see
//! [`crate::outbox`]) only while this queue holds less than
//! [`crate::session::websocket::PULL_UNTIL`] bytes, and their payloads are
//! shared. A client that takes nothing of them for `session.max_lag_ms` is
//! cut by the session's core.

use std::collections::VecDeque;
use std::io::{self, IoSlice};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use herald_protocol::envelope::{Accepted, Notification};
use herald_protocol::stomp::{self, Command, Version};
use herald_protocol::websocket::{self, OpCode};

use super::core::Sink;
use super::message_head::{recipient_lines, shared_lines};
use crate::config::SessionConfig;
use crate::metrics::TransportMeter;
use crate::metrics::traffic::now_micros;

const NUL: Bytes = Bytes::from_static(b"\0");
/// A STOMP heart-beat (one EOL) in a WebSocket text frame.
const HEARTBEAT: &[u8] = &[0x81, 0x01, b'\n'];

/// Room for a MESSAGE's STOMP head (its headers are about 200 bytes; a
/// longer head grows the buffer).
const HEAD_CAPACITY: usize = 256;

/// Most chunks handed to one `writev`.
const MAX_IOV: usize = 64;

/// Room past the bound, opened once when the session is cut, for the ERROR
/// frame and the close frame that say why (a few hundred bytes at most).
pub const CUT_RESERVE: usize = 1024;

/// A chunk waiting for the socket.
#[derive(Debug)]
struct Chunk {
    data: Bytes,
    /// Made by the gateway (charged against the bound), not a MESSAGE part.
    control: bool,
    /// The last chunk of a MESSAGE frame: when its notification was
    /// accepted, observed as delivery latency once the socket took the
    /// whole chunk.
    accepted: Accepted,
}

impl std::ops::Deref for Chunk {
    type Target = Bytes;

    fn deref(&self) -> &Bytes {
        &self.data
    }
}

/// A session's bound on control frames and its policy (see the module's
/// "Bound and policy"); the SockJS HTTP transports' queue uses it too.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Most control bytes charged (`session.queue_bytes`).
    limit: usize,
    full: Full,
}

impl Budget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Budget {
            full: Full::No,
            limit,
        }
    }

    /// Whether `n` more bytes may be charged on top of `charged`; when not,
    /// the budget is overflowed and admits nothing until the cut.
    pub fn admit(&mut self, charged: usize, n: usize) -> bool {
        let limit = match self.full {
            Full::No => self.limit,
            Full::Refusing => return false,
            Full::Cutting => self.limit.saturating_add(CUT_RESERVE),
        };
        if charged.saturating_add(n) <= limit {
            return true;
        }
        if self.full == Full::No {
            self.full = Full::Refusing;
        }
        false
    }

    /// Whether a frame was refused since the last call; the first `true`
    /// opens [`CUT_RESERVE`] for the frames that end the session.
    pub fn take_overflow(&mut self) -> bool {
        if self.full == Full::Refusing {
            self.full = Full::Cutting;
            return true;
        }
        false
    }
}

/// Whether the bound was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Full {
    /// Control frames are admitted while they fit.
    No,
    /// A control frame did not fit: nothing more is admitted until the
    /// session is cut ([`WriteQueue::take_overflow`]).
    Refusing,
    /// The session is being cut: the ERROR and close fit in [`CUT_RESERVE`].
    Cutting,
}

/// Bytes waiting for the socket, with control frames bounded (see the
/// module's "Bound and policy").
#[derive(Debug)]
pub struct WriteQueue {
    chunks: VecDeque<Chunk>,
    /// Control frames not yet handed to the socket: one buffer for a run.
    tail: BytesMut,
    /// Every byte waiting (chunks and tail).
    bytes: usize,
    /// Control bytes waiting (charged).
    control: usize,
    /// Pongs replaced by a newer one since the pending pong was queued
    /// (charged until the socket takes some of the pending pong).
    coalesced: usize,
    /// The absolute index of the pending pong's chunk, while none of it went
    /// out (so a newer ping may replace it).
    pong: Option<u64>,
    /// Chunks popped so far: the absolute index of the front chunk.
    popped: u64,
    budget: Budget,
    /// Where written bytes and delivered frames are counted (none in unit
    /// tests of the framing).
    meter: Option<TransportMeter>,
    /// The clock as read once for the current [`WriteQueue::write_to`].
    now_micros: Option<u64>,
}

impl Default for WriteQueue {
    /// A queue with the default `session.queue_bytes` bound.
    fn default() -> Self {
        WriteQueue::new(SessionConfig::default().queue_bytes)
    }
}

impl WriteQueue {
    /// An empty queue that charges control frames against `limit` bytes.
    pub fn new(limit: usize) -> Self {
        WriteQueue {
            chunks: VecDeque::new(),
            tail: BytesMut::new(),
            bytes: 0,
            control: 0,
            coalesced: 0,
            pong: None,
            popped: 0,
            budget: Budget::new(limit),
            meter: None,
            now_micros: None,
        }
    }

    /// Count written bytes and delivered frames on `meter`.
    pub fn with_meter(mut self, meter: TransportMeter) -> Self {
        self.meter = Some(meter);
        self
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// Bytes waiting.
    pub fn len(&self) -> usize {
        self.bytes
    }

    /// Control bytes waiting (what this queue holds of its own, against the
    /// bound).
    pub fn control_len(&self) -> usize {
        self.control
    }

    /// What counts against the bound: control bytes waiting and pongs
    /// answered by coalescing but not yet followed by one the socket took.
    pub fn charged(&self) -> usize {
        self.control + self.coalesced
    }

    /// Whether a control frame did not fit since the last call; the first
    /// `true` opens [`CUT_RESERVE`] for the frames that end the session.
    pub fn take_overflow(&mut self) -> bool {
        self.budget.take_overflow()
    }

    /// Whether `n` more control bytes may be queued; marks the queue
    /// overflowed when not.
    fn admit(&mut self, n: usize) -> bool {
        let charged = self.charged();
        self.budget.admit(charged, n)
    }

    /// Hand the run of control frames in `tail` to the chunk queue.
    fn seal(&mut self) {
        if !self.tail.is_empty() {
            let data = std::mem::take(&mut self.tail).freeze();
            self.chunks.push_back(Chunk {
                data,
                control: true,
                accepted: Accepted::UNKNOWN,
            });
        }
    }

    /// Queue a MESSAGE part (not charged).
    fn push(&mut self, b: Bytes) {
        if !b.is_empty() {
            self.seal();
            self.bytes += b.len();
            self.chunks.push_back(Chunk {
                data: b,
                control: false,
                accepted: Accepted::UNKNOWN,
            });
        }
    }

    /// The MESSAGE frame just queued carries a notification accepted
    /// `accepted`: its last chunk is observed when written.
    pub(super) fn mark_delivery(&mut self, accepted: Accepted) {
        if let Some(last) = self.chunks.back_mut().filter(|c| !c.control) {
            last.accepted = accepted;
        }
    }

    /// Queue an encoded control frame; false when it did not fit.
    fn push_control(&mut self, frame: &[u8]) -> bool {
        if !self.admit(frame.len()) {
            return false;
        }
        self.tail.extend_from_slice(frame);
        self.bytes += frame.len();
        self.control += frame.len();
        true
    }

    /// Write as much as the socket takes now; `Ok(n)` bytes written, stops
    /// at `WouldBlock` (returning what was written so far).
    pub fn write_to(&mut self, stream: &tokio::net::TcpStream) -> io::Result<usize> {
        self.seal();
        self.now_micros = None;
        let mut written = 0;
        while !self.chunks.is_empty() {
            // On the stack: a write is made for every delivery.
            let mut iov = [IoSlice::new(&[]); MAX_IOV];
            let mut count = 0;
            for (slot, chunk) in iov.iter_mut().zip(&self.chunks) {
                *slot = IoSlice::new(&chunk.data);
                count += 1;
            }
            match stream.try_write_vectored(&iov[..count]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    written += n;
                    if let Some(meter) = &self.meter {
                        meter.bytes_sent.inc_by(n as u64);
                    }
                    self.advance(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        if self.chunks.is_empty() && self.chunks.capacity() > 0 {
            self.chunks = VecDeque::new();
        }
        Ok(written)
    }

    /// `n` bytes from the front went out (the tail is sealed first).
    fn advance(&mut self, mut n: usize) {
        self.seal();
        self.bytes -= n;
        while n > 0 {
            let Some(front) = self.chunks.front_mut() else {
                return;
            };
            let taken = n.min(front.data.len());
            if front.control {
                self.control -= taken;
            }
            if self.pong == Some(self.popped) {
                // The client gets this pong: the ones it replaced are paid.
                self.pong = None;
                self.coalesced = 0;
            }
            n -= taken;
            if taken == front.data.len() {
                let accepted = front.accepted;
                self.chunks.pop_front();
                self.popped += 1;
                self.delivered(accepted);
            } else {
                front.data.advance(taken);
            }
        }
    }

    /// A MESSAGE frame's last chunk went out: observe its latency, reading
    /// the clock at most once per write.
    fn delivered(&mut self, accepted: Accepted) {
        let Some(meter) = &self.meter else { return };
        if accepted.unix_micros().is_none() {
            return;
        }
        let now = *self.now_micros.get_or_insert_with(now_micros);
        meter.delivered(accepted, now);
    }

    /// Every queued byte, concatenated (tests).
    #[cfg(test)]
    pub fn concat(&self) -> Vec<u8> {
        self.chunks
            .iter()
            .flat_map(|c| c.data.iter().copied())
            .chain(self.tail.iter().copied())
            .collect()
    }

    /// One WebSocket data frame of a MESSAGE: the frame's header and the
    /// head `encode_head` writes share one buffer (the one allocation per
    /// recipient), then the notification's shared `payload` and `tail` (the
    /// NUL, and whatever framing closes around it). Not charged (see the
    /// module's "Bound and policy").
    pub fn message_frame(
        &mut self,
        opcode: OpCode,
        encode_head: impl FnOnce(&mut BytesMut),
        payload: &Bytes,
        tail: Bytes,
    ) {
        const ROOM: usize = websocket::MAX_HEADER_LEN;
        let mut head = BytesMut::with_capacity(ROOM + HEAD_CAPACITY);
        head.put_bytes(0, ROOM);
        encode_head(&mut head);
        let len = head.len() - ROOM + payload.len() + tail.len();
        // The header goes right before the STOMP head, in the room left for
        // it; what it does not need is skipped.
        let start = ROOM - websocket::header_len(len);
        websocket::encode_header(opcode, len, &mut &mut head[start..ROOM]);
        head.advance(start);
        self.push(head.freeze());
        self.push(payload.clone());
        self.push(tail);
    }

    /// One WebSocket frame the gateway makes itself, payload `parts` in
    /// order, copied into the run of control frames and charged.
    pub fn control_frame(&mut self, opcode: OpCode, parts: &[&[u8]]) {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let mut frame = BytesMut::with_capacity(10 + len);
        websocket::encode_header(opcode, len, &mut frame);
        for p in parts {
            frame.extend_from_slice(p);
        }
        self.push_control(&frame);
    }

    /// A WebSocket close frame.
    pub fn close(&mut self, code: u16, reason: &str) {
        let mut out = BytesMut::with_capacity(4 + reason.len());
        websocket::encode_close(code, reason, &mut out);
        self.push_control(&out);
    }

    /// A WebSocket pong; it replaces a pending pong none of which went out.
    pub fn pong(&mut self, payload: &[u8]) {
        let mut out = BytesMut::with_capacity(2 + payload.len());
        websocket::encode_frame(OpCode::Pong, payload, &mut out);
        let new = out.freeze();
        if !self.admit(new.len()) {
            return;
        }
        if let Some(at) = self.pong {
            let old = &mut self.chunks[(at - self.popped) as usize].data;
            self.coalesced += old.len();
            self.control = self.control - old.len() + new.len();
            self.bytes = self.bytes - old.len() + new.len();
            *old = new;
            return;
        }
        self.seal();
        self.pong = Some(self.popped + self.chunks.len() as u64);
        self.bytes += new.len();
        self.control += new.len();
        self.chunks.push_back(Chunk {
            data: new,
            control: true,
            accepted: Accepted::UNKNOWN,
        });
    }
}

/// STOMP frames in WebSocket frames: the raw `/ws` framing.
pub struct RawStomp<'a>(pub &'a mut WriteQueue);

impl Sink for RawStomp<'_> {
    fn frame(&mut self, command: Command, hdrs: &[(&str, &str)], body: &[u8], v: Version) {
        let mut stomp_bytes = BytesMut::with_capacity(64 + body.len());
        stomp::encode_frame(command, hdrs, body, v, &mut stomp_bytes);
        self.0.control_frame(OpCode::Text, &[&stomp_bytes]);
    }

    fn message(&mut self, subscription: &str, seq: u64, epoch: u64, n: &Notification, v: Version) {
        let shared = shared_lines(n, v);
        let opcode = if n.payload_is_utf8 {
            OpCode::Text
        } else {
            OpCode::Binary
        };
        self.0.message_frame(
            opcode,
            |head| {
                recipient_lines(subscription, seq, epoch, v, head);
                head.extend_from_slice(shared);
            },
            &n.payload,
            NUL,
        );
        self.0.mark_delivery(n.accepted);
    }

    fn heartbeat(&mut self) {
        self.0.push_control(HEARTBEAT);
    }

    fn queued(&self) -> usize {
        self.0.len()
    }

    fn take_overflow(&mut self) -> bool {
        self.0.take_overflow()
    }
}

#[cfg(test)]
mod tests;
