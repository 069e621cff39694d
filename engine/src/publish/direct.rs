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

/// A publish request's body, as the server read it. A raw payload is
/// kept by every mailbox it reaches, for replay, so how it is held matters:
#[derive(Debug)]
pub enum RequestBody {
    /// A view into a buffer of the server's (a slice of a connection's read
    /// buffer, 8 KiB and up): a raw payload is copied into an allocation of
    /// its own length, or every retained notification would keep that
    /// whole buffer alive.
    Read(Bytes),
    /// A buffer of its own, read for this body: a raw payload keeps it as it
    /// is (shrunk to the body's length by a `realloc` if it has spare
    /// capacity).
    Owned(Vec<u8>),
}

impl RequestBody {
    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        match self {
            RequestBody::Read(b) => b,
            RequestBody::Owned(v) => v,
        }
    }

    /// The bytes as a payload in an allocation of their own length.
    pub fn into_payload(self) -> Bytes {
        match self {
            RequestBody::Read(b) => Bytes::copy_from_slice(&b),
            RequestBody::Owned(v) => Bytes::from(v.into_boxed_slice()),
        }
    }
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
        body: RequestBody,
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

    /// An admitted request whose body came slower than its rate: the 408
    /// answer, counted as a refusal as the axum path counts it.
    pub fn body_too_slow(&self, error: &crate::deadline::BodyTimedOut) -> Reply {
        self.reply(Err(ApiError::body_timeout(error.to_string())))
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

#[cfg(test)]
mod tests {
    use super::RequestBody;

    #[test]
    fn a_body_read_as_a_slice_of_a_buffer_becomes_a_payload_of_its_own() {
        // What hyper hands over for a body read in one piece: a slice of
        // the connection's read buffer, head and all.
        let mut read_buffer = bytes::BytesMut::with_capacity(8192);
        read_buffer.extend_from_slice(b"POST /v1/notifications?event=e HTTP/1.1\r\n\r\n");
        let head = read_buffer.len();
        read_buffer.extend_from_slice(&[b'x'; 100]);
        let buffer = read_buffer.freeze();
        let payload = RequestBody::Read(buffer.slice(head..)).into_payload();
        assert_eq!(&payload[..], &[b'x'; 100][..]);
        assert!(
            !buffer.as_ptr_range().contains(&payload.as_ptr()),
            "the payload shares the 8 KiB read buffer"
        );
        drop(buffer);
        let owned = payload.try_into_mut().expect("the payload's only handle");
        assert_eq!(
            owned.capacity(),
            100,
            "an allocation of the payload's length"
        );
    }

    #[test]
    fn a_body_read_into_its_own_buffer_is_kept_as_the_payload() {
        let body: Vec<u8> = (0..=255).collect();
        let at = body.as_ptr();
        let payload = RequestBody::Owned(body).into_payload();
        assert_eq!(payload.as_ptr(), at, "no copy");
        assert!(payload.iter().copied().eq(0..=255));
        let owned = payload.try_into_mut().expect("the payload's only handle");
        assert_eq!(owned.capacity(), 256);
        // Spare capacity is not kept.
        let mut spare = Vec::with_capacity(4096);
        spare.extend_from_slice(b"short");
        let payload = RequestBody::Owned(spare).into_payload();
        assert_eq!(&payload[..], b"short");
        let owned = payload.try_into_mut().expect("the payload's only handle");
        assert_eq!(owned.capacity(), 5, "shrunk to the body's length");
    }
}
