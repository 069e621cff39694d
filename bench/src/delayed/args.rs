//! The arguments of `herald-bench delayed`, and the scenarios and targets they name.

use std::path::PathBuf;

use clap::Args;

use crate::harness::amqp::AMQP_URL_ENV;
use crate::scheduled::plan::DueOrder;
use crate::scheduled::system::Target;

/// Environment variable for `--redis-url`.
pub(crate) const REDIS_URL_ENV: &str = "HERALD_BENCH_REDIS_URL";

#[derive(Debug, Args)]
pub(crate) struct DelayedArgs {
    /// What to measure: `ingest` (notifications stored per second), `lateness` (firing at a
    /// steady rate), `herd` (many due in the same instant), `footprint` (bytes per pending
    /// notification, then the lateness of a few due soon).
    #[arg(long, value_enum)]
    pub(crate) scenario: Scenario,

    /// `router`: herald-router with Redis (and an edge herald-gateway for the sessions);
    /// `standalone`: one herald-gateway with its embedded store.
    #[arg(long, value_enum, default_value_t = Target::Router)]
    pub(crate) target: Target,

    /// The herald-router binary (target router).
    #[arg(long, value_name = "PATH")]
    pub(crate) router_bin: Option<PathBuf>,

    /// The herald-gateway binary (target standalone, and the edge of target router when there
    /// are sessions).
    #[arg(long, value_name = "PATH")]
    pub(crate) gateway_bin: Option<PathBuf>,

    /// The broker (target router).
    #[arg(long, env = AMQP_URL_ENV, hide_env_values = true, default_value = crate::harness::amqp::DEFAULT_URL)]
    pub(crate) amqp_url: String,

    /// The Redis the router stores delayed notifications in (target router); the run uses a
    /// key prefix of its own and deletes its keys at the end.
    #[arg(long, env = REDIS_URL_ENV, hide_env_values = true, default_value = "redis://127.0.0.1:6379/0")]
    pub(crate) redis_url: String,

    /// Notifications to publish [default: ingest 500,000, herd 200,000, footprint 1,000,000;
    /// lateness: --rate x --seconds].
    #[arg(long)]
    pub(crate) count: Option<u64>,

    /// Notifications per HTTP request (at most Herald's publish.max_batch, 1000).
    #[arg(long, default_value_t = 1000)]
    pub(crate) batch: u64,

    /// HTTP connections publishing in parallel, one batch in flight each.
    #[arg(long, default_value_t = 4)]
    pub(crate) connections: usize,

    /// Size of each notification's JSON payload.
    #[arg(long, default_value_t = 200)]
    pub(crate) payload_bytes: usize,

    /// Lateness: notifications due per second.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) rate: u64,

    /// Lateness: seconds over which they fall due.
    #[arg(long, default_value_t = 10)]
    pub(crate) seconds: u64,

    /// Lateness and herd: from the start of publishing to the first due time, ms [default:
    /// 5,000 plus 1 per 10 notifications, so publishing is over before the first is due].
    #[arg(long)]
    pub(crate) lead_ms: Option<u64>,

    /// STOMP sessions receiving the notifications, one user each; notification k goes to
    /// user k % sessions [default: lateness 1,000, herd 10,000, footprint 100; ingest none].
    #[arg(long)]
    pub(crate) sessions: Option<usize>,

    /// Worker processes holding the sessions [default: ceil(sessions / 9000)].
    #[arg(long)]
    pub(crate) processes: Option<usize>,

    /// Footprint: notifications due soon, published after the far-future ones, whose lateness
    /// shows whether the backlog slows firing (0: none).
    #[arg(long, default_value_t = 1_000)]
    pub(crate) probe: u64,

    /// Footprint: the probe notifications fall due at this rate, from 5 s after they are
    /// published.
    #[arg(long, default_value_t = 1_000)]
    pub(crate) probe_rate: u64,

    /// Ingest and footprint: notifications fall due this many days ahead (one per ms from
    /// then), so none fires during the run.
    #[arg(long, default_value_t = 30)]
    pub(crate) far_days: u64,

    /// Ingest and footprint: the order of the due times. `sequential` (one per ms, rising with
    /// the sequence number: each index takes its inserts at one end, its best case) or
    /// `random` (the same span of milliseconds, scrambled: inserts land anywhere in the
    /// indexes, as many different delays do).
    #[arg(long, value_enum, default_value_t = DueOrder::Sequential)]
    pub(crate) due_order: DueOrder,

    /// After the last due time, wait at most this many seconds without a new arrival for the
    /// missing ones.
    #[arg(long, default_value_t = 30)]
    pub(crate) drain_timeout: u64,

    /// Seconds one session may take from TCP connect to RECEIPT.
    #[arg(long, default_value_t = 30)]
    pub(crate) handshake_timeout: u64,

    /// Seconds to wait for each process's /readyz (and the edge's queue).
    #[arg(long, default_value_t = 30)]
    pub(crate) startup_timeout: u64,

    /// Pid of the broker (beam.smp), to report the CPU it used too.
    #[arg(long)]
    pub(crate) broker_pid: Option<u32>,

    /// A `[schedule]` setting of the Herald under test, as KEY=VALUE with a TOML value
    /// (`--schedule claim_batch=5000`); repeatable. Default: Herald's own.
    #[arg(long = "schedule", value_name = "KEY=VALUE")]
    pub(crate) schedule: Vec<String>,

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

/// What a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Scenario {
    Ingest,
    Lateness,
    Herd,
    Footprint,
}

impl Scenario {
    pub(super) fn name(self) -> &'static str {
        match self {
            Scenario::Ingest => "ingest",
            Scenario::Lateness => "lateness",
            Scenario::Herd => "herd",
            Scenario::Footprint => "footprint",
        }
    }
}
