//! Targeted routing (`routing.mode = "targeted"`): a router publishes a
//! user- or client-scoped notification only to the edges that hold one of
//! its recipients, instead of to every edge.
//!
//! ```text
//!  edges --presence reports, snapshots--> (this router's own queue) --> View
//!                                                                        | route(n, now)
//!  publisher --[herald.edges.targeted] key <edge id>: the edges that hold a recipient
//!                                      key "": every edge (global scope, or in doubt)
//!            <-- catch-up: what went elsewhere for a user who just arrived on an edge
//! ```
//!
//! - [`view`]: which edges hold which users and clients, when an edge's
//!   view is trusted, and where a notification goes (pure, taking `now`);
//! - [`recent`]: what went to chosen edges lately, for the catch-up (pure);
//! - this file: [`Routing`], the two behind one lock, shared by the
//!   publisher (every forward, the HTTP API's and the delayed firer's
//!   alike) and the router's routing intake, and its metrics; and
//!   [`Routing::plan`], which turns a batch into messages, one per edge key
//!   that needs it, keeping each edge's order.
//!
//! The fanout exchange `herald.edges` is not used in this mode; edges bind
//! their queue to both exchanges, so routers can change mode one at a time.

pub mod recent;
#[cfg(test)]
mod tests;
pub mod view;

use std::collections::HashMap;
use std::sync::Arc;

use herald_engine::presence::PresenceReport;
use herald_protocol::envelope::Notification;
use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::topology::EVERY_EDGE;
use recent::{Recent, RecentConfig};
use view::{Every, Route, View, ViewConfig};

/// How a router sends to the edges.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Every notification to every edge (`herald.edges`, fanout).
    #[default]
    Fanout,
    /// Each to the edges holding a recipient (`herald.edges.targeted`).
    Targeted,
}

/// One message to publish: the notifications of a batch at `items`, in
/// order, to the edge key `key` (an edge id, or [`EVERY_EDGE`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The routing key.
    pub key: Arc<str>,
    /// Indexes into the batch.
    pub items: Vec<usize>,
}

/// Label of `herald_routing_every_total`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ReasonLabels {
    /// Why.
    pub reason: &'static str,
}

/// Label of `herald_routing_edges`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct StateLabels {
    /// The edge's state in the view.
    pub state: &'static str,
}

/// The routing metrics (`herald_routing_*`).
#[derive(Debug, Clone)]
pub struct RoutingMetrics {
    /// Notifications sent to every edge, by why.
    pub every: Family<ReasonLabels, Counter>,
    /// Notifications sent to chosen edges (maybe none).
    pub targeted: Counter,
    /// Edges each targeted notification went to.
    pub edges_per_notification: Histogram,
    /// Targeted notifications no edge holds a recipient of (sent nowhere).
    pub unheld: Counter,
    /// (notification, edge) pairs sent only because the edge's view was
    /// not trusted, by why.
    pub fallbacks: Family<ReasonLabels, Counter>,
    /// Messages published with one edge's key.
    pub edge_publications: Counter,
    /// Messages published with the every-edge key.
    pub every_publications: Counter,
    /// Edges known, by state.
    pub edges: Family<StateLabels, Gauge>,
    /// 1 while the view routes by edge (listening, past its warm-up).
    pub ready: Gauge,
    /// Presence reports and snapshot parts read.
    pub reports: Counter,
    /// Reports that could not be read (acknowledged, not applied).
    pub reports_rejected: Counter,
    /// Reports showing that earlier ones of the edge are missing.
    pub gaps: Counter,
    /// Snapshots completed.
    pub syncs: Counter,
    /// Edges whose view grew past its bound (they get everything).
    pub overflows: Counter,
    /// Notifications re-sent to an edge a recipient arrived on.
    pub catch_up: Counter,
    /// Catch-up publications that failed.
    pub catch_up_failed: Counter,
    /// Notifications the catch-up log forgot before its window ended.
    pub catch_up_evicted: Counter,
}

impl Default for RoutingMetrics {
    fn default() -> Self {
        RoutingMetrics {
            every: Family::default(),
            targeted: Counter::default(),
            edges_per_notification: Histogram::new([0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]),
            unheld: Counter::default(),
            fallbacks: Family::default(),
            edge_publications: Counter::default(),
            every_publications: Counter::default(),
            edges: Family::default(),
            ready: Gauge::default(),
            reports: Counter::default(),
            reports_rejected: Counter::default(),
            gaps: Counter::default(),
            syncs: Counter::default(),
            overflows: Counter::default(),
            catch_up: Counter::default(),
            catch_up_failed: Counter::default(),
            catch_up_evicted: Counter::default(),
        }
    }
}

impl RoutingMetrics {
    /// Register under `herald_routing_*`, every label value present.
    pub fn register(&self, registry: &mut Registry) {
        for reason in [
            Every::Global,
            Every::Warming,
            Every::Down,
            Every::Unknown,
            Every::AllEdges,
        ] {
            let _ = self.every.get_or_create(&ReasonLabels {
                reason: reason.as_str(),
            });
        }
        for reason in [view::Fallback::Stale, view::Fallback::Incomplete] {
            let _ = self.fallbacks.get_or_create(&ReasonLabels {
                reason: reason.as_str(),
            });
        }
        for state in ["trusted", "stale", "incomplete"] {
            let _ = self.edges.get_or_create(&StateLabels { state });
        }
        let r = registry;
        r.register(
            "herald_routing_every",
            "Notifications sent to every edge in targeted mode, by why (global, warming, down, unknown_edge, all_edges)",
            self.every.clone(),
        );
        r.register(
            "herald_routing_targeted",
            "Notifications sent to the edges holding a recipient (maybe none)",
            self.targeted.clone(),
        );
        r.register(
            "herald_routing_edges_per_notification",
            "Edges each targeted notification went to",
            self.edges_per_notification.clone(),
        );
        r.register(
            "herald_routing_unheld",
            "Targeted notifications no edge holds a recipient of, sent to no edge",
            self.unheld.clone(),
        );
        r.register(
            "herald_routing_fallbacks",
            "Notifications sent to an edge only because this router's view of it is stale or incomplete",
            self.fallbacks.clone(),
        );
        r.register(
            "herald_routing_edge_publications",
            "Messages published to one edge's key",
            self.edge_publications.clone(),
        );
        r.register(
            "herald_routing_every_publications",
            "Messages published to every edge's key",
            self.every_publications.clone(),
        );
        r.register(
            "herald_routing_edges",
            "Edges this router's view knows, by state (trusted, stale, incomplete)",
            self.edges.clone(),
        );
        r.register(
            "herald_routing_view_ready",
            "1 while this router's routing view routes by edge (listening, past its warm-up of routing.stale_ms); updated with each report",
            self.ready.clone(),
        );
        r.register(
            "herald_routing_reports",
            "Presence reports and snapshot parts the routing view read",
            self.reports.clone(),
        );
        r.register(
            "herald_routing_reports_rejected",
            "Presence reports the routing view could not read",
            self.reports_rejected.clone(),
        );
        r.register(
            "herald_routing_gaps",
            "Presence reports showing earlier ones of their edge missing",
            self.gaps.clone(),
        );
        r.register(
            "herald_routing_syncs",
            "Edge snapshots the routing view completed",
            self.syncs.clone(),
        );
        r.register(
            "herald_routing_overflows",
            "Edges whose view grew past its bound and fell back to every notification",
            self.overflows.clone(),
        );
        r.register(
            "herald_routing_catch_up",
            "Notifications re-sent to an edge a recipient arrived on",
            self.catch_up.clone(),
        );
        r.register(
            "herald_routing_catch_up_failed",
            "Catch-up publications the broker did not take",
            self.catch_up_failed.clone(),
        );
        r.register(
            "herald_routing_catch_up_evicted",
            "Notifications the catch-up log forgot before its window ended (a bound was reached)",
            self.catch_up_evicted.clone(),
        );
    }
}

struct State {
    view: View,
    recent: Recent,
}

/// The routing view and the catch-up log of one router, shared.
pub struct Routing {
    state: Mutex<State>,
    metrics: RoutingMetrics,
}

impl std::fmt::Debug for Routing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Routing").finish_non_exhaustive()
    }
}

/// What went elsewhere for recipients who arrived on `edge`, to re-send
/// there.
pub type CatchUp = (Arc<str>, Vec<Arc<Notification>>);

impl Routing {
    /// A routing view, down until [`Routing::start`].
    pub fn new(view: ViewConfig, recent: RecentConfig, metrics: RoutingMetrics) -> Self {
        Routing {
            state: Mutex::new(State {
                view: View::new(view),
                recent: Recent::new(recent),
            }),
            metrics,
        }
    }

    /// The metrics.
    pub fn metrics(&self) -> &RoutingMetrics {
        &self.metrics
    }

    /// The routing intake started consuming at `now`.
    pub fn start(&self, now: u64) {
        self.state.lock().view.start(now);
        self.gauge(now);
    }

    /// The routing intake stopped: everything goes to every edge.
    pub fn stop(&self) {
        self.state.lock().view.stop();
        self.metrics.ready.set(0);
    }

    /// Record a report received at `now`; what to re-send to whom.
    pub fn apply(&self, report: &PresenceReport, now: u64) -> Vec<CatchUp> {
        self.metrics.reports.inc();
        let mut state = self.state.lock();
        let applied = state.view.apply(report, now);
        tracing::debug!(
            edge = %report.edge,
            seq = report.seq,
            sync = ?report.sync.map(|s| (s.part, s.parts)),
            users = report.detail.len(),
            gap = applied.gap,
            synced = applied.synced,
            arrivals = ?applied.arrivals.iter().map(|a| (&a.key, a.since_ms)).collect::<Vec<_>>(),
            "presence report applied to the routing view"
        );
        if applied.gap {
            self.metrics.gaps.inc();
        }
        if applied.synced {
            self.metrics.syncs.inc();
        }
        if applied.overflow {
            self.metrics.overflows.inc();
        }
        let mut out: Vec<CatchUp> = Vec::new();
        for a in applied.arrivals {
            let again = state.recent.catch_up(&a.edge, &a.key, a.since_ms, now);
            if again.is_empty() {
                continue;
            }
            self.metrics.catch_up.inc_by(again.len() as u64);
            match out.iter_mut().find(|(e, _)| *e == a.edge) {
                Some((_, list)) => list.extend(again),
                None => out.push((a.edge, again)),
            }
        }
        let counts = state.view.counts(now);
        let ready = state.view.ready(now).is_ok();
        drop(state);
        self.set_gauge(counts);
        self.metrics.ready.set(i64::from(ready));
        out
    }

    /// The messages `batch` goes as at `now`, in order: each edge gets its
    /// notifications in batch order. Records what went to chosen edges
    /// for the catch-up.
    pub fn plan(&self, batch: &[Arc<Notification>], now: u64) -> Vec<Message> {
        let every: Arc<str> = Arc::from(EVERY_EDGE);
        let mut out: Vec<Message> = Vec::new();
        // The run of targeted notifications being grouped: edge -> its
        // message's index in `out`.
        let mut run: HashMap<Arc<str>, usize> = HashMap::new();
        let mut state = self.state.lock();
        let evicted_before = state.recent.evicted;
        for (i, n) in batch.iter().enumerate() {
            let route = state.view.route(n, now);
            tracing::trace!(id = %n.id, route = ?route, "routed");
            match route {
                Route::Every(reason) => {
                    self.metrics
                        .every
                        .get_or_create(&ReasonLabels {
                            reason: reason.as_str(),
                        })
                        .inc();
                    run.clear();
                    match out.last_mut() {
                        Some(m) if m.key == every => m.items.push(i),
                        _ => out.push(Message {
                            key: Arc::clone(&every),
                            items: vec![i],
                        }),
                    }
                }
                Route::Edges { edges, fallbacks } => {
                    self.metrics.targeted.inc();
                    self.metrics
                        .edges_per_notification
                        .observe(edges.len() as f64);
                    if edges.is_empty() {
                        self.metrics.unheld.inc();
                    }
                    for (reason, count) in fallbacks {
                        if count > 0 {
                            self.metrics
                                .fallbacks
                                .get_or_create(&ReasonLabels {
                                    reason: reason.as_str(),
                                })
                                .inc_by(u64::from(count));
                        }
                    }
                    for edge in &edges {
                        match run.get(edge) {
                            Some(&m) => out[m].items.push(i),
                            None => {
                                run.insert(Arc::clone(edge), out.len());
                                out.push(Message {
                                    key: Arc::clone(edge),
                                    items: vec![i],
                                });
                            }
                        }
                    }
                    state.recent.record(n, edges, now);
                }
            }
        }
        let evicted = state.recent.evicted - evicted_before;
        drop(state);
        self.metrics.catch_up_evicted.inc_by(evicted);
        out
    }

    fn gauge(&self, now: u64) {
        let counts = self.state.lock().view.counts(now);
        self.set_gauge(counts);
    }

    fn set_gauge(&self, c: view::EdgeCounts) {
        for (state, n) in [
            ("trusted", c.trusted),
            ("stale", c.stale),
            ("incomplete", c.incomplete),
        ] {
            self.metrics
                .edges
                .get_or_create(&StateLabels { state })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }
}
