//! This process's figures: `GET /v1/stats` standalone, and the stats
//! reports an edge sends its roots (docs/stats.md).
//!
//! Both are made by [`part`]: sessions by transport, mailboxes,
//! deliveries, callbacks, the delayed store's due counts (standalone) and
//! the per-topic windows of [`herald_engine::stats::TopicStats`]. An edge's
//! [`run_reporter`] hands one to every root link (a broadcast channel,
//! [`LINK_BACKLOG`] deep; a link that falls behind skips the oldest,
//! counted) every `edge.presence_heartbeat_ms`.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use herald_engine::schedule::timing::now_ms;
use herald_engine::stats::answer::{Answer, StatsQuery, respond};
use herald_engine::stats::part::{Callbacks, Part, Totals};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::app::{Mode, Shared};
use crate::metrics::{Transport, TransportLabels};

/// Stats reports waiting per root link (a link that falls further behind
/// skips the oldest; counted).
pub const LINK_BACKLOG: usize = 4;

/// This process's figures at `now`.
pub fn part(shared: &Shared, now: u64) -> Part {
    let m = &shared.metrics;
    let mut sessions = std::collections::BTreeMap::new();
    for &transport in Transport::ALL {
        let n = m
            .sessions
            .get_or_create(&TransportLabels { transport })
            .get();
        sessions.insert(transport.as_str().to_owned(), n.max(0) as u64);
    }
    let topics = m.topics.windows(now);
    let totals = m.topics.totals();
    let (kind, id, delayed) = match &shared.mode {
        Mode::Standalone { engine } => (
            "standalone",
            "standalone".to_owned(),
            engine.delayed.as_ref().map(|d| d.metrics().due()),
        ),
        Mode::Edge { .. } => (
            "edge",
            shared.edge_id().unwrap_or("unnamed").to_owned(),
            None,
        ),
    };
    Part {
        kind: kind.into(),
        id,
        at_ms: now,
        sessions,
        mailboxes: shared.hub.mailbox_count() as u64,
        deliveries: m.deliveries.get(),
        delayed,
        callbacks: Callbacks::of_totals(&totals),
        topics,
    }
}

/// `GET /v1/stats`: this gateway's figures (an edge answers for itself
/// too; the cluster's answer is the routers').
pub async fn get(
    State(shared): State<Arc<Shared>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let q = match StatsQuery::parse(query.as_deref()) {
        Ok(q) => q,
        Err(e) => {
            shared.metrics.stats_refused.inc();
            return herald_engine::publish::ApiError::invalid(e.field, e.message).into_response();
        }
    };
    let now = now_ms();
    let me = part(&shared, now);
    let answer = Answer {
        mode: if me.kind == "edge" {
            "edge"
        } else {
            "standalone"
        },
        now_ms: now,
        measured_ms: now,
        totals: Totals::of([&me], &|_| true),
        parts: None,
    };
    respond(&answer, &q, &headers)
}

/// Hand this edge's figures to the root links every `every` until
/// `shutdown`.
pub async fn run_reporter(
    shared: Arc<Shared>,
    every: Duration,
    out: broadcast::Sender<Arc<Part>>,
    shutdown: CancellationToken,
) {
    let mut every = herald_engine::task::Every::new(every);
    while every.tick(&shutdown).await {
        // No link connected: nobody to tell; the next tick tries again.
        let _ = out.send(Arc::new(part(&shared, now_ms())));
    }
}
