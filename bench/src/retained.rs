//! `herald-bench retained`: what a notification kept in a mailbox costs a standalone
//! `herald-gateway` in resident memory.
//!
//! `--users` sessions (one user each, in worker processes, [`crate::fleet`]) subscribe; each
//! user gets `--per-user` notifications of `--payload` bytes, published one per request over
//! `--connections` keep-alive connections on one path (`--path raw`: `text/plain`, the
//! envelope in the query string; `--path json`). The gateway keeps each in the user's mailbox
//! for replay after delivering it. The figure is the growth of the gateway's `VmRSS` (and of
//! its `RssAnon`) from the subscribed sessions (after a warm-up round, not counted) to when
//! every notification has arrived, per notification, against the goal: at most payload +
//! 256 B.
//!
//! # Layout
//! - [`args`]: the command line, checked (pure).
//! - [`publish`]: the requests of each path (pure), and publishing them.
//! - [`crate::harness::standalone`]: the gateway under test, started with files of the run's own
//!   and cleaned up.
//! - [`measure`](mod@measure): the run's phases; [`report`]: the result.
//!
//! Imports go one way: `measure -> publish | report -> args`.

pub(crate) mod args;
mod measure;
pub(crate) mod publish;
pub(crate) mod report;

pub(crate) use self::args::RetainedArgs;

use self::measure::measure;
use crate::harness::interrupt::interruptible;
use crate::harness::outcome::{BenchError, Outcome};
use crate::harness::standalone::{Gateway, Launch};

pub(crate) async fn run(args: RetainedArgs) -> Result<Outcome, BenchError> {
    args.check().map_err(BenchError::Usage)?;
    if let Err(e) = crate::harness::sys::raise_nofile_limit() {
        eprintln!("herald-bench: cannot raise RLIMIT_NOFILE ({e}); continuing");
    }
    let mut gateway = Gateway::start(&Launch {
        bin: &args.gateway_bin,
        log: args.gateway_log.as_deref(),
        startup_timeout: std::time::Duration::from_secs(args.startup_timeout),
    })
    .await?;
    eprintln!(
        "herald-bench: run {}: standalone gateway pid {} on {}",
        gateway.run_id,
        gateway.pid(),
        gateway.addr
    );
    let measured = interruptible(measure(&args, &mut gateway)).await;
    let stopped = gateway.finish().await;
    let mut report = measured?;
    report.gateway_stopped = stopped;
    Ok(crate::harness::report::emit(
        &report,
        || report.human(),
        report.complete,
        args.json,
    ))
}
