//! `GET /ws`: the WebSocket upgrade (RFC 6455 section 4.2), done here so the
//! session can take the raw `TcpStream` back from hyper and run without
//! per-connection read buffers. A well-formed `/ws` upgrade on a new
//! connection does not reach hyper at all ([`native`]); what it refuses
//! does, and is answered here.

use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use herald_engine::deadline::WriteDeadline;
use herald_protocol::stomp::Version;
use herald_protocol::websocket::accept_key;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::app::Shared;
use crate::metrics::RefuseReason;
use crate::publish_direct::Rewind;
use crate::session::websocket::{self, Framing, Upgraded};

pub(crate) mod native;

/// A request's headers, wherever they were parsed (hyper's map, or
/// httparse's list on the native path).
pub(crate) trait Headers {
    /// Every value of `name` (lower case), in order.
    fn header_values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]>;

    /// The first value of `name`.
    fn header<'a>(&'a self, name: &'a str) -> Option<&'a [u8]> {
        self.header_values(name).next()
    }
}

impl Headers for HeaderMap {
    fn header_values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> {
        self.get_all(name).iter().map(HeaderValue::as_bytes)
    }
}

impl Headers for [httparse::Header<'_>] {
    fn header_values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> {
        self.iter()
            .filter(move |h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    }
}

/// The comma-separated items of every value of `name`, trimmed.
fn items<'a>(headers: &'a (impl Headers + ?Sized), name: &'a str) -> impl Iterator<Item = &'a str> {
    headers
        .header_values(name)
        .filter_map(|v| std::str::from_utf8(v).ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
}

fn header_has_token(headers: &(impl Headers + ?Sized), name: &str, token: &str) -> bool {
    items(headers, name).any(|t| t.eq_ignore_ascii_case(token))
}

/// The highest STOMP subprotocol the client offers, if any.
fn choose_subprotocol(headers: &(impl Headers + ?Sized)) -> Option<&'static str> {
    items(headers, "sec-websocket-protocol")
        .filter_map(Version::from_subprotocol)
        .max()
        .map(Version::subprotocol)
}

/// The token of `?token=` in `query`, or else of `Authorization: Bearer`.
fn token(headers: &(impl Headers + ?Sized), query: Option<&str>) -> Option<String> {
    query
        .and_then(|q| {
            form_urlencoded::parse(q.as_bytes())
                .find(|(k, _)| k == "token")
                .map(|(_, v)| v.into_owned())
        })
        .or_else(|| {
            headers
                .header("authorization")
                .and_then(|v| std::str::from_utf8(v).ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(|t| t.trim().to_owned())
        })
}

/// What a valid upgrade request is answered with, and the token it carries.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Handshake {
    /// `Sec-WebSocket-Accept`.
    pub(crate) accept: String,
    /// `Sec-WebSocket-Protocol`, when the client offered a STOMP version.
    pub(crate) subprotocol: Option<&'static str>,
    pub(crate) token: Option<String>,
}

/// Check a STOMP upgrade request (RFC 6455 section 4.2.1): its answer, or
/// the status and message it is refused with.
fn check(
    headers: &(impl Headers + ?Sized),
    query: Option<&str>,
) -> Result<Handshake, (StatusCode, &'static str)> {
    if !header_has_token(headers, "upgrade", "websocket")
        || !header_has_token(headers, "connection", "upgrade")
    {
        return Err((
            StatusCode::UPGRADE_REQUIRED,
            "this endpoint speaks STOMP over WebSocket: send Connection: Upgrade and Upgrade: websocket",
        ));
    }
    // 13 is RFC 6455; 7 and 8 are the hybi drafts some browsers shipped,
    // framed the same way.
    if headers
        .header("sec-websocket-version")
        .is_none_or(|v| !matches!(v, b"13" | b"8" | b"7"))
    {
        return Err((
            StatusCode::UPGRADE_REQUIRED,
            "Sec-WebSocket-Version must be 13",
        ));
    }
    let Some(key) = headers
        .header("sec-websocket-key")
        .filter(|k| k.len() == 24)
    else {
        return Err((
            StatusCode::BAD_REQUEST,
            "Sec-WebSocket-Key is missing or not 16 base64-encoded bytes",
        ));
    };
    Ok(Handshake {
        accept: accept_key(key),
        subprotocol: choose_subprotocol(headers),
        token: token(headers, query),
    })
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
        let problem = if !header_has_token(headers, "upgrade", "websocket") {
            Some("Can \"Upgrade\" only to \"WebSocket\".")
        } else if !header_has_token(headers, "connection", "upgrade") {
            Some("\"Connection\" must be \"Upgrade\".")
        } else {
            None
        };
        if let Some(message) = problem {
            shared.metrics.refuse(RefuseReason::BadHandshake);
            return (StatusCode::BAD_REQUEST, message).into_response();
        }
    }
    let Handshake {
        accept,
        subprotocol,
        token: http_token,
    } = match check(headers, req.uri().query()) {
        Ok(h) => h,
        Err((status, message)) => return refuse(&shared, status, message),
    };
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
        // A plain connection, or one the direct publish path handed on,
        // its writes bounded by `http.write_timeout_ms` until now: from
        // here the session's own slow-consumer rules apply.
        let (stream, leftover) = match upgraded.downcast::<TokioIo<WriteDeadline<TcpStream>>>() {
            Ok(parts) => (parts.io.into_inner().into_inner(), parts.read_buf),
            Err(upgraded) => match upgraded.downcast::<TokioIo<WriteDeadline<Rewind>>>() {
                Ok(parts) => {
                    let (unread, stream) = parts.io.into_inner().into_inner().into_parts();
                    let leftover = if unread.is_empty() {
                        parts.read_buf
                    } else {
                        [parts.read_buf, unread].concat().into()
                    };
                    (stream, leftover)
                }
                Err(_) => {
                    tracing::error!("upgraded connection is not a TcpStream; closing it");
                    return;
                }
            },
        };
        let up = Upgraded {
            stream,
            leftover,
            http_token,
            peer,
            framing,
        };
        run(task_shared, up).await;
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
