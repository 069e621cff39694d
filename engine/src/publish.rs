//! `POST /v1/notifications`: the HTTP publish API.
//!
//! Authenticated by API key (`Authorization: Bearer KEY` or `X-Api-Key:
//! KEY`), which must allow the operation ([`crate::api_key`]). A JSON body
//! is one notification or an array of them; any other content type is a
//! raw payload whose envelope fields come from the query string. Answers
//! 202 `{"ids":[...]}` once the link has taken the batch, or a JSON error
//! (`400` malformed, `401` key, `403` the key may not publish, or not to
//! these sites, `413` size, or a batch over the key's burst, `415` no
//! content type, `422` a field, `429` over the key's publish rate, with
//! `Retry-After`, `408` a body slower than `http.body_min_bytes_per_sec`
//! ([`crate::deadline`]), `503` link down).
//!
//! Order of the checks: the key and its operation (before the body is
//! read), then the body and every notification's fields (its callback
//! settings included: [`crate::callback::target`]), then the key's sites,
//! then its rate (so a refused request costs no tokens).
//!
//! Where a notification goes: straight to the link when it is immediate
//! and has no callback; into the delayed store otherwise (`delay_ms`,
//! `deliver_at`, `when_online`, or a callback of its own or of its topic,
//! which the store makes durable and retries: an immediate one is stored
//! due now).

mod accept;
mod dead_letters;
pub mod decode;
mod direct;
mod disconnect;
mod error;
pub mod ledger;
pub(crate) mod notifications;
mod operator;
mod parse;
pub(crate) mod query;
mod topics;

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use bytes::Bytes;
use herald_protocol::envelope::{Limits, Notification};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::Serialize;

pub use direct::{Admitted, PublishHead, Reply, RequestBody};
pub use error::ApiError;
pub use ledger::{IdLedger, LedgerConfig, LedgerMetrics};

use crate::api_key::{ApiKeys, Caller, Operation};
use crate::callback::target;
use crate::link::Link;
use crate::metrics::{KeyRefusal, PublishMetrics};
use crate::rate_limit::{Refusal, retry_after_secs};
use crate::schedule::service::Delayed;

/// The API key header beside `Authorization: Bearer`.
const X_API_KEY: &str = "x-api-key";

/// Settings of the publish API.
#[derive(Debug, Clone)]
pub struct PublishConfig {
    /// Accepted API keys.
    pub api_keys: ApiKeys,
    /// Envelope limits.
    pub limits: Limits,
    /// Largest request body (a batch included).
    pub max_body_bytes: usize,
    /// Most notifications in one batch.
    pub max_batch: usize,
    /// The idempotency ledger's window and bound ([`ledger`]).
    pub ledger: LedgerConfig,
}

impl Default for PublishConfig {
    fn default() -> Self {
        PublishConfig {
            api_keys: ApiKeys::default(),
            limits: Limits::default(),
            max_body_bytes: 8 * 1024 * 1024,
            max_batch: 1000,
            ledger: LedgerConfig::default(),
        }
    }
}

/// The publish API's shared state.
#[derive(Clone)]
pub struct PublishApi {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PublishApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublishApi")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

struct Inner {
    config: PublishConfig,
    link: Arc<dyn Link>,
    metrics: PublishMetrics,
    delayed: Option<Delayed>,
    ledger: IdLedger,
}

#[derive(Serialize)]
struct Accepted {
    ids: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    scheduled: Vec<ScheduledInfo>,
    /// Ids that were taken already ([`ledger`]): those publications went
    /// nowhere.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    duplicates: Vec<String>,
}

/// The fixed due time of a delayed notification, in the 202 answer.
#[derive(Serialize)]
struct ScheduledInfo {
    id: String,
    due_at: String,
    due_at_ms: u64,
    /// The id was taken already (stored, or accepted within the window):
    /// nothing changed (idempotent resubmit); `due_at` is the holder's.
    duplicate: bool,
}

/// A fresh notification id: 128 random bits, hex.
pub fn new_id() -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bits: u128 = rand::random();
    let mut out = [0u8; 32];
    for (i, digit) in out.iter_mut().enumerate() {
        *digit = HEX[(bits >> (124 - 4 * i)) as usize & 0xf];
    }
    // Hex digits are ASCII.
    out.iter().map(|&b| char::from(b)).collect()
}

/// The caller's key, from `Authorization: Bearer KEY` or `X-Api-Key: KEY`,
/// if it is one of `keys` and allows `op`: else 401 `unauthorized` (with
/// `WWW-Authenticate: Bearer`) or 403 `forbidden` naming the key's ops,
/// each counted in `metrics` (`herald_api_key_refused_total`). Every
/// endpoint that takes a key checks it here: the publish API's, and
/// `GET /metrics` with `metrics_require_key` ([`crate::answers`]).
pub fn authorize(
    keys: &ApiKeys,
    metrics: &PublishMetrics,
    headers: &http::HeaderMap,
    op: Operation,
) -> Result<Caller, ApiError> {
    authorize_key(
        keys,
        metrics,
        direct::first(headers, http::header::AUTHORIZATION),
        direct::first(headers, X_API_KEY),
        op,
    )
}

/// [`authorize`] given the first `Authorization` and `X-Api-Key` values
/// that are visible ASCII.
fn authorize_key(
    keys: &ApiKeys,
    metrics: &PublishMetrics,
    authorization: Option<&str>,
    x_api_key: Option<&str>,
    op: Operation,
) -> Result<Caller, ApiError> {
    let bearer = authorization.and_then(|v| v.strip_prefix("Bearer "));
    let key = bearer.or(x_api_key);
    let Some(caller) = key.and_then(|k| keys.authenticate(k.trim())) else {
        metrics.refuse_key(None, op, KeyRefusal::Unauthorized);
        return Err(ApiError::unauthorized());
    };
    if !caller.may(op) {
        metrics.refuse_key(Some(caller.name_arc()), op, KeyRefusal::Forbidden);
        return Err(ApiError::forbidden(
            None,
            format!(
                "API key {:?} is not allowed the operation {:?} (its ops: {})",
                caller.name(),
                op.as_str(),
                caller.ops()
            ),
        ));
    }
    Ok(caller)
}

impl PublishApi {
    /// An API that validates with `config` and hands batches to `link`.
    pub fn new(config: PublishConfig, link: Arc<dyn Link>, metrics: PublishMetrics) -> Self {
        PublishApi::with_delayed(config, link, metrics, None)
    }

    /// An API that also accepts delayed notifications (`delay_ms`,
    /// `deliver_at`, `when_online`) into `delayed`, and serves their
    /// status, cancel and list endpoints.
    pub fn with_delayed(
        config: PublishConfig,
        link: Arc<dyn Link>,
        metrics: PublishMetrics,
        delayed: Option<Delayed>,
    ) -> Self {
        let ledger = IdLedger::local(config.ledger, LedgerMetrics::default());
        PublishApi::with_ledger(config, link, metrics, delayed, ledger)
    }

    /// [`PublishApi::with_delayed`] claiming ids in `ledger` (shared with
    /// the router's AMQP intake, and over the delayed store's shared
    /// ledger when it keeps one).
    pub fn with_ledger(
        config: PublishConfig,
        link: Arc<dyn Link>,
        metrics: PublishMetrics,
        delayed: Option<Delayed>,
        ledger: IdLedger,
    ) -> Self {
        PublishApi {
            inner: Arc::new(Inner {
                config,
                link,
                metrics,
                delayed,
                ledger,
            }),
        }
    }

    /// The idempotency ledger this API claims ids in.
    pub fn ledger(&self) -> &IdLedger {
        &self.inner.ledger
    }

    /// The routes: `POST /v1/notifications`; with delayed notifications
    /// also `GET /v1/notifications` (list), `GET` and `DELETE
    /// /v1/notifications/{id}`, `POST /v1/notifications/{id}/retry`,
    /// `POST /v1/dead-letters/retry` and `/cancel` ([`dead_letters`]),
    /// `POST /v1/users/{uid}/online`, and the
    /// topics API (`GET /v1/topics`, `PUT`, `GET` and `DELETE
    /// /v1/topics/{name}`). Always `GET /v1/operator` (whose
    /// key is this: the console's login) and `POST
    /// /v1/users/{uid}/disconnect` (end a user's sessions, through the
    /// link: [`crate::link::Link::disconnect`]).
    pub fn routes(&self) -> Router {
        let router = if self.inner.delayed.is_some() {
            Router::new()
                .route("/v1/notifications", post(publish).get(notifications::list))
                .route(
                    "/v1/notifications/{id}",
                    delete(notifications::cancel).get(notifications::status),
                )
                .route("/v1/notifications/{id}/retry", post(notifications::retry))
                .route("/v1/dead-letters/retry", post(dead_letters::retry))
                .route("/v1/dead-letters/cancel", post(dead_letters::cancel))
                .route("/v1/users/{uid}/online", post(notifications::user_online))
                .route("/v1/topics", get(topics::list))
                .route(
                    "/v1/topics/{name}",
                    put(topics::put).get(topics::get).delete(topics::delete),
                )
        } else {
            Router::new().route("/v1/notifications", post(publish))
        };
        router
            .route("/v1/operator", get(operator::whoami))
            .route("/v1/users/{uid}/disconnect", post(disconnect::disconnect))
            .with_state(self.clone())
    }

    fn delayed(&self) -> Option<&Delayed> {
        self.inner.delayed.as_ref()
    }

    /// The caller's key, if it is one and allows `op`: else 401 or 403,
    /// counted in `herald_api_key_refused_total` ([`authorize`]).
    pub(crate) fn authorize(
        &self,
        headers: &http::HeaderMap,
        op: Operation,
    ) -> Result<Caller, ApiError> {
        authorize(
            &self.inner.config.api_keys,
            &self.inner.metrics,
            headers,
            op,
        )
    }

    /// [`PublishApi::authorize`] given the first `Authorization` and
    /// `X-Api-Key` values that are visible ASCII.
    fn authorize_key(
        &self,
        authorization: Option<&str>,
        x_api_key: Option<&str>,
        op: Operation,
    ) -> Result<Caller, ApiError> {
        let (keys, metrics) = (&self.inner.config.api_keys, &self.inner.metrics);
        authorize_key(keys, metrics, authorization, x_api_key, op)
    }

    /// Every notification goes only to sites the key may publish to: a
    /// site-limited key must name sites (none means every site).
    fn check_sites(
        &self,
        caller: &Caller,
        publications: &[parse::Publication],
        batch: bool,
    ) -> Result<(), ApiError> {
        let Some(allowed) = caller.sites() else {
            return Ok(());
        };
        for (i, p) in publications.iter().enumerate() {
            let field = match batch {
                true => format!("[{i}].sites"),
                false => "sites".to_owned(),
            };
            let sites = &p.notification.sites;
            let refusal = if sites.is_empty() {
                Some(format!(
                    "API key {:?} may publish only to sites {}: a notification without sites goes to every site, so name its sites",
                    caller.name(),
                    allowed.join(", ")
                ))
            } else {
                sites.iter().find(|s| !allowed.contains(s)).map(|s| {
                    format!(
                        "API key {:?} may publish only to sites {}: {s:?} is not one of them",
                        caller.name(),
                        allowed.join(", ")
                    )
                })
            };
            if let Some(message) = refusal {
                self.inner.metrics.refuse_key(
                    Some(caller.name_arc()),
                    Operation::Publish,
                    KeyRefusal::Forbidden,
                );
                return Err(ApiError::forbidden(Some(field), message));
            }
        }
        Ok(())
    }

    /// Check a publication's own callback settings against the topics in
    /// force and the deployment's allowed destinations (422 naming
    /// `callback_url`, `recheck_url` or `browsers`, `[3].callback_url` in a
    /// batch). Without a delayed store there are no callbacks: a
    /// `callback_url` is refused.
    fn check_target(
        &self,
        p: &mut parse::Publication,
        index: Option<usize>,
    ) -> Result<target::Checked, ApiError> {
        let at = |field: &str| match index {
            Some(i) => format!("[{i}].{field}"),
            None => field.to_owned(),
        };
        let request = std::mem::take(&mut p.target);
        let (topic_calls_back, allowed) = match self.delayed() {
            Some(d) => (
                d.topics().calls_back(p.notification.topic.as_deref()),
                d.topics().allowed(),
            ),
            None if request.callback_url.is_some() => {
                return Err(ApiError::invalid(
                    at(target::CALLBACK_URL),
                    "callbacks are made from the delayed store, which is not enabled on this server (configure [redis] url, or --redis-url)",
                ));
            }
            None => (false, &[][..]),
        };
        target::check(request, topic_calls_back, allowed)
            .map_err(|e| ApiError::invalid(at(e.field), e.message))
    }

    /// Take `count` publications from the key's rate: 429 with
    /// `Retry-After` when over it, 413 for a batch larger than its burst.
    fn check_rate(&self, caller: &Caller, count: usize) -> Result<(), ApiError> {
        let Some(rate) = caller.rate() else {
            return Ok(());
        };
        let n = u32::try_from(count).unwrap_or(u32::MAX);
        match caller.take(n, std::time::Instant::now()) {
            Ok(()) => Ok(()),
            Err(Refusal::Wait(wait)) => {
                self.inner.metrics.refuse_key(
                    Some(caller.name_arc()),
                    Operation::Publish,
                    KeyRefusal::RateLimited,
                );
                let secs = retry_after_secs(wait);
                Err(ApiError::rate_limited(
                    secs,
                    format!(
                        "API key {:?} is over its publish rate ({} notifications/s, burst {}): retry after {secs} s",
                        caller.name(),
                        rate.per_sec(),
                        rate.burst()
                    ),
                ))
            }
            Err(Refusal::OverBurst) => Err(ApiError::too_large(
                None,
                format!(
                    "a batch of {count} notifications is more than API key {:?} may send at once (its burst, {}): send smaller batches",
                    caller.name(),
                    rate.burst()
                ),
            )),
        }
    }

    async fn read_body(&self, body: Body, declared: Option<u64>) -> Result<Bytes, ApiError> {
        let max = self.inner.config.max_body_bytes;
        let too_large =
            || ApiError::too_large(None, format!("the request body exceeds {max} bytes"));
        if declared.is_some_and(|len| len > max as u64) {
            return Err(too_large());
        }
        match Limited::new(body, max).collect().await {
            Ok(collected) => Ok(collected.to_bytes()),
            Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_large()),
            Err(e) => Err(match crate::deadline::BodyTimedOut::find(&*e) {
                Some(slow) => ApiError::body_timeout(slow.to_string()),
                None => ApiError::malformed(format!("the request body could not be read: {e}")),
            }),
        }
    }

    async fn handle(&self, req: Request) -> Result<Accepted, ApiError> {
        let (parts, body) = req.into_parts();
        let head = PublishHead::from_parts(&parts.headers, parts.uri.query());
        let admitted = self.check_head(&head)?;
        let body = self.read_body(body, None).await?;
        self.accept(admitted, &head, RequestBody::Read(body)).await
    }

    /// What is checked before the body is read: the key and its
    /// operation, the content type, the declared length.
    fn check_head(&self, head: &PublishHead<'_>) -> Result<Admitted, ApiError> {
        let caller = self.authorize_key(head.authorization, head.x_api_key, Operation::Publish)?;
        if head.content_type.is_none() {
            return Err(ApiError::unsupported_media_type(
                "Content-Type is required: application/json, or the payload's own type",
            ));
        }
        let max = self.inner.config.max_body_bytes;
        if head.content_length.is_some_and(|len| len > max as u64) {
            return Err(ApiError::too_large(
                None,
                format!("the request body exceeds {max} bytes"),
            ));
        }
        Ok(Admitted { caller })
    }
}

/// Whether a `Content-Type` value's essence (before any `;` parameter,
/// trimmed, any case) is `application/json`.
fn is_json(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .eq_ignore_ascii_case("application/json")
}

fn validate(n: &mut Notification, limits: &Limits, index: Option<usize>) -> Result<(), ApiError> {
    n.validate(limits).map_err(|e| {
        let field = match index {
            Some(i) => format!("[{i}].{}", e.field),
            None => e.field.to_owned(),
        };
        if e.field == "payload" && n.payload.len() > limits.max_payload_bytes {
            ApiError::too_large(Some(&field), e.message)
        } else {
            ApiError::invalid(field, e.message)
        }
    })
}

async fn publish(State(api): State<PublishApi>, req: Request) -> Response {
    let outcome = api.handle(req).await;
    api.reply(outcome).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_id_is_128_random_bits_in_lowercase_hex() {
        let a = new_id();
        assert_eq!(a.len(), 32, "{a}");
        assert!(
            a.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
            "{a}"
        );
        assert_ne!(a, new_id());
        // Every digit position is used: over 64 ids, each shows more than one value.
        let ids: Vec<String> = (0..64).map(|_| new_id()).collect();
        for i in 0..32 {
            let first = ids[0].as_bytes()[i];
            assert!(
                ids.iter().any(|id| id.as_bytes()[i] != first),
                "digit {i} never changes"
            );
        }
    }

    #[test]
    fn json_is_told_by_the_essence_in_any_case() {
        assert!(is_json("application/json"));
        assert!(is_json("Application/JSON; charset=utf-8"));
        assert!(is_json(" application/json ;x=y"));
        assert!(!is_json("application/jsonx"));
        assert!(!is_json("text/plain"));
        assert!(!is_json(""));
    }
}
