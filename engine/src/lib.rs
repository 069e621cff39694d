//! Herald's engine: what the two binaries (`herald-router`, the root layer,
//! and `herald-gateway`, the edge and the standalone server) share. No AMQP
//! here: that side is `herald-amqp`, built on this crate.
//!
//! # Layout
//! - [`engine`]: the front door: [`engine::Engine::build`] assembles the
//!   publish API, delayed notifications, presence and the console, with
//!   their metrics and tasks, from the parts that differ by mode (the
//!   link, the store, the presence source). Both binaries build it so.
//! - [`process`]: process plumbing: exit codes, logging set-up, the
//!   shutdown signal, URL redaction for logs.
//! - [`task`]: the one shape of every long-running task ([`task::Task`],
//!   run until a shutdown token fires) and the set a binary spawns them in.
//! - [`config`]: configuration helpers every binary uses (TOML reading, an
//!   error that lists every problem at once), the `[publish]` limits, the
//!   keys both binaries read (`config::table`; each binary keeps its own
//!   rows, and its table is both), and what is made from a binary's table:
//!   the environment variables, `--print-config`'s redaction,
//!   docs/configuration.md and the defaults `--help` shows.
//! - [`deadline`]: the deadlines of an HTTP connection, both binaries'
//!   (`[http]`): a write that the client leaves untaken too long closes
//!   the connection, a request body that comes slower than a rate is
//!   answered 408.
//! - [`link`]: the [`link::Link`] trait through which accepted
//!   notifications leave the process. Standalone Herald implements it
//!   in-process (straight into the gateway's mailboxes); the distributed
//!   router implements it over AMQP (`herald_amqp::AmqpLink`). One routing
//!   core, two links.
//! - [`publish`]: the HTTP publish API (`POST /v1/notifications`, status,
//!   cancel, list, `online`): parsing, API-key authentication, validation,
//!   JSON errors; its idempotency ledger ([`publish::ledger`]), which the
//!   router's AMQP intake claims ids in too.
//! - [`ids`]: notification ids as duplicate windows remember them (a keyed
//!   128-bit hash).
//! - [`console`]: the operator's web console at `/console` (its assets
//!   compiled in, versioned names, cache headers), served by the router
//!   and the standalone gateway.
//! - [`api_key`]: API keys: named, each with the operations it may perform,
//!   optionally its sites and publish rate; compared in constant time,
//!   reloadable.
//! - [`rate_limit`]: token buckets (pure, they take `now`) and a bounded
//!   map of them keyed by address or user.
//! - [`openapi`]: the OpenAPI 3.1 document of every HTTP endpoint
//!   (`engine/openapi.json`, written by hand), cut down to what a process
//!   serves and served at `GET /v1/openapi.json`; its drift check against
//!   the routes each crate registers.
//! - [`apidocs`]: the API reference page at `/v1/docs`, that document
//!   rendered by Redoc's bundle (vendored from npm, compiled in).
//! - [`answers`]: what every process answers alike: `/metrics`'s
//!   exposition, 404 and 405 as JSON errors.
//! - [`exposition`]: `/metrics`'s two text formats, OpenMetrics and the
//!   Prometheus text format 0.0.4, chosen by `Accept` (pure).
//! - [`health`]: the answers of `/healthz` (liveness) and `/readyz`
//!   (readiness), the same in both binaries.
//! - [`callback`]: the pure parts of callbacks (HTTP calls when a
//!   notification falls due): the `retry_if` condition language, Standard
//!   Webhooks signatures, retry policies and `Retry-After`, what an answer
//!   means, which destinations are refused, and a publication's own
//!   target (`callback_url`, `recheck_url`, `browsers`), which the publish
//!   API and the AMQP intake check at acceptance; the callback HTTP client;
//!   and alerts (`callback::alert`: dead letters and the delayed store
//!   down, as log lines, metrics, a Slack-compatible webhook and mail).
//! - [`metrics`]: counters for accepted and rejected publications
//!   (`source` = `http` or `amqp`), and for the API keys (refusals by key
//!   and operation, notifications by key, reloads).
//! - [`schedule`]: delayed notifications: the scheduler, the firer, and the
//!   durable stores behind one trait: `embedded` (feature `embedded`, redb;
//!   standalone) and `redis` (feature `redis`; the routers). The gateway
//!   builds without `redis`, so an edge does not link the Redis client.
//!   `presence` also holds who is online for operators
//!   (`presence::view`: sessions by transport, edges, since when,
//!   counts per client company), which the hub (standalone) and the
//!   routers' Redis implement and [`publish`] serves at
//!   `GET /v1/presence/...`.
//!
//! # Contract
//! A publication is parsed into a [`herald_protocol::envelope::Notification`],
//! validated once against [`herald_protocol::envelope::Limits`], and handed
//! to the link (or, when delayed, made durable in the store first). Nothing
//! is acknowledged (HTTP 202, AMQP ack) before the link or the store has
//! taken it. Delivery is at-least-once: a repeat carries the same id.

pub mod answers;
pub mod api_key;
pub mod apidocs;
pub mod callback;
pub mod config;
pub mod console;
pub mod deadline;
pub mod engine;
pub mod exposition;
pub mod health;
pub mod ids;
pub mod link;
pub mod metrics;
pub mod openapi;
pub mod presence;
pub mod process;
pub mod publish;
pub mod rate_limit;
pub mod schedule;
pub mod stats;
pub mod task;
