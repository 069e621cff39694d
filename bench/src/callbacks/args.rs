//! The arguments of `herald-bench callbacks`.

use std::path::PathBuf;

use clap::Args;

use crate::harness::amqp::AMQP_URL_ENV;
use crate::scheduled::system::Target;

/// Environment variable for `--redis-url` (the same as `delayed`'s).
const REDIS_URL_ENV: &str = "HERALD_BENCH_REDIS_URL";

#[derive(Debug, Args)]
pub(crate) struct CallbacksArgs {
    /// What to measure: `throughput` (N callbacks due at once: callbacks made per second, first
    /// arrival to last), `lateness` (due at --rate per second: arrival minus due time), `herd`
    /// (N due at one instant: time from due to the last arrival).
    #[arg(long, value_enum)]
    pub(crate) scenario: Scenario,

    /// `standalone`: one herald-gateway with its embedded store; `router`: herald-router with
    /// Redis (and RabbitMQ, which it needs).
    #[arg(long, value_enum, default_value_t = Target::Standalone)]
    pub(crate) target: Target,

    /// Whom to measure: Herald, BullMQ, or both, alternated run by run (Herald, BullMQ,
    /// Herald, BullMQ, ...).
    #[arg(long, value_enum, default_value_t = Peer::Both)]
    pub(crate) peer: Peer,

    /// Rounds: each round runs each peer once, on a fresh Herald and a fresh BullMQ prefix.
    #[arg(long, default_value_t = 3)]
    pub(crate) runs: usize,

    /// The herald-gateway binary (target standalone).
    #[arg(long, value_name = "PATH")]
    pub(crate) gateway_bin: Option<PathBuf>,

    /// The herald-router binary (target router).
    #[arg(long, value_name = "PATH")]
    pub(crate) router_bin: Option<PathBuf>,

    /// The broker (target router).
    #[arg(long, env = AMQP_URL_ENV, hide_env_values = true, default_value = crate::harness::amqp::DEFAULT_URL)]
    pub(crate) amqp_url: String,

    /// The Redis of BullMQ and of the router; each run uses a key prefix of its own and deletes
    /// its keys at the end.
    #[arg(long, env = REDIS_URL_ENV, hide_env_values = true, default_value = "redis://127.0.0.1:6379/0")]
    pub(crate) redis_url: String,

    /// Callbacks per run [default: throughput 50,000; herd 100,000; lateness: --rate x
    /// --seconds].
    #[arg(long)]
    pub(crate) count: Option<u64>,

    /// Lateness: callbacks due per second.
    #[arg(long, default_value_t = 5_000)]
    pub(crate) rate: u64,

    /// Lateness: seconds over which they fall due.
    #[arg(long, default_value_t = 10)]
    pub(crate) seconds: u64,

    /// From the start of publishing to the first due time, ms [default: 5,000 plus 1 per 5
    /// callbacks, so publishing is over before the first is due].
    #[arg(long)]
    pub(crate) lead_ms: Option<u64>,

    /// How long the receiver takes to answer each call, ms.
    #[arg(long, default_value_t = 1)]
    pub(crate) receiver_delay_ms: u64,

    /// Herald's calls at once to one destination host (`[callbacks] max_per_host`; Herald's
    /// default is 64).
    #[arg(long, default_value_t = 64)]
    pub(crate) per_host: usize,

    /// BullMQ Worker concurrency [default: --per-host, like for like].
    #[arg(long)]
    pub(crate) concurrency: Option<usize>,

    /// Also deliver each notification to the browsers (its user has no session, so to a
    /// mailbox); by default the notifications are callback-only (`browsers: false`), as the
    /// field reports' delay services use them and as BullMQ's jobs are.
    #[arg(long)]
    pub(crate) with_browsers: bool,

    /// Size of each callback's JSON body.
    #[arg(long, default_value_t = 200)]
    pub(crate) payload_bytes: usize,

    /// Notifications per publish request (Herald) or per `addBulk` (BullMQ).
    #[arg(long, default_value_t = 1000)]
    pub(crate) batch: u64,

    /// Publish requests in flight at once.
    #[arg(long, default_value_t = 4)]
    pub(crate) connections: usize,

    /// After the last due time, wait at most this many seconds without a new arrival.
    #[arg(long, default_value_t = 30)]
    pub(crate) drain_timeout: u64,

    /// Seconds to wait for each Herald process's /readyz and for the BullMQ peer to start.
    #[arg(long, default_value_t = 30)]
    pub(crate) startup_timeout: u64,

    /// The BullMQ peer's directory (package.json, package-lock.json, peer.js); `npm ci` runs
    /// there first when its node_modules is missing.
    #[arg(long, value_name = "DIR", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/peers/bullmq"))]
    pub(crate) peer_dir: PathBuf,

    /// The Node.js binary.
    #[arg(long, default_value = "node")]
    pub(crate) node: PathBuf,

    /// The npm binary (for `npm ci`).
    #[arg(long, default_value = "npm")]
    pub(crate) npm: PathBuf,

    /// A `[schedule]` setting of the Herald under test, as KEY=VALUE with a TOML value;
    /// repeatable.
    #[arg(long = "schedule", value_name = "KEY=VALUE")]
    pub(crate) schedule: Vec<String>,

    /// Where the router's stdout and stderr go [default: discarded].
    #[arg(long, value_name = "PATH")]
    pub(crate) router_log: Option<PathBuf>,

    /// Where the gateway's stdout and stderr go [default: discarded].
    #[arg(long, value_name = "PATH")]
    pub(crate) gateway_log: Option<PathBuf>,

    /// Where the BullMQ peer's stderr goes [default: discarded].
    #[arg(long, value_name = "PATH")]
    pub(crate) peer_log: Option<PathBuf>,

    /// Print one JSON object instead of the human-readable report.
    #[arg(long)]
    pub(crate) json: bool,
}

/// What a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Scenario {
    Throughput,
    Lateness,
    Herd,
}

impl Scenario {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Scenario::Throughput => "throughput",
            Scenario::Lateness => "lateness",
            Scenario::Herd => "herd",
        }
    }
}

/// Whom a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Peer {
    Herald,
    Bullmq,
    Both,
}
