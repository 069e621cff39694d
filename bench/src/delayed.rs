//! `herald-bench delayed`: delayed notifications (`docs/delayed-notifications.md`), measured
//! over Herald's HTTP API on a router with Redis (`--target router`) or on a standalone gateway
//! with its embedded store (`--target standalone`).
//!
//! Scenarios:
//! - `ingest`: N notifications due far in the future (none fires), published in batches over
//!   C keep-alive connections as fast as Herald answers `202` (accepted = durable); the rate
//!   is accepted notifications per second from the first request to the last answer.
//! - `lateness`: `rate` notifications per second falling due over `seconds`, from `lead` after
//!   the start of publishing, all published before the first is due; each to a user with a
//!   live STOMP session. Lateness = arrival on the session (wall clock) - `due_at_ms`.
//! - `herd`: N notifications all due at one instant, `lead` after the start of publishing:
//!   time from due to the last arrival, and whether all arrived.
//! - `footprint`: N far-future notifications; the store's growth (Redis `used_memory`, or the
//!   embedded store's bytes on disk) and the server's RSS growth per notification; then
//!   `--probe` notifications due soon, whose lateness shows whether the backlog slows firing.
//!
//! Every scenario also reads Herald's own `herald_delayed_*` metrics before and after
//! ([`metrics`]), and the CPU every process used ([`crate::scheduled::usage`]).
//!
//! # Layout
//! - [`args`]: the command line; [`settings`]: its defaults resolved and checked, the plan and
//!   the goal they imply (pure).
//! - [`measure`](mod@measure): one run in phases (sessions, baselines, publish, growth, probe, delivery,
//!   counters, report); [`watch`]: progress and the measuring window of its long phases;
//!   [`snapshot`]: the store's and the processes' bytes, Herald's metrics.
//! - [`metrics`]: Herald's metrics (pure); [`report`]: the result.
//! - What `delayed` shares with `callbacks` is in [`crate::scheduled`]: the Herald under
//!   test, its store, the plans, publishing them, arrivals against due times, CPU per process.
//!
//! Imports go one way, down this order; none goes up, and none to this file:
//!
//! ```text
//! measure -> snapshot -> report | watch -> settings -> args | metrics  (then crate::scheduled)
//! ```

pub(crate) mod args;
mod measure;
pub(crate) mod metrics;
pub(crate) mod report;
mod settings;
mod snapshot;
mod watch;

pub(crate) use self::args::DelayedArgs;

use self::measure::measure;
use self::settings::Settings;
use crate::harness::cpu;
use crate::harness::interrupt::interruptible;
use crate::harness::outcome::{BenchError, Outcome};
use crate::scheduled::system::System;

pub(crate) async fn run(args: DelayedArgs) -> Result<Outcome, BenchError> {
    let settings = Settings::from_args(&args).map_err(BenchError::Usage)?;
    if let Err(e) = crate::harness::sys::raise_nofile_limit() {
        eprintln!("herald-bench: cannot raise RLIMIT_NOFILE ({e}); continuing");
    }
    let load_before = cpu::load_average();
    let reference_ms = cpu::reference_ms();
    let mut system = System::begin(&settings.system).await?;
    eprintln!(
        "herald-bench: run {}: {} on {}",
        system.run_id,
        settings.scenario.name(),
        settings.system.target.name()
    );
    let measured = interruptible(measure(&settings, &mut system)).await;
    let cleanup = system.finish().await;
    let mut report = measured?;
    report.load_before = load_before;
    report.reference_ms = reference_ms;
    report.load_after = cpu::load_average();
    if cleanup.redis_problem.is_some() || !cleanup.amqp.problems.is_empty() {
        report.complete = false;
    }
    report.cleanup = cleanup;
    Ok(crate::harness::report::emit(
        &report,
        || report.human(),
        report.complete,
        settings.json,
    ))
}
