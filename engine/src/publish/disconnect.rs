//! `POST /v1/users/{uid}/disconnect`: an operator ends every live session
//! of a user, wherever it is connected, with a STOMP ERROR that says why
//! (`message:disconnected by an operator: REASON`), then closes it. The
//! body is `{"reason": "..."}` (required: 1 to 200 characters, no control
//! characters). The user's mailboxes stay: a client that reconnects
//! resumes (the ERROR is not one a client is told to give up on), so this
//! ends sessions, it does not ban anyone: revoke the user's tokens for
//! that.
//!
//! Standalone, the gateway's own hub ends the sessions and the answer
//! counts them (`202 {"user", "sessions": N}`); a router publishes the
//! request to every edge (where a broadcast notification goes,
//! `herald_amqp`'s `DISCONNECT_TYPE`) and answers once the broker has it
//! (`202 {"user"}`, the count is each edge's). Needs the `admin`
//! operation; `503` when the link cannot take it.

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::notifications::path_param;
use super::{ApiError, PublishApi};
use crate::api_key::Operation;

/// Longest `reason`, in characters.
pub(super) const MAX_REASON_CHARS: usize = 200;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DisconnectBody {
    reason: String,
}

/// `uid` is a user id as tokens carry it, or a 422 naming it.
pub(crate) fn check_uid(uid: &str) -> Result<(), ApiError> {
    if uid.is_empty() || uid.len() > 256 || uid.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            "uid",
            "must be 1 to 256 bytes without control characters",
        ));
    }
    Ok(())
}

/// `reason` may go in a STOMP header, or a 422 naming it.
fn check_reason(reason: &str) -> Result<(), ApiError> {
    let chars = reason.chars().count();
    if reason.trim().is_empty() || chars > MAX_REASON_CHARS || reason.chars().any(char::is_control)
    {
        return Err(ApiError::invalid(
            "reason",
            format!("must be 1 to {MAX_REASON_CHARS} characters without control characters"),
        ));
    }
    Ok(())
}

/// `POST /v1/users/{uid}/disconnect`.
pub(crate) async fn disconnect(
    State(api): State<PublishApi>,
    headers: HeaderMap,
    uid: Result<Path<String>, PathRejection>,
    body: Body,
) -> Response {
    let answer = async {
        let caller = api.authorize(&headers, Operation::Admin)?;
        let uid = path_param("uid", uid)?;
        check_uid(&uid)?;
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let bytes = api.read_body(body, declared).await?;
        let parsed: DisconnectBody = serde_json::from_slice(&bytes).map_err(|e| {
            if e.is_data() {
                ApiError::invalid(
                    "reason",
                    format!("the body must be {{\"reason\": TEXT}}: {e}"),
                )
            } else {
                ApiError::malformed(format!("the body is not JSON: {e}"))
            }
        })?;
        check_reason(&parsed.reason)?;
        let reason = parsed.reason.trim();
        let told = api
            .inner
            .link
            .disconnect(&uid, reason)
            .await
            .map_err(|e| ApiError::unavailable(e.to_string()))?;
        tracing::info!(api_key = caller.name(), user = %uid, %reason, sessions = ?told, "user disconnected");
        let body = match told {
            Some(n) => json!({"user": uid, "sessions": n}),
            None => json!({"user": uid}),
        };
        Ok::<_, ApiError>((StatusCode::ACCEPTED, Json(body)).into_response())
    };
    answer.await.unwrap_or_else(IntoResponse::into_response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_and_users_are_checked() {
        assert!(check_reason("maintenance").is_ok());
        assert!(check_reason(&"é".repeat(MAX_REASON_CHARS)).is_ok());
        for bad in ["", "  ", "a\nb", "bell\u{7}"] {
            assert_eq!(
                check_reason(bad).unwrap_err().field.as_deref(),
                Some("reason"),
                "{bad:?}"
            );
        }
        assert!(check_reason(&"x".repeat(MAX_REASON_CHARS + 1)).is_err());
        assert!(check_uid("alice").is_ok());
        assert!(check_uid("").is_err());
        assert!(check_uid("a\u{0}").is_err());
        assert!(check_uid(&"u".repeat(257)).is_err());
    }
}
