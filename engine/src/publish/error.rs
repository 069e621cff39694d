//! The JSON error body: `{"error":{"code":..., "message":..., "field":...}}`.

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde::Serialize;

use crate::metrics::RejectReason;

/// An error answered to a publisher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable code.
    pub code: &'static str,
    /// What went wrong, for a human.
    pub message: String,
    /// The offending field, when one is to blame.
    pub field: Option<String>,
    /// Seconds for a `Retry-After` header (429).
    pub retry_after: Option<u64>,
}

#[derive(Serialize)]
struct Body<'a> {
    error: Inner<'a>,
}

#[derive(Serialize)]
struct Inner<'a> {
    code: &'a str,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<&'a str>,
}

impl ApiError {
    /// 401: no or wrong API key.
    pub fn unauthorized() -> Self {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            code: "unauthorized",
            message: "a valid API key is required (Authorization: Bearer KEY or X-Api-Key: KEY)"
                .into(),
            field: None,
            retry_after: None,
        }
    }

    /// 400: the body is not parseable.
    pub fn malformed(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            code: "malformed_json",
            message: message.into(),
            field: None,
            retry_after: None,
        }
    }

    /// 422: a field is wrong.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            code: "invalid_field",
            message: message.into(),
            field: Some(field.into()),
            retry_after: None,
        }
    }

    /// 413: over a size limit.
    pub fn too_large(field: Option<&str>, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            code: "too_large",
            message: message.into(),
            field: field.map(str::to_owned),
            retry_after: None,
        }
    }

    /// 415: content type missing.
    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            code: "unsupported_media_type",
            message: message.into(),
            field: None,
            retry_after: None,
        }
    }

    /// 408: the body came too slowly ([`crate::deadline::BodyTimedOut`]).
    pub fn body_timeout(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::REQUEST_TIMEOUT,
            code: "body_timeout",
            message: message.into(),
            field: None,
            retry_after: None,
        }
    }

    /// 503: the link did not take the batch.
    pub fn unavailable(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "unavailable",
            message: message.into(),
            field: None,
            retry_after: None,
        }
    }

    /// 404: no such notification.
    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            code: "not_found",
            message: message.into(),
            field: None,
            retry_after: None,
        }
    }

    /// 409: the notification is past the point the request needs.
    pub fn too_late(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::CONFLICT,
            code: "too_late",
            message: message.into(),
            field: None,
            retry_after: None,
        }
    }

    /// 403: the API key may not do this; `field` names the part of the
    /// request to blame (`sites`), if one is.
    pub fn forbidden(field: Option<String>, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::FORBIDDEN,
            code: "forbidden",
            message: message.into(),
            field,
            retry_after: None,
        }
    }

    /// 429: over a rate; retry after `retry_after_secs`.
    pub fn rate_limited(retry_after_secs: u64, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            code: "rate_limited",
            message: message.into(),
            field: None,
            retry_after: Some(retry_after_secs),
        }
    }

    /// The metric reason for this error.
    pub fn reason(&self) -> RejectReason {
        match self.status {
            StatusCode::UNAUTHORIZED => RejectReason::Unauthorized,
            StatusCode::BAD_REQUEST => RejectReason::MalformedJson,
            StatusCode::PAYLOAD_TOO_LARGE => RejectReason::TooLarge,
            StatusCode::UNSUPPORTED_MEDIA_TYPE => RejectReason::UnsupportedMediaType,
            StatusCode::SERVICE_UNAVAILABLE => RejectReason::Unavailable,
            StatusCode::FORBIDDEN => RejectReason::Forbidden,
            StatusCode::TOO_MANY_REQUESTS => RejectReason::RateLimited,
            StatusCode::REQUEST_TIMEOUT => RejectReason::BodyTimeout,
            _ => RejectReason::InvalidField,
        }
    }
}

impl ApiError {
    /// The JSON error body.
    pub(super) fn json(&self) -> Vec<u8> {
        let body = Body {
            error: Inner {
                code: self.code,
                message: &self.message,
                field: self.field.as_deref(),
            },
        };
        // Strings only: it always serializes.
        serde_json::to_vec(&body).unwrap_or_default()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        super::Reply::error(&self).into_response()
    }
}
