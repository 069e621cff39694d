//! The HTTP surface: routes and small handlers.
//!
//! | route | what |
//! |---|---|
//! | `GET /ws` | STOMP over WebSocket ([`crate::ws`]) |
//! | `POST /v1/notifications` | publish (from `herald-router`) |
//! | `GET /healthz` | liveness: 200 while serving (`"draining"` once shutdown starts) |
//! | `GET /readyz` | readiness: 200 when taking new sessions, else 503 with reasons ([`crate::health`]) |
//! | `GET /metrics` | Prometheus text format |
//! | `GET /v1/stats` | live counts as JSON, cacheable for 15 s |
//! | `/sockjs/...` | SockJS 0.3 ([`crate::sockjs`]) |
//! | `GET /js/herald.js` | the browser client module |
//! | `GET /` | the demo page (dev mode only) |

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use crate::app::Shared;
use crate::sockjs::native::Native;
use crate::sockjs::session::Registry;

const DEMO_PAGE: &str = include_str!("../assets/demo.html");
const CLIENT_MODULE: &str = include_str!("../js/src/herald.js");

/// Every route of the gateway, given the publish routes, and the native
/// streaming path of the `/sockjs` service (see [`crate::sockjs::native`]).
pub fn routes(shared: Arc<Shared>, publish: Router) -> (Router, Option<Arc<Native>>) {
    let mut router = Router::new()
        .route("/ws", get(crate::ws::upgrade))
        .route("/js/herald.js", get(client_module))
        .route("/healthz", get(crate::health::healthz))
        .route("/readyz", get(crate::health::readyz))
        .route("/metrics", get(metrics))
        .route("/v1/stats", get(stats));
    if shared.dev.is_some() {
        router = router.route("/", get(demo));
    }
    let services = crate::sockjs::routes::services(&shared.config.sockjs);
    let mut router = router.with_state(Arc::clone(&shared)).merge(publish);
    let mut native = None;
    for (prefix, service) in services {
        let registry = Arc::new(Registry::default());
        if service.app == crate::sockjs::App::Stomp {
            native = Some(Arc::new(Native::new(
                Arc::clone(&shared),
                Arc::clone(&registry),
                service,
                prefix,
            )));
        }
        router = router
            .nest(
                prefix,
                crate::sockjs::routes::router(Arc::clone(&shared), service, registry),
            )
            .route(&format!("{prefix}/"), get(crate::sockjs::routes::greeting));
    }
    let router = router
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed);
    (router, native)
}

async fn method_not_allowed() -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        axum::Json(json!({"error": {
            "code": "method_not_allowed",
            "message": "this endpoint does not take that method"
        }})),
    )
        .into_response()
}

async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    let mut body = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut body, &shared.registry) {
        tracing::error!(error = %e, "metrics encoding failed");
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

async fn client_module() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        CLIENT_MODULE,
    )
        .into_response()
}

/// `GET /v1/stats`: live counts as JSON, cacheable for 15 s (Varnish sits
/// in front of it in the distributed deployment).
async fn stats(State(shared): State<Arc<Shared>>) -> Response {
    use crate::metrics::{Transport, TransportLabels};
    let m = &shared.metrics;
    let mut sessions = serde_json::Map::new();
    let mut total = 0;
    for &transport in Transport::ALL {
        let n = m
            .sessions
            .get_or_create(&TransportLabels { transport })
            .get();
        total += n;
        sessions.insert(transport.as_str().to_owned(), json!(n));
    }
    let body = json!({
        "edge": shared.edge_id(),
        "sessions": {"total": total, "by_transport": sessions},
        "mailboxes": shared.hub.mailbox_count(),
        "deliveries": m.deliveries.get(),
        "replayed": m.replayed.get(),
        "gaps": m.gaps.get(),
    });
    (
        [(header::CACHE_CONTROL, "public, max-age=15")],
        axum::Json(body),
    )
        .into_response()
}

async fn demo() -> Html<&'static str> {
    Html(DEMO_PAGE)
}

async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        axum::Json(json!({"error": {"code": "not_found", "message": "no such endpoint"}})),
    )
        .into_response()
}
