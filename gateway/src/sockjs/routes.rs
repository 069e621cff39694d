//! The HTTP surface of a SockJS service, per the SockJS 0.3 protocol:
//! greeting, `/info`, the transports, CORS, cache headers, and the
//! protocol's error answers (404 unknown session or bad id, 405 wrong
//! method, 500 "Payload expected." / "Broken JSON encoding.", 413 oversized
//! send).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use bytes::Bytes;
use futures_util::StreamExt;
use herald_protocol::sockjs;
use http_body_util::BodyExt;

use super::session::{Attach, Kind, ReceivedOn, Registry};
use super::{App, Service, test_apps};
use crate::app::Shared;
use crate::metrics::RefuseReason;
use crate::session::websocket::{self, Framing};
use crate::ws::{self, Flavor};

/// Bytes of `h` before the first frame of xhr-streaming: browsers deliver a
/// streaming XHR's progress only after a first chunk of some size.
const XHR_STREAMING_PRELUDE: usize = 2048;
/// One year, for cacheable preflight answers.
const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

/// State of one mounted service.
#[derive(Clone)]
pub struct SockjsState {
    shared: Arc<Shared>,
    service: Service,
    registry: Arc<Registry>,
}

/// The routes of one service, to be nested under its prefix; sessions live
/// in `registry`, shared with the service's native streaming path.
pub fn router(shared: Arc<Shared>, service: Service, registry: Arc<Registry>) -> Router {
    let state = SockjsState {
        shared,
        service,
        registry,
    };
    Router::new()
        .route("/", get(greeting))
        .route("/info", get(info).options(preflight_get))
        .route("/websocket", any(raw_websocket))
        .route("/{server}/{session}/{transport}", any(dispatch))
        .with_state(state)
}

/// Session paths: ids are checked before the method, as the protocol wants
/// (an invalid path is 404 whatever the method), then the transport and
/// method pick the handler; a wrong method is a bare 405.
async fn dispatch(
    State(s): State<SockjsState>,
    Path((server, session, transport)): Path<(String, String, String)>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    req: Request,
) -> Response {
    if !sockjs::is_valid_id(&server) || !sockjs::is_valid_id(&session) {
        return plain(StatusCode::NOT_FOUND, "Not found");
    }
    let method = req.method().clone();
    match (transport.as_str(), method) {
        ("websocket", Method::GET) => {
            if !s.service.websocket {
                return plain(StatusCode::NOT_FOUND, "Not found");
            }
            accept_websocket(s, peer, req, Framing::Sockjs)
        }
        ("xhr", Method::POST) => receive(s, &session, req, Kind::XhrPolling).await,
        ("xhr_streaming", Method::POST) => receive(s, &session, req, Kind::XhrStreaming).await,
        ("eventsource", Method::GET) => receive(s, &session, req, Kind::Eventsource).await,
        ("xhr_send", Method::POST) => xhr_send(s, &session, req).await,
        ("xhr" | "xhr_streaming" | "xhr_send", Method::OPTIONS) => {
            let headers = req.headers().clone();
            let mut r = preflight(&headers, "OPTIONS, POST");
            cookie(&s.service, &headers, r.headers_mut());
            r
        }
        ("websocket" | "eventsource", _) => method_not_allowed("GET"),
        ("xhr" | "xhr_streaming" | "xhr_send", _) => method_not_allowed("OPTIONS, POST"),
        _ => plain(StatusCode::NOT_FOUND, "Not found"),
    }
}

/// The cache header of every dynamic answer, as the SockJS protocol has
/// spelled it since v0.3.3 (and sockjs-node since 0.3.8): `no-transform`
/// keeps compressing proxies from buffering a stream.
pub(crate) const NO_CACHE: &str = "no-store, no-cache, no-transform, must-revalidate, max-age=0";

/// The content type of EventSource streams: the event stream format is
/// UTF-8 by definition, so the later protocol names no charset.
pub(crate) const EVENT_STREAM: &str = "text/event-stream";

/// CORS as the SockJS protocol wants it since v0.3.3: a request with an
/// `Origin` (`null` included, as sandboxed pages and `file:` send it) gets
/// that origin back with credentials; one without gets `*` and no
/// credentials, which browsers refuse together anyway.
fn cors(request: &HeaderMap, response: &mut HeaderMap) {
    match request.get(header::ORIGIN) {
        Some(origin) => {
            response.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
            response.insert(
                header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
                HeaderValue::from_static("true"),
            );
        }
        None => {
            response.insert(
                header::ACCESS_CONTROL_ALLOW_ORIGIN,
                HeaderValue::from_static("*"),
            );
        }
    }
    if let Some(h) = request.get(header::ACCESS_CONTROL_REQUEST_HEADERS) {
        response.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, h.clone());
    }
}

/// `JSESSIONID` for services that need the cookie.
fn cookie(service: &Service, request: &HeaderMap, response: &mut HeaderMap) {
    if !service.cookie_needed {
        return;
    }
    let value = request
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| c.trim().strip_prefix("JSESSIONID="))
        .unwrap_or("dummy");
    if let Ok(v) = HeaderValue::from_str(&format!("JSESSIONID={value}; path=/")) {
        response.insert(header::SET_COOKIE, v);
    }
}

/// A bare 405 with `Allow`, no body, no content type (as the protocol wants).
fn method_not_allowed(allow: &'static str) -> Response {
    let mut r = StatusCode::METHOD_NOT_ALLOWED.into_response();
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    r
}

fn plain(status: StatusCode, text: &'static str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=UTF-8")],
        text,
    )
        .into_response()
}

/// `GET {prefix}` and `{prefix}/`: the SockJS greeting.
pub async fn greeting() -> Response {
    plain(StatusCode::OK, "Welcome to SockJS!\n")
}

async fn info(State(s): State<SockjsState>, headers: HeaderMap) -> Response {
    let body = serde_json::json!({
        "websocket": s.service.websocket,
        "cookie_needed": s.service.cookie_needed,
        "origins": ["*:*"],
        "entropy": rand::random::<u32>(),
    });
    let mut r = (
        [
            (header::CONTENT_TYPE, "application/json; charset=UTF-8"),
            (header::CACHE_CONTROL, NO_CACHE),
        ],
        body.to_string(),
    )
        .into_response();
    cors(&headers, r.headers_mut());
    r
}

fn preflight(headers: &HeaderMap, methods: &'static str) -> Response {
    let mut r = StatusCode::NO_CONTENT.into_response();
    let h = r.headers_mut();
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=31536000"),
    );
    if let Ok(v) = HeaderValue::from_str(&httpdate::fmt_http_date(SystemTime::now() + YEAR)) {
        h.insert(header::EXPIRES, v);
    }
    h.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("31536000"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static(methods),
    );
    cors(headers, h);
    r
}

async fn preflight_get(headers: HeaderMap) -> Response {
    preflight(&headers, "OPTIONS, GET")
}

async fn raw_websocket(
    State(s): State<SockjsState>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    req: Request,
) -> Response {
    if req.method() != Method::GET {
        return method_not_allowed("GET");
    }
    if !s.service.websocket {
        return plain(StatusCode::NOT_FOUND, "Not found");
    }
    accept_websocket(s, peer, req, Framing::Raw)
}

/// Accept a WebSocket for this service: the STOMP session, or on the test
/// services the suite's echo or close app (the session path has no test
/// branch).
fn accept_websocket(
    s: SockjsState,
    peer: std::net::SocketAddr,
    req: Request,
    framing: Framing,
) -> Response {
    match s.service.app {
        App::Stomp => ws::accept(s.shared, peer, req, framing, Flavor::Sockjs, websocket::run),
        app => ws::accept(
            s.shared,
            peer,
            req,
            framing,
            Flavor::Sockjs,
            move |shared, up| test_apps::run_websocket(shared, up, app),
        ),
    }
}

fn query_token(req: &Request) -> Option<String> {
    let query = req.uri().query()?;
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.into_owned())
}

/// A receiving request: take the session's receiver slot and stream.
async fn receive(s: SockjsState, session: &str, req: Request, kind: Kind) -> Response {
    if let Some(on) = req.extensions().get::<ReceivedOn>() {
        on.mark();
    }
    let headers = req.headers().clone();
    let token = query_token(&req);
    // The client, as the accept loop and the front resolved it.
    let client = req
        .extensions()
        .get::<ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0)
        .unwrap_or_else(|| std::net::SocketAddr::from(([0, 0, 0, 0], 0)));
    let app = || match s.service.app {
        App::Stomp => super::application::stomp(&s.shared, kind, token, client),
        App::Echo => Box::new(test_apps::Echo),
        App::Close => Box::new(test_apps::Close),
    };
    let Some(sess) = s
        .registry
        .get_or_create(session, kind, s.service, &s.shared, app)
    else {
        s.shared.metrics.refuse(RefuseReason::SessionLimit);
        return plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many sessions on this gateway; retry another\n",
        );
    };
    let prelude = match kind {
        Kind::XhrStreaming => {
            let mut p = vec![b'h'; XHR_STREAMING_PRELUDE];
            p.push(b'\n');
            Some(Bytes::from(p))
        }
        Kind::Eventsource => Some(Bytes::from_static(b"\r\n")),
        Kind::XhrPolling => None,
    };
    let frames = match sess.attach(kind).await {
        // One HTTP chunk per SockJS frame: clients (and the protocol suite)
        // read a chunk as a frame. This copies a frame's pieces together;
        // the native path (`super::native`) writes them without a copy.
        Attach::Stream(handle) => futures_util::stream::unfold(handle, |handle| async move {
            let frame = handle.next().await?;
            Some((join(&frame), handle))
        })
        .boxed(),
        Attach::Refused(close) => {
            let line: Vec<Bytes> = match kind {
                Kind::Eventsource => vec![
                    Bytes::from_static(b"data: "),
                    close,
                    Bytes::from_static(b"\r\n\r\n"),
                ],
                _ => vec![close, Bytes::from_static(b"\n")],
            };
            futures_util::stream::iter([join(&line)]).boxed()
        }
    };
    let body = futures_util::stream::iter(prelude)
        .chain(frames)
        .map(Ok::<Bytes, Infallible>);
    let content_type = match kind {
        Kind::Eventsource => EVENT_STREAM,
        _ => "application/javascript; charset=UTF-8",
    };
    let mut r = Response::new(Body::from_stream(body));
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(NO_CACHE));
    cors(&headers, h);
    cookie(&s.service, &headers, h);
    r
}

async fn xhr_send(s: SockjsState, session: &str, req: Request) -> Response {
    let Some(sess) = s.registry.get(session) else {
        return plain(StatusCode::NOT_FOUND, "Not found");
    };
    let headers = req.headers().clone();
    let limit = s.shared.config.sockjs.max_send_bytes;
    let body = match http_body_util::Limited::new(req.into_body(), limit)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            s.shared
                .metrics
                .error(crate::metrics::ProtocolError::Oversized);
            return plain(StatusCode::PAYLOAD_TOO_LARGE, "Payload too large.");
        }
        Err(_) => return plain(StatusCode::BAD_REQUEST, "Broken request body."),
    };
    if let Some(transport) = sess.transport() {
        s.shared
            .metrics
            .traffic
            .meter(transport)
            .bytes_received
            .inc_by(body.len() as u64);
    }
    let messages = match sockjs::decode_messages(&body, false) {
        Ok(m) => m,
        Err(sockjs::DecodeError::Empty) => {
            s.shared
                .metrics
                .error(crate::metrics::ProtocolError::MalformedFrame);
            return plain(StatusCode::INTERNAL_SERVER_ERROR, "Payload expected.");
        }
        Err(_) => {
            s.shared
                .metrics
                .error(crate::metrics::ProtocolError::MalformedFrame);
            return plain(StatusCode::INTERNAL_SERVER_ERROR, "Broken JSON encoding.");
        }
    };
    if !sess.send(messages) {
        s.shared
            .metrics
            .refuse(crate::metrics::RefuseReason::InboundFull);
        return plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "the session's inbound queue is full; retry later",
        );
    }
    let mut r = StatusCode::NO_CONTENT.into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=UTF-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(NO_CACHE));
    cors(&headers, h);
    cookie(&s.service, &headers, h);
    r
}

fn join(pieces: &[Bytes]) -> Bytes {
    let mut out = bytes::BytesMut::with_capacity(pieces.iter().map(Bytes::len).sum());
    for p in pieces {
        out.extend_from_slice(p);
    }
    out.freeze()
}

/// Every SockJS service this gateway mounts, by prefix.
pub fn services(config: &crate::config::SockjsConfig) -> Vec<(&'static str, Service)> {
    let mut v = vec![(
        "/sockjs",
        Service {
            app: App::Stomp,
            websocket: config.websocket,
            cookie_needed: config.jsessionid,
            streaming_limit_bytes: config.streaming_limit_bytes,
        },
    )];
    if config.test_endpoints {
        // The suite expects its test server to end streams after 4096 bytes.
        let echo = Service {
            app: App::Echo,
            websocket: true,
            cookie_needed: false,
            streaming_limit_bytes: 4096,
        };
        v.push(("/echo", echo));
        v.push((
            "/close",
            Service {
                app: App::Close,
                ..echo
            },
        ));
        v.push((
            "/disabled_websocket_echo",
            Service {
                websocket: false,
                ..echo
            },
        ));
        v.push((
            "/cookie_needed_echo",
            Service {
                cookie_needed: true,
                ..echo
            },
        ));
    }
    v
}
