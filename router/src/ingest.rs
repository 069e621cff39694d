//! The AMQP intake: consume the publications queue, validate, forward.
//!
//! For each delivery, in the order they arrive:
//! - valid: publish to the edges exchange (confirm mode), and once the broker
//!   confirms, ack the delivery;
//! - invalid: publish the original body and properties to the dead-letter
//!   exchange with `x-herald-error` (the reason) and `x-herald-field`, and
//!   once the broker confirms, ack the delivery.
//!
//! - delayed (`delay-ms`, `deliver-at`, `when-online`), or with a callback
//!   (its own `callback-url`, or its topic's; immediate ones are due now):
//!   store it in the delayed store ([`Delayed::accept`]), and once it is
//!   durable, ack;
//! - a publication whose `message_id` the idempotency ledger holds
//!   ([`herald_engine::publish::ledger`]: accepted within
//!   `publish.dedup_window_secs` on any path, or a delayed one not yet
//!   that long past its due time): acked, sent nowhere, counted in
//!   `herald_publish_duplicates_total{source="amqp"}`. A redelivery is
//!   not refused so (its first delivery took the id): an immediate one is
//!   forwarded again for the edges' window to drop, a delayed one goes to
//!   the store, which knows whether it holds it;
//! - a cancel (`type` = `herald.cancel`): cancel in the delayed store, ack;
//!   an unknown id is dead-lettered. A cancel of a publication still being
//!   stored (delivered just before it) waits for that store first.
//!
//! While the delayed store is unreachable, a delayed publication ends the
//! session like a failed forward: it goes back to the queue, and the intake
//! reconnects with backoff (nothing delayed is lost or delivered early).
//!
//! Nothing is acked before its forward is confirmed, so a publication the
//! backend got a confirm for survives a router crash or a broker restart: at
//! worst it is forwarded twice (delivery is at-least-once; edges can dedupe
//! by `message_id`). A forward that fails or is refused ends the session: the
//! connection closes, its unacked deliveries go back to the queue, and the
//! supervisor reconnects with backoff.
//!
//! One task does it all, without a task per delivery: every hand-off
//! between lapin's I/O thread and the tokio workers costs the router more
//! CPU than validating a publication does.
//!
//! ```text
//!  consumer --delivery--> validate --publish, in delivery order--> forwards in flight (Ordered)
//!                                                                     | confirms, oldest first
//!                                                                     v
//!                       basic.ack(multiple) of the last one <-- every confirm ready now
//! ```
//!
//! Forwards are sent in delivery order and confirmed concurrently, and
//! taken back in delivery order (`Ordered`: only the oldest forward wakes
//! the task). Once the confirms that are in have been taken, one
//! `basic.ack` with `multiple` acks every delivery up to the last of them.
//! The first forward taken back that failed ends the session; it and the
//! ones after it stay unacked.
//!
//! Bound: the prefetch (`basic.qos`, set before `basic.consume`) caps the
//! unacked deliveries, so at most `prefetch` forwards are in flight.
//!
//! # Layout
//! - `ingest.rs` (this file): [`Ingest`], its [`IngestConfig`], and what a
//!   forward is and gives back (`Forward`, `Confirmed`, `Sent`);
//! - `ingest/session.rs`: the session loop ([`Ingest::run`]): consume, shut
//!   down, drain;
//! - `ingest/plan.rs`: the plan for one delivery (`Plan`) and the forward
//!   that carries it out, dead letters included;
//! - `ingest/in_flight.rs`: the forwards in flight (`InFlight`), settled
//!   when taken back (counted, logged) and acked;
//! - `ingest/ordered.rs`: `Ordered`, the queue that gives forwards back in
//!   delivery order;
//! - `ingest/storing.rs`: `Storing`, the stores in flight by id, so that a
//!   cancel right behind its publication waits for its store.

mod in_flight;
mod ordered;
mod plan;
mod session;
mod storing;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use herald_protocol::envelope::{Limits, Notification};
use lapin::types::{DeliveryTag, ShortString};

use herald_amqp::envelope::Rejection;
use herald_amqp::link::PublisherSlot;
use herald_amqp::metrics::AmqpMetrics;
use herald_amqp::publisher::{ForwardError, Forwarded};
use herald_amqp::routing::Routing;
use herald_amqp::topology::Topology;
use herald_engine::metrics::PublishMetrics;
use herald_engine::publish::IdLedger;
use herald_engine::schedule::service::Delayed;

/// Metric and log label of this intake.
pub const SOURCE: &str = "amqp";

/// Settings of the intake.
#[derive(Debug, Clone)]
pub struct IngestConfig {
    /// Names to declare and use.
    pub topology: Topology,
    /// Most unacknowledged deliveries (`basic.qos` prefetch count).
    pub prefetch: u16,
    /// Envelope limits.
    pub limits: Limits,
    /// On shutdown, how long in-flight forwards may take to be confirmed.
    pub drain_timeout: Duration,
    /// Targeted mode: the routing view every forward is routed by (the
    /// HTTP API's and the delayed firer's too: they publish through the
    /// same publisher).
    pub routing: Option<Arc<Routing>>,
}

/// The intake session: run by the [`herald_amqp::Supervisor`] on
/// every connection. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Ingest {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: IngestConfig,
    slot: PublisherSlot,
    publish_metrics: PublishMetrics,
    amqp_metrics: AmqpMetrics,
    delayed: Option<Delayed>,
    /// The idempotency ledger, the HTTP API's.
    ledger: IdLedger,
    /// Delayed publications being stored: a cancel waits for its own.
    storing: storing::Storing,
}

/// A forward on its way: its publish, then the broker's confirm.
type Forward = Pin<Box<dyn Future<Output = Confirmed> + Send>>;

/// What the broker said about a forward, and what settling its delivery
/// needs.
struct Confirmed {
    delivery_tag: DeliveryTag,
    outcome: Result<Forwarded, ForwardError>,
    sent: Sent,
}

/// What a forward carried.
enum Sent {
    /// A valid publication, to the edges exchange.
    Edges {
        notification: Arc<Notification>,
        redelivered: bool,
    },
    /// A delayed publication, into the delayed store.
    Stored {
        id: String,
        due_ms: u64,
        duplicate: bool,
        topic: Option<String>,
    },
    /// A cancel, applied to the delayed store.
    Cancelled { id: String, too_late: bool },
    /// An immediate publication whose id the ledger holds: sent nowhere.
    Duplicate { id: String },
    /// A refused publication, to the dead-letter exchange.
    Dead {
        rejection: Rejection,
        message_id: Option<ShortString>,
        routing_key: ShortString,
    },
}

impl Ingest {
    /// An intake that publishes through a publisher it also puts in `slot`
    /// (for the HTTP link).
    /// With `delayed`, publications carrying timing headers are stored
    /// there; without, they are dead-lettered
    /// ([`DELAYED_DISABLED`](herald_amqp::envelope::DELAYED_DISABLED)).
    /// Ids are claimed in `ledger` (the engine's, the HTTP API's too).
    pub fn new(
        config: IngestConfig,
        slot: PublisherSlot,
        publish_metrics: PublishMetrics,
        amqp_metrics: AmqpMetrics,
        delayed: Option<Delayed>,
        ledger: IdLedger,
    ) -> Self {
        Ingest {
            inner: Arc::new(Inner {
                config,
                slot,
                publish_metrics,
                amqp_metrics,
                delayed,
                ledger,
                storing: storing::Storing::default(),
            }),
        }
    }
}
