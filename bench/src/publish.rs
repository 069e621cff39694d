//! `herald-bench publish`: what the HTTP publish path costs a standalone `herald-gateway`,
//! in server CPU per notification, with no session to deliver to: one notification per
//! request or batches (`--batch`), one request in flight per keep-alive connection or several
//! (`--depth`, HTTP/1.1 pipelining), and against the build before a change in the same run
//! (`--baseline-gateway-bin`, alternated A B, B A, ... round by round).
//!
//! The notifications go to users nobody holds (`nobody-N`): the gateway reads, authorizes,
//! parses and validates each request, routes its notifications to no mailbox, and answers
//! `202` with their ids. The server CPU is the gateway's `utime + stime` over the measured
//! requests, from `/proc`; `--warmup` requests before them are not counted. For instruction
//! counts, give a wrapper script that execs `valgrind --tool=callgrind` as the binary.
//!
//! # Layout
//! - [`args`]: the command line, checked (pure).
//! - [`requests`]: the requests (pure) and one connection sending its share.
//! - [`report`]: the figures, medians, ratios.
//!
//! Imports go one way: this module -> `requests` | `report` -> `args`.

pub(crate) mod args;
pub(crate) mod report;
pub(crate) mod requests;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) use self::args::PublishArgs;

use self::report::{Report, Run, Settings};
use self::requests::{Shape, Tally};
use crate::harness::cpu::{load_average, read_cpu};
use crate::harness::interrupt::{INTERRUPTED, interrupt, interruptible};
use crate::harness::outcome::{BenchError, Outcome};
use crate::harness::standalone::{Gateway, Launch};

pub(crate) async fn run(args: PublishArgs) -> Result<Outcome, BenchError> {
    args.check().map_err(BenchError::Usage)?;
    // Listen for Ctrl-C and SIGTERM before a gateway is started.
    interrupt();
    let settings = Settings {
        body: args.body,
        batch: args.batch,
        notifications: args.notifications,
        warmup: args.warmup,
        connections: args.connections,
        depth: args.depth,
        payload: args.payload,
        users: args.users,
        rounds: args.rounds,
    };
    let mut runs = Vec::new();
    let mut problems = Vec::new();
    for round in 1..=args.rounds {
        let mut order = vec![("herald", args.gateway_bin.as_path())];
        if let Some(baseline) = &args.baseline_gateway_bin {
            order.push(("baseline", baseline.as_path()));
            if round % 2 == 0 {
                order.reverse();
            }
        }
        for (label, bin) in order {
            eprintln!(
                "herald-bench publish: round {round}, {label} ({})",
                bin.display()
            );
            match one_run(&args, label, bin, round).await {
                Ok(run) => runs.push(run),
                Err(BenchError::Failed(why)) if why != INTERRUPTED => {
                    problems.push(format!("{label} round {round}: {why}"));
                }
                Err(e) => return Err(e),
            }
        }
    }
    let report = Report::new(settings, runs, problems);
    Ok(crate::harness::report::emit(
        &report,
        || report.human(),
        report.complete,
        args.json,
    ))
}

/// Starts `bin`, warms it up, measures, stops it (and removes its files), Ctrl-C or not.
async fn one_run(
    args: &PublishArgs,
    label: &'static str,
    bin: &std::path::Path,
    round: usize,
) -> Result<Run, BenchError> {
    let log = args
        .log_dir
        .as_ref()
        .map(|dir| dir.join(format!("{label}-{round}.log")));
    let gateway = Gateway::start(&Launch {
        bin,
        log: log.as_deref(),
        startup_timeout: Duration::from_secs(args.startup_timeout),
    })
    .await?;
    let measured = interruptible(measure(args, &gateway)).await;
    let command = gateway.command();
    let stopped = gateway.finish().await;
    let (tally, seconds, cpu, load_before) = measured?;
    let requests = (args.notifications / args.batch) as u64;
    let notifications = tally.accepted * args.batch as u64;
    Ok(Run {
        label,
        round,
        command,
        load_before,
        seconds,
        requests,
        notifications,
        refused: tally.refused,
        first_refusal: tally.first_refusal,
        server_cpu_seconds: cpu,
        cpu_us_per_notification: cpu * 1e6 / args.notifications as f64,
        cpu_us_per_request: cpu * 1e6 / requests as f64,
        notifications_per_second: notifications as f64 / seconds,
        gateway_stopped: stopped,
    })
}

/// The warm-up, then the measured requests: what they came to, their wall time, the gateway's
/// CPU over them, and the load average before.
async fn measure(
    args: &PublishArgs,
    gateway: &Gateway,
) -> Result<(Tally, f64, f64, Option<f64>), BenchError> {
    let shape = Shape {
        addr: gateway.addr,
        api_key: gateway.api_key.clone(),
        body: args.body,
        batch: args.batch,
        payload: args.payload,
        users: args.users,
    };
    let cycle = Arc::new(shape.cycle());
    let warmup = (args.warmup / args.batch) as u64;
    let warm = send_all(gateway.addr, &cycle, 0..warmup, args).await?;
    if warm.refused > 0 {
        return Err(BenchError::Failed(format!(
            "warm-up refused: {}",
            warm.first_refusal.unwrap_or_default()
        )));
    }
    let requests = (args.notifications / args.batch) as u64;
    let load_before = load_average();
    let cpu_failed = |e: std::io::Error| BenchError::Failed(format!("gateway CPU: {e}"));
    let before = read_cpu(gateway.pid()).map_err(cpu_failed)?;
    let started = Instant::now();
    let tally = send_all(gateway.addr, &cycle, warmup..warmup + requests, args).await?;
    let seconds = started.elapsed().as_secs_f64();
    let after = read_cpu(gateway.pid()).map_err(cpu_failed)?;
    Ok((tally, seconds, after.since(&before).total(), load_before))
}

/// Requests `range` of `cycle`, split in contiguous shares over `--connections` connections
/// at once.
async fn send_all(
    addr: SocketAddr,
    cycle: &Arc<Vec<Vec<u8>>>,
    range: std::ops::Range<u64>,
    args: &PublishArgs,
) -> Result<Tally, BenchError> {
    let count = range.end - range.start;
    let connections = args.connections as u64;
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..connections {
        let share =
            range.start + count * c / connections..range.start + count * (c + 1) / connections;
        let cycle = Arc::clone(cycle);
        let depth = args.depth;
        tasks.spawn(async move { requests::send(addr, &cycle, share, depth).await });
    }
    let mut total = Tally::default();
    while let Some(joined) = tasks.join_next().await {
        let tally = joined
            .map_err(|e| BenchError::Failed(format!("a publishing connection panicked: {e}")))?
            .map_err(BenchError::Failed)?;
        total.add(tally);
    }
    Ok(total)
}
