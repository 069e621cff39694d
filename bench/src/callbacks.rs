//! `herald-bench callbacks`: Herald's callbacks (`docs/callbacks.md`) against a local receiver,
//! beside BullMQ doing the same job on the same Redis, in the same run.
//!
//! A run of Herald starts a fresh Herald (a standalone `herald-gateway`, or a `herald-router`
//! with Redis: [`crate::scheduled::system`]), registers a topic whose `callback_url` is the
//! bench's receiver, publishes N delayed notifications of that topic over the HTTP API, and
//! waits for Herald to `POST` each to the receiver when due. A run of BullMQ starts
//! `bench/peers/bullmq/peer.js` ([`bullmq`]): a Queue that adds the same N as delayed jobs and a
//! Worker that makes the same signed `POST` to the same receiver. Runs alternate, Herald then
//! BullMQ, round after round, and the report gives each run's figures, each side's median and
//! spread, and the ratio of the two round by round.
//!
//! Scenarios:
//! - `throughput`: N (50,000) due at one instant: callbacks made per second, from the first
//!   arrival to the last.
//! - `lateness`: `rate` (5,000) due per second for `seconds` (10): arrival minus due time.
//! - `herd`: N (100,000) due at one instant: the time from the due time to the last arrival.
//!
//! Each run also reads the CPU time of every process from `/proc` while publishing and while
//! firing: Herald's (and Redis's for the router), or Node's and Redis's for BullMQ, and the
//! bench's own (its receiver serves both), reported per 1,000 callbacks.
//!
//! # Layout
//! - [`args`]: the command line; [`settings`]: its defaults resolved and checked, the plans and
//!   the order of the runs (pure).
//! - [`crate::harness::receiver`]: the service being called (hyper on 127.0.0.1), recording each
//!   arrival (in the harness: `soak` uses it too).
//! - [`herald`]: one Herald run; [`bullmq`]: the BullMQ peer and one BullMQ run.
//! - [`outcome`]: one run's figures, and waiting for the arrivals.
//! - [`report`]: medians, spreads, ratios, goals and their text (pure).
//!
//! Imports go one way: `herald | bullmq -> outcome -> settings -> args`, `report ->
//! outcome`; below them [`crate::scheduled`] and [`crate::harness`].

pub(crate) mod args;
mod bullmq;
mod herald;
mod outcome;
mod report;
mod settings;

pub(crate) use self::args::CallbacksArgs;

use self::report::{CallbacksReport, figure_name, summarize};
use self::settings::{Settings, Side};
use crate::harness::cpu;
use crate::harness::outcome::{BenchError, Outcome};

pub(crate) async fn run(args: CallbacksArgs) -> Result<Outcome, BenchError> {
    let s = Settings::from_args(&args).map_err(BenchError::Usage)?;
    if let Err(e) = crate::harness::sys::raise_nofile_limit() {
        eprintln!("herald-bench: cannot raise RLIMIT_NOFILE ({e}); continuing");
    }
    let order = s.order();
    if order.iter().any(|(_, side)| *side == Side::Bullmq) {
        bullmq::install(&s).await?;
    }
    let load_before = cpu::load_average();
    let reference_ms = cpu::reference_ms();
    let mut runs = Vec::with_capacity(order.len());
    let mut problems = Vec::new();
    let mut bullmq_version = None;
    for (round, side) in order {
        eprintln!(
            "herald-bench: round {} of {}: {} ({} on {})",
            round + 1,
            s.runs,
            side.name(),
            s.scenario.name(),
            s.system.target.name()
        );
        let outcome = match side {
            Side::Herald => herald::run(&s, round).await,
            Side::Bullmq => bullmq::run(&s, round).await.map(|(o, version)| {
                bullmq_version = Some(version);
                o
            }),
        };
        match outcome {
            Ok(o) => {
                problems.extend(
                    o.problems
                        .iter()
                        .map(|p| format!("run {} {}: {p}", o.round, side.name())),
                );
                runs.push(o);
            }
            // A run that could not be made is reported; an interruption ends the whole.
            Err(BenchError::Failed(e)) if e != "interrupted" => {
                problems.push(format!("run {} {}: {e}", round + 1, side.name()));
            }
            Err(e) => return Err(e),
        }
    }
    let (summary, ratios, goals) = summarize(&s, &runs);
    let report = CallbacksReport {
        command: "callbacks",
        scenario: s.scenario.name(),
        target: s.system.target.name(),
        plan: s.describe_plan(),
        count: s.count,
        receiver_delay_ms: s.receiver_delay.as_millis() as u64,
        payload_bytes: s.payload_bytes,
        herald_per_host_concurrency: s.per_host,
        herald_browsers: s.browsers,
        bullmq_concurrency: s.concurrency,
        bullmq_version,
        figure: figure_name(s.scenario),
        runs,
        summary,
        ratios,
        goals,
        cores: cpu::cores(),
        reference_ms,
        load_before,
        load_after: cpu::load_average(),
        complete: problems.is_empty(),
        problems,
    };
    Ok(crate::harness::report::emit(
        &report,
        || report.human(),
        report.complete,
        s.json,
    ))
}
