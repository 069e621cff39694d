//! Herald's AMQP side (lapin, RabbitMQ), shared by the router and the edge
//! gateway: the wire forms, the topology, the confirmed publisher and its
//! link, and the one reconnect supervisor both binaries run their sessions
//! under. The router's intake (`herald-router`'s `ingest`) and the edge's
//! uplink (`herald-gateway`'s `uplink`) are built on it.
//!
//! ```text
//!  backend --publish--> [herald] --#--> (herald.publications)
//!                                              | ingest: basic.qos(prefetch), consume
//!                                              v
//!                     envelope::from_amqp (validate once)
//!                         | valid                         | invalid
//!                         v                               v
//!   HTTP API --AmqpLink--> publisher (confirm mode)   [herald.dead] + x-herald-error
//!                         v
//!                  [herald.edges] --> every edge's queue
//!                         |
//!           confirm --> ack the delivery (never before)
//! ```
//!
//! - [`topology`]: the names and their idempotent declaration.
//! - [`envelope`]: headers and properties to and from a
//!   [`herald_protocol::envelope::Notification`] (pure, no I/O). Edges read
//!   what the router forwards with the same [`envelope::from_amqp`].
//! - [`control`]: requests a router sends its edges beside notifications
//!   (an operator's disconnect of a user).
//! - [`supervisor`]: one connection kept alive: connect with backoff and
//!   jitter, run a session, reconnect when it fails, until shutdown.
//! - [`publisher`]: the confirm-mode channel forwards go through.
//! - [`link`]: [`link::AmqpLink`], the [`herald_engine::link::Link`] the HTTP API
//!   publishes through; it follows reconnects through a
//!   [`link::PublisherSlot`].
//! - [`presence`]: the AMQP form of the presence reports edges send to
//!   roots (pure; the router's `presence_intake` consumes them).
//! - [`stats`]: the AMQP form of the stats reports edges send to roots
//!   (pure; the router's `stats_intake` consumes them).
//! - [`routing`]: targeted routing, the routing view the router keeps of
//!   which edge holds whom, and the catch-up after a move.
//! - [`metrics`]: connection and forward counters.
//! - [`wire`]: Herald's own AMQP 0-9-1 consumer client, the edges' root link
//!   by default: the consuming task reads the socket itself and acks a burst
//!   with one write; frames are read and written with lapin's codec
//!   (`amq-protocol`), with no thread of lapin's in between.
//!
//! The contract for publishers is in `docs/amqp.md`.

pub mod control;
pub mod envelope;
pub mod guarded;
pub mod link;
pub mod metrics;
pub mod presence;
pub mod publisher;
pub mod routing;
pub mod stats;
pub mod supervisor;
pub mod topology;
pub mod wire;

pub use envelope::{Rejection, from_amqp, from_amqp_bytes, to_amqp};
pub use link::{AmqpLink, Bundling, PublisherSlot};
pub use metrics::AmqpMetrics;
pub use publisher::Publisher;
pub use supervisor::{
    Backoff, Reconnect, SessionError, Supervisor, SupervisorConfig, SupervisorEvents,
};
pub use topology::Topology;
