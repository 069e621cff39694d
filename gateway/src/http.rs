//! The HTTP surface: routes and small handlers.
//!
//! | route | what |
//! |---|---|
//! | `GET /ws` | STOMP over WebSocket ([`ws`]) |
//! | `POST /v1/notifications` | publish (from `herald-router`) |
//! | `GET /healthz` | 200 while serving, 503 once shutdown starts |
//! | `GET /metrics` | Prometheus text format |
//! | `GET /` | the demo page (dev mode only) |

pub mod ws;

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use crate::app::Shared;

const DEMO_PAGE: &str = include_str!("../assets/demo.html");

/// Every route of the gateway, given the publish routes.
pub fn routes(shared: Arc<Shared>, publish: Router) -> Router {
    let mut router = Router::new()
        .route("/ws", get(ws::upgrade))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics));
    if shared.dev.is_some() {
        router = router.route("/", get(demo));
    }
    router
        .with_state(shared)
        .merge(publish)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
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

async fn healthz(State(shared): State<Arc<Shared>>) -> Response {
    if shared.shutdown.is_cancelled() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({"status": "shutting down"})),
        )
            .into_response()
    } else {
        axum::Json(json!({"status": "ok"})).into_response()
    }
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
