//! What the footprint compares before and after publishing: the store's bytes and the RSS of
//! each Herald process, and Herald's own metrics over its API.

use super::metrics::Scrape;
use super::report::Growth;
use crate::client::api::ApiConnection;
use crate::harness::outcome::BenchError;
use crate::harness::rss;
use crate::scheduled::system::{self, System};

/// `GET /metrics`, parsed. The connection sits idle between scrapes and the server may have
/// closed it meanwhile: a GET is idempotent, so a failed one is sent once more on a new
/// connection (as HTTP clients do with a stale keep-alive connection).
pub(super) async fn scrape(conn: &mut ApiConnection) -> Result<Scrape, BenchError> {
    let r = match conn.get("/metrics").await {
        Ok(r) => Ok(r),
        Err(_) => conn.get("/metrics").await,
    }
    .map_err(|e| BenchError::Failed(format!("GET /metrics: {e}")))?;
    if r.status != 200 {
        return Err(BenchError::Failed(format!(
            "GET /metrics: http {}",
            r.status
        )));
    }
    Ok(Scrape::parse(&String::from_utf8_lossy(&r.body)))
}

/// Byte counts the footprint compares: the store, and the RSS of each Herald process.
#[derive(Debug, Clone)]
pub(super) struct Snapshot {
    store: (u64, Option<u64>),
    rss: Vec<(&'static str, rss::Reading)>,
}

pub(super) async fn snapshot(system: &System) -> Result<Snapshot, BenchError> {
    let store = system
        .store_bytes()
        .await
        .map_err(|e| BenchError::Failed(format!("measuring the store: {e}")))?;
    let mut rss = Vec::new();
    for (name, pid) in system.pids() {
        let reading = rss::settled_rss(pid)
            .await
            .map_err(|e| BenchError::Failed(format!("RSS of the {name}: {e}")))?;
        rss.push((name, reading));
    }
    Ok(Snapshot { store, rss })
}

pub(super) fn growth(system: &System, before: &Snapshot, after: &Snapshot, n: u64) -> Vec<Growth> {
    let mut out = Vec::new();
    match &system.store {
        system::Store::Redis(_) => {
            out.push(Growth::new(
                "redis used_memory",
                before.store.0,
                after.store.0,
                n,
                true,
            ));
        }
        system::Store::Embedded(_) => {
            out.push(Growth::new(
                "embedded store on disk (allocated)",
                before.store.0,
                after.store.0,
                n,
                true,
            ));
            if let (Some(b), Some(a)) = (before.store.1, after.store.1) {
                out.push(Growth::new("embedded store files' length", b, a, n, true));
            }
        }
    }
    for ((name, b), (_, a)) in before.rss.iter().zip(&after.rss) {
        out.push(Growth::new(
            &format!("{name} RSS"),
            b.bytes,
            a.bytes,
            n,
            b.settled && a.settled,
        ));
    }
    out
}
