//! One run of `herald-bench retained`, in phases: sessions, warm-up, baseline, publish, arrival,
//! reading, report.

use std::time::Duration;

use super::args::RetainedArgs;
use super::publish::{Publisher, publish};
use super::report::{Memory, Report};
use crate::fleet::Fleet;
use crate::harness::outcome::BenchError;
use crate::harness::plan;
use crate::harness::rss;
use crate::harness::standalone::Gateway;
use crate::harness::token::user_id;

/// How long the sessions' tokens stay valid: longer than any run.
const TOKEN_TTL: Duration = Duration::from_secs(6 * 3600);
/// Time between two looks at the sessions' arrival counts.
const ARRIVAL_POLL: Duration = Duration::from_millis(100);

/// The gateway's `VmRSS` once it settles, and its `RssAnon` then.
async fn memory(pid: u32) -> Result<Memory, BenchError> {
    let failed = |e: std::io::Error| BenchError::Failed(format!("reading the gateway's RSS: {e}"));
    let reading = rss::settled_rss(pid).await.map_err(failed)?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(failed)?;
    Ok(Memory {
        rss: reading.bytes,
        anon: rss::parse_status_bytes(&status, "RssAnon").unwrap_or_default(),
        settled: reading.settled,
    })
}

/// Waits until the sessions have received `target` bench messages in all, or `timeout` passes
/// without a new one; returns how many they received.
async fn arrivals(
    fleet: &mut Fleet,
    gateway: &mut Gateway,
    target: u64,
    timeout: Duration,
) -> Result<u64, BenchError> {
    let mut last = fleet.received();
    let mut quiet_since = tokio::time::Instant::now();
    loop {
        fleet.pump();
        let got = fleet.received();
        if got >= target {
            return Ok(got);
        }
        if let Some(why) = gateway.exited() {
            return Err(BenchError::Failed(why));
        }
        if fleet.any_exited() {
            return Err(BenchError::Failed("a worker exited".into()));
        }
        if got != last {
            last = got;
            quiet_since = tokio::time::Instant::now();
        } else if quiet_since.elapsed() >= timeout {
            eprintln!("herald-bench: {got} of {target} arrived; none for {timeout:?}");
            return Ok(got);
        }
        tokio::time::sleep(ARRIVAL_POLL).await;
    }
}

pub(super) async fn measure(a: &RetainedArgs, gateway: &mut Gateway) -> Result<Report, BenchError> {
    let plans = plan::plan(a.users, a.processes, &[], gateway.addr.ip())
        .map_err(|e| BenchError::Usage(e.to_string()))?;
    let users: Vec<String> = plans
        .iter()
        .flat_map(|p| (0..p.sessions).map(move |n| user_id(p.index, n)))
        .collect();
    let mut fleet = Fleet::spawn(
        &plans,
        gateway.addr,
        &gateway.jwt_secret,
        Duration::from_secs(a.handshake_timeout),
        TOKEN_TTL,
    )?;
    fleet.wait_ready(a.users).await?;
    eprintln!(
        "herald-bench: {} subscribed sessions over {} processes",
        a.users,
        plans.len()
    );
    let publisher = Publisher {
        addr: gateway.addr,
        api_key: gateway.api_key.clone(),
        path: a.path,
        payload: a.payload,
        connections: a.connections,
    };
    let drain = Duration::from_secs(a.drain_timeout);
    let warm = (a.users * a.warmup) as u64;
    let (warmed, warm_problem) = publish(&publisher, &users, 0, warm).await;
    arrivals(&mut fleet, gateway, warm, drain).await?;
    let before = memory(gateway.pid()).await?;
    eprintln!(
        "herald-bench: baseline {} RSS; publishing {} notifications",
        rss::human_bytes(before.rss as f64),
        a.users * a.per_user
    );
    let count = (a.users * a.per_user) as u64;
    let started = std::time::Instant::now();
    let (published, problem) = publish(&publisher, &users, warm, count).await;
    let publish_secs = started.elapsed().as_secs_f64();
    let received = arrivals(&mut fleet, gateway, warm + count, drain).await?;
    let after = memory(gateway.pid()).await?;
    let closed = fleet.close().await;
    if closed.foreign > 0 || closed.dropped > 0 {
        eprintln!(
            "herald-bench: {} foreign messages, {} sessions dropped by the gateway",
            closed.foreign, closed.dropped
        );
    }
    let mut report = Report {
        run_id: gateway.run_id.clone(),
        gateway_bin: a.gateway_bin.display().to_string(),
        gateway_pid: gateway.pid(),
        path: a.path,
        users: a.users,
        per_user: a.per_user,
        warmup: a.warmup,
        payload: a.payload,
        connections: a.connections,
        notifications: count,
        accepted: warmed.accepted + published.accepted,
        refused: warmed.refused + published.refused,
        problem: warm_problem.or(problem),
        received,
        publish_secs,
        before,
        after,
        rss_per_notification: 0.0,
        anon_per_notification: 0.0,
        goal_bytes: 0,
        goal_met: false,
        complete: false,
        gateway_stopped: String::new(),
    };
    report.derive();
    if closed.dropped > 0 {
        report.complete = false;
    }
    Ok(report)
}
