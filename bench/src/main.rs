//! `herald-bench`: load and measurement tool for Herald.
//!
//! # Layout
//! - [`cli`]: the command line (`connections`, `router-throughput`, `latency`, and the hidden
//!   `worker`).
//! - [`connections`]: the parent of a connection benchmark: plan, spawn workers, measure, report.
//! - [`router_throughput`]: how fast one `herald-router` forwards, and its CPU per publication.
//! - [`latency`]: AMQP publish to STOMP `MESSAGE` through a router and an edge gateway.
//! - [`delayed`]: delayed notifications: ingest rate, firing lateness, herds, bytes per pending
//!   notification, over the HTTP API of a router with Redis or of a standalone gateway.
//! - [`run`]: what those two share: a run's own broker names, files, processes and cleanup;
//!   [`configs`] (their names and configuration files, pure), [`amqp`] (publishing, queues),
//!   [`pacing`] (a fixed rate, pure), [`stats`] (percentiles, pure), [`cpu`] (`/proc` CPU time).
//! - [`worker`]: a worker process: opens its share of sessions, reports JSON lines ([`events`]).
//! - [`session`]: one STOMP session over a [`transport`] (connect, handshake, hold).
//! - [`transport`]: raw WebSocket, SockJS websocket, SockJS xhr-streaming.
//! - [`upgrade`]: the client side of the WebSocket opening handshake.
//! - [`stomp_client`]: a tiny client-side STOMP frame encoder/decoder (pure).
//! - [`sockjs`]: SockJS framing, client side (pure).
//! - [`http`]: the HTTP/1.1 client bits xhr-streaming needs: request, response head, chunked
//!   body (pure).
//! - [`token`]: minting the HS256 JWTs sessions log in with.
//! - [`plan`]: splitting sessions over processes and source addresses (pure).
//! - [`rss`]: reading and settling a process's VmRSS.
//! - [`service`]: starting a Herald process, waiting for its `/healthz`, stopping it.
//! - [`gateway`]: starting/stopping a standalone `herald-gateway` (`--spawn-gateway`).
//! - [`endpoint`], [`report`], [`sys`] (the only `unsafe`: setrlimit, kill).
//!
//! # Processes
//! The parent never opens sessions: each process may hold at most 20,000 fds, so sessions live
//! in worker processes (the same binary, `herald-bench worker ...`), at most 19,000 each, each
//! binding to its own source address so loopback's ephemeral ports last.

mod amqp;
mod cli;
mod configs;
mod connections;
mod cpu;
mod delayed;
mod delayed_ids;
mod endpoint;
mod events;
mod gateway;
mod http;
mod latency;
mod outcome;
mod pacing;
mod plan;
mod report;
mod router_throughput;
mod rss;
mod run;
mod service;
mod session;
mod sockjs;
mod stats;
mod stomp_client;
mod sys;
mod token;
mod transport;
mod upgrade;
mod worker;

use std::process::ExitCode;

use clap::Parser as _;

use crate::cli::{Cli, Command};
use crate::outcome::{BenchError, Outcome};

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
