//! Publishing a [`Plan`] over the HTTP API as fast as Herald takes it: `connections`
//! keep-alive connections, each sending one batch at a time (`POST /v1/notifications` with a
//! JSON array) and taking the next batch number from a shared counter, so the connections
//! stay busy until the plan is done and the batches go out roughly in due order.
//!
//! A batch is built right before it is sent (the bench never holds the plan in memory). A
//! batch that fails on the wire (connection closed, timeout) is sent again on a fresh
//! connection, up to [`ATTEMPTS`] times; a resubmitted id is answered as a duplicate, which the
//! report counts. A batch answered with an error status is not retried: its notifications are
//! counted as refused under the status and Herald's error message.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::task::JoinSet;

use super::body;
use super::plan::{Plan, Users};
use crate::client::api::ApiConnection;
use crate::harness::stats::Summary;

/// Tries per batch on a failing connection.
const ATTEMPTS: usize = 3;
/// Pause before sending a batch again.
const RETRY_PAUSE: Duration = Duration::from_millis(200);
/// The publish endpoint.
const PATH: &str = "/v1/notifications";

/// How to publish.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) addr: SocketAddr,
    pub(crate) api_key: String,
    pub(crate) connections: usize,
    pub(crate) batch: u64,
    pub(crate) payload_bytes: usize,
    /// Keep `(seq, due_at_ms)` of every notification (for delivery scenarios).
    pub(crate) keep_dues: bool,
    /// The topic every notification names (`None`: no topic).
    pub(crate) topic: Option<String>,
    /// `browsers: false` on every notification (callback-only: needs a topic that calls back).
    pub(crate) callback_only: bool,
}

/// Counts shared with the caller while publishing (for progress lines).
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// Notifications answered (accepted, duplicate or refused).
    pub(crate) answered: AtomicU64,
    /// Set to stop the publishers after their current batch.
    pub(crate) stop: AtomicBool,
}

/// What publishing a plan gave.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Ingested {
    pub(crate) notifications: u64,
    pub(crate) requests: u64,
    pub(crate) accepted: u64,
    pub(crate) duplicates: u64,
    /// Notifications in batches refused or lost, by reason.
    pub(crate) refused: BTreeMap<String, u64>,
    /// Batches sent again after a connection failure.
    pub(crate) retries: u64,
    /// `due_at_ms` that differed from the `deliver_at` asked.
    pub(crate) due_mismatches: u64,
    /// From the first request to the last answer.
    pub(crate) seconds: f64,
    /// `accepted / seconds`.
    pub(crate) rate: f64,
    /// Time from writing a batch to its answer.
    pub(crate) request_latency: Option<Summary>,
    /// `(seq, due_at_ms)` per accepted notification, when kept, in no particular order.
    #[serde(skip)]
    pub(crate) dues: Vec<(u64, u64)>,
}

/// One connection's share.
#[derive(Debug, Default)]
struct Share {
    requests: u64,
    accepted: u64,
    duplicates: u64,
    refused: BTreeMap<String, u64>,
    retries: u64,
    due_mismatches: u64,
    latencies: Vec<u64>,
    dues: Vec<(u64, u64)>,
}

/// Publishes every notification of `plan`; returns once all are answered (or `progress.stop`).
pub(crate) async fn publish(
    settings: &Settings,
    plan: Plan,
    users: Arc<Users>,
    progress: Arc<Progress>,
) -> Ingested {
    let next = Arc::new(AtomicU64::new(0));
    let batches = plan.batches(settings.batch);
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for _ in 0..settings.connections.max(1) {
        let (next, users, progress, settings) = (
            next.clone(),
            users.clone(),
            progress.clone(),
            settings.clone(),
        );
        tasks.spawn(async move {
            let mut conn = ApiConnection::new(settings.addr, &settings.api_key);
            let mut share = Share::default();
            loop {
                if progress.stop.load(Ordering::Relaxed) {
                    break;
                }
                let b = next.fetch_add(1, Ordering::Relaxed);
                if b >= batches {
                    break;
                }
                let seqs = plan.batch(b, settings.batch);
                let n = seqs.clone().count() as u64;
                let body = body::batch(
                    &plan,
                    seqs.clone(),
                    &users,
                    settings.payload_bytes,
                    settings.topic.as_deref(),
                    settings.callback_only,
                );
                send(&mut conn, &plan, seqs, &body, &settings, &mut share).await;
                progress.answered.fetch_add(n, Ordering::Relaxed);
            }
            share
        });
    }
    let mut out = Ingested {
        notifications: plan.count,
        ..Ingested::default()
    };
    let mut latencies = Vec::with_capacity(batches as usize);
    while let Some(joined) = tasks.join_next().await {
        let share = match joined {
            Ok(s) => s,
            Err(e) => {
                *out.refused
                    .entry(format!("publisher task: {e}"))
                    .or_default() += 1;
                continue;
            }
        };
        out.requests += share.requests;
        out.accepted += share.accepted;
        out.duplicates += share.duplicates;
        out.retries += share.retries;
        out.due_mismatches += share.due_mismatches;
        for (reason, n) in share.refused {
            *out.refused.entry(reason).or_default() += n;
        }
        latencies.extend(share.latencies);
        out.dues.extend(share.dues);
    }
    out.seconds = started.elapsed().as_secs_f64();
    out.rate = out.accepted as f64 / out.seconds.max(1e-9);
    out.request_latency = Summary::of(&mut latencies);
    out
}

/// Sends one batch (retrying on connection failures) and counts its answer in `share`.
async fn send(
    conn: &mut ApiConnection,
    plan: &Plan,
    seqs: std::ops::Range<u64>,
    batch: &[u8],
    settings: &Settings,
    share: &mut Share,
) {
    let n = seqs.clone().count() as u64;
    let mut last_error = String::new();
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            share.retries += 1;
            tokio::time::sleep(RETRY_PAUSE).await;
        }
        let sent = Instant::now();
        let response = match conn.post_json(PATH, batch).await {
            Ok(r) => r,
            Err(e) => {
                last_error = format!("connection: {:?}", e.kind());
                continue;
            }
        };
        share.requests += 1;
        share
            .latencies
            .push(u64::try_from(sent.elapsed().as_nanos()).unwrap_or(u64::MAX));
        if response.status != 202 {
            *share
                .refused
                .entry(refusal(response.status, &response.body))
                .or_default() += n;
            return;
        }
        match body::answer(&response.body, plan, seqs) {
            Ok(a) => {
                share.accepted += a.accepted;
                share.duplicates += a.duplicates;
                share.due_mismatches += a.due_mismatches;
                if settings.keep_dues {
                    share.dues.extend(a.dues);
                }
            }
            Err(e) => *share.refused.entry(e).or_default() += n,
        }
        return;
    }
    *share
        .refused
        .entry(format!("{last_error} ({ATTEMPTS} attempts)"))
        .or_default() += n;
}

/// A refusal's reason: the status and Herald's error code and field (`{"error":{...}}`), not
/// the message, so that reasons stay few.
fn refusal(status: u16, body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Error {
        code: Option<String>,
        field: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct Body {
        error: Error,
    }
    match serde_json::from_slice::<Body>(body) {
        Ok(Body { error }) => {
            let code = error.code.unwrap_or_else(|| "?".into());
            match error.field {
                // `[3].delay_ms` and `[4].delay_ms` are one reason.
                Some(f) => {
                    let f = f.split_once("].").map_or(f.as_str(), |(_, rest)| rest);
                    format!("http {status} {code} ({f})")
                }
                None => format!("http {status} {code}"),
            }
        }
        Err(_) => format!("http {status}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_name_status_code_and_field() {
        assert_eq!(
            refusal(
                422,
                br#"{"error":{"code":"invalid","field":"[3].deliver_at","message":"x"}}"#
            ),
            "http 422 invalid (deliver_at)"
        );
        assert_eq!(
            refusal(
                503,
                br#"{"error":{"code":"unavailable","message":"the store"}}"#
            ),
            "http 503 unavailable"
        );
        assert_eq!(refusal(502, b"<html>"), "http 502");
    }
}
