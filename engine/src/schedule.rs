//! Delayed notifications: accepted now, delivered when they fall due.
//!
//! # Layout
//! - [`entry`]: what is stored ([`entry::Entry`]) and reported
//!   ([`entry::Status`]), and the lifecycle ([`entry::State`]).
//! - [`record`]: the stored binary form of an entry (pure, versioned).
//! - [`store`]: the [`store::Store`] trait every backend implements.
//! - [`error`]: [`error::StoreError`], what every store method can answer.
//! - [`scheduler`]: when to claim: a state machine over the in-memory
//!   window that takes `now` and reports its next deadline.
//! - `firer` (private): the loop that claims, holds, merges, spaces and
//!   sends, with its confirmer and settler (its own `# Layout` tells the
//!   parts); `ready` (claimed entries waiting for their time) and `pace`
//!   (how long claims take) feed it.
//! - [`service`]: [`service::Delayed`], the front the publish API and the
//!   AMQP intake hand accepted entries to, and
//!   [`service::Scheduling`], the firer and maintenance as one task.
//! - [`online`]: the question asked for `when-online` entries (is the user
//!   online?), answered by [`crate::presence`].
//! - [`timing`]: the due time of a publication, fixed at acceptance.
//! - `outcomes` (private): recording what came of callbacks, for the
//!   service and the firer's sender alike.
//! - [`config`], [`metrics`]: `[schedule]` and `herald_delayed_*`.
//!
//! # Data flow
//! ```text
//! POST /v1/notifications {delay_ms | deliver_at}    AMQP delay-ms | deliver-at
//!                   \                               /
//!          due time fixed by the server clock at acceptance
//!                                |
//!                    Store::insert (durable) --> 202 / ack
//!                                |
//!   scheduler: in-memory window of (fire time, id), fed by Store::upcoming
//!                                | at each deadline
//!                    Store::claim_due (atomic, leased)
//!                                |
//!         when-online and the user is offline? --> Store::hold --> (user online) claim_held
//!                                |
//!      Link::send --> (confirmer) taken? --> Store::delivered (settler)
//!                                  refused? --> Store::release (retry)
//! ```

pub mod config;
pub mod entry;
pub mod error;
mod firer;
pub mod metrics;
pub mod online;
mod outcomes;
mod pace;
mod ready;
pub mod record;
pub mod scheduler;
mod sender;
pub mod service;
pub mod store;
pub mod timing;
pub mod topics;
