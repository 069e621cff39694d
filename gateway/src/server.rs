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

use crate::sockjs::native::Native;

/// Longest time a client may take to send request headers.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
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

/// Serve `router` on `listener` until `shutdown` fires. Connections are
/// tracked by `tracker`; on shutdown, idle keep-alive connections close and
/// in-flight requests finish. The listener closes when this returns: from
/// then on new connections, `/healthz` and `/readyz` probes included, are
/// refused. That is on purpose: a balancer retries a refused connection on
/// another server (HAProxy's `retries` and `option redispatch`), where an
/// answer (even a 503) would go back to the browser.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    native: Option<Arc<Native>>,
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
        let native = native.clone();
        tracker.spawn(async move {
            let stream = match native {
                Some(native) => match native.try_serve(stream, HEADER_READ_TIMEOUT).await {
                    Some(stream) => stream,
                    None => return,
                },
                None => stream,
            };
            let service = hyper::service::service_fn(move |mut req: http::Request<Incoming>| {
                req.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
                router.clone().oneshot(req.map(axum::body::Body::new))
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!(peer = %peer, error = %e, "http connection ended");
                    }
                }
                _ = shutdown.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    if let Err(e) = conn.await {
                        tracing::debug!(peer = %peer, error = %e, "http connection ended");
                    }
                }
            }
        });
    }
    tracing::info!("stopped accepting connections");
}
