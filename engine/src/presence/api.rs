//! The presence endpoints ([`PresenceApi`] over a [`crate::presence::view`]),
//! served beside the publish API wherever a presence source is configured
//! (standalone: the hub; distributed: the routers' Redis):
//!
//! - `GET /v1/presence/users/{uid}?site=S`: online or not, sessions by
//!   transport, the edges holding them and since when. 200 for every
//!   well-formed uid (an offline user is not a 404).
//! - `GET /v1/presence/clients?limit=&after=`: companies with users online,
//!   by name, one page at a time (`next` is the cursor for `after`).
//! - `GET /v1/presence/clients/{client}`: one company's counts.
//!
//! All take an API key allowed `admin` (they span every user and site,
//! like the notification list). Answers are `Cache-Control: private,
//! no-store`: they are live and depend on the key.

use std::sync::Arc;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use crate::api_key::Operation;
use crate::presence::view::{
    ClientCount, Endpoint, Outcome, PresenceMetrics, PresenceView, Sessions, UserPresence,
};
use crate::publish::notifications::path_param;
use crate::publish::{ApiError, PublishApi};
use crate::schedule::timing::rfc3339;

/// The presence endpoints over one view, taking the publish API's keys
/// (and counting their refusals with it). Cheap to clone.
#[derive(Clone)]
pub struct PresenceApi {
    publish: PublishApi,
    view: Arc<dyn PresenceView>,
    metrics: PresenceMetrics,
}

impl std::fmt::Debug for PresenceApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PresenceApi").finish_non_exhaustive()
    }
}

impl PresenceApi {
    /// The endpoints over `view`, authorized by `publish`'s API keys,
    /// counted in `metrics`.
    pub fn new(publish: PublishApi, view: Arc<dyn PresenceView>, metrics: PresenceMetrics) -> Self {
        PresenceApi {
            publish,
            view,
            metrics,
        }
    }

    /// `GET /v1/presence/users/{uid}`, `/v1/presence/clients` and
    /// `/v1/presence/clients/{client}`.
    pub fn routes(&self) -> Router {
        Router::new()
            .route("/v1/presence/users/{uid}", get(user))
            .route("/v1/presence/clients", get(clients))
            .route("/v1/presence/clients/{client}", get(client))
            .with_state(self.clone())
    }
}

/// Default and largest page of `GET /v1/presence/clients`.
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;
/// Longest user id, site or client name asked about (bytes).
const MAX_NAME: usize = 256;

#[derive(Serialize)]
struct UserBody {
    user: String,
    online: bool,
    since: Option<String>,
    since_ms: Option<u64>,
    sessions: Sessions,
    edges: Vec<EdgeBody>,
}

#[derive(Serialize)]
struct EdgeBody {
    edge: String,
    sessions: u64,
    since: Option<String>,
    since_ms: Option<u64>,
}

impl From<UserPresence> for UserBody {
    fn from(p: UserPresence) -> Self {
        UserBody {
            user: p.user,
            online: p.online,
            since: p.since_ms.map(rfc3339),
            since_ms: p.since_ms,
            sessions: p.sessions,
            edges: p
                .edges
                .into_iter()
                .map(|e| EdgeBody {
                    edge: e.edge,
                    sessions: e.sessions,
                    since: e.since_ms.map(rfc3339),
                    since_ms: e.since_ms,
                })
                .collect(),
        }
    }
}

#[derive(Serialize)]
struct PageBody {
    items: Vec<ClientCount>,
    next: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct UserQuery {
    site: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PageQuery {
    limit: Option<usize>,
    after: Option<String>,
}

/// A user id, site or client name: 1 to [`MAX_NAME`] bytes without
/// control characters (what a token's claims may hold), or a 422 naming
/// `field`.
fn check_text(field: &str, value: &str) -> Result<(), ApiError> {
    if value.is_empty() || value.len() > MAX_NAME || value.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            field,
            format!("must be 1 to {MAX_NAME} bytes without control characters"),
        ));
    }
    Ok(())
}

fn unavailable(e: impl std::fmt::Display) -> ApiError {
    ApiError::unavailable(format!("presence is unavailable: {e}"))
}

/// The key (`admin`) and the view, or the error; counted either way.
async fn answer<F, Fut>(
    api: &PresenceApi,
    headers: &HeaderMap,
    endpoint: Endpoint,
    f: F,
) -> Response
where
    F: FnOnce(Arc<dyn PresenceView>) -> Fut,
    Fut: std::future::Future<Output = Result<Response, ApiError>>,
{
    let result = async {
        api.publish.authorize(headers, Operation::Admin)?;
        f(Arc::clone(&api.view)).await
    }
    .await;
    let metrics = &api.metrics;
    match result {
        Ok(mut response) => {
            metrics.count(endpoint, Outcome::Ok);
            response.headers_mut().insert(
                http::header::CACHE_CONTROL,
                http::HeaderValue::from_static("private, no-store"),
            );
            response
        }
        Err(e) => {
            let outcome = match e.status.as_u16() {
                401 | 403 => Outcome::Refused,
                503 => Outcome::Unavailable,
                _ => Outcome::Invalid,
            };
            metrics.count(endpoint, outcome);
            e.into_response()
        }
    }
}

/// `GET /v1/presence/users/{uid}`.
async fn user(
    State(api): State<PresenceApi>,
    headers: HeaderMap,
    uid: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Response {
    answer(&api, &headers, Endpoint::User, |view| async move {
        let uid = path_param("uid", uid)?;
        check_text("uid", &uid)?;
        let q: UserQuery = crate::publish::query::query_params(query.as_deref())?;
        if let Some(site) = &q.site {
            check_text("site", site)?;
        }
        let p = view
            .user(&uid, q.site.as_deref())
            .await
            .map_err(unavailable)?;
        Ok(Json(UserBody::from(p)).into_response())
    })
    .await
}

/// `GET /v1/presence/clients`.
async fn clients(
    State(api): State<PresenceApi>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    answer(&api, &headers, Endpoint::Clients, |view| async move {
        let q: PageQuery = crate::publish::query::query_params(query.as_deref())?;
        let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
        if limit == 0 || limit > MAX_LIMIT {
            return Err(ApiError::invalid(
                "limit",
                format!("must be between 1 and {MAX_LIMIT}"),
            ));
        }
        if let Some(after) = &q.after {
            check_text("after", after)?;
        }
        let page = view
            .clients(q.after.as_deref(), limit)
            .await
            .map_err(unavailable)?;
        Ok(Json(PageBody {
            items: page.items,
            next: page.next,
        })
        .into_response())
    })
    .await
}

/// `GET /v1/presence/clients/{client}`.
async fn client(
    State(api): State<PresenceApi>,
    headers: HeaderMap,
    client: Result<Path<String>, PathRejection>,
) -> Response {
    answer(&api, &headers, Endpoint::Client, |view| async move {
        let client = path_param("client", client)?;
        check_text("client", &client)?;
        let count = view.client(&client).await.map_err(unavailable)?;
        Ok(Json(count).into_response())
    })
    .await
}
