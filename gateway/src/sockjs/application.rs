//! What a SockJS session of the HTTP transports runs: the seam between the
//! driver ([`super::session`]) and the application. Herald's is STOMP
//! ([`stomp`]); the test services run the suite's apps
//! ([`super::test_apps`]). The routes choose, per service.

use std::sync::Arc;

use tokio::time::Instant;

use super::pending::{Kind, Pending};
use crate::app::Shared;
use crate::outbox::Outbox;
use crate::session::core::StompCore;
use crate::session::host::Host;
use crate::session::sockjs_frame::close_reason;

/// What a session of the HTTP transports runs: the STOMP core, or (on the
/// test services only) one of the suite's apps ([`super::test_apps`]). The
/// routes choose; the driver only calls these.
pub trait Application: Send {
    /// A message from the client (`xhr_send`).
    fn on_message(&mut self, message: &str, now: Instant, out: &mut Pending);
    /// The open frame went out; a close here ends the session at once.
    fn opened(&mut self) -> Option<(u16, &'static str)> {
        None
    }
    /// Move what waits into `out` until it holds `limit` bytes.
    fn pull(&mut self, _out: &mut Pending, _limit: usize, _now: Instant) {}
    /// Set once the session must end: the SockJS close frame.
    fn close(&self) -> Option<(u16, &'static str)> {
        None
    }
    /// The next instant [`Self::on_timer`] has work.
    fn next_deadline(&self) -> Option<Instant> {
        None
    }
    /// The outbox to wait on while pulling makes sense.
    fn outbox(&self) -> Option<Arc<Outbox>> {
        None
    }
    /// Deadlines due.
    fn on_timer(&mut self, _now: Instant, _out: &mut Pending) {}
    /// `out` refused a frame at its bound: cut the session as a slow
    /// consumer. (The test apps have nothing to cut; their echoes are
    /// refused.)
    fn check_queue(&mut self, _out: &mut Pending) {}
    /// Shutdown started.
    fn shutdown(&mut self, _out: &mut Pending) {}
    /// Bytes went out to a receiver.
    fn sent(&mut self, _now: Instant) {}
    /// The client went away.
    fn peer_closed(&mut self) {}
    /// The session ended.
    fn finish(self: Box<Self>) {}
}

/// Herald's application for a new session: STOMP, with the token the
/// request carried (if any).
pub fn stomp(
    shared: &Arc<Shared>,
    kind: Kind,
    http_token: Option<String>,
    client: std::net::SocketAddr,
) -> Box<dyn Application> {
    Box::new(
        StompCore::new(
            Arc::clone(shared) as Arc<dyn Host>,
            kind.transport(),
            http_token,
            Instant::now(),
        )
        .with_client(client),
    )
}

impl Application for StompCore {
    fn on_message(&mut self, message: &str, now: Instant, out: &mut Pending) {
        self.on_stomp_bytes(message.as_bytes(), now, out);
    }

    fn pull(&mut self, out: &mut Pending, limit: usize, now: Instant) {
        StompCore::pull(self, out, limit, now);
    }

    fn close(&self) -> Option<(u16, &'static str)> {
        self.close_code().map(|code| (code, close_reason(code)))
    }

    fn next_deadline(&self) -> Option<Instant> {
        StompCore::next_deadline(self)
    }

    fn outbox(&self) -> Option<Arc<Outbox>> {
        self.can_pull().then(|| Arc::clone(StompCore::outbox(self)))
    }

    fn on_timer(&mut self, now: Instant, out: &mut Pending) {
        StompCore::on_timer(self, now, out);
    }

    fn check_queue(&mut self, out: &mut Pending) {
        StompCore::check_queue(self, out);
    }

    fn shutdown(&mut self, out: &mut Pending) {
        StompCore::shutdown(self, out);
    }

    fn sent(&mut self, now: Instant) {
        StompCore::sent(self, now);
    }

    fn peer_closed(&mut self) {
        StompCore::peer_closed(self);
    }

    fn finish(self: Box<Self>) {
        StompCore::finish(*self);
    }
}
