//! The arguments of `herald-bench router-throughput`.

use std::path::PathBuf;

use clap::Args;

use crate::harness::amqp::AMQP_URL_ENV;

#[derive(Debug, Args)]
pub(crate) struct RouterThroughputArgs {
    /// The herald-router binary to start.
    #[arg(long, value_name = "PATH")]
    pub(crate) router_bin: PathBuf,

    /// The broker (the router, the publishers and the edges consumer all use it).
    #[arg(long, env = AMQP_URL_ENV, hide_env_values = true, default_value = crate::harness::amqp::DEFAULT_URL)]
    pub(crate) amqp_url: String,

    /// Publications to publish.
    #[arg(long, default_value_t = 200_000)]
    pub(crate) messages: u64,

    /// Size of each publication's JSON body.
    #[arg(long, default_value_t = 200)]
    pub(crate) payload_bytes: usize,

    /// Publisher connections publishing in parallel.
    #[arg(long, default_value_t = 2)]
    pub(crate) publishers: usize,

    /// Publications a publisher hands to the broker at once.
    #[arg(long, default_value_t = 500)]
    pub(crate) batch: usize,

    /// Most unconfirmed publications per publisher.
    #[arg(long, default_value_t = 5_000)]
    pub(crate) confirm_window: usize,

    /// The router's `amqp.prefetch` [default: the router's, 256].
    #[arg(long)]
    pub(crate) prefetch: Option<u16>,

    /// Prefetch of the bench's consumer of the edges queue (it acks every prefetch/4 messages
    /// at once, `multiple`).
    #[arg(long, default_value_t = 8_000)]
    pub(crate) consumer_prefetch: u16,

    /// Publish every publication before starting the router (to its queue, declared by the
    /// bench as the router would), and run the clock from the router's start: the router's
    /// drain rate, without publishers competing for the broker.
    #[arg(long)]
    pub(crate) prefill: bool,

    /// Publish transient publications (delivery mode 1) and make the edges queue non-durable,
    /// so the broker writes nothing to disk (the router still forwards persistent messages).
    #[arg(long)]
    pub(crate) transient: bool,

    /// Pid of the broker (beam.smp), to report the CPU it used too.
    #[arg(long)]
    pub(crate) broker_pid: Option<u32>,

    /// Give up when nothing is forwarded for this many seconds.
    #[arg(long, default_value_t = 30)]
    pub(crate) stall_timeout: u64,

    /// Seconds to wait for the router's /readyz to answer 200.
    #[arg(long, default_value_t = 30)]
    pub(crate) startup_timeout: u64,

    /// Where the router's stdout and stderr go [default: discarded].
    #[arg(long, value_name = "PATH")]
    pub(crate) router_log: Option<PathBuf>,

    /// Print one JSON object instead of the human-readable report.
    #[arg(long)]
    pub(crate) json: bool,
}
