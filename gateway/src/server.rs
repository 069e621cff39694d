//! The accept loop: one hyper HTTP/1.1 connection per socket, upgrades
//! allowed, graceful shutdown when the token fires.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use std::sync::atomic::{AtomicBool, Ordering};

use crate::client_addr::ClientAddrs;
use crate::metrics::Metrics;
use crate::proxy_header;
use crate::sockjs::native::{Handed, Native};
use crate::sockjs::session::{ReceivedOn, SHUTDOWN_LINGER};

/// Pause after an accept error (e.g. out of file descriptors) before trying again.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// Pending connections the kernel queues before `accept`: a burst of
/// reconnecting browsers must not overflow it (the default of 128 drops
/// SYNs and costs each client a one-second retransmit).
pub const LISTEN_BACKLOG: u32 = 4096;

/// Bind a listener with SO_REUSEADDR and a [`LISTEN_BACKLOG`] backlog.
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// How the accept loop treats a new connection.
#[derive(Clone)]
pub struct Accepting {
    /// The native streaming path that sniffs new connections first.
    pub native: Option<Arc<Native>>,
    /// `session.header_timeout_ms`: from accept to a whole request head
    /// (and a PROXY header before it), whether the native path or hyper
    /// reads it. The native path counts its timeouts; hyper's are not
    /// counted, because hyper ends an idle keep-alive connection with the
    /// same error, which is no refusal.
    pub header_timeout: Duration,
    /// The client's address behind trusted proxies (`[proxy]`) and new
    /// connections per client address (`[connection_rate]`, when on: a
    /// connection over it is answered 429 and closed).
    pub clients: Arc<ClientAddrs>,
    /// Where refusals are counted.
    pub metrics: Arc<Metrics>,
}

/// Serve `router` on `listener` until `shutdown` fires. Connections are
/// tracked by `tracker`; on shutdown, idle keep-alive connections close and
/// in-flight requests finish (a connection a SockJS poll came on first stays
/// open up to [`SHUTDOWN_LINGER`] for the client's next poll). The listener closes when this returns: from
/// then on new connections, `/healthz` and `/readyz` probes included, are
/// refused. That is on purpose: a balancer retries a refused connection on
/// another server (HAProxy's `retries` and `option redispatch`), where an
/// answer (even a 503) would go back to the browser.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    accepting: Accepting,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            r = listener.accept() => match r {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            },
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "set_nodelay failed");
        }
        let router = router.clone();
        let shutdown = shutdown.clone();
        let accepting = accepting.clone();
        tracker.spawn(async move {
            // One header deadline per connection, counted from accept.
            let deadline = tokio::time::Instant::now() + accepting.header_timeout;
            let clients = &accepting.clients;
            let mut stream = stream;
            // The client: what a trusted proxy's PROXY header says, or the
            // connection's own address.
            let client = if clients.proxy_protocol() {
                let trusted = clients.is_trusted(peer.ip());
                let read = tokio::select! {
                    r = proxy_header::read(&mut stream, peer, trusted, deadline) => r,
                    // Nothing is in flight yet: do not hold the drain.
                    _ = shutdown.cancelled() => return,
                };
                match read {
                    Ok(client) => client,
                    Err(refusal) => {
                        if let Some(reason) = refusal.reason() {
                            accepting.metrics.refuse(reason);
                        }
                        match refusal {
                            proxy_header::Refusal::Untrusted
                            | proxy_header::Refusal::Malformed(_)
                            | proxy_header::Refusal::Timeout => {
                                tracing::info!(peer = %peer, reason = %refusal, "connection refused: PROXY header");
                            }
                            proxy_header::Refusal::Silent | proxy_header::Refusal::Ended => {
                                tracing::debug!(peer = %peer, reason = %refusal, "connection closed before its request");
                            }
                        }
                        return;
                    }
                }
            } else {
                peer
            };
            // Requests from a trusted proxy name their client in
            // X-Forwarded-For: the rate applies to the first request's.
            let per_request = clients.uses_forwarded_for(peer);
            if !per_request && let Err(retry_after) = clients.admit(client.ip()) {
                tracing::debug!(client = %client, peer = %peer, retry_after, "connection over the per-address rate; answered 429");
                refuse_rate_limited(stream, retry_after, accepting.header_timeout).await;
                return;
            }
            // hyper's connection: `header_timeout` for each head (what the
            // look at the first request left of the deadline, or the whole
            // timeout after the direct publish path).
            let conn = |header_timeout| HttpConn {
                peer,
                client,
                clients: Arc::clone(clients),
                per_request,
                header_timeout,
            };
            let left = |deadline: tokio::time::Instant| {
                deadline
                    .saturating_duration_since(tokio::time::Instant::now())
                    .max(Duration::from_millis(1))
            };
            let Some(native) = &accepting.native else {
                serve_http(stream, router, conn(left(deadline)), shutdown).await;
                return;
            };
            match native.try_serve(stream, peer, client, clients, deadline).await {
                Some(Handed::Hyper(stream)) => {
                    serve_http(stream, router, conn(left(deadline)), shutdown).await;
                }
                Some(Handed::Publish(stream)) => {
                    let Some(api) = native.publish_api() else {
                        return;
                    };
                    let timeout = accepting.header_timeout;
                    if let Some(rest) = crate::publish_direct::serve(api, stream, timeout, &shutdown).await {
                        serve_http(rest, router, conn(timeout), shutdown).await;
                    }
                }
                None => {}
            }
        });
        // Serve connections in the order they were accepted: a task spawned
        // here goes to this worker's LIFO slot, so accepting the next
        // connection first would start the later one before the earlier
        // (a SockJS poll opened after another would take its session).
        // Yielding lets the new task make its first step now.
        tokio::task::yield_now().await;
    }
    tracing::info!("stopped accepting connections");
}

/// A connection hyper serves: where it came from, and for how long a head
/// may take.
struct HttpConn {
    peer: SocketAddr,
    client: SocketAddr,
    clients: Arc<ClientAddrs>,
    /// Requests name their client in `X-Forwarded-For` (a trusted proxy
    /// without the PROXY protocol).
    per_request: bool,
    header_timeout: Duration,
}

/// Serve `io` with hyper (upgrades allowed) until it ends or `shutdown`
/// fires (see [`serve`]).
async fn serve_http<I>(io: I, router: Router, conn: HttpConn, shutdown: CancellationToken)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let HttpConn {
        peer,
        client,
        clients,
        per_request,
        header_timeout,
    } = conn;
    let ended = |e: hyper::Error| {
        tracing::debug!(client = %client, peer = %peer, error = %e, "http connection ended");
    };
    let first = AtomicBool::new(per_request && clients.rate_limited());
    let received_on = ReceivedOn::default();
    let marker = received_on.clone();
    let service_clients = clients;
    let service = hyper::service::service_fn(move |mut req: http::Request<Incoming>| {
        let client = if per_request {
            let values = req
                .headers()
                .get_all(X_FORWARDED_FOR)
                .iter()
                .map(|v| v.as_bytes());
            service_clients.forwarded_for(peer, values)
        } else {
            client
        };
        if first.swap(false, Ordering::Relaxed)
            && let Err(retry_after) = service_clients.admit(client.ip())
        {
            tracing::debug!(client = %client, peer = %peer, retry_after, "connection over the per-address rate; answered 429");
            let refused = too_many(retry_after, true).map(axum::body::Body::new);
            return futures_util::future::Either::Left(std::future::ready(Ok::<
                _,
                std::convert::Infallible,
            >(refused)));
        }
        req.extensions_mut()
            .insert(ConnectInfo::<SocketAddr>(client));
        req.extensions_mut().insert(marker.clone());
        futures_util::future::Either::Right(router.clone().oneshot(req.map(axum::body::Body::new)))
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                ended(e);
            }
        }
        _ = shutdown.cancelled() => {
            // A SockJS poll came on this connection: the client's
            // next one may already be on its way, and gets the
            // session's shutdown notice if it is served.
            if received_on.marked()
                && let Ok(r) = tokio::time::timeout(SHUTDOWN_LINGER, conn.as_mut()).await
            {
                if let Err(e) = r {
                    ended(e);
                }
                return;
            }
            conn.as_mut().graceful_shutdown();
            if let Err(e) = conn.await {
                ended(e);
            }
        }
    }
}

/// `X-Forwarded-For`, as trusted proxies name a request's client.
const X_FORWARDED_FOR: &str = "x-forwarded-for";

/// The 429 answer to a connection over its address's rate, with
/// `Connection: close` when the connection ends after it.
fn too_many(retry_after: u64, close: bool) -> http::Response<http_body_util::Full<bytes::Bytes>> {
    let body = format!("too many new connections from this address: retry after {retry_after} s\n");
    let mut response = http::Response::builder()
        .status(http::StatusCode::TOO_MANY_REQUESTS)
        .header(http::header::RETRY_AFTER, retry_after)
        .header(http::header::CONTENT_TYPE, "text/plain; charset=utf-8");
    if close {
        response = response.header(http::header::CONNECTION, "close");
    }
    response
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .unwrap_or_default()
}

/// Answer a connection over its address's rate: read its request head (up
/// to `header_timeout`), answer 429 with `Retry-After`, close. Whatever it
/// asked (a WebSocket upgrade, a SockJS stream, the API) is not served.
async fn refuse_rate_limited(
    stream: tokio::net::TcpStream,
    retry_after: u64,
    header_timeout: Duration,
) {
    let service = hyper::service::service_fn(move |_req: http::Request<Incoming>| {
        std::future::ready(Ok::<_, std::convert::Infallible>(too_many(
            retry_after,
            false,
        )))
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .keep_alive(false)
        .serve_connection(TokioIo::new(stream), service);
    // The head is bounded by the header timeout; the answer is small, but
    // a peer that never reads it must not keep the task either.
    match tokio::time::timeout(header_timeout + Duration::from_secs(5), conn).await {
        Ok(Err(e)) => tracing::debug!(error = %e, "refused connection ended"),
        Ok(Ok(())) => {}
        Err(_) => tracing::debug!("refused connection did not take its answer in time"),
    }
}
