//! `herald-bench`: load and measurement tool for Herald.
//!
//! # Layout
//! - [`cli`]: the command line (`connections`, and the hidden `worker`).
//! - [`connections`]: the parent of a connection benchmark: plan, spawn workers, measure, report.
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
//! - [`gateway`]: starting/stopping a `herald-gateway` (`--spawn-gateway`).
//! - [`endpoint`], [`report`], [`sys`] (the only `unsafe`: setrlimit, kill).
//!
//! # Processes
//! The parent never opens sessions: each process may hold at most 20,000 fds, so sessions live
//! in worker processes (the same binary, `herald-bench worker ...`), at most 19,000 each, each
//! binding to its own source address so loopback's ephemeral ports last.

mod cli;
mod connections;
mod endpoint;
mod events;
mod gateway;
mod http;
mod plan;
mod report;
mod rss;
mod session;
mod sockjs;
mod stomp_client;
mod sys;
mod token;
mod transport;
mod upgrade;
mod worker;

use std::process::ExitCode;

use clap::Parser as _;

use crate::cli::{Cli, Command};
use crate::connections::{BenchError, Outcome};

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
            match runtime.block_on(connections::run(args)) {
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

/// Workers use every core for their thousands of sessions; the parent only coordinates.
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
