//! Herald's root layer: where publications come in.
//!
//! # Layout
//! The shared engine (`herald-engine`: the publish API, the `Link` trait,
//! scheduling and the stores) and the AMQP side (`herald-amqp`: envelope,
//! topology, publisher, `AmqpLink`, the supervisor) are crates of their own;
//! this crate is what only the root layer does:
//! - [`ingest`]: the session that consumes `herald.publications` and
//!   forwards to `herald.edges` (or dead-letters to `herald.dead`), acking
//!   after the broker's confirm; delayed publications go to the store.
//! - [`intake`]: what the AMQP intakes share: a connection of their own,
//!   supervised, as one task each.
//! - [`presence_intake`]: the consumer of the edges' presence reports, which
//!   it records in the store for `when-online` notifications and the
//!   presence API, publishing online and offline events.
//! - [`presence_sweep`]: takes the users of dead edge processes offline
//!   (their `offline` events), bounded per round.
//! - [`routing_intake`]: with `routing.mode = "targeted"`, this router's
//!   own view of which edge holds whom, from every edge's presence reports
//!   and snapshots, and the catch-up of an edge a recipient arrived on
//!   (the view itself is `herald_amqp::routing`).
//! - [`stats`] and [`stats_intake`]: the cluster-wide `GET /v1/stats`
//!   (every edge's latest report and every router's summary, kept in
//!   Redis) and the consumer of the edges' stats reports.
//! - [`config`]: the `herald-router` binary's configuration (defaults, TOML,
//!   `HERALD_ROUTER_*`, flags), validated all at once.
//! - [`health`]: liveness (`/healthz`) and readiness (`/readyz`: not
//!   draining, connected to the broker, Redis answering when configured).
//! - [`server`]: the binary's process: HTTP API, `/healthz`, `/readyz`,
//!   `/metrics`, the supervised intake, and shutdown. Contract for
//!   publishers: `docs/amqp.md`.
//!
//! # Data flow (distributed)
//! ```text
//! backend --AMQP--> [herald] --#--> (herald.publications)
//!                                         | basic.qos(prefetch), consume
//!                                         v
//!                      amqp::envelope::from_amqp: validate once
//!                       | valid                      | invalid
//! backend --HTTP--> PublishApi                       v
//!                       | AmqpLink          [herald.dead] + x-herald-error, x-herald-field
//!                       v                            |
//!        publisher (confirm mode) --> [herald.edges] --> one queue per edge
//!                       |
//!        broker confirm --> ack the delivery / answer 202 (never before)
//! ```
//!
//! # Contract
//! A publication is parsed into a [`herald_protocol::envelope::Notification`],
//! validated once against [`herald_protocol::envelope::Limits`], and handed
//! to the link. Nothing is acknowledged (HTTP 202, AMQP ack) before the link
//! has taken it: for AMQP, before the broker has confirmed the forward to the
//! edges (or to the dead-letter exchange). Delivery is at-least-once: a
//! connection lost between the confirm and the ack forwards the publication
//! again with the same `message_id`.

pub mod config;
pub mod health;
pub mod ingest;
pub mod intake;
pub mod presence_intake;
pub mod presence_sweep;
pub mod routing_intake;
pub mod server;
pub mod stats;
pub mod stats_intake;
