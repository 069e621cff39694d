//! Delayed notifications: accepted now, delivered when they fall due.
//!
//! # Layout
//! - [`entry`]: what is stored ([`entry::Entry`]) and reported
//!   ([`entry::Status`]), and the lifecycle ([`entry::State`]).
//! - [`record`]: the stored binary form of an entry (pure, versioned).
//! - [`store`]: the [`store::Store`] trait every backend implements.
//! - [`scheduler`]: when to claim: a state machine over the in-memory
//!   window that takes `now` and reports its next deadline.
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
mod pace;
pub mod presence;
mod ready;
pub mod record;
pub mod scheduler;
pub mod service;
pub mod store;
pub mod timing;
