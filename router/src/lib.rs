//! Herald's root layer: where publications come in.
//!
//! # Layout
//! - [`publish`]: the HTTP publish API (`POST /v1/notifications`): parsing,
//!   API-key authentication, validation, JSON errors.
//! - [`amqp`]: the AMQP side (lapin): the [`amqp::topology`] it declares,
//!   the AMQP form of a notification ([`amqp::envelope`], pure), the
//!   connection [`amqp::supervisor`] (backoff, reconnect, shutdown), the
//!   [`amqp::ingest`] that consumes `herald.publications` and forwards to
//!   `herald.edges` (or dead-letters to `herald.dead`), and
//!   [`amqp::link::AmqpLink`], the HTTP API's way out. Contract for
//!   publishers: `router/AMQP.md`.
//! - [`link`]: the [`link::Link`] trait through which accepted notifications
//!   leave the router. Standalone Herald implements it in-process (straight
//!   into the gateway's mailboxes); the distributed router implements it
//!   over AMQP ([`amqp::AmqpLink`]). One routing core, two links.
//! - [`config`]: the `herald-router` binary's configuration (defaults, TOML,
//!   `HERALD_ROUTER_*`, flags), validated all at once.
//! - [`server`]: the binary's process: HTTP API, `/healthz`, `/metrics`, the
//!   supervised intake, and shutdown.
//! - [`api_key`]: API keys, compared in constant time.
//! - [`metrics`]: counters for accepted and rejected publications
//!   (`source` = `http` or `amqp`).
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

pub mod amqp;
pub mod api_key;
pub mod config;
pub mod link;
pub mod metrics;
pub mod process;
pub mod publish;
pub mod schedule;
pub mod server;
