//! The HTTP answers every Herald process gives alike, whatever it serves:
//! the metrics exposition (`GET /metrics`) and the JSON errors for a path
//! nobody serves (404) or a method a path does not take (405), in the
//! publish API's error form (`{"error":{"code":...,"message":...}}`).

use axum::Json;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use prometheus_client::registry::Registry;
use serde_json::json;

/// `GET /metrics`: `registry` in the OpenMetrics text format.
pub fn metrics(registry: &Registry) -> Response {
    let mut body = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut body, registry) {
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

/// The router's fallback: 404 `not_found`.
pub async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({"error": {"code": "not_found", "message": "no such endpoint"}})),
    )
        .into_response()
}

/// The router's fallback for a known path: 405 `method_not_allowed`.
pub async fn method_not_allowed() -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        Json(json!({"error": {
            "code": "method_not_allowed",
            "message": "this endpoint does not take that method"
        }})),
    )
        .into_response()
}
