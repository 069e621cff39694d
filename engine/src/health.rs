//! The answers of `/healthz` (liveness) and `/readyz` (readiness), alike in
//! both binaries; each binary decides what keeps it from being ready.
//!
//! - Liveness, `GET /healthz`: the process is up and answering HTTP. Always
//!   200: `{"status":"ok"}`, or `{"status":"draining"}` once shutdown has
//!   started (the process is still alive; restarting it would only cut the
//!   drain short). Nothing else is checked: a liveness probe that failed
//!   because a broker is down would restart a healthy process.
//! - Readiness, `GET /readyz`: the process takes new work (sessions,
//!   publications). 200 `{"status":"ready"}`, or 503
//!   `{"status":"unavailable","reasons":[...]}` listing every condition
//!   that failed, e.g. `"draining"`, `"no root link"`, `"broker
//!   disconnected"`. Load balancers route by this one.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Why a process is not ready: one short phrase each, in the 503's
/// `reasons`.
pub type Reason = &'static str;

/// Shutdown has started: no new sessions or publications.
pub const DRAINING: Reason = "draining";

/// The answer of `GET /healthz`: 200, saying whether the drain has started.
pub fn liveness(draining: bool) -> Response {
    let status = if draining { DRAINING } else { "ok" };
    Json(json!({ "status": status })).into_response()
}

/// The answer of `GET /readyz`: 200 when `reasons` is empty, else 503
/// naming them.
pub fn readiness(reasons: &[Reason]) -> Response {
    if reasons.is_empty() {
        Json(json!({"status": "ready"})).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "unavailable", "reasons": reasons})),
        )
            .into_response()
    }
}
