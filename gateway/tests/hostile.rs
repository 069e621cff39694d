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

// Deadlines of HTTP connections (`[http]`): answers nobody reads, bodies
// that never end.

const WRITE_TIMEOUT: &str = "herald_connections_refused_total{reason=\"write_timeout\"}";
const BODY_TIMEOUT: &str = "herald_connections_refused_total{reason=\"body_timeout\"}";
/// `http.write_timeout_ms` in these tests.
const WRITE_DEADLINE: Duration = Duration::from_millis(500);
/// `http.body_grace_ms` and `session.header_timeout_ms` in these tests.
const GRACE: Duration = Duration::from_millis(1000);
/// `http.body_min_bytes_per_sec` in these tests.
const MIN_RATE: usize = 4000;
/// A keyless publish: answered 401. Without a body: one whose body has not
/// all come when its head is refused closes the connection on the direct
/// path, after the answer (and pipelined requests split anywhere).
const KEYLESS: &[u8] = b"POST /v1/notifications HTTP/1.1\r\nHost: herald\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n";
/// A first request that makes the connection hyper's.
const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: herald\r\n\r\n";

async fn deadline_gateway() -> TestGateway {
    start(|c| {
        c.http.write_timeout_ms = WRITE_DEADLINE.as_millis() as u64;
        c.http.body_grace_ms = GRACE.as_millis() as u64;
        c.http.body_min_bytes_per_sec = MIN_RATE as u64;
        c.session.header_timeout_ms = GRACE.as_millis() as u64;
    })
    .await
}

/// One HTTP/1.1 answer (with a `content-length`) read from `stream`, bytes
/// after it kept in `buf`: the status, the lowercased headers, the body.
async fn read_answer(
    stream: &mut OwnedReadHalf,
    buf: &mut BytesMut,
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let read = async {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut res = httparse::Response::new(&mut headers);
            if let httparse::Status::Complete(head) = res.parse(buf).unwrap() {
                let headers: Vec<(String, String)> = res
                    .headers
                    .iter()
                    .map(|h| {
                        let value = String::from_utf8_lossy(h.value).into_owned();
                        (h.name.to_ascii_lowercase(), value)
                    })
                    .collect();
                let len: usize = headers
                    .iter()
                    .find(|(n, _)| n == "content-length")
                    .map_or(0, |(_, v)| v.parse().unwrap());
                if buf.len() >= head + len {
                    let status = res.code.unwrap();
                    buf.advance(head);
                    let body = buf.split_to(len).to_vec();
                    return (status, headers, body);
                }
            }
            assert!(stream.read_buf(buf).await.unwrap() > 0, "closed mid-answer");
        }
    };
    tokio::time::timeout(WAIT, read)
        .await
        .expect("an answer within the wait")
}

/// A connection whose client takes as little as it can: a small receive
/// buffer, so the gateway's answers back up quickly.
async fn tight_connection(gw: &TestGateway) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(gw.addr).await.unwrap()
}

/// Pipeline keyless publishes on `wr` (after `first`) and never read, until
/// a write fails: the gateway closed the connection.
fn pipeline_keyless(mut wr: OwnedWriteHalf, first: &'static [u8]) -> JoinHandle<usize> {
    let batch = KEYLESS.repeat(64);
    tokio::spawn(async move {
        let mut sent = 0;
        if wr.write_all(first).await.is_err() {
            return sent;
        }
        while wr.write_all(&batch).await.is_ok() {
            sent += batch.len();
        }
        sent
    })
}

/// Clients that read nothing, at once. The kernel lets the gateway's send
/// buffer grow to `net.ipv4.tcp_wmem`'s largest (4 MiB) before a write
/// waits, about 14,000 answers a connection: a few keep the test short.
const CONNS: usize = 3;

/// `conns` clients pipeline keyless publishes (after `first`) and read
/// nothing: each connection is closed once its answers have waited for
/// `http.write_timeout_ms`, and counted once.
async fn answers_nobody_reads_are_cut(first: &'static [u8], conns: usize) {
    let gw = deadline_gateway().await;
    let before = sample(&gw.metrics().await, WRITE_TIMEOUT).unwrap();
    let started = tokio::time::Instant::now();
    let mut clients = Vec::new();
    for _ in 0..conns {
        let (rd, wr) = tight_connection(&gw).await.into_split();
        clients.push((rd, pipeline_keyless(wr, first)));
    }
    // Filling the buffers takes the gateway a few seconds of answers (a
    // debug build through hyper: about 7,000 a second).
    let cut = async {
        while sample(&gw.metrics().await, WRITE_TIMEOUT) < Some(before + conns as f64) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    if tokio::time::timeout(FLOOD_WAIT, cut).await.is_err() {
        let cut = sample(&gw.metrics().await, WRITE_TIMEOUT).unwrap() - before;
        let ended = clients.iter().filter(|c| c.1.is_finished()).count();
        panic!("{cut} of {conns} connections cut for a write timeout, {ended} closed");
    }
    let cut_after = started.elapsed();
    for (mut rd, writer) in clients {
        // The gateway closed: the writes fail, and reading ends after the
        // answers that were already on their way.
        let sent = tokio::time::timeout(WAIT, writer)
            .await
            .expect("the client's writes fail once the gateway closed")
            .unwrap();
        assert!(sent > 0);
        let drained = tokio::time::timeout(WAIT, async {
            let mut sink = vec![0u8; 64 * 1024];
            while let Ok(n) = rd.read(&mut sink).await {
                if n == 0 {
                    break;
                }
            }
        });
        drained.await.expect("the connection ends");
    }
    assert!(cut_after >= WRITE_DEADLINE, "{cut_after:?}");
    // Counted once per connection, however long after.
    let after = sample(&gw.metrics().await, WRITE_TIMEOUT).unwrap();
    assert_eq!(after, before + conns as f64);
    eprintln!("{conns} connections that read nothing, cut after {cut_after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_answers_nobody_reads_are_cut_on_the_direct_publish_path() {
    // The first request is a publish: the direct path serves them all.
    answers_nobody_reads_are_cut(b"", CONNS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_answers_nobody_reads_are_cut_on_hyper() {
    // The first request is not a publish: hyper serves them all.
    answers_nobody_reads_are_cut(HEALTHZ, CONNS).await;
}

/// The head of an authenticated publish whose body is `len` bytes.
fn publish_head(len: usize) -> Vec<u8> {
    format!(
        "POST /v1/notifications HTTP/1.1\r\nHost: herald\r\nAuthorization: Bearer {API_KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: {len}\r\n\r\n"
    )
    .into_bytes()
}

/// A publication of exactly `len` bytes of JSON.
fn publication(len: usize) -> Vec<u8> {
    let empty = r#"{"users":["u"],"event":"e","payload":""}"#;
    let pad = "x".repeat(len - empty.len());
    format!(r#"{{"users":["u"],"event":"e","payload":"{pad}"}}"#).into_bytes()
}

/// A body sent `chunk` bytes every `every`, on a connection whose first
/// request is `first` (answered first); returns the answer to the publish,
/// how long after its head it came, and whether the connection then ended
/// (waited for when `refused`).
async fn paced_publish(
    gw: &TestGateway,
    first: &[u8],
    (len, chunk, every): (usize, usize, Duration),
    refused: bool,
) -> ((u16, Vec<(String, String)>, Vec<u8>), Duration, bool) {
    let (mut rd, mut wr) = TcpStream::connect(gw.addr).await.unwrap().into_split();
    let mut buf = BytesMut::new();
    if !first.is_empty() {
        wr.write_all(first).await.unwrap();
        assert_eq!(read_answer(&mut rd, &mut buf).await.0, 200);
    }
    wr.write_all(&publish_head(len)).await.unwrap();
    let started = tokio::time::Instant::now();
    let body = publication(len);
    // Pacing is the scenario: the client's bytes come at its timer's rate.
    let writer = tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        for part in body.chunks(chunk) {
            tick.tick().await;
            if wr.write_all(part).await.is_err() {
                return;
            }
        }
        // Whole: keep the write side open, as a client waiting for its
        // answer does.
        std::future::pending::<()>().await;
    });
    let answer = read_answer(&mut rd, &mut buf).await;
    let took = started.elapsed();
    let ended = refused
        && tokio::time::timeout(WAIT, async {
            buf.is_empty() && matches!(rd.read_buf(&mut buf).await, Ok(0) | Err(_))
        })
        .await
        .unwrap_or(false);
    writer.abort();
    (answer, took, ended)
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// A body sent a byte every `session.header_timeout_ms` − 100 ms (each
/// read in time) is answered 408 `body_timeout` and the connection closed,
/// once it falls behind `http.body_min_bytes_per_sec` after the grace.
async fn a_byte_at_a_time_is_answered_408(first: &'static [u8]) {
    let gw = deadline_gateway().await;
    let before = sample(&gw.metrics().await, BODY_TIMEOUT).unwrap();
    let every = GRACE - Duration::from_millis(100);
    let ((status, headers, body), took, ended) =
        paced_publish(&gw, first, (1000, 1, every), true).await;
    assert_eq!(status, 408, "{}", String::from_utf8_lossy(&body));
    assert_eq!(header(&headers, "connection"), Some("close"));
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(json["error"]["code"], "body_timeout", "{json}");
    assert!(ended, "the connection ends after the 408");
    // Not before its grace; about then (two bytes had come).
    assert!(took >= GRACE, "{took:?}");
    gw.until_metric(BODY_TIMEOUT, before + 1.0).await;
    let rejected = "herald_notifications_rejected_total{source=\"http\",reason=\"body_timeout\"}";
    assert_eq!(sample(&gw.metrics().await, rejected), Some(1.0));
    eprintln!("a byte every {every:?}: answered 408 {took:?} after the head");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_a_byte_per_read_timeout_is_answered_408_on_the_direct_publish_path() {
    a_byte_at_a_time_is_answered_408(b"").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_a_byte_per_read_timeout_is_answered_408_on_hyper() {
    a_byte_at_a_time_is_answered_408(HEALTHZ).await;
}

/// Bodies 10 and 100 times slower than the rate are cut soon after the
/// grace (they fall behind at once); one twice as fast is whole, on both
/// paths.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_slower_than_the_rate_are_cut_and_faster_ones_are_whole() {
    let gw = deadline_gateway().await;
    // 4000 bytes: 1 s of grace and 1 s at the rate.
    let len = MIN_RATE;
    for first in [&b""[..], HEALTHZ] {
        for slower in [10, 100] {
            // Chunks every 100 ms at rate / slower.
            let chunk = MIN_RATE / slower / 10;
            let every = Duration::from_millis(100);
            let pace = (len, chunk, every);
            let ((status, ..), took, ended) = paced_publish(&gw, first, pace, true).await;
            assert_eq!(status, 408, "{slower}x slower");
            assert!(ended);
            assert!(took >= GRACE, "{took:?}");
            eprintln!("{slower}x slower than the rate: 408 after {took:?}");
        }
        // Twice the rate: 80 bytes every 10 ms, 0.5 s in all.
        let pace = (len, 80, Duration::from_millis(10));
        let ((status, _, body), took, _) = paced_publish(&gw, first, pace, false).await;
        assert_eq!(status, 202, "{}", String::from_utf8_lossy(&body));
        eprintln!("twice the rate: 202 after {took:?}");
    }
}

/// A WebSocket upgraded through hyper leaves the write deadline behind at
/// the upgrade: a client that floods pings and reads nothing is cut by the
/// session's own rule (slow consumer, close 1008), not by a write timeout,
/// though `http.write_timeout_ms` is far shorter than the flood.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_upgraded_through_hyper_is_left_to_its_session_rules() {
    let gw = start(|c| {
        c.session.queue_bytes = BOUND;
        c.mailbox.buffer_bytes = BOUND;
        c.session.connect_timeout_ms = 600_000;
        c.http.write_timeout_ms = 100;
    })
    .await;
    let metrics = gw.metrics().await;
    let before = sample(&metrics, SLOW_CONSUMER).unwrap();
    let timeouts = sample(&metrics, WRITE_TIMEOUT).unwrap();
    let rss_before = rss();
    let (mut rd, mut wr) = TcpStream::connect(gw.addr).await.unwrap().into_split();
    let mut buf = BytesMut::new();
    // A first request makes the connection hyper's; the upgrade follows.
    wr.write_all(HEALTHZ).await.unwrap();
    assert_eq!(read_answer(&mut rd, &mut buf).await.0, 200);
    let upgrade = format!(
        "GET /ws HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Protocol: v12.stomp\r\n\r\n",
        gw.addr
    );
    wr.write_all(upgrade.as_bytes()).await.unwrap();
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        assert!(rd.read_buf(&mut buf).await.unwrap() > 0);
    }
    assert!(buf.starts_with(b"HTTP/1.1 101"), "{buf:?}");
    let ping = masked(OpCode::Ping, &[b'p'; 125]);
    let flood = flood(wr, vec![ping], 48 << 20);
    assert_cut(
        &gw,
        "ping flood through hyper",
        rd,
        flood,
        before,
        rss_before,
    )
    .await;
    assert_eq!(
        sample(&gw.metrics().await, WRITE_TIMEOUT),
        Some(timeouts),
        "the session is not cut by the write deadline"
    );
}
