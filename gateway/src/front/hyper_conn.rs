//! hyper's side of the front: HTTP/1.1 with upgrades, for every
//! connection the front does not serve itself, and the 429 answer to a
//! connection over its address's rate.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use herald_engine::deadline::Deadlines;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::client_addr::ClientAddrs;
use crate::sockjs::session::{ReceivedOn, SHUTDOWN_LINGER};

/// A connection hyper serves: where it came from, for how long a head may
/// take, and its answers' and bodies' deadlines.
pub(super) struct HttpConn<'a> {
    pub(super) peer: SocketAddr,
    pub(super) client: SocketAddr,
    pub(super) clients: Arc<ClientAddrs>,
    /// Requests name their client in `X-Forwarded-For` (a trusted proxy
    /// without the PROXY protocol).
    pub(super) per_request: bool,
    pub(super) header_timeout: Duration,
    /// `[http]`: the socket's writes are bounded here, until an upgrade
    /// takes the socket out (`crate::ws`); the router's request bodies
    /// already are (`Deadlines::bound_bodies`).
    pub(super) deadlines: &'a Deadlines,
}

/// Serve `io` with hyper (upgrades allowed) until it ends or `shutdown`
/// fires: idle keep-alive connections close and in-flight requests finish
/// (a connection a SockJS poll came on stays open up to
/// [`SHUTDOWN_LINGER`] for the client's next poll). An answer the client
/// takes nothing of for `http.write_timeout_ms` ends the connection.
pub(super) async fn serve_http<I>(
    io: I,
    router: Router,
    conn: HttpConn<'_>,
    shutdown: CancellationToken,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let HttpConn {
        peer,
        client,
        clients,
        per_request,
        header_timeout,
        deadlines,
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
        .serve_connection(TokioIo::new(deadlines.wrap(io)), service)
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
pub(super) async fn refuse_rate_limited(
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
