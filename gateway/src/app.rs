//! What every request and session shares, and the mode this process runs in.

use std::sync::Arc;

use herald_engine::answers::MetricsAccess;
use herald_engine::engine::Engine;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::auth::Verifier;
use crate::config::Config;
use crate::dedup::DuplicateFilter;
use crate::hub::Hub;
use crate::metrics::Metrics;
use crate::permit::{SessionPermit, SessionSlots};
use crate::presence::PresenceReporter;

/// Credentials made up in dev mode.
#[derive(Debug, Clone)]
pub struct DevCredentials {
    /// API key for the publish API.
    pub api_key: String,
    /// A token for user `demo` of client `demo-co`.
    pub token: String,
    /// The HS256 secret tokens are signed with (saved for the backend
    /// examples, which mint their own tokens: docs/examples.md).
    pub jwt_secret: String,
}

/// Standalone or edge: decided once from the configuration (root brokers
/// configured or not), carrying what only that mode has. Code matches on
/// it instead of asking the configuration again.
#[derive(Debug)]
pub enum Mode {
    /// The whole of Herald in one process: this gateway serves the publish
    /// API and schedules delayed notifications itself.
    Standalone {
        /// The engine over this gateway's parts ([`crate::standalone`]):
        /// the publish API into the local hub, delayed notifications (told
        /// when a user comes online), online and offline events.
        engine: Engine,
    },
    /// An edge of root brokers: notifications arrive over the uplinks,
    /// publishing and scheduling are the routers' business.
    Edge {
        /// Presence changes for the roots' routers.
        presence: PresenceReporter,
    },
}

impl Mode {
    /// `"standalone"` or `"edge"`, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Mode::Standalone { .. } => "standalone",
            Mode::Edge { .. } => "edge",
        }
    }
}

/// State shared by the HTTP handlers and every session.
#[derive(Debug)]
pub struct Shared {
    /// Configuration.
    pub config: Arc<Config>,
    /// The mailboxes.
    pub hub: Arc<Hub>,
    /// The one duplicate filter in front of the hub, whatever the mode.
    pub duplicates: Arc<DuplicateFilter>,
    /// JWT verification.
    pub verifier: Verifier,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// The registry `/metrics` encodes.
    pub registry: Registry,
    /// Fires when shutdown starts.
    pub shutdown: CancellationToken,
    /// Tracks sessions so shutdown can wait for them.
    pub tracker: TaskTracker,
    /// Dev-mode credentials, when in dev mode.
    pub dev: Option<DevCredentials>,
    /// Standalone or edge.
    pub mode: Mode,
    /// Session slots (`session.max_sessions`).
    pub sessions: SessionSlots,
    /// Who may read `/metrics` (`metrics_require_key`).
    pub metrics_access: MetricsAccess,
}

impl Shared {
    /// Take a session slot, or None at `session.max_sessions`; the slot
    /// is given back when the permit drops.
    pub fn acquire_session(&self) -> Option<SessionPermit> {
        self.sessions.acquire()
    }

    /// Connections holding a session slot.
    pub fn session_slots(&self) -> usize {
        self.sessions.taken()
    }

    /// This edge's id, in edge mode when one is configured.
    pub fn edge_id(&self) -> Option<&str> {
        match self.mode {
            Mode::Edge { .. } => self.config.edge.id.as_deref(),
            Mode::Standalone { .. } => None,
        }
    }
}
