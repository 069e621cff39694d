//! The router's HTTP server keeps `[http]`'s deadlines: a client that
//! pipelines requests and reads no answer is closed, a body slower than the
//! rate is answered 408 and closed. Raw sockets on 127.0.0.1 against
//! [`super::serve`] with routes of the tests' own.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use herald_engine::deadline::{DeadlineCounters, Deadlines, HttpConfig};
use prometheus_client::metrics::counter::Counter;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, timeout};
use tokio_util::sync::CancellationToken;

/// How long anything here may take.
const WAIT: Duration = Duration::from_secs(30);
/// `http.write_timeout_ms` here.
const WRITE_DEADLINE: Duration = Duration::from_millis(300);
/// `http.body_grace_ms` here.
const GRACE: Duration = Duration::from_millis(1000);

/// A server of `serve` with a large answer (`GET /big`, 16 KiB, so the
/// socket's buffers fill after a few hundred) and a route that reads its
/// body (`POST /echo`, axum's `Bytes`, answering its length).
async fn server() -> (SocketAddr, DeadlineCounters, CancellationToken) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let counters = DeadlineCounters::default();
    let http = HttpConfig {
        write_timeout_ms: WRITE_DEADLINE.as_millis() as u64,
        body_grace_ms: GRACE.as_millis() as u64,
        body_min_bytes_per_sec: 4000,
    };
    let deadlines = Deadlines::new(&http, counters.clone());
    let routes = Router::new()
        .route("/big", get(|| async { vec![b'x'; 16 * 1024] }))
        .route(
            "/echo",
            post(|body: axum::body::Bytes| async move { body.len().to_string() }),
        );
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        super::serve(listener, routes, &deadlines, Duration::from_secs(1), stop).await;
    });
    (addr, counters, shutdown)
}

/// Until `counter` reads `value`, within the wait.
async fn until(counter: &Counter, value: u64) {
    let reached = async {
        while counter.get() < value {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    timeout(WAIT, reached)
        .await
        .unwrap_or_else(|_| panic!("the counter stayed at {}", counter.get()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_pipelines_and_never_reads_is_closed() {
    let (addr, counters, _shutdown) = server().await;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let (mut rd, mut wr) = socket.connect(addr).await.unwrap().into_split();
    let batch = b"GET /big HTTP/1.1\r\nHost: router\r\n\r\n".repeat(64);
    let writer = tokio::spawn(async move { while wr.write_all(&batch).await.is_ok() {} });
    let started = Instant::now();
    until(&counters.write_timeout, 1).await;
    assert!(started.elapsed() >= WRITE_DEADLINE);
    // Closed: the client's writes fail, its reads end.
    timeout(WAIT, writer).await.unwrap().unwrap();
    let drained = async {
        let mut sink = vec![0u8; 64 * 1024];
        while let Ok(n) = rd.read(&mut sink).await {
            if n == 0 {
                break;
            }
        }
    };
    timeout(WAIT, drained).await.unwrap();
    assert_eq!(counters.write_timeout.get(), 1);
}

/// Send a body of `len` bytes, `chunk` bytes every `every`; the whole
/// answer (the server closes after it when it refuses) and how long it
/// took from the head.
async fn paced_body(
    addr: SocketAddr,
    len: usize,
    chunk: usize,
    every: Duration,
) -> (String, Duration) {
    let (mut rd, mut wr) = TcpStream::connect(addr).await.unwrap().into_split();
    let head = format!("POST /echo HTTP/1.1\r\nHost: router\r\nContent-Length: {len}\r\n\r\n");
    wr.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    // Pacing is the scenario: the client's bytes come at its timer's rate.
    let writer = tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        for _ in 0..len.div_ceil(chunk) {
            tick.tick().await;
            if wr.write_all(&vec![b'x'; chunk]).await.is_err() {
                return;
            }
        }
        std::future::pending::<()>().await;
    });
    let mut answer = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
            // A kept-alive answer: its body is the length, at the end.
            if answer.ends_with(len.to_string().as_bytes()) && answer.starts_with(b"HTTP/1.1 200") {
                return;
            }
        }
    };
    timeout(WAIT, read)
        .await
        .expect("an answer within the wait");
    writer.abort();
    (
        String::from_utf8_lossy(&answer).into_owned(),
        started.elapsed(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_a_byte_at_a_time_is_answered_408_and_closed() {
    let (addr, counters, _shutdown) = server().await;
    // A byte every 900 ms: each wait is short, the whole would take 15 min.
    let (answer, took) = paced_body(addr, 1000, 1, Duration::from_millis(900)).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    assert!(answer.contains("body_timeout"), "{answer}");
    assert!(took >= GRACE, "{took:?}");
    assert_eq!(counters.body_timeout.get(), 1);
    // At twice the rate, the body is whole.
    let (answer, _) = paced_body(addr, 4000, 80, Duration::from_millis(10)).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(counters.body_timeout.get(), 1);
}
