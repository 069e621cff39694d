//! `/healthz` (liveness) and `/readyz` (readiness); the answers are
//! [`herald_engine::health`]'s, the same as the router's.
//!
//! Ready means this gateway takes new sessions:
//! - not draining (the shutdown token has not fired);
//! - edge: linked to at least one root (`herald_root_links` > 0). An edge
//!   with no root link accepts sessions that would receive nothing, so a
//!   balancer should send users to another edge;
//! - standalone: nothing more. The embedded store is opened before the
//!   gateway serves (a store that cannot be opened stops the process with
//!   `EX_CANTCREAT`), so a serving standalone gateway has it open.
//!
//! Once shutdown starts the listener closes (see [`crate::server`]): a probe
//! that reaches a handler after that (on a connection already open) gets
//! `draining`, every new probe is refused, which a balancer's check counts
//! as a failure just the same.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use herald_engine::health::{self, DRAINING, Reason};

use crate::app::{Mode, Shared};

/// An edge with no root link up.
pub const NO_ROOT_LINK: Reason = "no root link";

/// What keeps this gateway from taking new sessions; empty when ready.
pub fn not_ready(shared: &Shared) -> Vec<Reason> {
    let mut reasons = Vec::new();
    if shared.shutdown.is_cancelled() {
        reasons.push(DRAINING);
    }
    match shared.mode {
        Mode::Edge { .. } if shared.metrics.root_links.get() < 1 => reasons.push(NO_ROOT_LINK),
        Mode::Edge { .. } | Mode::Standalone { .. } => {}
    }
    reasons
}

/// `GET /healthz`: 200 while the process serves HTTP, `"draining"` once
/// shutdown has started.
pub async fn healthz(State(shared): State<Arc<Shared>>) -> Response {
    health::liveness(shared.shutdown.is_cancelled())
}

/// `GET /readyz`: 200 when [`not_ready`] is empty, else 503 naming why.
pub async fn readyz(State(shared): State<Arc<Shared>>) -> Response {
    health::readiness(&not_ready(&shared))
}
