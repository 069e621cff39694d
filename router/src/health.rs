//! `/healthz` (liveness) and `/readyz` (readiness); the answers are
//! [`herald_engine::health`]'s, the same as the gateway's.
//!
//! Ready means this router takes publications:
//! - not draining (the shutdown token has not fired);
//! - connected to its broker with the topology declared (the intake's
//!   publisher is in the [`PublisherSlot`]): without it `POST
//!   /v1/notifications` answers 503 and nothing is consumed;
//! - with `[redis]`, the delayed store answers a `PING` within
//!   [`STORE_PING_TIMEOUT`] (asked at every probe: one cheap round trip).
//!
//! Every failed condition is named in the 503. Once shutdown starts the
//! HTTP listener closes (axum's graceful shutdown stops accepting), so a new
//! probe is refused for the rest of the drain; one that reaches the handler
//! on a connection still open gets `draining`.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::get;
use herald_amqp::PublisherSlot;
use herald_engine::health::{self, DRAINING, Reason};
use herald_engine::schedule::store::redis::RedisStore;
use tokio_util::sync::CancellationToken;

/// The router is not connected to its broker.
pub const BROKER_DISCONNECTED: Reason = "broker disconnected";
/// Redis did not answer a `PING` in time.
pub const STORE_UNREACHABLE: Reason = "store unreachable";

/// How long a probe waits for Redis's `PONG`: under HAProxy's `timeout
/// check` (2 s), so a slow Redis reads as unready rather than as a probe
/// that timed out.
pub const STORE_PING_TIMEOUT: Duration = Duration::from_secs(1);

/// What readiness looks at.
#[derive(Clone)]
pub struct Health {
    slot: PublisherSlot,
    shutdown: CancellationToken,
    store: Option<Arc<RedisStore>>,
}

impl Health {
    /// Readiness from the intake's `slot`, the `shutdown` token and, with
    /// `[redis]`, the `store`.
    pub fn new(
        slot: PublisherSlot,
        shutdown: CancellationToken,
        store: Option<Arc<RedisStore>>,
    ) -> Self {
        Health {
            slot,
            shutdown,
            store,
        }
    }

    /// What keeps this router from taking publications; empty when ready.
    pub async fn not_ready(&self) -> Vec<Reason> {
        let mut reasons = Vec::new();
        if self.shutdown.is_cancelled() {
            reasons.push(DRAINING);
        }
        if !self.slot.is_ready() {
            reasons.push(BROKER_DISCONNECTED);
        }
        if let Some(store) = &self.store
            && let Err(e) = store.ping(STORE_PING_TIMEOUT).await
        {
            tracing::debug!(error = %e, "readiness: the delayed store did not answer");
            reasons.push(STORE_UNREACHABLE);
        }
        reasons
    }

    /// `GET /healthz` and `GET /readyz`.
    pub fn routes(self) -> Router {
        Router::new()
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .with_state(self)
    }
}

/// `GET /healthz`: 200 while the process serves HTTP, `"draining"` once
/// shutdown has started. The broker's state is `/readyz`'s business.
async fn healthz(State(health): State<Health>) -> Response {
    health::liveness(health.shutdown.is_cancelled())
}

/// `GET /readyz`: 200 when [`Health::not_ready`] is empty, else 503 naming
/// why.
async fn readyz(State(health): State<Health>) -> Response {
    health::readiness(&health.not_ready().await)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn answer(health: &Health, path: &str) -> (u16, serde_json::Value) {
        use tower::ServiceExt;
        let r = health
            .clone()
            .routes()
            .oneshot(
                axum::http::Request::get(path)
                    .body(axum::body::Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        let status = r.status().as_u16();
        let body = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
        (status, serde_json::from_slice(&body).unwrap())
    }

    #[tokio::test]
    async fn draining_and_disconnected_are_both_named_while_alive() {
        let health = Health::new(PublisherSlot::new(), CancellationToken::new(), None);
        let (status, body) = answer(&health, "/readyz").await;
        assert_eq!(status, 503);
        assert_eq!(
            body,
            serde_json::json!({"status": "unavailable", "reasons": ["broker disconnected"]})
        );
        assert_eq!(answer(&health, "/healthz").await.0, 200);
        health.shutdown.cancel();
        let (status, body) = answer(&health, "/readyz").await;
        assert_eq!(status, 503);
        assert_eq!(
            body["reasons"],
            serde_json::json!(["draining", "broker disconnected"])
        );
        let (status, body) = answer(&health, "/healthz").await;
        assert_eq!((status, body["status"].as_str()), (200, Some("draining")));
    }
}
