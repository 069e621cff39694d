//! The cluster-wide `GET /v1/stats` (docs/stats.md#cluster): this router's
//! own figures, the other routers' summaries and every edge's latest report,
//! added up.
//!
//! Every part lives in the [`RedisStatsBook`] beside the delayed store
//! (`<prefix>:stats`): the [`crate::stats_intake`] keeps the edges' reports
//! there, and [`run_summary`] writes this router's own part every
//! [`RouterStats::summary_every`]. The router answering reads them all and
//! puts its own fresh figures in place of its stored summary. A part older
//! than `redis.presence_edge_ttl_ms` (a few edge heartbeats) is listed
//! `stale`, and its last figures still count: an edge that stopped reporting
//! shows as stale, not as zero.
//!
//! A router without `[redis]` has no book: it answers with its own part.
//! Redis not answering is a 503 (`stale-if-error` lets a cache serve the
//! last answer), counted in `herald_stats_unavailable_total`.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use herald_engine::publish::ApiError;
use herald_engine::schedule::service::Delayed;
use herald_engine::schedule::store::redis::{Put, RedisStatsBook};
use herald_engine::schedule::timing::now_ms;
use herald_engine::stats::TopicStats;
use herald_engine::stats::answer::{Answer, PartView, StatsQuery, respond};
use herald_engine::stats::part::{Callbacks, Part, Totals};

/// Longest interval between two of this router's summaries.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(5);

/// Label of the stats counters that say what came of something.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// What came of it.
    pub result: &'static str,
}

/// Results of an edge's report taken from the queue.
pub const REPORT_RESULTS: [&str; 4] = ["recorded", "older", "full", "rejected"];
/// Results of writing this router's summary.
pub const SUMMARY_RESULTS: [&str; 3] = ["written", "full", "failed"];

/// The router's stats counters (`herald_stats_*`, docs/monitoring.md).
#[derive(Debug, Clone, Default)]
pub struct StatsMetrics {
    /// Edges' stats reports by result: `recorded`, `older` (a newer one of
    /// the same edge was kept), `full` (the book holds its most parts:
    /// refuse-new), `rejected` (unreadable: dead-lettered).
    pub reports: Family<ResultLabels, Counter>,
    /// This router's summaries by result: `written`, `full`, `failed`
    /// (Redis did not answer).
    pub summaries: Family<ResultLabels, Counter>,
    /// `GET /v1/stats` refused for a bad query parameter.
    pub refused: Counter,
    /// `GET /v1/stats` answered 503: the book in Redis did not answer.
    pub unavailable: Counter,
}

impl StatsMetrics {
    /// Register them, every result label at zero.
    pub fn register(&self, registry: &mut Registry) {
        for result in REPORT_RESULTS {
            let _ = self.reports.get_or_create(&ResultLabels { result });
        }
        for result in SUMMARY_RESULTS {
            let _ = self.summaries.get_or_create(&ResultLabels { result });
        }
        registry.register(
            "herald_stats_intake_reports",
            "Edges' stats reports taken from the root's queue, by result (recorded, older, full, rejected)",
            self.reports.clone(),
        );
        registry.register(
            "herald_stats_summaries",
            "This router's stats summaries written to Redis, by result (written, full, failed)",
            self.summaries.clone(),
        );
        registry.register(
            "herald_stats_refused",
            "GET /v1/stats requests refused for a bad query parameter",
            self.refused.clone(),
        );
        registry.register(
            "herald_stats_unavailable",
            "GET /v1/stats requests answered 503 because Redis did not answer",
            self.unavailable.clone(),
        );
    }

    /// Count one report's `result`.
    pub fn report(&self, result: &'static str) {
        self.reports.get_or_create(&ResultLabels { result }).inc();
    }

    fn summary(&self, result: &'static str) {
        self.summaries.get_or_create(&ResultLabels { result }).inc();
    }
}

/// What this router's statistics are made of. Shared by the HTTP handler
/// and the summary writer.
pub struct RouterStats {
    id: String,
    topics: TopicStats,
    delayed: Option<Delayed>,
    book: Option<RedisStatsBook>,
    stale_ms: u64,
    metrics: StatsMetrics,
}

impl std::fmt::Debug for RouterStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouterStats")
            .field("id", &self.id)
            .field("stale_ms", &self.stale_ms)
            .finish_non_exhaustive()
    }
}

/// This router's id among the parts: `<hostname>:<port>` (stable across
/// restarts, so a restarted router takes its old place).
pub fn router_id(port: u16) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty() && h.len() <= 150)
        .unwrap_or_else(|| "router".to_owned());
    format!("{host}:{port}")
}

impl RouterStats {
    /// Statistics of router `id`; parts older than `stale_ms` are stale.
    pub fn new(
        id: String,
        topics: TopicStats,
        delayed: Option<Delayed>,
        book: Option<RedisStatsBook>,
        stale_ms: u64,
        metrics: StatsMetrics,
    ) -> RouterStats {
        RouterStats {
            id,
            topics,
            delayed,
            book,
            stale_ms,
            metrics,
        }
    }

    /// How often this router writes its summary: often enough that a
    /// live router is never stale (a third of the stale limit, at most
    /// [`SUMMARY_EVERY`]).
    pub fn summary_every(&self) -> Duration {
        Duration::from_millis(self.stale_ms / 3).clamp(Duration::from_millis(100), SUMMARY_EVERY)
    }

    /// This router's figures at `now`: per-topic windows (accepted,
    /// callbacks, held, cancelled, expired, lateness), callbacks since it
    /// started, and the delayed store's counts by due time.
    pub fn part(&self, now: u64) -> Part {
        Part {
            kind: "router".into(),
            id: self.id.clone(),
            at_ms: now,
            delayed: self.delayed.as_ref().map(|d| d.metrics().due()),
            callbacks: Callbacks::of_totals(&self.topics.totals()),
            topics: self.topics.windows(now),
            ..Part::default()
        }
    }

    /// Every part at `now` (this router's fresh), sorted by kind and id.
    async fn parts(&self, now: u64) -> Result<Vec<Part>, String> {
        let mut parts = match &self.book {
            Some(book) => book.all(now).await.map_err(|e| e.to_string())?,
            None => Vec::new(),
        };
        parts.retain(|p| !(p.kind == "router" && p.id == self.id));
        parts.push(self.part(now));
        parts.sort_by(|a, b| (&a.kind, &a.id).cmp(&(&b.kind, &b.id)));
        Ok(parts)
    }

    /// The cluster's answer at `now` from `parts`.
    fn answer(&self, parts: &[Part], now: u64) -> Answer {
        let known = self.delayed.as_ref().map(|d| d.topics().snapshot());
        let keep = |t: &str| known.as_ref().is_none_or(|k| k.knows(t));
        let views = parts
            .iter()
            .map(|p| {
                let age_ms = now.saturating_sub(p.at_ms);
                PartView {
                    kind: p.kind.clone(),
                    id: p.id.clone(),
                    age_ms,
                    stale: age_ms > self.stale_ms,
                }
            })
            .collect();
        Answer {
            mode: "cluster",
            now_ms: now,
            measured_ms: parts.iter().map(|p| p.at_ms).max().unwrap_or(now),
            totals: Totals::of(parts, &keep),
            parts: Some(views),
        }
    }

    /// `GET /v1/stats` on a router.
    pub fn routes(self: Arc<Self>) -> Router {
        Router::new()
            .route("/v1/stats", get(stats))
            .with_state(self)
    }
}

async fn stats(
    State(s): State<Arc<RouterStats>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let q = match StatsQuery::parse(query.as_deref()) {
        Ok(q) => q,
        Err(e) => {
            s.metrics.refused.inc();
            return ApiError::invalid(e.field, e.message).into_response();
        }
    };
    let now = now_ms();
    let parts = match s.parts(now).await {
        Ok(p) => p,
        Err(e) => {
            s.metrics.unavailable.inc();
            tracing::warn!(error = %e, "stats: reading the parts in Redis failed");
            return ApiError::unavailable("the cluster's statistics in Redis are not answering")
                .into_response();
        }
    };
    respond(&s.answer(&parts, now), &q, &headers)
}

/// Write this router's summary to the book every
/// [`RouterStats::summary_every`] until `shutdown` (nothing without a book).
pub async fn run_summary(stats: Arc<RouterStats>, shutdown: CancellationToken) {
    let Some(book) = stats.book.clone() else {
        return;
    };
    let mut every = herald_engine::task::Every::new(stats.summary_every());
    while every.tick(&shutdown).await {
        match book.put(&stats.part(now_ms())).await {
            Ok(Put::Stored | Put::Older) => stats.metrics.summary("written"),
            Ok(Put::Full) => {
                stats.metrics.summary("full");
                tracing::warn!(
                    id = %stats.id,
                    "stats: the book of parts is full; this router's summary is not kept"
                );
            }
            Err(e) => {
                stats.metrics.summary("failed");
                tracing::warn!(error = %e, "stats: writing this router's summary failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_engine::stats::window::{Event, Rolling};

    const T0: u64 = 1_800_000_000_000;

    fn edge(id: &str, at_ms: u64, delivered: u64) -> Part {
        let mut r = Rolling::new();
        r.record(Event::Delivered, delivered, at_ms);
        Part {
            kind: "edge".into(),
            id: id.into(),
            at_ms,
            sessions: [("websocket".to_owned(), 1)].into(),
            deliveries: delivered,
            topics: [("other".to_owned(), r.windows(at_ms))].into(),
            ..Part::default()
        }
    }

    #[test]
    fn a_part_past_the_limit_is_stale_and_still_counts() {
        let s = RouterStats::new(
            "r1".into(),
            TopicStats::default(),
            None,
            None,
            1_000,
            StatsMetrics::default(),
        );
        let parts = vec![edge("e1", T0 - 500, 2), edge("e2", T0 - 5_000, 3)];
        let a = s.answer(&parts, T0);
        let views = a.parts.unwrap();
        assert_eq!(views[0].age_ms, 500);
        assert!(!views[0].stale);
        assert!(views[1].stale);
        assert_eq!(a.totals.deliveries, 5);
        assert_eq!(a.totals.sessions["websocket"], 2);
        assert_eq!(a.measured_ms, T0 - 500);
        assert_eq!(s.summary_every(), Duration::from_millis(333));
    }
}
