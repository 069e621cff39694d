//! The service the callbacks call: a hyper HTTP/1.1 server on 127.0.0.1 that reads each
//! request, notes when it arrived and which notification it is, waits `delay` (the service's
//! own work, 1 ms by default) and answers `200 {"ok":true}`.
//!
//! The notification is read from the body, which both Herald and the BullMQ worker make the
//! notification's payload: the bench's payloads start with `{"seq":N,`
//! ([`crate::harness::amqp::payload`]). Every arrival is kept (sequence number, unix ns at the
//! moment the request head was parsed), duplicates included; the summary against the due times
//! is [`crate::scheduled::delivery::summarize`]. A request that names no sequence number is
//! answered all the same and counted apart.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::harness::events::unix_nanos;

/// Largest request body read.
const MAX_BODY_BYTES: usize = 1024 * 1024;
/// The path the callbacks go to.
pub(crate) const PATH: &str = "/callback";

/// The running receiver.
pub(crate) struct Receiver {
    pub(crate) addr: SocketAddr,
    arrivals: Arc<Arrivals>,
    server: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// Listens on a free 127.0.0.1 port; expects notifications `0..count`.
    pub(crate) async fn start(count: u64, delay: Duration) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let arrivals = Arc::new(Arrivals::new(count));
        let server = tokio::spawn(serve(listener, arrivals.clone(), delay));
        Ok(Self {
            addr,
            arrivals,
            server,
        })
    }

    /// The URL to register.
    pub(crate) fn url(&self) -> String {
        format!("http://{}{PATH}", self.addr)
    }

    /// Distinct notifications arrived so far.
    pub(crate) fn distinct(&self) -> u64 {
        self.arrivals.distinct()
    }

    /// Stops serving (open connections are dropped) and returns what arrived.
    pub(crate) fn stop(self) -> Arrived {
        self.server.abort();
        self.arrivals.take()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// What arrived.
#[derive(Debug, Default)]
pub(crate) struct Arrived {
    /// `(seq, unix ns)` of every request, in arrival order, duplicates included.
    pub(crate) arrivals: Vec<(u64, u64)>,
    /// Requests whose body named no sequence number.
    pub(crate) unparsed: u64,
}

async fn serve(listener: TcpListener, arrivals: Arc<Arrivals>, delay: Duration) {
    // Dropped with the task: every connection goes with it.
    let mut connections = JoinSet::new();
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                eprintln!("herald-bench: receiver accept: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let arrivals = arrivals.clone();
        connections.spawn(async move {
            let service = service_fn(move |request| answer(request, arrivals.clone(), delay));
            // A connection the client closes ends here; nothing to report.
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
        // Reap the finished ones so the set does not grow with every reconnection.
        while connections.try_join_next().is_some() {}
    }
}

async fn answer(
    request: Request<Incoming>,
    arrivals: Arc<Arrivals>,
    delay: Duration,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let at = unix_nanos();
    let body = match Limited::new(request.into_body(), MAX_BODY_BYTES)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            let mut bad = Response::new(Full::new(Bytes::from_static(b"body too large")));
            *bad.status_mut() = StatusCode::PAYLOAD_TOO_LARGE;
            return Ok(bad);
        }
    };
    arrivals.record(seq_of(&body), at);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let mut ok = Response::new(Full::new(Bytes::from_static(br#"{"ok":true}"#)));
    ok.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    Ok(ok)
}

/// The sequence number of a bench payload: `{"seq":N,...`.
pub(crate) fn seq_of(body: &[u8]) -> Option<u64> {
    let rest = body.strip_prefix(br#"{"seq":"#)?;
    let end = rest.iter().position(|b| !b.is_ascii_digit())?;
    std::str::from_utf8(&rest[..end]).ok()?.parse().ok()
}

/// The arrivals, shared by the connections.
struct Arrivals {
    inner: Mutex<Inner>,
    distinct: AtomicU64,
}

struct Inner {
    arrived: Arrived,
    /// Whether each expected sequence number arrived yet.
    seen: Vec<bool>,
}

impl Arrivals {
    fn new(count: u64) -> Self {
        Self {
            inner: Mutex::new(Inner {
                arrived: Arrived {
                    arrivals: Vec::with_capacity(count as usize),
                    unparsed: 0,
                },
                seen: vec![false; count as usize],
            }),
            distinct: AtomicU64::new(0),
        }
    }

    fn record(&self, seq: Option<u64>, at: u64) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let Some(seq) = seq else {
            inner.arrived.unparsed += 1;
            return;
        };
        inner.arrived.arrivals.push((seq, at));
        if let Some(seen) = inner.seen.get_mut(seq as usize)
            && !*seen
        {
            *seen = true;
            self.distinct.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn distinct(&self) -> u64 {
        self.distinct.load(Ordering::Relaxed)
    }

    fn take(&self) -> Arrived {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut inner.arrived)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::api::ApiConnection;

    #[test]
    fn sequence_numbers_come_from_the_payload() {
        let payload = crate::harness::amqp::payload(4_321, 200);
        assert_eq!(seq_of(&payload), Some(4_321));
        assert_eq!(seq_of(br#"{"seq":7,"pad":""}"#), Some(7));
        assert_eq!(seq_of(b"{}"), None);
        assert_eq!(seq_of(br#"{"seq":x}"#), None);
        assert_eq!(seq_of(br#"{"seq":12"#), None);
    }

    #[tokio::test]
    async fn records_every_arrival_and_answers_ok() {
        let receiver = Receiver::start(10, Duration::from_millis(1)).await.unwrap();
        assert!(receiver.url().ends_with(PATH));
        let mut conn = ApiConnection::new(receiver.addr, "unused");
        for seq in [3u64, 4, 3] {
            let body = crate::harness::amqp::payload(seq, 64);
            let r = conn.post_json(PATH, &body).await.unwrap();
            assert_eq!(r.status, 200);
            assert_eq!(r.body, br#"{"ok":true}"#);
        }
        let r = conn.post_json(PATH, b"not ours").await.unwrap();
        assert_eq!(r.status, 200, "answered all the same");
        assert_eq!(receiver.distinct(), 2);
        let arrived = receiver.stop();
        let seqs: Vec<u64> = arrived.arrivals.iter().map(|a| a.0).collect();
        assert_eq!(seqs, [3, 4, 3]);
        assert_eq!(arrived.unparsed, 1);
        assert!(arrived.arrivals.windows(2).all(|w| w[0].1 <= w[1].1));
    }
}
