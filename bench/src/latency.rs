//! `herald-bench latency`: the time from an AMQP publish to the router's exchange to the STOMP
//! `MESSAGE` on a browser session, through `herald-router` and an edge `herald-gateway`.
//!
//! 1. A run with names of its own ([`crate::harness::run`]): the router on them, and one gateway in edge
//!    mode (its `edge.exchange` the run's edges exchange, `--edge-id` the run id), ready once
//!    its queue on the broker has a consumer.
//! 2. M STOMP-over-WebSocket sessions on the gateway (the bench's own session code), one user
//!    each, every one reading and parsing what it receives.
//! 3. One publisher publishes at a fixed rate ([`crate::harness::pacing`]) for the given seconds;
//!    publication k goes to user k % M, with confirms awaited off the sending path. Its message
//!    id is `lat-{k}-{ns}`, ns being the publish time on a monotonic clock that the sessions,
//!    in the same process, read too ([`traffic::Clock`]); the gateway passes the id on as the
//!    `message-id` header, so each `MESSAGE` yields one latency sample.
//! 4. After the last publication the bench waits until every publication has arrived, or until
//!    nothing has arrived for `--drain-timeout`, and counts the missing.
//! 5. Exact percentiles over every sample ([`crate::harness::stats`]), then the processes are stopped and
//!    everything the run declared is deleted.
//!
//! The timestamp is taken when the message is handed to the AMQP client, not when it was
//! scheduled; if the publisher falls behind its schedule, the report says by how much (the
//! latency of a late publication does not include its lateness).
//!
//! # Layout
//! [`args`] (the command line), [`measure`](mod@measure) (one run in phases: set up, run, collect, report),
//! [`traffic`] (the clock, the publisher on its schedule, each session's reader), [`report`]
//! (the result).

mod args;
mod measure;
mod report;
mod traffic;

pub(crate) use self::args::LatencyArgs;

use std::time::Duration;

use self::measure::measure;
use crate::harness::configs;
use crate::harness::cpu;
use crate::harness::interrupt::interruptible;
use crate::harness::outcome::{BenchError, Outcome};
use crate::harness::run::Run;
use crate::harness::service::Service;
use crate::harness::token::random_token;

/// Checks the arguments before anything starts.
fn validate(args: &LatencyArgs) -> Result<(), String> {
    if args.rate == 0 || args.seconds == 0 {
        return Err("--rate and --seconds must be at least 1".into());
    }
    if args.sessions == 0 || args.sessions > 10_000 {
        return Err("--sessions must be between 1 and 10,000 (they live in this process)".into());
    }
    if args.payload_bytes > 64 * 1024 {
        return Err("--payload-bytes must be at most 64 KiB".into());
    }
    Ok(())
}

pub(crate) async fn run(args: LatencyArgs) -> Result<Outcome, BenchError> {
    validate(&args).map_err(BenchError::Usage)?;
    if let Err(e) = crate::harness::sys::raise_nofile_limit() {
        eprintln!("herald-bench: cannot raise RLIMIT_NOFILE ({e}); continuing");
    }
    let load_before = cpu::load_average();
    let mut run = Run::begin(&args.amqp_url).await?;
    let edge_queue = configs::edge_queue(&run.id);
    run.add_queue(edge_queue.clone());
    eprintln!(
        "herald-bench: run {}: exchange {}, edge {} (queue {edge_queue})",
        run.id, run.topology.exchange, run.id
    );
    let jwt_secret = random_token(48);
    let mut services: Vec<(&'static str, Service)> = Vec::new();
    let started = interruptible(start_services(&args, &run, &jwt_secret)).await;
    let measured = match started {
        Ok((router, gateway)) => {
            services.push(("gateway", gateway));
            services.push(("router", router));
            interruptible(measure(&args, &run, &jwt_secret, &mut services)).await
        }
        Err(e) => Err(e),
    };
    let cleanup = run.finish(services).await;
    let mut report = measured?;
    report.load_before = load_before;
    report.load_after = cpu::load_average();
    report.cleanup = cleanup;
    Ok(crate::harness::report::emit(
        &report,
        || report.human(),
        report.complete,
        args.json,
    ))
}

/// The router, then the edge gateway; ready once the edge's queue has its consumer.
async fn start_services(
    args: &LatencyArgs,
    run: &Run,
    jwt_secret: &str,
) -> Result<(Service, Service), BenchError> {
    let timeout = Duration::from_secs(args.startup_timeout);
    let router = run
        .start_router(
            &args.router_bin,
            args.prefetch,
            args.router_log.as_deref(),
            timeout,
        )
        .await?;
    eprintln!(
        "herald-bench: router pid {} on {}",
        router.pid(),
        router.addr
    );
    let gateway = run
        .start_edge(
            &args.gateway_bin,
            jwt_secret,
            args.gateway_log.as_deref(),
            timeout,
        )
        .await;
    match gateway {
        Ok(gateway) => {
            eprintln!(
                "herald-bench: edge gateway pid {} on {}",
                gateway.pid(),
                gateway.addr
            );
            Ok((router, gateway))
        }
        Err(e) => {
            router.stop().await;
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> LatencyArgs {
        use clap::Parser as _;
        let mut argv = vec![
            "herald-bench",
            "latency",
            "--router-bin",
            "r",
            "--gateway-bin",
            "g",
        ];
        argv.extend_from_slice(extra);
        match crate::cli::Cli::try_parse_from(argv).unwrap().command {
            crate::cli::Command::Latency(a) => a,
            _ => unreachable!(),
        }
    }

    #[test]
    fn arguments_are_checked_before_anything_starts() {
        assert_eq!(validate(&args(&[])), Ok(()));
        assert!(validate(&args(&["--rate", "0"])).is_err());
        assert!(validate(&args(&["--seconds", "0"])).is_err());
        assert!(validate(&args(&["--sessions", "0"])).is_err());
        assert!(validate(&args(&["--sessions", "20000"])).is_err());
        assert!(validate(&args(&["--payload-bytes", "100000"])).is_err());
    }
}
