//! The arguments of `herald-bench latency`.

use std::path::PathBuf;

use clap::Args;

use crate::harness::amqp::AMQP_URL_ENV;

#[derive(Debug, Args)]
pub(crate) struct LatencyArgs {
    /// The herald-router binary to start.
    #[arg(long, value_name = "PATH")]
    pub(crate) router_bin: PathBuf,

    /// The herald-gateway binary to start in edge mode.
    #[arg(long, value_name = "PATH")]
    pub(crate) gateway_bin: PathBuf,

    /// The broker (root of the edge, the router's, and the publisher's).
    #[arg(long, env = AMQP_URL_ENV, hide_env_values = true, default_value = crate::harness::amqp::DEFAULT_URL)]
    pub(crate) amqp_url: String,

    /// Publications per second.
    #[arg(long, default_value_t = 25_000)]
    pub(crate) rate: u64,

    /// How long to publish.
    #[arg(long, default_value_t = 10)]
    pub(crate) seconds: u64,

    /// STOMP sessions on the gateway, one user each; publication k goes to user k % sessions.
    #[arg(long, default_value_t = 100)]
    pub(crate) sessions: usize,

    /// Size of each publication's JSON body.
    #[arg(long, default_value_t = 200)]
    pub(crate) payload_bytes: usize,

    /// The router's `amqp.prefetch` [default: the router's, 256].
    #[arg(long)]
    pub(crate) prefetch: Option<u16>,

    /// After the last publication, wait at most this many seconds without a new MESSAGE for
    /// the missing ones.
    #[arg(long, default_value_t = 10)]
    pub(crate) drain_timeout: u64,

    /// Seconds one session may take from TCP connect to RECEIPT.
    #[arg(long, default_value_t = 30)]
    pub(crate) handshake_timeout: u64,

    /// Pid of the broker (beam.smp), to report the CPU it used too.
    #[arg(long)]
    pub(crate) broker_pid: Option<u32>,

    /// Seconds to wait for the router's and the gateway's /readyz, and for the edge's queue.
    #[arg(long, default_value_t = 30)]
    pub(crate) startup_timeout: u64,

    /// Where the router's stdout and stderr go [default: discarded].
    #[arg(long, value_name = "PATH")]
    pub(crate) router_log: Option<PathBuf>,

    /// Where the gateway's stdout and stderr go [default: discarded].
    #[arg(long, value_name = "PATH")]
    pub(crate) gateway_log: Option<PathBuf>,

    /// Print one JSON object instead of the human-readable report.
    #[arg(long)]
    pub(crate) json: bool,
}
