//! `GET /v1/operator`: whose API key this is and what it may do, for the
//! console's login (and any operator tool) to check a key before using it.
//! Needs the `admin` operation: 401 for no or a wrong key, 403 for a key
//! without `admin`, each counted like every refusal.

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::PublishApi;
use crate::api_key::Operation;

/// `GET /v1/operator`: `{"key": NAME, "ops": [...], "delayed": BOOL}`
/// (`delayed`: this server keeps delayed notifications and topics).
pub(crate) async fn whoami(State(api): State<PublishApi>, headers: HeaderMap) -> Response {
    match api.authorize(&headers, Operation::Admin) {
        Ok(caller) => {
            let ops: Vec<&str> = Operation::ALL
                .iter()
                .filter(|op| caller.may(**op))
                .map(|op| op.as_str())
                .collect();
            Json(json!({
                "key": caller.name(),
                "ops": ops,
                "delayed": api.delayed().is_some(),
            }))
            .into_response()
        }
        Err(e) => e.into_response(),
    }
}
