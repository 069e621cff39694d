//! What every request and session shares.

use std::sync::Arc;

use herald_router::schedule::service::Delayed;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::auth::Verifier;
use crate::config::Config;
use crate::hub::Hub;
use crate::metrics::Metrics;
use crate::presence::PresenceReporter;
use crate::session::permit::{SessionPermit, SessionSlots};

/// Credentials made up in dev mode.
#[derive(Debug, Clone)]
pub struct DevCredentials {
    /// API key for the publish API.
    pub api_key: String,
    /// A token for user `demo` of client `demo-co`.
    pub token: String,
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
    /// Delayed notifications (standalone): told when a user comes online.
    pub delayed: Option<Delayed>,
    /// Edge mode: presence changes for the roots.
    pub presence: Option<PresenceReporter>,
    sessions: SessionSlots,
}

impl Shared {
    /// Assemble.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        config: Arc<Config>,
        hub: Arc<Hub>,
        verifier: Verifier,
        metrics: Arc<Metrics>,
        registry: Registry,
        shutdown: CancellationToken,
        tracker: TaskTracker,
        dev: Option<DevCredentials>,
        delayed: Option<Delayed>,
        presence: Option<PresenceReporter>,
    ) -> Self {
        Shared {
            hub,
            verifier,
            metrics,
            registry,
            shutdown,
            tracker,
            dev,
            delayed,
            presence,
            sessions: SessionSlots::new(config.session.max_sessions),
            config,
        }
    }

    /// Take a session slot, or None at `session.max_sessions`; the slot
    /// is given back when the permit drops.
    pub fn acquire_session(&self) -> Option<SessionPermit> {
        self.sessions.acquire()
    }

    /// Connections holding a session slot.
    pub fn session_slots(&self) -> usize {
        self.sessions.taken()
    }
}
