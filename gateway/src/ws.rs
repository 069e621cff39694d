//! `GET /ws`: the WebSocket upgrade (RFC 6455 section 4.2), done here so the
//! session can take the raw `TcpStream` back from hyper and run without
//! per-connection read buffers.

use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use herald_protocol::stomp::Version;
use herald_protocol::websocket::accept_key;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::app::Shared;
use crate::metrics::RefuseReason;
use crate::session::websocket::{self, Framing, Upgraded};

fn header_has_token(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// The highest STOMP subprotocol the client offers, if any.
fn choose_subprotocol(headers: &HeaderMap) -> Option<&'static str> {
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|p| Version::from_subprotocol(p.trim()))
        .max()
        .map(Version::subprotocol)
}

fn query_token(req: &Request) -> Option<String> {
    let query = req.uri().query()?;
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.into_owned())
}

/// How the handshake's own errors are answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// `/ws`: 426 Upgrade Required for plain HTTP.
    Stomp,
    /// SockJS: 400 with the protocol's own messages.
    Sockjs,
}

fn refuse(shared: &Shared, status: StatusCode, message: &str) -> Response {
    shared
        .metrics
        .refuse(if status == StatusCode::SERVICE_UNAVAILABLE {
            RefuseReason::SessionLimit
        } else {
            RefuseReason::BadHandshake
        });
    let mut response = (status, format!("{message}\n")).into_response();
    if status == StatusCode::UPGRADE_REQUIRED {
        response.headers_mut().insert(
            header::SEC_WEBSOCKET_VERSION,
            HeaderValue::from_static("13"),
        );
    }
    response
}

/// `GET /ws`: STOMP over a raw WebSocket.
pub async fn upgrade(
    State(shared): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    req: Request,
) -> Response {
    accept(
        shared,
        peer,
        req,
        Framing::Raw,
        Flavor::Stomp,
        websocket::run,
    )
}

/// Validate the upgrade, answer 101, and `run` the session on the socket
/// (the STOMP session, [`websocket::run`], or a SockJS test-suite app that
/// the SockJS routes pass).
pub(crate) fn accept<F, Fut>(
    shared: Arc<Shared>,
    peer: std::net::SocketAddr,
    mut req: Request,
    framing: Framing,
    flavor: Flavor,
    run: F,
) -> Response
where
    F: FnOnce(Arc<Shared>, Upgraded) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let headers = req.headers();
    if flavor == Flavor::Sockjs {
        let problem = if !header_has_token(headers, header::UPGRADE, "websocket") {
            Some("Can \"Upgrade\" only to \"WebSocket\".")
        } else if !header_has_token(headers, header::CONNECTION, "upgrade") {
            Some("\"Connection\" must be \"Upgrade\".")
        } else {
            None
        };
        if let Some(message) = problem {
            shared.metrics.refuse(RefuseReason::BadHandshake);
            return (StatusCode::BAD_REQUEST, message).into_response();
        }
    }
    if !header_has_token(headers, header::UPGRADE, "websocket")
        || !header_has_token(headers, header::CONNECTION, "upgrade")
    {
        return refuse(
            &shared,
            StatusCode::UPGRADE_REQUIRED,
            "this endpoint speaks STOMP over WebSocket: send Connection: Upgrade and Upgrade: websocket",
        );
    }
    // 13 is RFC 6455; 7 and 8 are the hybi drafts some browsers shipped,
    // framed the same way.
    if headers
        .get(header::SEC_WEBSOCKET_VERSION)
        .is_none_or(|v| !matches!(v.as_bytes(), b"13" | b"8" | b"7"))
    {
        return refuse(
            &shared,
            StatusCode::UPGRADE_REQUIRED,
            "Sec-WebSocket-Version must be 13",
        );
    }
    let Some(key) = headers
        .get(header::SEC_WEBSOCKET_KEY)
        .filter(|k| k.len() == 24)
    else {
        return refuse(
            &shared,
            StatusCode::BAD_REQUEST,
            "Sec-WebSocket-Key is missing or not 16 base64-encoded bytes",
        );
    };
    let accept = accept_key(key.as_bytes());
    let subprotocol = choose_subprotocol(headers);
    let http_token = query_token(&req).or_else(|| {
        headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(|t| t.trim().to_owned())
    });
    if shared.shutdown.is_cancelled() {
        return refuse(
            &shared,
            StatusCode::SERVICE_UNAVAILABLE,
            "server shutting down",
        );
    }
    let Some(on_upgrade) = req.extensions_mut().remove::<hyper::upgrade::OnUpgrade>() else {
        return refuse(
            &shared,
            StatusCode::UPGRADE_REQUIRED,
            "this connection cannot be upgraded",
        );
    };
    let Some(permit) = shared.acquire_session() else {
        return refuse(
            &shared,
            StatusCode::SERVICE_UNAVAILABLE,
            "too many sessions on this gateway; retry another",
        );
    };
    let task_shared = Arc::clone(&shared);
    shared.tracker.spawn(async move {
        // The slot is the task's until it ends, however it ends.
        let _permit = permit;
        let upgraded = match on_upgrade.await {
            Ok(u) => u,
            Err(e) => {
                tracing::debug!(error = %e, "upgrade failed");
                return;
            }
        };
        match upgraded.downcast::<TokioIo<TcpStream>>() {
            Ok(parts) => {
                let up = Upgraded {
                    stream: parts.io.into_inner(),
                    leftover: parts.read_buf,
                    http_token,
                    peer,
                    framing,
                };
                run(task_shared, up).await;
            }
            Err(_) => {
                tracing::error!("upgraded connection is not a TcpStream; closing it");
            }
        }
    });
    let mut response = StatusCode::SWITCHING_PROTOCOLS.into_response();
    let h = response.headers_mut();
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(v) = HeaderValue::from_str(&accept) {
        h.insert(header::SEC_WEBSOCKET_ACCEPT, v);
    }
    if let Some(p) = subprotocol.filter(|_| framing == Framing::Raw) {
        h.insert(header::SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static(p));
    }
    response
}
