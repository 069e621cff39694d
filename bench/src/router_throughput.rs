//! `herald-bench router-throughput`: how many publications per second one `herald-router`
//! validates and forwards, and what CPU that costs it.
//!
//! 1. A run with names of its own ([`crate::harness::run`]); the router is started on them with a
//!    generated configuration, and is ready once its `/readyz` says it has declared them.
//! 2. An edges queue is declared and bound to the edges exchange, as an edge would, so every
//!    forward is routed, and the bench consumes it (large prefetch, acks `multiple`).
//! 3. P publishers (a connection each) publish the N publications to the router's exchange as
//!    fast as the broker takes them: batches handed over without waiting, confirms awaited in
//!    a sliding window.
//! 4. The clock runs from the first publish to the moment the edges consumer has seen all N
//!    (distinct) publications; the router's CPU time (`/proc/PID/stat`) over the same window
//!    gives publications per CPU-second, which is the per-core figure. The router's context
//!    switches (`/proc/PID/task/*/status`) over the window say how often its threads handed
//!    work to each other.
//! 5. The router is stopped (SIGTERM) and everything the run declared is deleted.
//!
//! # Layout
//! [`args`] (the command line), [`measure`](mod@measure) (one run in phases), [`traffic`] (the publishers
//! and the edges consumer), [`report`] (the result and the router's context switches).

mod args;
mod measure;
mod report;
mod traffic;

pub(crate) use self::args::RouterThroughputArgs;

use self::measure::{measure, start_router};
use crate::harness::configs;
use crate::harness::cpu;
use crate::harness::interrupt::interruptible;
use crate::harness::outcome::{BenchError, Outcome};
use crate::harness::run::Run;

/// Checks the arguments before anything starts.
fn validate(args: &RouterThroughputArgs) -> Result<(), String> {
    if args.messages == 0 {
        return Err("--messages must be at least 1".into());
    }
    if args.publishers == 0 || args.publishers as u64 > args.messages {
        return Err("--publishers must be between 1 and --messages".into());
    }
    if args.batch == 0 || args.confirm_window < args.batch {
        return Err("--batch must be at least 1 and --confirm-window at least --batch".into());
    }
    if args.payload_bytes > 1024 * 1024 {
        return Err("--payload-bytes must be at most 1 MiB (the router's default limit)".into());
    }
    if args.consumer_prefetch < 4 {
        return Err("--consumer-prefetch must be at least 4".into());
    }
    Ok(())
}

pub(crate) async fn run(args: RouterThroughputArgs) -> Result<Outcome, BenchError> {
    validate(&args).map_err(BenchError::Usage)?;
    let load_before = cpu::load_average();
    let mut run = Run::begin(&args.amqp_url).await?;
    let edges_queue = configs::edge_queue(&run.id);
    run.add_queue(edges_queue.clone());
    eprintln!(
        "herald-bench: run {}: exchange {}, edges queue {edges_queue}",
        run.id, run.topology.exchange
    );

    let mut router = None;
    if !args.prefill {
        match interruptible(start_router(&args, &run)).await {
            Ok(r) => router = Some(r),
            Err(e) => {
                run.finish(Vec::new()).await;
                return Err(e);
            }
        }
    }
    let measured = interruptible(measure(&args, &run, &edges_queue, &mut router)).await;
    let cleanup = run
        .finish(router.into_iter().map(|r| ("router", r)).collect())
        .await;
    let mut report = measured?;
    report.load_after = cpu::load_average();
    report.load_before = load_before;
    report.cleanup = cleanup;
    Ok(crate::harness::report::emit(
        &report,
        || report.human(),
        report.complete,
        args.json,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> RouterThroughputArgs {
        use clap::Parser as _;
        let mut argv = vec!["herald-bench", "router-throughput", "--router-bin", "r"];
        argv.extend_from_slice(extra);
        match crate::cli::Cli::try_parse_from(argv).unwrap().command {
            crate::cli::Command::RouterThroughput(a) => a,
            _ => unreachable!(),
        }
    }

    #[test]
    fn arguments_are_checked_before_anything_starts() {
        assert_eq!(validate(&args(&[])), Ok(()));
        assert!(validate(&args(&["--messages", "0"])).is_err());
        assert!(validate(&args(&["--messages", "3", "--publishers", "4"])).is_err());
        assert!(validate(&args(&["--publishers", "0"])).is_err());
        assert!(validate(&args(&["--batch", "600", "--confirm-window", "500"])).is_err());
        assert!(validate(&args(&["--payload-bytes", "2000000"])).is_err());
        assert!(validate(&args(&["--consumer-prefetch", "2"])).is_err());
    }
}
