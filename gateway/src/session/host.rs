//! What a session needs from the rest of the gateway, and nothing more: the
//! seam between the STOMP core ([`super::core`]) and the gateway's state.
//! [`crate::app::Shared`] implements it for real; the core's unit tests
//! implement it on plain values, without sockets.

use std::sync::Arc;

use tokio::time::Instant;

use crate::auth::AuthError;
use crate::config::SessionConfig;
use crate::hub::{Attached, Identity, Replay, Resume};
use crate::metrics::Metrics;
use crate::outbox::{Outbox, Subscription};

/// The gateway as one session sees it.
pub trait Host: Send + Sync {
    /// Limits, queue sizes, heart-beat and connect timings.
    fn config(&self) -> &SessionConfig;

    /// The `server` header of CONNECTED (names the edge, when it has an id).
    fn server_name(&self) -> String;

    /// Who a token names.
    fn verify(&self, token: &str) -> Result<Identity, AuthError>;

    /// Join the session's outbox to the user's mailbox.
    fn attach(&self, who: &Identity, outbox: &Arc<Outbox>) -> Attached;

    /// Add a subscription, replaying from `resume` when given.
    fn subscribe(
        &self,
        who: &Identity,
        outbox: &Arc<Outbox>,
        sub: Subscription,
        resume: Option<&Resume>,
        now: Instant,
    ) -> Replay;

    /// Leave the mailbox; true when the user has no session left here.
    fn detach(&self, who: &Identity, outbox: &Arc<Outbox>, now: Instant) -> bool;

    /// The user's first session here began (whoever holds their delayed
    /// notifications wants to know).
    fn user_online(&self, user: &Arc<str>);

    /// The user's last session here ended.
    fn user_offline(&self, user: &Arc<str>);

    /// Where sessions count what happens to them.
    fn metrics(&self) -> &Metrics;
}
