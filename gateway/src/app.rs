//! What every request and session shares, and the mode this process runs in.

use std::sync::Arc;

use herald_engine::publish::PublishApi;
use herald_engine::schedule::service::Delayed;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use tokio::time::Instant;

use crate::auth::{AuthError, Verifier};
use crate::config::{Config, SessionConfig};
use crate::hub::{Attached, Hub, Identity, Replay, Resume};
use crate::metrics::Metrics;
use crate::outbox::{Outbox, Subscription};
use crate::presence::PresenceReporter;
use crate::session::host::Host;
use crate::session::permit::{SessionPermit, SessionSlots};

/// Credentials made up in dev mode.
#[derive(Debug, Clone)]
pub struct DevCredentials {
    /// API key for the publish API.
    pub api_key: String,
    /// A token for user `demo` of client `demo-co`.
    pub token: String,
}

/// Standalone or edge: decided once from the configuration (root brokers
/// configured or not), carrying what only that mode has. Code matches on
/// it instead of asking the configuration again.
#[derive(Debug)]
pub enum Mode {
    /// The whole of Herald in one process: this gateway serves the publish
    /// API and schedules delayed notifications itself.
    Standalone {
        /// The delayed-notification engine: told when a user comes online.
        delayed: Delayed,
        /// The publish API (`POST /v1/notifications`), into the local hub.
        publish: PublishApi,
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

/// Sessions reach the gateway through this: the hub, the verifier, the
/// metrics, and the mode's presence (the delayed engine standalone, the
/// roots' routers on an edge).
impl Host for Shared {
    fn config(&self) -> &SessionConfig {
        &self.config.session
    }

    fn server_name(&self) -> String {
        // Name the edge, so a client (and an operator) can tell where a
        // session landed behind the proxy.
        match self.edge_id() {
            Some(id) => format!("Herald/{} {id}", env!("CARGO_PKG_VERSION")),
            None => concat!("Herald/", env!("CARGO_PKG_VERSION")).to_owned(),
        }
    }

    fn verify(&self, token: &str) -> Result<Identity, AuthError> {
        self.verifier.verify(token)
    }

    fn attach(&self, who: &Identity, outbox: &Arc<Outbox>) -> Attached {
        self.hub.attach(who, outbox)
    }

    fn subscribe(
        &self,
        who: &Identity,
        outbox: &Arc<Outbox>,
        sub: Subscription,
        resume: Option<&Resume>,
        now: Instant,
    ) -> Replay {
        self.hub.subscribe(who, outbox, sub, resume, now)
    }

    fn detach(&self, who: &Identity, outbox: &Arc<Outbox>, now: Instant) -> bool {
        self.hub.detach(who, outbox, now)
    }

    fn user_online(&self, user: &Arc<str>) {
        match &self.mode {
            Mode::Standalone { delayed, .. } => delayed.user_online(user),
            Mode::Edge { presence } => presence.online(user),
        }
    }

    fn user_offline(&self, user: &Arc<str>) {
        match &self.mode {
            // The delayed engine asks the hub when it needs to know.
            Mode::Standalone { .. } => {}
            Mode::Edge { presence } => presence.offline(user),
        }
    }

    fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}
