//! The topics API, beside the delayed-notification endpoints:
//!
//! - `PUT /v1/topics/{name}`: register a topic or replace its settings
//!   (see [`crate::callback::topic`] for the body). 201 with the topic when
//!   new, 200 when replaced; 422 naming the field (and, for `retry_if`, the
//!   `position` in the condition); 409 `too_many_topics` beyond
//!   `schedule.max_topics`.
//! - `GET /v1/topics/{name}`: the topic, registered or configured
//!   (`"source": "registered"` or `"configured"`); signing secrets are
//!   shown only as a count. 404 when neither.
//! - `DELETE /v1/topics/{name}`: unregister (204); 404 when not
//!   registered. A configured topic stays in force (409 `configured`:
//!   change the file).
//! - `GET /v1/topics?limit=100&cursor=NAME`: registered topics in name
//!   order, a page at a time, and the configured ones on the first page.
//!
//! A registered topic is in force at once in the process that took it,
//! and within `schedule.maintenance_every_ms` in every other process
//! sharing the store. All take an API key with the `admin` operation
//! (a topic's settings hold callback URLs and signing secrets, and span
//! every site).

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::notifications::{self, unavailable};
use super::{ApiError, PublishApi};
use crate::api_key::Operation;
use crate::callback::topic::{Topic, TopicError, check_name};
use crate::schedule::config::TopicPolicy;
use crate::schedule::service::Delayed;
use crate::schedule::store::{PutTopic, StoredTopic};
use crate::schedule::timing::{now_ms, rfc3339};

/// Default and largest page size of the list.
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;

/// The caller's key allows `admin`, and this server keeps topics (it
/// schedules delayed notifications).
fn guard<'a>(api: &'a PublishApi, headers: &HeaderMap) -> Result<&'a Delayed, ApiError> {
    notifications::guard(api, headers, Operation::Admin).map(|(_, delayed)| delayed)
}

fn name_ok(name: &str) -> Result<(), ApiError> {
    check_name(name).map_err(|e| ApiError::invalid("name", e.message))
}

/// A 422 for a topic setting, with the position in `retry_if` when there
/// is one.
fn invalid(e: TopicError) -> Response {
    let mut error = json!({
        "code": "invalid_field",
        "message": format!("{}: {}", e.field, e.message),
        "field": e.field,
    });
    if let Some(at) = e.position {
        error["position"] = json!(at);
    }
    (
        StatusCode::UNPROCESSABLE_ENTITY,
        Json(json!({ "error": error })),
    )
        .into_response()
}

fn registered_view(stored: &StoredTopic, topic: &Topic) -> Value {
    let mut view = topic.to_json();
    view["name"] = json!(stored.name);
    view["source"] = json!("registered");
    view["updated_at"] = json!(rfc3339(stored.updated_ms));
    view["updated_at_ms"] = json!(stored.updated_ms);
    view
}

fn configured_view(name: &str, policy: &TopicPolicy) -> Value {
    json!({
        "name": name,
        "source": "configured",
        "jitter_ms": policy.jitter_ms,
        "min_interval_ms": policy.min_interval_ms,
        "merge": policy.merge,
    })
}

/// `PUT /v1/topics/{name}`.
pub(crate) async fn put(
    State(api): State<PublishApi>,
    headers: HeaderMap,
    name: Result<Path<String>, PathRejection>,
    body: Body,
) -> Response {
    let answer = async {
        let delayed = guard(&api, &headers)?;
        let name = notifications::path_param("name", name)?;
        name_ok(&name)?;
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let bytes = api.read_body(body, declared).await?;
        let json: Value = serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::malformed(format!("the body is not JSON: {e}")))?;
        let topic = match Topic::from_json(&json, delayed.topics().allowed())
            .and_then(|t| delayed.fits_lease(t))
        {
            Ok(t) => t,
            Err(e) => return Ok(invalid(e)),
        };
        let (outcome, stored) = delayed
            .put_topic(&name, topic.clone(), now_ms())
            .await
            .map_err(unavailable)?;
        let status = match outcome {
            PutTopic::Created => StatusCode::CREATED,
            PutTopic::Replaced => StatusCode::OK,
            PutTopic::Full => {
                return Err(ApiError {
                    status: StatusCode::CONFLICT,
                    code: "too_many_topics",
                    message: format!(
                        "{} topics are registered, the most schedule.max_topics allows: delete one first",
                        delayed.config().max_topics
                    ),
                    field: None,
                    retry_after: None,
                });
            }
        };
        let view = registered_view(&stored, &topic);
        tracing::info!(topic = %name, created = status == StatusCode::CREATED, "topic registered");
        let mut response = (status, Json(view)).into_response();
        if status == StatusCode::CREATED
            && let Ok(location) = format!("/v1/topics/{name}").parse()
        {
            response.headers_mut().insert(header::LOCATION, location);
        }
        Ok(response)
    };
    answer.await.unwrap_or_else(IntoResponse::into_response)
}

/// `GET /v1/topics/{name}`.
pub(crate) async fn get(
    State(api): State<PublishApi>,
    headers: HeaderMap,
    name: Result<Path<String>, PathRejection>,
) -> Response {
    let answer = async {
        let delayed = guard(&api, &headers)?;
        let name = notifications::path_param("name", name)?;
        name_ok(&name)?;
        if let Some(stored) = delayed.topic(&name).await.map_err(unavailable)? {
            let topic = delayed.topics().parse(&stored).map_err(|e| {
                ApiError::unavailable(format!("topic {name:?} is stored but unreadable: {e}"))
            })?;
            return Ok(Json(registered_view(&stored, &topic)).into_response());
        }
        match delayed.config().topics.get(&name) {
            Some(policy) => Ok(Json(configured_view(&name, policy)).into_response()),
            None => Err(ApiError::not_found(format!("no topic {name:?}"))),
        }
    };
    answer.await.unwrap_or_else(IntoResponse::into_response)
}

/// `DELETE /v1/topics/{name}`.
pub(crate) async fn delete(
    State(api): State<PublishApi>,
    headers: HeaderMap,
    name: Result<Path<String>, PathRejection>,
) -> Response {
    let answer = async {
        let delayed = guard(&api, &headers)?;
        let name = notifications::path_param("name", name)?;
        name_ok(&name)?;
        if delayed.delete_topic(&name).await.map_err(unavailable)? {
            tracing::info!(topic = %name, "topic unregistered");
            return Ok(StatusCode::NO_CONTENT.into_response());
        }
        if delayed.config().topics.contains_key(&name) {
            return Err(ApiError {
                status: StatusCode::CONFLICT,
                code: "configured",
                message: format!(
                    "topic {name:?} is configured in the file ([schedule.topics]), not registered: change the file"
                ),
                field: None,
                retry_after: None,
            });
        }
        Err(ApiError::not_found(format!("no registered topic {name:?}")))
    };
    answer.await.unwrap_or_else(IntoResponse::into_response)
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    limit: Option<usize>,
    cursor: Option<String>,
}

#[derive(Serialize)]
struct ListBody {
    items: Vec<Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    configured: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
}

/// `GET /v1/topics?limit=&cursor=`.
pub(crate) async fn list(
    State(api): State<PublishApi>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let answer = async {
        let delayed = guard(&api, &headers)?;
        let q: ListQuery = super::query::query_params(query.as_deref())?;
        let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(ApiError::invalid(
                "limit",
                format!("must be 1 to {MAX_LIMIT}"),
            ));
        }
        if let Some(c) = &q.cursor {
            check_name(c).map_err(|e| ApiError::invalid("cursor", e.message))?;
        }
        let first = q.cursor.is_none();
        // One more than the page, to know whether another follows.
        let mut page = delayed
            .topic_page(q.cursor, limit + 1)
            .await
            .map_err(unavailable)?;
        let more = page.len() > limit;
        page.truncate(limit);
        let next_cursor = more.then(|| page.last().map(|t| t.name.clone())).flatten();
        let topics = delayed.topics();
        let items = page
            .iter()
            .map(|stored| match topics.parse(stored) {
                Ok(topic) => registered_view(stored, &topic),
                Err(e) => json!({ "name": stored.name, "source": "registered", "error": e }),
            })
            .collect();
        let configured = if first {
            delayed
                .config()
                .topics
                .iter()
                .map(|(name, policy)| configured_view(name, policy))
                .collect()
        } else {
            Vec::new()
        };
        Ok(Json(ListBody {
            items,
            configured,
            next_cursor,
        })
        .into_response())
    };
    answer.await.unwrap_or_else(IntoResponse::into_response)
}
