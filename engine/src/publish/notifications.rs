//! The delayed-notification endpoints beside `POST /v1/notifications`:
//!
//! - `GET /v1/notifications/{id}`: its status (`scheduled`, `firing`,
//!   `held`, `retry_wait`, `delivered`, `cancelled`, `expired`, `declined`,
//!   `dead`) with timestamps, the `step` of a firing callback, and its
//!   `attempt_log` (the callback's requests); 404 for an id that was never
//!   delayed or whose status was purged.
//! - `DELETE /v1/notifications/{id}`: cancel (200 with the status; again
//!   200, idempotent); 409 `too_late` once it is firing or final; 404
//!   unknown.
//! - `GET /v1/notifications?state=scheduled&topic=T&limit=100&cursor=C`:
//!   one page ordered by due time, and `next_cursor` for the next
//!   (`state=dead&topic=T`: the dead letters of a topic).
//! - `POST /v1/notifications/{id}/retry`: send a dead letter again (202
//!   with its status, `retry_wait` due now); 409 `not_dead` otherwise; 404
//!   unknown.
//! - `POST /v1/users/{uid}/online`: the backend says the user is online
//!   now: fire what is held for them (202).
//!
//! All take the API key, like the publish endpoint, and need its
//! operation: `status` for a status, `cancel` to cancel, `admin` for the
//! list (it spans every site and user), `publish` for `online` (it makes
//! held notifications go out). Status and cancel name one notification by
//! id in the key's tenant's namespace ([`herald_protocol::tenant`]; see
//! `resolve`): a key limited to sites reads and cancels only what its
//! tenant published.

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::{ApiError, PublishApi};
use crate::api_key::{Caller, Operation};
use crate::callback::attempt::Attempt;
use crate::schedule::entry::{State as EntryState, Status};
use crate::schedule::service::Delayed;
use crate::schedule::store::{Cancel, Cursor, ListFilter, Replay};
use crate::schedule::timing::rfc3339;

/// Default and largest page size of the list.
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;

/// A status as JSON.
#[derive(Debug, Serialize)]
pub(crate) struct StatusBody {
    id: String,
    state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    topic: Option<String>,
    accepted_at: String,
    accepted_at_ms: u64,
    due_at: String,
    due_at_ms: u64,
    updated_at: String,
    updated_at_ms: u64,
    attempts: u32,
    /// The request a firing callback has on its way.
    #[serde(skip_serializing_if = "Option::is_none")]
    step: Option<&'static str>,
    /// When a `retry_wait` callback is tried next.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_attempt_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_attempt_at_ms: Option<u64>,
}

impl From<Status> for StatusBody {
    fn from(s: Status) -> Self {
        StatusBody {
            step: s.step.map(|st| st.as_str()),
            next_attempt_at: s.next_attempt_ms.map(rfc3339),
            next_attempt_at_ms: s.next_attempt_ms,
            state: s.state.as_str(),
            topic: s.topic,
            accepted_at: rfc3339(s.accepted_ms),
            accepted_at_ms: s.accepted_ms,
            due_at: rfc3339(s.due_ms),
            due_at_ms: s.due_ms,
            updated_at: rfc3339(s.updated_ms),
            updated_at_ms: s.updated_ms,
            attempts: s.attempts,
            id: s.id,
        }
    }
}

/// One status with its attempt log, as `GET /v1/notifications/{id}`
/// answers it.
#[derive(Debug, Serialize)]
struct StatusWithLog {
    #[serde(flatten)]
    status: StatusBody,
    attempt_log: Vec<AttemptBody>,
}

/// An attempt as JSON: its record, and when it started as RFC 3339.
#[derive(Debug, Serialize)]
struct AttemptBody {
    at: String,
    #[serde(flatten)]
    attempt: Attempt,
}

impl From<Attempt> for AttemptBody {
    fn from(a: Attempt) -> Self {
        AttemptBody {
            at: rfc3339(a.at_ms),
            attempt: a,
        }
    }
}

/// A 409: the request does not fit the notification's state.
#[derive(Serialize)]
struct Conflict<'a> {
    error: ConflictError<'a>,
    notification: StatusBody,
}

#[derive(Serialize)]
struct ConflictError<'a> {
    code: &'a str,
    message: String,
}

/// A 409 with `code`, `message` and the notification's status.
fn conflict(code: &str, message: String, status: Status) -> Response {
    let body = Conflict {
        error: ConflictError { code, message },
        notification: status.into(),
    };
    (StatusCode::CONFLICT, Json(body)).into_response()
}

#[derive(Serialize)]
struct ListBody {
    items: Vec<StatusBody>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    state: Option<String>,
    topic: Option<String>,
    limit: Option<usize>,
    cursor: Option<String>,
}

pub(super) fn unavailable(e: impl std::fmt::Display) -> ApiError {
    ApiError::unavailable(format!("the delayed store is unavailable: {e}"))
}

/// The caller's key allows `op` and this server schedules delayed
/// notifications: the key and the scheduler.
pub(super) fn guard<'a>(
    api: &'a PublishApi,
    headers: &HeaderMap,
    op: Operation,
) -> Result<(Caller, &'a Delayed), ApiError> {
    let caller = api.authorize(headers, op)?;
    let delayed = api.delayed().ok_or_else(|| {
        ApiError::not_found("delayed notifications are not enabled on this server")
    })?;
    Ok((caller, delayed))
}

/// A path parameter as text, or a 422 naming it: axum's own answer to a
/// parameter that is not UTF-8 once percent-decoded (`%C0%80`) is a
/// plain-text 400 naming nothing.
pub(crate) fn path_param(
    field: &str,
    path: Result<Path<String>, PathRejection>,
) -> Result<String, ApiError> {
    path.map(|Path(value)| value).map_err(|e| {
        ApiError::invalid(
            field,
            format!("must be UTF-8 once percent-decoded ({})", e.body_text()),
        )
    })
}

/// `value` is a valid Herald name (ids, topics), or a 422 naming `field`.
fn check_name(field: &str, value: &str) -> Result<(), ApiError> {
    if herald_protocol::envelope::is_valid_name(value) {
        Ok(())
    } else {
        Err(ApiError::invalid(
            field,
            "must be 1 to 200 characters of A-Z a-z 0-9 . _ ~ @ / + = -",
        ))
    }
}

/// The id the store keeps for the notification `caller` names `id`
/// ([`herald_protocol::tenant`]), or a 422 naming the field.
///
/// A key of a tenant names ids in its tenant's namespace: `id` is an id as
/// published, and the store keeps it scoped. One exception, the migration
/// from before tenants: an entry kept under `id` as written that was
/// accepted before the store first kept tenants apart
/// ([`Delayed::tenants_since`]) is found by it as well, as any key found
/// it then. A key of no tenant names what the store keeps as it is: an id
/// published without a tenant, or a scoped `id:tenant` as the list shows
/// it.
async fn resolve(caller: &Caller, delayed: &Delayed, id: &str) -> Result<Resolved, ApiError> {
    if caller.tenant().is_none() {
        if !herald_protocol::envelope::is_valid_kept_id(id) {
            return Err(ApiError::invalid(
                "id",
                "must be 1 to 200 characters of A-Z a-z 0-9 . _ ~ @ / + = -, or such an id, a colon and its tenant",
            ));
        }
        return Ok(Resolved {
            kept: id.to_owned(),
            read: None,
        });
    }
    check_name("id", id)?;
    let scoped = caller.scoped_id(id);
    if let Some(s) = delayed.status(&scoped).await.map_err(unavailable)? {
        return Ok(Resolved {
            kept: scoped,
            read: Some(Some(s)),
        });
    }
    let legacy = delayed
        .status(id)
        .await
        .map_err(unavailable)?
        .filter(|s| s.accepted_ms < delayed.tenants_since());
    Ok(match legacy {
        Some(s) => Resolved {
            kept: id.to_owned(),
            read: Some(Some(s)),
        },
        None => Resolved {
            kept: scoped,
            read: Some(None),
        },
    })
}

/// The id the store keeps for a caller's id, and its status when finding
/// the id meant reading it (a tenant's key): the status endpoint answers
/// with that rather than reading it again.
struct Resolved {
    kept: String,
    /// None: not read (a key of every site names the kept id itself).
    read: Option<Option<Status>>,
}

/// `status` as `caller` sees it: by the id it published, without its
/// tenant.
fn shown(caller: &Caller, mut status: Status) -> Status {
    if caller.tenant().is_some() {
        let public = herald_protocol::tenant::public_id(&status.id).len();
        status.id.truncate(public);
    }
    status
}

/// `GET /v1/notifications/{id}`.
pub(crate) async fn status(
    State(api): State<PublishApi>,
    headers: HeaderMap,
    id: Result<Path<String>, PathRejection>,
) -> Response {
    let answer = async {
        let (caller, delayed) = guard(&api, &headers, Operation::Status)?;
        let id = path_param("id", id)?;
        let Resolved { kept, read } = resolve(&caller, delayed, &id).await?;
        // The status first, then the log: a callback that ends in between
        // shows as still firing with its last attempt logged, never as
        // ended with the attempt missing (the store writes both at once).
        let status = match read {
            Some(read) => Ok(read),
            None => delayed.status(&kept).await,
        };
        let log = delayed.attempts(&kept).await;
        match status.map_err(unavailable)? {
            Some(s) => {
                let body = StatusWithLog {
                    status: shown(&caller, s).into(),
                    attempt_log: log
                        .map_err(unavailable)?
                        .into_iter()
                        .map(AttemptBody::from)
                        .collect(),
                };
                Ok(Json(body).into_response())
            }
            None => Err(ApiError::not_found(format!(
                "no delayed notification {id:?} (never delayed, or its status was purged after the retention period)"
            ))),
        }
    };
    answer.await.unwrap_or_else(IntoResponse::into_response)
}

/// `DELETE /v1/notifications/{id}`.
pub(crate) async fn cancel(
    State(api): State<PublishApi>,
    headers: HeaderMap,
    id: Result<Path<String>, PathRejection>,
) -> Response {
    let answer = async {
        let (caller, delayed) = guard(&api, &headers, Operation::Cancel)?;
        let id = path_param("id", id)?;
        let kept = resolve(&caller, delayed, &id).await?.kept;
        match delayed.cancel(&kept).await.map_err(unavailable)? {
            Cancel::Cancelled(s) => {
                tracing::info!(api_key = caller.name(), id = %kept, "delayed notification cancelled");
                Ok(Json(StatusBody::from(shown(&caller, s))).into_response())
            }
            Cancel::TooLate(s) => {
                let message = format!(
                    "notification {id:?} is {} and can no longer be cancelled",
                    s.state
                );
                Ok(conflict("too_late", message, shown(&caller, s)))
            }
            Cancel::NotFound => Err(ApiError::not_found(format!(
                "no delayed notification {id:?} to cancel"
            ))),
        }
    };
    answer.await.unwrap_or_else(IntoResponse::into_response)
}

/// `POST /v1/notifications/{id}/retry`.
pub(crate) async fn retry(
    State(api): State<PublishApi>,
    headers: HeaderMap,
    id: Result<Path<String>, PathRejection>,
) -> Response {
    let answer = async {
        let (caller, delayed) = guard(&api, &headers, Operation::Admin)?;
        let id = path_param("id", id)?;
        let kept = resolve(&caller, delayed, &id).await?.kept;
        match delayed.replay(&kept).await.map_err(unavailable)? {
            Replay::Replayed(s) => {
                tracing::info!(api_key = caller.name(), id = %kept, "dead letter sent again");
                let s = shown(&caller, s);
                Ok((StatusCode::ACCEPTED, Json(StatusBody::from(s))).into_response())
            }
            Replay::NotDead(s) => {
                let message = format!(
                    "notification {id:?} is {}: only a dead letter can be sent again",
                    s.state
                );
                Ok(conflict("not_dead", message, shown(&caller, s)))
            }
            Replay::NotFound => Err(ApiError::not_found(format!(
                "no delayed notification {id:?} to send again (never delayed, or purged after the retention period)"
            ))),
        }
    };
    answer.await.unwrap_or_else(IntoResponse::into_response)
}

/// `GET /v1/notifications?state=&topic=&limit=&cursor=`.
pub(crate) async fn list(
    State(api): State<PublishApi>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let answer = async {
        let (_, delayed) = guard(&api, &headers, Operation::Admin)?;
        let q: ListQuery = super::query::query_params(query.as_deref())?;
        let state = match q.state.as_deref() {
            None => EntryState::Scheduled,
            Some(s) => s
                .parse::<EntryState>()
                .map_err(|e| ApiError::invalid("state", e.to_string()))?,
        };
        let limit = topic_and_limit(q.topic.as_deref(), q.limit, DEFAULT_LIMIT, MAX_LIMIT)?;
        let after = q.cursor.as_deref().map(parse_cursor).transpose()?;
        let filter = ListFilter {
            topic: q.topic,
            state,
        };
        let page = delayed
            .list(filter, after, limit)
            .await
            .map_err(unavailable)?;
        let body = ListBody {
            items: page.items.into_iter().map(StatusBody::from).collect(),
            next_cursor: page.next.map(|c| format!("{}.{}", c.due_ms, c.id)),
        };
        Ok::<_, ApiError>(Json(body).into_response())
    };
    answer.await.unwrap_or_else(IntoResponse::into_response)
}

/// A list's (or a bulk action's) `topic`, checked, and its `limit`:
/// `default` when absent, else 1 to `max`, or a 422 naming the field.
pub(super) fn topic_and_limit(
    topic: Option<&str>,
    limit: Option<usize>,
    default: usize,
    max: usize,
) -> Result<usize, ApiError> {
    if let Some(t) = topic {
        check_name("topic", t)?;
    }
    let limit = limit.unwrap_or(default);
    if limit == 0 || limit > max {
        return Err(ApiError::invalid(
            "limit",
            format!("must be between 1 and {max}"),
        ));
    }
    Ok(limit)
}

/// A cursor is `DUE_MS.ID`, as `next_cursor` gives it.
fn parse_cursor(c: &str) -> Result<Cursor, ApiError> {
    let bad = || ApiError::invalid("cursor", "is not a cursor this API gave (next_cursor)");
    let (due, id) = c.split_once('.').ok_or_else(bad)?;
    let due_ms = due.parse().map_err(|_| bad())?;
    if !herald_protocol::envelope::is_valid_kept_id(id) {
        return Err(bad());
    }
    Ok(Cursor {
        due_ms,
        id: id.to_owned(),
    })
}

/// `POST /v1/users/{uid}/online`.
pub(crate) async fn user_online(
    State(api): State<PublishApi>,
    headers: HeaderMap,
    uid: Result<Path<String>, PathRejection>,
) -> Response {
    let answer = async {
        let (_, delayed) = guard(&api, &headers, Operation::Publish)?;
        let uid = path_param("uid", uid)?;
        if uid.is_empty() || uid.len() > 256 || uid.chars().any(char::is_control) {
            return Err(ApiError::invalid(
                "uid",
                "must be 1 to 256 bytes without control characters",
            ));
        }
        delayed.user_online(&uid);
        Ok((
            StatusCode::ACCEPTED,
            Json(serde_json::json!({ "user": uid })),
        )
            .into_response())
    };
    answer.await.unwrap_or_else(IntoResponse::into_response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::callback::attempt::{Kind, Verdict};
    use crate::schedule::entry::Step;

    #[test]
    fn a_status_shows_its_step_next_attempt_and_log() {
        let status = Status {
            id: "n".into(),
            state: EntryState::RetryWait,
            topic: None,
            accepted_ms: 0,
            due_ms: 0,
            updated_ms: 0,
            attempts: 2,
            step: None,
            next_attempt_ms: Some(1_800_000_060_000),
        };
        let attempt = Attempt {
            at_ms: 1_800_000_000_000,
            duration_ms: 5,
            attempt: 2,
            kind: Kind::Call,
            status: Some(500),
            verdict: Verdict::Failed,
            error: Some("HTTP 500".into()),
            excerpt: "oops".into(),
        };
        let body = StatusWithLog {
            status: status.clone().into(),
            attempt_log: vec![attempt.into()],
        };
        let v = serde_json::to_value(body).unwrap();
        assert_eq!(v["state"], "retry_wait");
        assert_eq!(v["next_attempt_at_ms"], 1_800_000_060_000u64);
        assert_eq!(v["next_attempt_at"], "2027-01-15T08:01:00Z");
        assert!(v.get("step").is_none());
        let log = &v["attempt_log"][0];
        assert_eq!(log["at"], "2027-01-15T08:00:00Z");
        assert_eq!(
            (
                &log["kind"],
                &log["verdict"],
                &log["status"],
                &log["attempt"]
            ),
            (
                &serde_json::json!("call"),
                &serde_json::json!("failed"),
                &serde_json::json!(500),
                &serde_json::json!(2)
            )
        );
        let firing = Status {
            state: EntryState::Firing,
            step: Some(Step::Calling),
            next_attempt_ms: None,
            ..status
        };
        let v = serde_json::to_value(StatusBody::from(firing)).unwrap();
        assert_eq!(
            (&v["state"], &v["step"]),
            (&serde_json::json!("firing"), &serde_json::json!("calling"))
        );
        assert!(v.get("next_attempt_at").is_none());
    }

    #[test]
    fn cursors_round_trip_and_bad_ones_name_the_field() {
        let c = parse_cursor("1800000000000.a.b-c").unwrap();
        assert_eq!(c.due_ms, 1_800_000_000_000);
        assert_eq!(c.id, "a.b-c");
        for bad in ["", "x.y", "12", "12.", "12.a b"] {
            assert_eq!(
                parse_cursor(bad).unwrap_err().field.as_deref(),
                Some("cursor"),
                "{bad}"
            );
        }
    }
}
