//! `POST /v1/notifications` for a server that reads requests itself (the
//! gateway's direct publish path) as well as through axum: what the
//! handler reads of a head ([`PublishHead`]), the checks made before the
//! body is read ([`PublishApi::check_publish`]), the rest once it is
//! ([`PublishApi::publish_body`]), and the answer as status, headers and
//! JSON bytes ([`Reply`]), the same bytes axum's handler answers.

use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::StatusCode;

use super::{Accepted, ApiError, PublishApi};
use crate::api_key::Caller;

/// What the publish handler reads of a request's head: each header's first
/// value, when it is visible ASCII (as `HeaderValue::to_str` takes it).
#[derive(Debug, Clone, Copy, Default)]
pub struct PublishHead<'a> {
    /// `Authorization`.
    pub authorization: Option<&'a str>,
    /// `X-Api-Key`.
    pub x_api_key: Option<&'a str>,
    /// `Content-Type`.
    pub content_type: Option<&'a str>,
    /// `Content-Length`, when it is a number.
    pub content_length: Option<u64>,
    /// The query string, without its `?`.
    pub query: Option<&'a str>,
}

impl<'a> PublishHead<'a> {
    /// The head of an `http` request.
    pub fn from_parts(headers: &'a http::HeaderMap, query: Option<&'a str>) -> Self {
        PublishHead {
            authorization: first(headers, http::header::AUTHORIZATION),
            x_api_key: first(headers, super::X_API_KEY),
            content_type: first(headers, http::header::CONTENT_TYPE),
            content_length: first(headers, http::header::CONTENT_LENGTH)
                .and_then(|v| v.parse().ok()),
            query,
        }
    }
}

/// A header's first value, if it is visible ASCII.
pub(super) fn first<K: http::header::AsHeaderName>(
    headers: &http::HeaderMap,
    name: K,
) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// A publish request whose head passed: its body may be read.
#[derive(Debug)]
pub struct Admitted {
    pub(super) caller: Caller,
}

/// An answer of the publish API, counted and logged when it was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// Its status.
    pub status: StatusCode,
    /// `Retry-After` seconds (429).
    pub retry_after: Option<u64>,
    /// Whether it carries `WWW-Authenticate: Bearer` (401).
    pub www_authenticate: bool,
    /// The JSON body (`Content-Type: application/json`).
    pub body: Vec<u8>,
}

impl Reply {
    /// The answer for `error`.
    pub fn error(error: &ApiError) -> Reply {
        Reply {
            status: error.status,
            retry_after: error.retry_after,
            www_authenticate: error.status == StatusCode::UNAUTHORIZED,
            body: error.json(),
        }
    }

    fn accepted(accepted: &Accepted) -> Reply {
        Reply {
            status: StatusCode::ACCEPTED,
            retry_after: None,
            www_authenticate: false,
            // A struct of strings and numbers always serializes.
            body: serde_json::to_vec(accepted).unwrap_or_default(),
        }
    }
}

impl IntoResponse for Reply {
    fn into_response(self) -> Response {
        let mut response = (
            self.status,
            [(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            )],
            self.body,
        )
            .into_response();
        if self.www_authenticate {
            response.headers_mut().insert(
                http::header::WWW_AUTHENTICATE,
                http::HeaderValue::from_static("Bearer"),
            );
        }
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(http::header::RETRY_AFTER, http::HeaderValue::from(secs));
        }
        response
    }
}

impl PublishApi {
    /// The most bytes a publish request's body may have.
    pub fn max_body_bytes(&self) -> usize {
        self.inner.config.max_body_bytes
    }

    /// The checks before a publish request's body is read (key, operation,
    /// content type, declared length): the refusal, answered and counted,
    /// when one fails.
    pub fn check_publish(&self, head: &PublishHead<'_>) -> Result<Admitted, Reply> {
        self.check_head(head).map_err(|e| self.reply(Err(e)))
    }

    /// The rest of an admitted publish request, given its whole `body`.
    pub async fn publish_body(
        &self,
        admitted: Admitted,
        head: &PublishHead<'_>,
        body: Bytes,
    ) -> Reply {
        let outcome = self.accept(admitted, head, body).await;
        self.reply(outcome)
    }

    /// An admitted request whose body could not be read (the peer went
    /// away): counted as a refusal, as the axum path counts it.
    pub fn body_unreadable(&self, error: &std::io::Error) {
        self.reply(Err(ApiError::malformed(format!(
            "the request body could not be read: {error}"
        ))));
    }

    /// Count and log `outcome`, and make its answer.
    pub(super) fn reply(&self, outcome: Result<Accepted, ApiError>) -> Reply {
        match outcome {
            Ok(accepted) => {
                self.inner
                    .metrics
                    .accepted
                    .get_or_create(&crate::metrics::SourceLabels { source: "http" })
                    .inc_by(accepted.ids.len() as u64);
                Reply::accepted(&accepted)
            }
            Err(e) => {
                self.inner.metrics.reject("http", e.reason());
                tracing::debug!(code = e.code, field = ?e.field, message = %e.message, "publication refused");
                Reply::error(&e)
            }
        }
    }
}
