//! What a session writes, as chunks of `Bytes` for a vectored write.
//!
//! A MESSAGE is three chunks: `[WebSocket header + STOMP head]` (small, per
//! recipient: it names the subscription and the mailbox sequence), the
//! payload (the notification's own `Bytes`, shared by every recipient, never
//! copied), and a static NUL. Server frames are unmasked, so the shared
//! payload goes to the socket as is.

use std::collections::VecDeque;
use std::io::{self, IoSlice};

use bytes::{Buf, Bytes, BytesMut};
use herald_protocol::envelope::Notification;
use herald_protocol::stomp::{self, Command, Version};
use herald_protocol::websocket::{self, OpCode};

use super::core::{Sink, message_headers};

const NUL: Bytes = Bytes::from_static(b"\0");
/// A STOMP heart-beat (one EOL) in a WebSocket text frame.
const HEARTBEAT: Bytes = Bytes::from_static(&[0x81, 0x01, b'\n']);

/// Most chunks handed to one `writev`.
const MAX_IOV: usize = 64;

/// Bytes waiting for the socket.
#[derive(Debug, Default)]
pub struct WriteQueue {
    chunks: VecDeque<Bytes>,
    bytes: usize,
}

impl WriteQueue {
    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Bytes waiting.
    pub fn len(&self) -> usize {
        self.bytes
    }

    fn push(&mut self, b: Bytes) {
        if !b.is_empty() {
            self.bytes += b.len();
            self.chunks.push_back(b);
        }
    }

    /// Write as much as the socket takes now; `Ok(n)` bytes written, stops
    /// at `WouldBlock` (returning what was written so far).
    pub fn write_to(&mut self, stream: &tokio::net::TcpStream) -> io::Result<usize> {
        let mut written = 0;
        while !self.chunks.is_empty() {
            let iov: Vec<IoSlice<'_>> = self
                .chunks
                .iter()
                .take(MAX_IOV)
                .map(|c| IoSlice::new(c))
                .collect();
            match stream.try_write_vectored(&iov) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    written += n;
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

    fn advance(&mut self, mut n: usize) {
        self.bytes -= n;
        while n > 0 {
            let Some(front) = self.chunks.front_mut() else {
                return;
            };
            if n >= front.len() {
                n -= front.len();
                self.chunks.pop_front();
            } else {
                front.advance(n);
                n = 0;
            }
        }
    }

    /// Every queued byte, concatenated (tests).
    #[cfg(test)]
    pub fn concat(&self) -> Vec<u8> {
        self.chunks.iter().flat_map(|c| c.iter().copied()).collect()
    }

    /// One WebSocket frame whose payload is `pieces` in order; the pieces
    /// are queued as they are (shared, not copied).
    pub fn ws_frame(&mut self, opcode: OpCode, pieces: &[&Bytes]) {
        let len = pieces.iter().map(|p| p.len()).sum();
        let mut header = BytesMut::with_capacity(10);
        websocket::encode_header(opcode, len, &mut header);
        self.push(header.freeze());
        for p in pieces {
            self.push((*p).clone());
        }
    }

    /// A WebSocket close frame.
    pub fn close(&mut self, code: u16, reason: &str) {
        let mut out = BytesMut::with_capacity(4 + reason.len());
        websocket::encode_close(code, reason, &mut out);
        self.push(out.freeze());
    }

    /// A WebSocket pong.
    pub fn pong(&mut self, payload: &[u8]) {
        let mut out = BytesMut::with_capacity(2 + payload.len());
        websocket::encode_frame(OpCode::Pong, payload, &mut out);
        self.push(out.freeze());
    }
}

/// STOMP frames in WebSocket frames: the raw `/ws` framing.
pub struct RawStomp<'a>(pub &'a mut WriteQueue);

impl Sink for RawStomp<'_> {
    fn frame(&mut self, command: Command, hdrs: &[(&str, &str)], body: &[u8], v: Version) {
        let mut stomp_bytes = BytesMut::with_capacity(64 + body.len());
        stomp::encode_frame(command, hdrs, body, v, &mut stomp_bytes);
        self.0.ws_frame(OpCode::Text, &[&stomp_bytes.freeze()]);
    }

    fn message(&mut self, subscription: &str, seq: u64, epoch: u64, n: &Notification, v: Version) {
        let seq = seq.to_string();
        let epoch = epoch.to_string();
        let length = n.payload.len().to_string();
        let hdrs = message_headers(subscription, &seq, &epoch, &length, n, false);
        let mut head = BytesMut::with_capacity(256);
        stomp::encode_head(Command::Message, &hdrs, v, &mut head);
        let opcode = if n.payload_is_utf8 {
            OpCode::Text
        } else {
            OpCode::Binary
        };
        self.0.ws_frame(opcode, &[&head.freeze(), &n.payload, &NUL]);
    }

    fn heartbeat(&mut self) {
        self.0.push(HEARTBEAT);
    }

    fn queued(&self) -> usize {
        self.0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_protocol::envelope::Scope;
    use herald_protocol::stomp::{Decoded, Limits};
    use herald_protocol::websocket::Message;

    fn decode_server_frames(bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
        // Server frames are unmasked; parse the simple header by hand.
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            let op = bytes[i] & 0x0f;
            let len7 = (bytes[i + 1] & 0x7f) as usize;
            let (len, hdr) = match len7 {
                126 => (u16::from_be_bytes([bytes[i + 2], bytes[i + 3]]) as usize, 4),
                127 => (
                    u64::from_be_bytes(bytes[i + 2..i + 10].try_into().unwrap()) as usize,
                    10,
                ),
                n => (n, 2),
            };
            out.push((op, bytes[i + hdr..i + hdr + len].to_vec()));
            i += hdr + len;
        }
        out
    }

    #[test]
    fn message_shares_the_payload_and_decodes() {
        let payload = Bytes::from(vec![b'x'; 70_000]);
        let n = Notification {
            id: "n1".into(),
            scope: Scope::Client,
            users: vec![],
            clients: vec!["acme".into()],
            sites: vec![],
            event: "chat.message".into(),
            topic: Some("chat".into()),
            content_type: "text/plain".into(),
            payload: payload.clone(),
            payload_is_utf8: true,
            ttl: None,
            encodings: Default::default(),
        };
        let mut q = WriteQueue::default();
        RawStomp(&mut q).message("sub:0", 7, 99, &n, Version::V1_2);
        // The payload chunk is the very same allocation.
        assert_eq!(q.chunks[2].as_ptr(), payload.as_ptr());
        let frames = decode_server_frames(&q.concat());
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0].0, 1, "text frame");
        let mut buf = BytesMut::from(&frames[0].1[..]);
        let limits = Limits {
            max_frame_bytes: 1 << 20,
            ..Limits::default()
        };
        let Some(Decoded::Frame(f)) = stomp::decode(&mut buf, Version::V1_2, &limits).unwrap()
        else {
            panic!()
        };
        assert_eq!(f.command, Command::Message);
        assert_eq!(f.header("subscription"), Some("sub:0"));
        assert_eq!(f.header("seq"), Some("7"));
        assert_eq!(f.header("epoch"), Some("99"));
        assert_eq!(f.header("event"), Some("chat.message"));
        assert_eq!(f.header("scope"), Some("client"));
        assert_eq!(f.header("topic"), Some("chat"));
        assert_eq!(f.body.len(), 70_000);
    }

    #[test]
    fn binary_payloads_go_in_binary_frames() {
        let n = Notification {
            id: "n1".into(),
            scope: Scope::User,
            users: vec!["u".into()],
            clients: vec![],
            sites: vec![],
            event: "e".into(),
            topic: None,
            content_type: "application/octet-stream".into(),
            payload: Bytes::from_static(b"\xff\x00\xfe"),
            payload_is_utf8: false,
            ttl: None,
            encodings: Default::default(),
        };
        let mut q = WriteQueue::default();
        RawStomp(&mut q).message("s", 1, 1, &n, Version::V1_2);
        assert_eq!(decode_server_frames(&q.concat())[0].0, 2);
    }

    #[test]
    fn control_frames() {
        let mut q = WriteQueue::default();
        RawStomp(&mut q).heartbeat();
        q.close(1000, "bye");
        q.pong(b"p");
        let frames = decode_server_frames(&q.concat());
        assert_eq!(frames[0], (1, b"\n".to_vec()));
        assert_eq!(frames[1].0, 8);
        assert_eq!(&frames[1].1[..2], &1000u16.to_be_bytes());
        assert_eq!(frames[2], (10, b"p".to_vec()));
        let _ = Message::Pong(Bytes::new());
    }

    #[test]
    fn advance_splits_chunks() {
        let mut q = WriteQueue::default();
        q.push(Bytes::from_static(b"abc"));
        q.push(Bytes::from_static(b"def"));
        q.advance(4);
        assert_eq!(q.concat(), b"ef");
        assert_eq!(q.len(), 2);
    }
}
