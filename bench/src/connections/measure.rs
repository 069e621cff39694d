//! One run, in phases: the baseline RSS, the workers started, the connect phase until every
//! worker is ready, the settled RSS, the report, the hold, and the close with a deadline.

use std::time::Duration;

use super::args::ConnectionsArgs;
use super::gateway::SpawnedGateway;
use super::report::{ConnectionsReport, Memory};
use crate::harness::opening::{Totals, WorkerState, close, connect};
use crate::harness::outcome::{BenchError, Outcome};
use crate::harness::plan::WorkerPlan;
use crate::harness::rss::{self, Reading};
use crate::harness::workers::{WorkerCommand, Workers};

/// Tokens stay valid this long beyond the hold.
const TOKEN_SLACK: Duration = Duration::from_secs(3600);
/// Worker lines read but not yet taken in.
const QUEUE: usize = 256;

pub(super) async fn measure(
    args: &ConnectionsArgs,
    plans: &[WorkerPlan],
    jwt_secret: &str,
    gateway: Option<&SpawnedGateway>,
) -> Result<Outcome, BenchError> {
    let url = gateway.map_or_else(|| args.url(), |gw| gw.url(args.transport));
    let gateway_pid = gateway.map(SpawnedGateway::pid).or(args.gateway_pid);
    let baseline = match gateway_pid {
        Some(pid) => Some(settled_rss(pid).await?),
        None => None,
    };

    let mut workers: Vec<WorkerState> = plans.iter().cloned().map(WorkerState::new).collect();
    let mut processes = spawn_workers(args, plans, &url, jwt_secret)?;
    connect(args.sessions, &mut workers, &mut processes).await;
    let totals = Totals::of(&workers);
    let memory = match (gateway_pid, baseline) {
        (Some(pid), Some(before)) => Some(memory(pid, &before, totals.opened).await?),
        _ => None,
    };

    let opened = totals.opened;
    print_report(&report(args, plans.len(), url, totals, memory), args.json);
    hold(args.hold).await;
    close(&mut workers, &mut processes).await;
    Ok(if opened == args.sessions as u64 {
        Outcome::AllOpened
    } else {
        Outcome::SomeFailed
    })
}

async fn settled_rss(pid: u32) -> Result<Reading, BenchError> {
    rss::settled_rss(pid)
        .await
        .map_err(|e| BenchError::Failed(format!("cannot read RSS of pid {pid}: {e}")))
}

/// Starts one worker process per plan, each to open its share of the sessions on `url`.
fn spawn_workers(
    args: &ConnectionsArgs,
    plans: &[WorkerPlan],
    url: &str,
    jwt_secret: &str,
) -> Result<Workers, BenchError> {
    let command = WorkerCommand {
        url,
        transport: args.transport.name(),
        concurrency: args.concurrency,
        handshake_timeout_secs: args.handshake_timeout,
        token_ttl: Duration::from_secs(args.hold) + TOKEN_SLACK,
        record: false,
        pipelined: args.pipelined,
        jwt_secret,
    };
    Workers::spawn(&command, plans, QUEUE)
}

/// The gateway's settled RSS now against `before`, per opened session.
async fn memory(pid: u32, before: &Reading, opened: u64) -> Result<Memory, BenchError> {
    let after = settled_rss(pid).await?;
    Ok(Memory::new(
        pid,
        before.bytes,
        after.bytes,
        before.settled && after.settled,
        opened,
    ))
}

fn report(
    args: &ConnectionsArgs,
    processes: usize,
    url: String,
    totals: Totals,
    memory: Option<Memory>,
) -> ConnectionsReport {
    ConnectionsReport {
        command: "connections",
        transport: args.transport.name(),
        url,
        processes,
        sessions_requested: args.sessions as u64,
        sessions_opened: totals.opened,
        sessions_failed: totals.failed,
        failures: totals.failures,
        connect_seconds: totals.connect_seconds,
        connect_rate: ConnectionsReport::connect_rate(totals.opened, totals.connect_seconds),
        memory,
    }
}

fn print_report(report: &ConnectionsReport, json: bool) {
    if json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.to_text());
    }
}

/// Keeps the sessions open for `seconds`, or until Ctrl-C or SIGTERM.
async fn hold(seconds: u64) {
    if seconds > 0 {
        eprintln!("herald-bench: holding the sessions for {seconds} s");
        let interrupt = crate::harness::interrupt::interrupt();
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(seconds)) => {}
            _ = interrupt.cancelled() => eprintln!("herald-bench: interrupted; closing"),
        }
    }
}
