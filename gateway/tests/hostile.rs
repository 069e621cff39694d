//! Hostile input: clients that make the gateway answer and never read the
//! answers. Every frame the gateway makes for a session counts against the
//! session's bound (`session.queue_bytes`); a client that lets it fill is cut
//! as a slow consumer, with a reason, and counted.
//!
//! The clients here are raw sockets: they write masked frames by hand and
//! read nothing until the gateway has cut them.

mod common;

use std::time::Duration;

use bytes::{Buf, BytesMut};
use common::*;
use herald_protocol::websocket::{OpCode, encode_masked_frame};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::task::JoinHandle;

/// The session bound these tests configure (`session.queue_bytes`).
const BOUND: usize = 64 * 1024;
/// How long a flood may take to be cut.
const FLOOD_WAIT: Duration = Duration::from_secs(60);
/// More process memory than this for one flooding client is a leak: the
/// bound is 64 KiB, and before it existed these floods grew the gateway by
/// twice what was sent.
const RSS_SLACK: u64 = 24 << 20;

const SLOW_CONSUMER: &str = "herald_dropped_total{reason=\"slow_consumer\"}";
const QUEUED: &str = "herald_session_queued_control_bytes";

async fn hostile_gateway() -> TestGateway {
    start(|c| {
        c.session.queue_bytes = BOUND;
        c.mailbox.buffer_bytes = BOUND;
        // The ping flood sends no CONNECT: no connect timeout may cut it first.
        c.session.connect_timeout_ms = 600_000;
    })
    .await
}

/// This process's resident set (the gateway runs in it), in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// A WebSocket on `/ws`. The socket keeps its default buffers: the kernel
/// holds a few MiB before the gateway's queue fills, but once cut, the
/// client reads to the close quickly (well within the gateway's close grace).
async fn raw_ws(gw: &TestGateway) -> (OwnedReadHalf, OwnedWriteHalf) {
    let mut stream = TcpStream::connect(gw.addr).await.unwrap();
    let request = format!(
        "GET /ws HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Protocol: v12.stomp\r\n\r\n",
        gw.addr
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        stream.read_exact(&mut b).await.unwrap();
        head.push(b[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    stream.into_split()
}

fn masked(opcode: OpCode, payload: &[u8]) -> BytesMut {
    let mut out = BytesMut::new();
    encode_masked_frame(true, opcode, payload, [7, 1, 3, 9], &mut out);
    out
}

/// Unmasked server frames, read as they come.
struct Frames {
    rd: OwnedReadHalf,
    buf: BytesMut,
}

impl Frames {
    /// The next frame (opcode, payload), or None at EOF.
    async fn next(&mut self) -> Option<(u8, Vec<u8>)> {
        loop {
            if self.buf.len() >= 2 {
                let len7 = (self.buf[1] & 0x7f) as usize;
                let (len, hdr) = match len7 {
                    126 if self.buf.len() >= 4 => {
                        (u16::from_be_bytes([self.buf[2], self.buf[3]]) as usize, 4)
                    }
                    127 if self.buf.len() >= 10 => (
                        u64::from_be_bytes(self.buf[2..10].try_into().unwrap()) as usize,
                        10,
                    ),
                    126 | 127 => (usize::MAX, 0),
                    n => (n, 2),
                };
                if len != usize::MAX && self.buf.len() >= hdr + len {
                    let op = self.buf[0] & 0x0f;
                    self.buf.advance(hdr);
                    let payload = self.buf.split_to(len).to_vec();
                    return Some((op, payload));
                }
            }
            match self.rd.read_buf(&mut self.buf).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    }

    /// Read to the close frame: the STOMP ERROR messages seen on the way and
    /// the close code.
    async fn read_to_close(&mut self) -> (Vec<String>, Option<u16>) {
        let mut errors = Vec::new();
        let read = async {
            while let Some((op, payload)) = self.next().await {
                match op {
                    1 if payload.starts_with(b"ERROR\n") => {
                        errors.push(String::from_utf8_lossy(&payload).into_owned())
                    }
                    8 => return payload.get(..2).map(|c| u16::from_be_bytes([c[0], c[1]])),
                    _ => {}
                }
            }
            None
        };
        let code = tokio::time::timeout(WAIT, read)
            .await
            .expect("the gateway closes within the wait");
        (errors, code)
    }
}

/// Write `frames` over and over (never reading) until `cap` bytes went out;
/// the gateway stops reading once it cut the session, so a cut flood never
/// finishes. Returns the bytes written.
fn flood(mut wr: OwnedWriteHalf, frames: Vec<BytesMut>, cap: usize) -> JoinHandle<usize> {
    let round: Vec<u8> = frames.iter().flat_map(|f| f.iter().copied()).collect();
    // Whole frames only, about 64 KiB a write.
    let batch = round.repeat((64 * 1024 / round.len()).max(1));
    tokio::spawn(async move {
        let mut sent = 0;
        while sent < cap {
            if wr.write_all(&batch).await.is_err() {
                break;
            }
            sent += batch.len();
        }
        sent
    })
}

/// Wait (bounded) until the slow-consumer count passes `before` or the
/// flood is over; meanwhile, the queued control bytes must stay within the
/// bound. Returns whether the client was cut, and the most queued seen.
async fn wait_for_cut(gw: &TestGateway, before: f64, flood: &JoinHandle<usize>) -> (bool, f64) {
    let mut most = 0.0f64;
    let watch = async {
        loop {
            let m = gw.metrics().await;
            let queued = sample(&m, QUEUED).unwrap_or(0.0);
            most = most.max(queued);
            assert!(
                queued <= (BOUND + 1024) as f64,
                "{queued} bytes queued for one session, bound {BOUND}"
            );
            if sample(&m, SLOW_CONSUMER).unwrap() > before {
                return true;
            }
            if flood.is_finished() {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let cut = tokio::time::timeout(FLOOD_WAIT, watch)
        .await
        .expect("the flood ends or is cut within the wait");
    (cut, most)
}

async fn assert_cut(
    gw: &TestGateway,
    what: &str,
    rd: OwnedReadHalf,
    flood: JoinHandle<usize>,
    before: f64,
    rss_before: u64,
) {
    let (cut, most) = wait_for_cut(gw, before, &flood).await;
    let grown = rss().saturating_sub(rss_before);
    assert!(
        cut,
        "{what}: {} MiB sent without the session being cut; the process grew {} MiB",
        flood.await.unwrap() >> 20,
        grown >> 20
    );
    assert!(
        grown < RSS_SLACK,
        "{what}: the process grew {} MiB for one client",
        grown >> 20
    );
    assert!(most <= (BOUND + 1024) as f64, "{most}");
    flood.abort();
    let mut frames = Frames {
        rd,
        buf: BytesMut::new(),
    };
    let (errors, code) = frames.read_to_close().await;
    assert_eq!(code, Some(1008), "{what}: close code");
    assert!(
        errors.iter().any(|e| e.contains("message:slow consumer")),
        "{what}: an ERROR says why: {errors:?}"
    );
    drop(frames);
    // After the client left, its session's queue is gone from the gauge.
    gw.until_metric(QUEUED, 0.0).await;
    let after = sample(&gw.metrics().await, SLOW_CONSUMER).unwrap();
    assert_eq!(after, before + 1.0, "{what}: counted once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ping_flood_that_never_reads_is_cut_within_the_bound() {
    let gw = hostile_gateway().await;
    let before = sample(&gw.metrics().await, SLOW_CONSUMER).unwrap();
    let rss_before = rss();
    // No CONNECT: pings need no credentials.
    let (rd, wr) = raw_ws(&gw).await;
    let ping = masked(OpCode::Ping, &[b'p'; 125]);
    let flood = flood(wr, vec![ping], 48 << 20);
    assert_cut(&gw, "ping flood", rd, flood, before, rss_before).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receipt_flood_that_never_reads_is_cut_within_the_bound() {
    let gw = hostile_gateway().await;
    let before = sample(&gw.metrics().await, SLOW_CONSUMER).unwrap();
    let rss_before = rss();
    let (rd, mut wr) = raw_ws(&gw).await;
    let connect = format!(
        "CONNECT\naccept-version:1.2\nhost:herald\npasscode:{}\n\n\0",
        token("mallory", None, None)
    );
    wr.write_all(&masked(OpCode::Text, connect.as_bytes()))
        .await
        .unwrap();
    let mut frames = Frames {
        rd,
        buf: BytesMut::new(),
    };
    let (op, connected) = tokio::time::timeout(WAIT, frames.next())
        .await
        .unwrap()
        .expect("an answer to CONNECT");
    assert_eq!(op, 1);
    assert!(connected.starts_with(b"CONNECTED\n"), "{connected:?}");
    assert!(frames.buf.is_empty());
    let subscribe = masked(
        OpCode::Text,
        b"SUBSCRIBE\nid:s\ndestination:/user/notifications\nreceipt:r\n\n\0",
    );
    let unsubscribe = masked(OpCode::Text, b"UNSUBSCRIBE\nid:s\nreceipt:r\n\n\0");
    let flood = flood(wr, vec![subscribe, unsubscribe], 32 << 20);
    assert_cut(&gw, "receipt flood", frames.rd, flood, before, rss_before).await;
}
