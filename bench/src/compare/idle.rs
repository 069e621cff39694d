//! The idle scenario on one system and one session count: a fresh server, its memory and CPU
//! read, N sessions (one user each) opened by worker processes as `herald-bench connections`
//! opens them, then the connect rate, the server CPU they cost and its memory per session.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::args::CompareArgs;
use super::system::{Server, System};
use crate::harness::cpu;
use crate::harness::opening::{Totals, WorkerState, close, connect};
use crate::harness::outcome::BenchError;
use crate::harness::plan;
use crate::harness::token::random_token;
use crate::harness::workers::{WorkerCommand, Workers};

/// Handshakes in flight per worker.
const CONCURRENCY: usize = 256;
/// Seconds one session may take to open.
const HANDSHAKE_TIMEOUT_SECS: u64 = 60;
/// Tokens outlive the run.
const TOKEN_TTL: Duration = Duration::from_secs(3600);
/// Worker lines read but not yet taken in.
const QUEUE: usize = 256;

/// One idle run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct IdleRun {
    pub(crate) system: System,
    pub(crate) round: usize,
    pub(crate) sessions: usize,
    pub(crate) opened: u64,
    pub(crate) failed: u64,
    pub(crate) failures: BTreeMap<String, u64>,
    /// From the first handshake started to the last one finished.
    pub(crate) connect_seconds: f64,
    pub(crate) connect_rate: f64,
    /// CPU its processes used from before the first session to after the last.
    pub(crate) server_cpu_seconds: f64,
    pub(crate) cpu_per_session_us: f64,
    /// The kernel's part of `cpu_per_session_us` (`stime`); None in runs from before the
    /// bench split it.
    #[serde(default)]
    pub(crate) kernel_cpu_per_session_us: Option<f64>,
    pub(crate) pss_before_bytes: u64,
    pub(crate) pss_after_bytes: u64,
    pub(crate) pss_settled: bool,
    pub(crate) bytes_per_session: f64,
    pub(crate) server_processes: usize,
    pub(crate) load_before: Option<f64>,
    pub(crate) server_command: String,
}

/// Measures `sessions` idle sessions on a fresh `system`.
pub(crate) async fn run(
    system: System,
    args: &CompareArgs,
    round: usize,
    sessions: usize,
) -> Result<IdleRun, BenchError> {
    let label = format!("idle-{sessions}-r{round}");
    Server::with_fresh(system, args, &label, async |server| {
        measure(server, round, sessions, args.pipelined).await
    })
    .await
}

async fn measure(
    server: &Server,
    round: usize,
    sessions: usize,
    pipelined: bool,
) -> Result<IdleRun, BenchError> {
    let load_before = cpu::load_average();
    let plans = plan::plan(sessions, None, &[], IpAddr::V4(Ipv4Addr::LOCALHOST))
        .map_err(|e| BenchError::Usage(e.to_string()))?;
    let before = server.settled_pss().await?;
    let cpu_before = server.cpu()?;
    let url = server.session_url();
    // A peer without authentication gets no token: its sessions name their channel.
    let secret = server
        .jwt_secret()
        .map_or_else(|| random_token(32), str::to_owned);
    let command = WorkerCommand {
        url: &url,
        transport: server.system.transport().name(),
        concurrency: CONCURRENCY,
        handshake_timeout_secs: HANDSHAKE_TIMEOUT_SECS,
        token_ttl: TOKEN_TTL,
        record: false,
        pipelined,
        jwt_secret: &secret,
    };
    let mut workers: Vec<WorkerState> = plans.iter().cloned().map(WorkerState::new).collect();
    let mut processes = Workers::spawn(&command, &plans, QUEUE)?;
    connect(sessions, &mut workers, &mut processes).await;
    let cpu_delta = server.cpu()?.since(&cpu_before);
    let cpu_used = cpu_delta.total();
    let totals = Totals::of(&workers);
    let after = server.settled_pss().await?;
    let server_processes = server.pids().len();
    close(&mut workers, &mut processes).await;
    let opened = totals.opened;
    let per = |value: f64| {
        if opened == 0 {
            0.0
        } else {
            value / opened as f64
        }
    };
    Ok(IdleRun {
        system: server.system,
        round,
        sessions,
        opened,
        failed: totals.failed,
        failures: totals.failures,
        connect_seconds: totals.connect_seconds,
        connect_rate: if totals.connect_seconds > 0.0 {
            opened as f64 / totals.connect_seconds
        } else {
            0.0
        },
        server_cpu_seconds: cpu_used,
        cpu_per_session_us: per(cpu_used * 1e6),
        kernel_cpu_per_session_us: Some(per(cpu_delta.system_seconds * 1e6)),
        pss_before_bytes: before.bytes,
        pss_after_bytes: after.bytes,
        pss_settled: before.settled && after.settled,
        bytes_per_session: per(after.bytes.saturating_sub(before.bytes) as f64),
        server_processes,
        load_before,
        server_command: server.command.clone(),
    })
}
