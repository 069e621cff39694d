//! The large-message scenario on one system: a fresh server, `--large-sessions` sessions of a
//! broadcast audience, then one notification of `--large-bytes` to all of them. Figures: the
//! server's peak memory growth while it delivers (its summed PSS sampled every
//! [`SAMPLE_EVERY`] from before the publication until the last arrival, against the settled
//! reading before), and the time from the publication until every session has it intact
//! (its full length, its padding unchanged).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::args::CompareArgs;
use super::audience::Audience;
use super::ramp::{self, Arrivals, Lanes};
use super::system::{Server, System};
use crate::harness::clock::Clock;
use crate::harness::cpu;
use crate::harness::outcome::BenchError;
use crate::harness::proctree;

/// How often the server's memory is read while it delivers.
const SAMPLE_EVERY: Duration = Duration::from_millis(10);
/// How often the arrivals are checked.
const POLL: Duration = Duration::from_millis(5);

/// One large-message run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct LargeRun {
    pub(crate) system: System,
    pub(crate) round: usize,
    pub(crate) sessions: usize,
    pub(crate) bytes: usize,
    /// Sessions that got it whole.
    pub(crate) delivered: u64,
    /// Deliveries that arrived cut or changed.
    pub(crate) damaged: u64,
    pub(crate) lost: u64,
    /// From the publication to the last intact arrival (or the drain's end).
    pub(crate) seconds_until_all: f64,
    pub(crate) pss_before_bytes: u64,
    pub(crate) pss_peak_bytes: u64,
    pub(crate) peak_growth_bytes: u64,
    pub(crate) server_cpu_seconds: f64,
    pub(crate) load_before: Option<f64>,
    pub(crate) server_command: String,
}

/// Runs the scenario on a fresh `system`.
pub(crate) async fn run(
    system: System,
    args: &CompareArgs,
    round: usize,
) -> Result<LargeRun, BenchError> {
    Server::with_fresh(system, args, &format!("large-r{round}"), async |server| {
        measure(server, args, round).await
    })
    .await
}

async fn measure(
    server: &Server,
    args: &CompareArgs,
    round: usize,
) -> Result<LargeRun, BenchError> {
    let sessions = args.large_sessions;
    let sockets = ramp::open_sessions(server, Audience::Broadcast, sessions).await?;
    let clock = Clock::new();
    let arrivals = Arrivals::new(args.large_bytes);
    let cancel = CancellationToken::new();
    let _readers = ramp::start_readers(
        sockets,
        ramp::framing(server.system),
        clock,
        &arrivals,
        &cancel,
    );
    let mut lanes = Lanes::open(server, 1).await?;
    let load_before = cpu::load_average();
    let before = server.settled_pss().await?;
    let cpu_before = server.cpu()?;

    // Sample the memory from now until told to stop.
    let peak = Arc::new(AtomicU64::new(before.bytes));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (peak, sampling) = (peak.clone(), sampling.clone());
        let root = server.pids()[0];
        tokio::spawn(async move {
            while sampling.load(Ordering::Relaxed) {
                if let Ok(pss) = proctree::pss(root) {
                    peak.fetch_max(pss, Ordering::Relaxed);
                }
                tokio::time::sleep(SAMPLE_EVERY).await;
            }
        })
    };
    let started = Instant::now();
    let published = ramp::publish_one(server, &mut lanes, clock, args.large_bytes).await;
    let drain = Duration::from_secs(args.drain_timeout);
    let mut last_change = Instant::now();
    let mut last_count = 0;
    let mut last_arrival = Duration::ZERO;
    loop {
        let count = arrivals.count.load(Ordering::Relaxed);
        let damaged = arrivals.damaged.load(Ordering::Relaxed);
        if count + damaged != last_count {
            (last_count, last_change) = (count + damaged, Instant::now());
            if count > 0 {
                last_arrival = started.elapsed();
            }
        }
        if count + damaged >= sessions as u64 || last_change.elapsed() >= drain {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    sampling.store(false, Ordering::Relaxed);
    let _ = sampler.await;
    let cpu_used = server.cpu()?.since(&cpu_before).total();
    lanes.close().await;
    cancel.cancel();
    if let Err(why) = published {
        return Err(BenchError::Failed(format!(
            "{}: the large message was not accepted: {why}",
            server.system.name()
        )));
    }
    let delivered = arrivals.count.load(Ordering::Relaxed);
    let damaged = arrivals.damaged.load(Ordering::Relaxed);
    let pss_peak = peak.load(Ordering::Relaxed);
    Ok(LargeRun {
        system: server.system,
        round,
        sessions,
        bytes: args.large_bytes,
        delivered,
        damaged,
        lost: (sessions as u64).saturating_sub(delivered + damaged),
        seconds_until_all: last_arrival.as_secs_f64(),
        pss_before_bytes: before.bytes,
        pss_peak_bytes: pss_peak,
        peak_growth_bytes: pss_peak.saturating_sub(before.bytes),
        server_cpu_seconds: cpu_used,
        load_before,
        server_command: server.command.clone(),
    })
}
