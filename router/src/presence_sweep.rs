//! The routers' presence sweep: every [`EVERY`], take the users of edge
//! processes that are no longer alive (their liveness key expired, or the
//! edge restarted with a new boot) through the presence book, at most
//! [`MAX_USERS`] a round (the rest wait for the next round), and publish
//! an `offline` event for each user this leaves with no live session
//! anywhere ([`PresenceEvents`], when `presence.events_topic` is set).
//!
//! Every router sweeps; the book pops each user of a dead process once,
//! so two routers share the work and a user's `offline` is decided once.
//! A round that fails (Redis down) is logged and the next one tries again.

use std::sync::Arc;
use std::time::Duration;

use herald_engine::presence::PresenceBook;
use herald_engine::presence::events::PresenceEvents;
use herald_engine::schedule::timing::now_ms;
use tokio_util::sync::CancellationToken;

/// How often a router sweeps.
pub const EVERY: Duration = Duration::from_secs(2);
/// Most users taken off dead edge processes per round.
pub const MAX_USERS: usize = 1_000;

/// Sweep until `shutdown`.
pub async fn run(
    book: Arc<dyn PresenceBook>,
    events: PresenceEvents,
    every: Duration,
    shutdown: CancellationToken,
) {
    let mut every = herald_engine::task::Every::new(every);
    while every.tick(&shutdown).await {
        match book.sweep(now_ms(), MAX_USERS).await {
            Ok(swept) => {
                events.metrics().swept.inc_by(swept.users);
                for t in swept.moved {
                    events.emit(t);
                }
            }
            Err(e) => tracing::warn!(error = %e, "presence sweep failed; trying again next round"),
        }
    }
}
