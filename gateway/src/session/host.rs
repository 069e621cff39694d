//! What a session needs from the rest of the gateway, and nothing more: the
//! seam between the STOMP core ([`super::core`]) and the gateway's state.
//! [`crate::app::Shared`] implements it for real; the core's unit tests
//! implement it on plain values, without sockets.

use std::sync::Arc;

use tokio::time::Instant;

use herald_engine::presence::events::PresenceEvents;
use herald_engine::presence::transition::Move;

use crate::app::{Mode, Shared};
use crate::auth::{AuthError, Verified};
use crate::config::SessionConfig;
use crate::hub::{Attached, Identity, Missed, Replay, Resume, TooManySessions};
use crate::metrics::Metrics;
use crate::outbox::{Outbox, Subscription};
use crate::presence::view::STANDALONE_EDGE;

/// The gateway as one session sees it.
pub trait Host: Send + Sync {
    /// Limits, queue sizes, heart-beat and connect timings.
    fn config(&self) -> &SessionConfig;

    /// The `server` header of CONNECTED (names the edge, when it has an id).
    fn server_name(&self) -> String;

    /// Who a token names, and how long it stays valid.
    fn verify(&self, token: &str) -> Result<Verified, AuthError>;

    /// Join the session's outbox to the user's mailbox, unless the user
    /// has `session.max_per_user` sessions already.
    fn attach(
        &self,
        who: &Identity,
        outbox: &Arc<Outbox>,
        missed: Option<&Missed>,
    ) -> Result<Attached, TooManySessions>;

    /// Add a subscription, replaying from `resume` when given.
    fn subscribe(
        &self,
        who: &Identity,
        outbox: &Arc<Outbox>,
        sub: Subscription,
        resume: Option<&Resume>,
        now: Instant,
    ) -> Replay;

    /// A subscription resumes `missed` (its SUBSCRIBE's `offline-ms`: a
    /// position restored after a page reload): see [`Missed`].
    fn missed(&self, who: &Identity, missed: &Missed);

    /// Refill the outbox of a session that fell behind from its mailbox.
    fn refill(&self, who: &Identity, outbox: &Arc<Outbox>, now: Instant);

    /// Leave the mailbox; true when the user has no session left here.
    fn detach(&self, who: &Identity, outbox: &Arc<Outbox>, now: Instant) -> bool;

    /// The user's first session here began (whoever holds their delayed
    /// notifications wants to know); `who` is the session that began it.
    fn user_online(&self, who: &Identity);

    /// The user's last session here ended; `who` is the session that
    /// ended it.
    fn user_offline(&self, who: &Identity);

    /// Where sessions count what happens to them.
    fn metrics(&self) -> &Metrics;
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

    fn verify(&self, token: &str) -> Result<Verified, AuthError> {
        self.verifier.verify(token)
    }

    fn attach(
        &self,
        who: &Identity,
        outbox: &Arc<Outbox>,
        missed: Option<&Missed>,
    ) -> Result<Attached, TooManySessions> {
        let attached = self
            .hub
            .attach(who, outbox, self.config.session.max_per_user, missed)?;
        // A first session is reported by `user_online`; another one
        // changes the user's counts, which the routers show.
        if let (Mode::Edge { presence }, false) = (&self.mode, attached.came_online) {
            presence.sessions(&who.user);
        }
        Ok(attached)
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

    fn refill(&self, who: &Identity, outbox: &Arc<Outbox>, now: Instant) {
        self.hub.refill(who, outbox, now);
    }

    fn detach(&self, who: &Identity, outbox: &Arc<Outbox>, now: Instant) -> bool {
        let went_offline = self.hub.detach(who, outbox, now);
        // A last session is reported by `user_offline`.
        if let (Mode::Edge { presence }, false) = (&self.mode, went_offline) {
            presence.sessions(&who.user);
        }
        went_offline
    }

    fn missed(&self, who: &Identity, missed: &Missed) {
        // Routers read it from the user's next report.
        if self.hub.note_missed(who, missed)
            && let Mode::Edge { presence } = &self.mode
        {
            presence.sessions(&who.user);
        }
    }

    fn user_online(&self, who: &Identity) {
        match &self.mode {
            Mode::Standalone { engine } => {
                if let Some(delayed) = &engine.delayed {
                    delayed.user_online(&who.user);
                }
                self.presence_event(&engine.events, who, Move::Online);
            }
            Mode::Edge { presence } => presence.online(&who.user),
        }
    }

    fn user_offline(&self, who: &Identity) {
        match &self.mode {
            // The delayed engine asks the hub when it needs to know.
            Mode::Standalone { engine } => self.presence_event(&engine.events, who, Move::Offline),
            Mode::Edge { presence } => presence.offline(&who.user),
        }
    }

    fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

impl Shared {
    /// Standalone: the hub saw `who`'s user come or go; an event to
    /// `presence.events_topic`, if set.
    fn presence_event(&self, events: &PresenceEvents, who: &Identity, event: Move) {
        let edge = self.config.edge.id.as_deref().unwrap_or(STANDALONE_EDGE);
        events.local(&who.user, &who.site, who.client.as_deref(), event, edge);
    }
}
