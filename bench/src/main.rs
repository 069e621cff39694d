//! `herald-bench`: load and measurement tool for Herald.
//!
//! # Layout
//! Commands on top, what they share beneath; imports only go down (a command never imports
//! another command or [`cli`], [`harness`] imports neither the commands nor [`client`]):
//!
//! ```text
//! main -> cli -> connections | router_throughput | latency | delayed | retained | callbacks | compare | publish | soak | worker
//!                     |               |               |         |  |      |          |         |
//!                     |               |               |         |  +-> scheduled <---+         |
//!                     |               |               |         +-> fleet <-+                  |
//!                     v               v               v         v         v                    v
//!                   client (STOMP sessions, the HTTP API) ---------------------------------> harness
//! ```
//!
//! - [`cli`]: the command line; it only names the commands, each command owns its arguments.
//! - [`connections`]: the parent of a connection benchmark: plan, spawn workers, measure, report.
//! - [`router_throughput`]: how fast one `herald-router` forwards, and its CPU per publication.
//! - [`latency`]: AMQP publish to STOMP `MESSAGE` through a router and an edge gateway.
//! - [`delayed`]: delayed notifications: ingest rate, firing lateness, herds, bytes per pending
//!   notification, over the HTTP API of a router with Redis or of a standalone gateway.
//! - [`callbacks`]: callbacks made when due, against a local receiver, beside BullMQ: throughput,
//!   lateness, herds, CPU per callback, ratios.
//! - [`scheduled`]: what `delayed` and `callbacks` share: the Herald under test, publishing
//!   delayed notifications over HTTP, arrivals against due times, CPU per process.
//! - [`publish`]: server CPU per notification on the HTTP publish path (single, pipelined,
//!   batched), against the build before a change.
//! - [`retained`]: memory per notification a standalone gateway keeps in its mailboxes, on the
//!   raw or the JSON publish path.
//! - [`compare`]: Herald beside its peers (Nchan), same scenarios, same client, one run: idle
//!   sessions, broadcast ramps; ratios round by round.
//! - [`soak`]: the distributed deployment (`deploy/up`) under mixed traffic for half an hour:
//!   nothing lost, and the slope of every process's RSS, descriptors and threads and of the
//!   stores' sizes after the warm-up; Markdown, JSON and an SVG plot.
//! - [`fleet`]: the recording sessions `delayed` and `retained` share: worker processes whose
//!   sessions count the bench's messages as they arrive.
//! - [`worker`]: a worker process (hidden command): opens its share of sessions, reports JSON
//!   lines ([`harness::events`]).
//! - [`client`]: one STOMP session over a transport (raw WebSocket, SockJS websocket, SockJS
//!   xhr-streaming): [`client::session`], [`client::transport`], [`client::upgrade`] (the
//!   WebSocket opening handshake), and the pure codecs [`client::stomp_client`],
//!   [`client::sockjs`], [`client::http`].
//! - [`harness`]: what the commands share. [`harness::run`] (a run's own broker names, files,
//!   processes and cleanup), [`harness::configs`] (their names and configuration files, pure),
//!   [`harness::service`] (starting a Herald process, `/readyz`, stopping it),
//!   [`harness::amqp`] (publishing, queues), [`harness::events`] (the parent/worker protocol),
//!   [`harness::plan`] (sessions over processes and source addresses, pure),
//!   [`harness::cpu`] and [`harness::rss`] (sampling `/proc`), [`harness::token`] (JWTs),
//!   [`harness::pacing`] (a fixed rate, pure), [`harness::stats`] (percentiles, median and
//!   range, pure),
//!   [`harness::report`] (printing reports, number formats), [`harness::outcome`] (exit codes'
//!   inputs), [`harness::workers`] (starting worker processes, reading their lines),
//!   [`harness::endpoint`], [`harness::delayed_ids`], [`harness::sys`] (the only `unsafe`:
//!   setrlimit, kill).
//!
//! # Processes
//! The parent never opens sessions (but `soak`, which holds a hundred or so itself): each process may hold at most 20,000 fds, so sessions live
//! in worker processes (the same binary, `herald-bench worker ...`), at most 19,000 each, each
//! binding to its own source address so loopback's ephemeral ports last.

mod callbacks;
mod cli;
mod client;
mod compare;
mod connections;
mod delayed;
mod fleet;
mod harness;
mod latency;
mod publish;
mod retained;
mod router_throughput;
mod scheduled;
mod soak;
mod worker;

use std::process::ExitCode;

use clap::Parser as _;

use crate::cli::{Cli, Command};
use crate::harness::outcome::{BenchError, Outcome};

/// Exit code for bad arguments (as clap uses).
const EXIT_USAGE: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Connections(args) => {
            let runtime = match runtime(false) {
                Ok(rt) => rt,
                Err(code) => return code,
            };
            exit_code(runtime.block_on(connections::run(args)))
        }
        Command::RouterThroughput(args) => {
            let runtime = match runtime(true) {
                Ok(rt) => rt,
                Err(code) => return code,
            };
            exit_code(runtime.block_on(router_throughput::run(args)))
        }
        Command::Latency(args) => {
            let runtime = match runtime(true) {
                Ok(rt) => rt,
                Err(code) => return code,
            };
            let code = exit_code(runtime.block_on(latency::run(args)));
            runtime.shutdown_timeout(std::time::Duration::from_secs(1));
            code
        }
        Command::Delayed(args) => {
            let runtime = match runtime(true) {
                Ok(rt) => rt,
                Err(code) => return code,
            };
            let code = exit_code(runtime.block_on(delayed::run(args)));
            runtime.shutdown_timeout(std::time::Duration::from_secs(1));
            code
        }
        Command::Callbacks(args) => {
            let runtime = match runtime(true) {
                Ok(rt) => rt,
                Err(code) => return code,
            };
            let code = exit_code(runtime.block_on(callbacks::run(args)));
            runtime.shutdown_timeout(std::time::Duration::from_secs(1));
            code
        }
        Command::Retained(args) => {
            let runtime = match runtime(true) {
                Ok(rt) => rt,
                Err(code) => return code,
            };
            let code = exit_code(runtime.block_on(retained::run(args)));
            runtime.shutdown_timeout(std::time::Duration::from_secs(1));
            code
        }
        Command::Publish(args) => {
            let runtime = match runtime(true) {
                Ok(rt) => rt,
                Err(code) => return code,
            };
            let code = exit_code(runtime.block_on(publish::run(args)));
            runtime.shutdown_timeout(std::time::Duration::from_secs(1));
            code
        }
        Command::Compare(args) => {
            let runtime = match runtime(true) {
                Ok(rt) => rt,
                Err(code) => return code,
            };
            let code = exit_code(runtime.block_on(compare::run(args)));
            runtime.shutdown_timeout(std::time::Duration::from_secs(1));
            code
        }
        Command::Soak(args) => {
            let runtime = match runtime(true) {
                Ok(rt) => rt,
                Err(code) => return code,
            };
            let code = exit_code(runtime.block_on(soak::run(args)));
            runtime.shutdown_timeout(std::time::Duration::from_secs(1));
            code
        }
        Command::Worker(args) => {
            let runtime = match runtime(true) {
                Ok(rt) => rt,
                Err(code) => return code,
            };
            let code = runtime.block_on(worker::run(args.into()));
            // Don't wait for lingering session tasks; the worker has reported.
            runtime.shutdown_background();
            ExitCode::from(u8::try_from(code).unwrap_or(1))
        }
    }
}

/// The exit code of a run: 0 when complete, 1 when not (or failed), 2 for bad arguments.
fn exit_code(result: Result<Outcome, BenchError>) -> ExitCode {
    match result {
        Ok(Outcome::AllOpened) => ExitCode::SUCCESS,
        Ok(Outcome::SomeFailed) => ExitCode::FAILURE,
        Err(BenchError::Usage(message)) => {
            eprintln!("herald-bench: {message}");
            ExitCode::from(EXIT_USAGE)
        }
        Err(BenchError::Failed(message)) => {
            eprintln!("herald-bench: error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Workers (and the AMQP benchmarks) use every core for their thousands of sessions; the parent only coordinates.
fn runtime(multi_thread: bool) -> Result<tokio::runtime::Runtime, ExitCode> {
    let mut builder = if multi_thread {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    builder.enable_all().build().map_err(|e| {
        eprintln!("herald-bench: cannot start the async runtime: {e}");
        ExitCode::FAILURE
    })
}
