//! Edge mode: one link to every root broker.
//!
//! Each link declares this edge's queue `herald.edge.<id>` on its root
//! (durable, so it survives a short edge restart; `x-expires`, so a root
//! forgets an edge that is gone for long), binds it to the routers'
//! fanout exchange, and to the direct exchange `<exchange>.targeted` with
//! this edge's id and with the every-edge key `""` (routers routing by
//! edge publish there: `routing.mode = "targeted"`), and consumes with a
//! bounded prefetch. A delivery (one
//! notification, or a bundle of several: `type` `herald.bundle`) is
//! parsed with the router's own AMQP envelope code, deduplicated by id, and
//! routed by [`Hub::deliver`], the same routing core standalone mode uses;
//! it is acknowledged after that: the deliveries already waiting are
//! routed together and acked with one `basic.ack` (`multiple`), at most
//! `ACK_BURST` at a time. Each link also publishes this edge's
//! presence reports ([`crate::presence`]) to `herald.presence` on its root,
//! and its stats reports ([`crate::stats`]) to `herald.presence.stats`; a
//! link that comes up asks for a presence snapshot, which goes to
//! `herald.presence.sync`. Each link runs under
//! `herald_amqp`'s [`Supervisor`], like the router's intake: a link that
//! fails reconnects with exponential backoff and jitter
//! (`edge.reconnect_initial_ms` to `edge.reconnect_max_ms`), forever, until
//! shutdown. Roots are independent: one down does not stop the others.
//!
//! A link runs on one of two AMQP clients ([`client`]): herald-amqp's own
//! consumer ([`herald_amqp::wire`], `edge.uplink_client = "herald"`, the
//! default), read by the link's task itself, or lapin (`"lapin"`, and
//! every `amqps://` root), which reads the socket on a thread of its own
//! and hands each delivery over.

mod client;

use herald_amqp::control::Disconnect;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use herald_amqp::envelope::{
    BUNDLE_TYPE, accepted_from_amqp, bundle_accepted, forwarded_from_amqp_bytes,
};
use herald_amqp::presence::{PresenceAmqp, PresenceReport};
use herald_amqp::stats::Part;
use herald_amqp::supervisor::CLOSE_TIMEOUT;
use herald_amqp::topology::{EVERY_EDGE, targeted_name};
use herald_amqp::wire::{Assembled, Wire, WireConfig, WireError};
use herald_amqp::{SessionError, Supervisor, SupervisorConfig, SupervisorEvents};
use herald_protocol::bundle;
use herald_protocol::envelope::{Limits, Notification};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, ExchangeKind};
use tokio::sync::broadcast;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{EdgeConfig, UplinkClient};
use crate::dedup::DuplicateFilter;
use crate::hub::Hub;
use crate::metrics::Metrics;
use crate::presence::{SyncRequests, ToRoots};
use client::{LapinLink, RootClient, consume_on_wire};

/// Most deliveries acked by one `basic.ack` (`multiple`): those that were
/// already waiting when the first was routed, up to this many.
const ACK_BURST: usize = 256;

/// The links of this edge to its roots.
pub struct Uplink {
    config: EdgeConfig,
    hub: Arc<Hub>,
    limits: Limits,
    metrics: Arc<Metrics>,
    duplicates: Arc<DuplicateFilter>,
    reports: broadcast::Sender<Arc<PresenceReport>>,
    /// Asked for a presence snapshot when a link comes up.
    syncs: SyncRequests,
    /// This edge's stats reports ([`crate::stats`]), to every root.
    stats: broadcast::Sender<Arc<Part>>,
}

/// Why a link ended.
#[derive(Debug, thiserror::Error)]
enum LinkError {
    /// lapin failed.
    #[error("amqp: {0}")]
    Amqp(#[from] lapin::Error),
    /// Herald's own client failed.
    #[error("amqp: {0}")]
    Wire(#[from] WireError),
    /// The consumer stream ended.
    #[error("the broker ended the consumer")]
    ConsumerEnded,
}

impl From<LinkError> for SessionError {
    fn from(e: LinkError) -> Self {
        match e {
            LinkError::Amqp(e) => SessionError::Amqp(e),
            other => SessionError::Lost(other.to_string()),
        }
    }
}

/// Least bound on a delivery's body ([`Uplink::max_body`]): no router
/// makes a larger bundle (`amqp.bundle_max_bytes` is checked against it).
const MIN_MAX_BODY: u64 = herald_amqp::link::MAX_BUNDLE_BYTES as u64;

/// The reports one connection publishes, subscribed before it connects.
struct Reports {
    presence: broadcast::Receiver<Arc<PresenceReport>>,
    stats: broadcast::Receiver<Arc<Part>>,
}

/// What a link declares on its root and consumes.
#[derive(Debug, Clone)]
struct Topology {
    /// Every exchange the edge uses, with its kind (all durable).
    exchanges: Vec<(String, ExchangeKind)>,
    /// This edge's queue (durable).
    queue: String,
    /// Its arguments (`x-expires`).
    queue_args: FieldTable,
    /// (exchange, routing key) pairs the queue is bound with.
    bindings: Vec<(String, String)>,
    /// The consumer's tag.
    consumer_tag: String,
    /// Unacknowledged deliveries at most.
    prefetch: u16,
}

/// `herald_root_links` counts one while it lives.
struct LinkUp<'a>(&'a Metrics);

impl<'a> LinkUp<'a> {
    fn new(metrics: &'a Metrics) -> Self {
        metrics.root_links.inc();
        LinkUp(metrics)
    }
}

impl Drop for LinkUp<'_> {
    fn drop(&mut self) {
        self.0.root_links.dec();
    }
}

/// An edge counts its root links' failures as `herald_root_reconnects`;
/// `herald_root_links` goes up once a link consumes (see [`Uplink::link`]).
#[derive(Debug)]
struct RootLinkEvents(Arc<Metrics>);

impl SupervisorEvents for RootLinkEvents {
    fn connect_failed(&self) {
        self.0.root_reconnects.inc();
    }

    fn connected(&self, _again: bool) {}

    fn disconnected(&self, lost: bool) {
        if lost {
            self.0.root_reconnects.inc();
        }
    }
}

impl Uplink {
    /// Links for `config.roots`, delivering into `hub` what `duplicates`
    /// admits, and sending each presence report of `presence` to every
    /// root (asking it for a snapshot when a link comes up).
    pub fn new(
        config: EdgeConfig,
        hub: Arc<Hub>,
        duplicates: Arc<DuplicateFilter>,
        limits: Limits,
        metrics: Arc<Metrics>,
        presence: ToRoots,
        stats: broadcast::Sender<Arc<Part>>,
    ) -> Self {
        Uplink {
            config,
            hub,
            limits,
            metrics,
            duplicates,
            reports: presence.reports,
            syncs: presence.syncs,
            stats,
        }
    }

    /// This edge's queue name on every root.
    pub fn queue_name(&self) -> String {
        format!(
            "herald.edge.{}",
            self.config.id.as_deref().unwrap_or("unnamed")
        )
    }

    /// Run a supervised link per root until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut tasks = tokio::task::JoinSet::new();
        for root in self.config.roots.clone() {
            let this = Arc::clone(&self);
            let shutdown = shutdown.clone();
            tasks.spawn(async move { this.supervise(root, shutdown).await });
        }
        while tasks.join_next().await.is_some() {}
    }

    /// One root's link, kept up by the shared [`Supervisor`] (the same
    /// backoff, timeouts and logs as the router's intake), on the client
    /// `edge.uplink_client` names (lapin for an `amqps://` root).
    async fn supervise(&self, root: String, shutdown: CancellationToken) {
        let lapin =
            self.config.uplink_client == UplinkClient::Lapin || root.starts_with("amqps://");
        let connection_name = format!("herald-edge {}", self.queue_name());
        let supervisor = Supervisor::new(
            SupervisorConfig {
                url: root.clone(),
                // Named, so operators (and tests) can find this link on the broker.
                connection_name: connection_name.clone(),
                backoff: self.config.reconnect().backoff(),
                connect_timeout: self.config.reconnect().connect_timeout(),
            },
            RootLinkEvents(Arc::clone(&self.metrics)),
        );
        let topology = self.topology();
        // Whether this link consumed its queue on this root before.
        let linked = &AtomicBool::new(false);
        if lapin {
            supervisor
                .run(shutdown, |conn, shutdown| {
                    let topology = &topology;
                    // Reports made while this link connects wait in the backlog.
                    let reports = self.subscribe();
                    async move {
                        let (mut link, existed) = LapinLink::open(&conn, topology).await?;
                        self.relinked(linked, existed);
                        Ok(self
                            .serve(&mut link, reports, &topology.queue, &shutdown)
                            .await?)
                    }
                })
                .await;
            return;
        }
        let wire = WireConfig {
            url: root,
            connection_name,
            max_body: self.max_body(),
        };
        supervisor
            .run_with(
                shutdown,
                || Wire::open(&wire),
                |mut wire, shutdown| {
                    let topology = &topology;
                    let reports = self.subscribe();
                    async move {
                        let served = match consume_on_wire(&mut wire, topology).await {
                            Ok(existed) => {
                                self.relinked(linked, existed);
                                self.serve(&mut wire, reports, &topology.queue, &shutdown)
                                    .await
                            }
                            Err(e) => Err(e.into()),
                        };
                        // Closing hands unacknowledged deliveries back at
                        // once. After a channel error or a cancelled
                        // consumer the connection still works and is
                        // closed too; after any other error the socket is
                        // just dropped.
                        let usable = matches!(
                            served,
                            Ok(())
                                | Err(LinkError::Wire(
                                    WireError::ChannelClosed { .. } | WireError::ConsumerCancelled
                                ))
                        );
                        if usable && let Err(e) = wire.close(CLOSE_TIMEOUT).await {
                            tracing::debug!(error = %e, "closing the root link");
                        }
                        Ok(served?)
                    }
                },
            )
            .await;
    }

    /// A link consumes its queue again (`linked`: it did before, in this
    /// process) and found it `existed`. If it did not, the root deleted it
    /// while the edge was away longer than `edge.queue_expires_secs`, and
    /// with it whatever was routed to this edge meanwhile: every mailbox
    /// here may miss messages, and its sessions are told so with a
    /// `herald.gap` ([`Hub::upstream_lost`]). (The first link of a process
    /// finds an old queue or none; its mailboxes are new anyway.)
    fn relinked(&self, linked: &AtomicBool, existed: bool) {
        if linked.swap(true, Ordering::Relaxed) && !existed {
            let mailboxes = self.hub.upstream_lost();
            tracing::warn!(
                queue = %self.queue_name(),
                mailboxes,
                "this edge's queue on a root was gone (it expired while the link was down, \
                 edge.queue_expires_secs): what was routed to it meanwhile is lost; \
                 every mailbox's sessions get a herald.gap"
            );
        }
    }

    /// The exchanges, queue and bindings of this edge on every root.
    fn topology(&self) -> Topology {
        let queue = self.queue_name();
        let presence = self.config.presence_exchange.as_str();
        let targeted = targeted_name(&self.config.exchange);
        let mut queue_args = FieldTable::default();
        queue_args.insert(
            "x-expires".into(),
            AMQPValue::LongLongInt((self.config.queue_expires_secs * 1000) as i64),
        );
        let id = self.config.id.as_deref().unwrap_or("unnamed");
        Topology {
            exchanges: vec![
                (presence.to_owned(), ExchangeKind::Fanout),
                (
                    herald_amqp::stats::stats_name(presence),
                    ExchangeKind::Fanout,
                ),
                (
                    herald_amqp::presence::sync_name(presence),
                    ExchangeKind::Fanout,
                ),
                (self.config.exchange.clone(), ExchangeKind::Fanout),
                (targeted.clone(), ExchangeKind::Direct),
            ],
            consumer_tag: format!("{queue}.consumer"),
            queue,
            queue_args,
            bindings: vec![
                (self.config.exchange.clone(), String::new()),
                (targeted.clone(), id.to_owned()),
                (targeted, EVERY_EDGE.to_owned()),
            ],
            prefetch: self.config.prefetch,
        }
    }

    /// The largest delivery body a link takes: one notification at the
    /// envelope limits (payload and every list full), or
    /// [`MIN_MAX_BODY`], whichever is larger. Nothing a router sends is
    /// larger; a delivery that is, is dropped and counted.
    fn max_body(&self) -> u64 {
        let l = &self.limits;
        let ids = (l.max_users + l.max_clients + l.max_sites) as u64;
        let one = l.max_payload_bytes as u64 + ids * (l.max_identifier_bytes as u64 + 8) + 65_536;
        one.max(MIN_MAX_BODY)
    }

    /// The presence and stats reports from now on, for one connection.
    fn subscribe(&self) -> Reports {
        Reports {
            presence: self.reports.subscribe(),
            stats: self.stats.subscribe(),
        }
    }

    /// One connection's life once it consumes `queue`: route, ack, and
    /// publish this edge's `reports` (those made since it connected).
    async fn serve<C: RootClient>(
        &self,
        client: &mut C,
        reports: Reports,
        queue: &str,
        shutdown: &CancellationToken,
    ) -> Result<(), LinkError> {
        let Reports {
            presence: mut reports,
            mut stats,
        } = reports;
        let presence_exchange = self.config.presence_exchange.as_str();
        let stats_exchange = herald_amqp::stats::stats_name(presence_exchange);
        let sync_exchange = herald_amqp::presence::sync_name(presence_exchange);
        tracing::info!(queue = %queue, client = C::NAME, "root link up");
        // The routers of this root may have missed reports while it was
        // down: a snapshot makes their view of this edge whole again.
        self.syncs.request();
        // Up means consuming, until this future ends or the supervisor drops
        // it (on the connection's error event): the guard counts both.
        let _up = LinkUp::new(&self.metrics);
        loop {
            let delivery = tokio::select! {
                // The supervisor closes the connection.
                _ = shutdown.cancelled() => return Ok(()),
                report = reports.recv() => {
                    match report {
                        Ok(report) => {
                            let exchange = if report.sync.is_some() {
                                sync_exchange.as_str()
                            } else {
                                presence_exchange
                            };
                            client.publish(exchange, report.to_amqp(), &report.body()).await?;
                            self.metrics.presence_reports.inc();
                        }
                        Err(broadcast::error::RecvError::Lagged(n)) => {
                            self.metrics.presence_lagged.inc_by(n);
                        }
                        // The batcher stopped: shutdown is under way.
                        Err(broadcast::error::RecvError::Closed) => {}
                    }
                    continue;
                }
                part = stats.recv() => {
                    match part {
                        Ok(part) => {
                            let (props, body) = herald_amqp::stats::encode(&part);
                            client.publish(&stats_exchange, props, &body).await?;
                            self.metrics.stats_reports.inc();
                        }
                        Err(broadcast::error::RecvError::Lagged(n)) => {
                            self.metrics.stats_lagged.inc_by(n);
                        }
                        Err(broadcast::error::RecvError::Closed) => {}
                    }
                    continue;
                }
                d = client.next() => d?,
            };
            let mut last = self.take(delivery);
            // Route every delivery already here, then ack them all with
            // one `basic.ack` (`multiple`): one write (lapin: one hand-off
            // to its I/O thread) per burst instead of one per delivery. An
            // error ends the link without acking the burst; the broker
            // redelivers it and the dedup window drops what was already
            // routed.
            let mut burst = 1;
            while burst < ACK_BURST {
                match client.ready()? {
                    Some(d) => {
                        last = self.take(d);
                        burst += 1;
                    }
                    None => break,
                }
            }
            self.metrics.uplink_acks.inc();
            client.ack(last).await?;
        }
    }

    /// Route one delivery; its tag, to ack.
    fn take(&self, delivery: Assembled) -> u64 {
        match delivery {
            Assembled::Delivery(d) => {
                let d = *d;
                self.route(&d.properties, d.body);
                d.delivery_tag
            }
            Assembled::TooLarge {
                delivery_tag: tag,
                size,
            } => {
                // Redelivering it would not make it fit: acknowledged,
                // counted and logged.
                self.metrics.uplink_rejected.inc();
                tracing::warn!(
                    size,
                    max = self.max_body(),
                    "delivery from a root above the size bound dropped"
                );
                tag
            }
        }
    }

    /// Parse, deduplicate and deliver one delivery: a notification, or a
    /// bundle of several.
    fn route(&self, properties: &BasicProperties, body: Bytes) {
        // A router's request for this edge rather than a notification.
        if let Some(request) = Disconnect::from_amqp(properties, &body) {
            match request {
                Ok(d) => {
                    let told = self.hub.disconnect(&d.user, &d.reason);
                    tracing::info!(user = %d.user, reason = %d.reason, told, "user disconnected by an operator");
                }
                Err(e) => {
                    self.metrics.uplink_rejected.inc();
                    tracing::warn!(reason = %e, "unreadable disconnect request from a root dropped");
                }
            }
            return;
        }
        if properties
            .kind()
            .as_ref()
            .is_some_and(|k| k.as_str() == BUNDLE_TYPE)
        {
            self.route_bundle(properties, body);
            return;
        }
        self.metrics.uplink_received.inc();
        let n = match forwarded_from_amqp_bytes(
            properties,
            body,
            &self.limits,
            herald_engine::publish::new_id,
        ) {
            Ok(mut n) => {
                n.accepted = accepted_from_amqp(properties);
                n
            }
            Err(e) => {
                // Routers validate before forwarding; a delivery that fails
                // here came from elsewhere. It is acknowledged (redelivering
                // it would fail the same way), counted and logged.
                self.metrics.uplink_rejected.inc();
                tracing::warn!(reason = %e, "invalid delivery from a root dropped");
                return;
            }
        };
        self.deliver(n, Instant::now());
    }

    /// Route each notification of a bundle, in order. One that fails
    /// validation is dropped alone; a bundle that cannot be read is
    /// dropped whole (acknowledged: it would fail the same way again).
    fn route_bundle(&self, properties: &BasicProperties, body: Bytes) {
        self.metrics.uplink_bundles.inc();
        let batch = match bundle::decode(body) {
            Ok(mut batch) => {
                // Without a table (an older router) or with one that does
                // not fit, the notifications go unmeasured.
                if let Some(table) = bundle_accepted(properties) {
                    bundle::apply_accepted(table, &mut batch);
                }
                batch
            }
            Err(e) => {
                self.metrics.uplink_rejected.inc();
                tracing::warn!(reason = %e, "unreadable bundle from a root dropped");
                return;
            }
        };
        self.metrics.uplink_received.inc_by(batch.len() as u64);
        let now = Instant::now();
        for mut n in batch {
            if let Err(e) = n.validate_forwarded(&self.limits) {
                self.metrics.uplink_rejected.inc();
                tracing::warn!(id = %n.id, reason = %e, "invalid notification in a bundle dropped");
                continue;
            }
            self.deliver(n, now);
        }
    }

    /// Deduplicate and deliver one valid notification.
    fn deliver(&self, n: Notification, now: Instant) {
        if self.duplicates.admit(&n.id, now) {
            self.hub.deliver(&Arc::new(n), now);
        }
    }
}
