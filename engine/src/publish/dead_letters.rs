//! `POST /v1/dead-letters/retry` and `POST /v1/dead-letters/cancel`: act
//! on many dead letters at once, a topic's (`?topic=T`) or every one, up to
//! `limit` per request (default 1,000, at most 10,000), oldest due first.
//! Retried ones go back to `retry_wait`, due now (as `POST
//! /v1/notifications/{id}/retry`); cancelled ones become `cancelled` and
//! nobody sends them again (as `DELETE /v1/notifications/{id}`, their
//! attempt logs kept until purged). Either leaves the dead-letter list, so
//! calling again goes on where the last call stopped: the answer says how
//! many it acted on, how many had changed state meanwhile (`skipped`), and
//! whether dead letters remain (`more`). Needs the `admin` operation.

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::notifications::{guard, topic_and_limit, unavailable};
use super::{ApiError, PublishApi};
use crate::api_key::Operation;
use crate::schedule::entry::State as EntryState;
use crate::schedule::service::Delayed;
use crate::schedule::store::{Cancel, ListFilter, Replay};

/// Dead letters acted on per request unless `limit` says otherwise.
const DEFAULT_LIMIT: usize = 1_000;
/// The most one request acts on.
const MAX_LIMIT: usize = 10_000;
/// Dead letters read per list call.
const PAGE: usize = 500;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BulkQuery {
    topic: Option<String>,
    limit: Option<usize>,
}

/// What one bulk request did.
#[derive(Debug, Serialize)]
struct BulkAnswer {
    action: &'static str,
    topic: Option<String>,
    /// Retried or cancelled.
    done: usize,
    /// Listed dead, but no longer dead when acted on (another request, or
    /// purged).
    skipped: usize,
    /// Dead letters remain (of the topic, if given): call again.
    more: bool,
}

#[derive(Debug, Clone, Copy)]
enum Action {
    Retry,
    Cancel,
}

impl Action {
    fn as_str(self) -> &'static str {
        match self {
            Action::Retry => "retry",
            Action::Cancel => "cancel",
        }
    }

    /// Act on the dead letter `id`: whether it was still dead.
    async fn on(self, delayed: &Delayed, id: &str) -> Result<bool, ApiError> {
        Ok(match self {
            Action::Retry => matches!(
                delayed.replay(id).await.map_err(unavailable)?,
                Replay::Replayed(_)
            ),
            Action::Cancel => matches!(
                delayed.cancel(id).await.map_err(unavailable)?,
                Cancel::Cancelled(_)
            ),
        })
    }
}

/// `POST /v1/dead-letters/retry?topic=&limit=`.
pub(crate) async fn retry(
    State(api): State<PublishApi>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    bulk(&api, &headers, query.as_deref(), Action::Retry)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// `POST /v1/dead-letters/cancel?topic=&limit=`.
pub(crate) async fn cancel(
    State(api): State<PublishApi>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    bulk(&api, &headers, query.as_deref(), Action::Cancel)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn bulk(
    api: &PublishApi,
    headers: &HeaderMap,
    query: Option<&str>,
    action: Action,
) -> Result<Response, ApiError> {
    let (caller, delayed) = guard(api, headers, Operation::Admin)?;
    let q: BulkQuery = super::query::query_params(query)?;
    let limit = topic_and_limit(q.topic.as_deref(), q.limit, DEFAULT_LIMIT, MAX_LIMIT)?;
    let filter = ListFilter {
        topic: q.topic.clone(),
        state: EntryState::Dead,
    };
    let (mut done, mut skipped) = (0usize, 0usize);
    // Each one acted on leaves the list: every page is read from its
    // start, and each item counts toward `limit`, so this ends.
    'pages: while done + skipped < limit {
        let want = (limit - done - skipped).min(PAGE);
        let page = delayed
            .list(filter.clone(), None, want)
            .await
            .map_err(unavailable)?;
        if page.items.is_empty() {
            break;
        }
        for status in page.items {
            if action.on(delayed, &status.id).await? {
                done += 1;
            } else {
                skipped += 1;
            }
            if done + skipped >= limit {
                break 'pages;
            }
        }
    }
    let more = !delayed
        .list(filter, None, 1)
        .await
        .map_err(unavailable)?
        .items
        .is_empty();
    tracing::info!(
        api_key = caller.name(),
        action = action.as_str(),
        topic = q.topic.as_deref(),
        done,
        skipped,
        more,
        "dead letters acted on"
    );
    Ok(Json(BulkAnswer {
        action: action.as_str(),
        topic: q.topic,
        done,
        skipped,
        more,
    })
    .into_response())
}
