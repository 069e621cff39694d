//! `herald-bench soak` arguments.

use std::path::PathBuf;

use clap::Args;

/// The distributed deployment under mixed traffic for a long while, sampled once a minute.
#[derive(Debug, Clone, Args)]
pub(crate) struct SoakArgs {
    /// How long the traffic runs, in minutes (bring-up and teardown come on top).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=1440))]
    pub(crate) minutes: u64,
    /// Seconds between two samples (one more is taken at the start).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(5..=3600))]
    pub(crate) sample_secs: u64,
    /// The first part of the run left out of the slopes, in percent.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(0..=80))]
    pub(crate) warmup_percent: u64,
    /// Steady sessions: one per user, open for the whole run, checked for every delivery.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=5000))]
    pub(crate) steady: u64,
    /// Churn slots: each holds a session 2 to 20 s, closes it and opens the next.
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u64).range(0..=5000))]
    pub(crate) churn: u64,
    /// Client companies the users belong to.
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub(crate) companies: u64,
    /// Immediate publications per second (per-user, client-scoped and global; HTTP and AMQP).
    #[arg(long, default_value_t = 10.0)]
    pub(crate) rate: f64,
    /// Delayed notifications per second.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) delayed_rate: f64,
    /// Callback notifications per second.
    #[arg(long, default_value_t = 0.5)]
    pub(crate) callback_rate: f64,
    /// Presence queries per second.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) presence_rate: f64,
    /// A delivery this many seconds past due counts as overdue at a sample (lost only if it
    /// has not come by the end).
    #[arg(long, default_value_t = 30)]
    pub(crate) grace_secs: u64,
    /// Where herald-router and herald-gateway are (default: beside this herald-bench).
    #[arg(long)]
    pub(crate) bin_dir: Option<PathBuf>,
    /// The repository's deploy/ directory (deploy/up, deploy/down).
    #[arg(long, default_value = "deploy")]
    pub(crate) deploy_dir: PathBuf,
    /// deploy/up --port-offset: a multiple of 1000 no other deployment on this machine uses.
    #[arg(long, default_value_t = 4000, value_parser = clap::value_parser!(u32).range(0..=10000))]
    pub(crate) port_offset: u32,
    /// A directory for the deployment's state and the logs (must not exist; default a new one
    /// under the temporary directory).
    #[arg(long)]
    pub(crate) work_dir: Option<PathBuf>,
    /// Where the report goes (NAME.md, NAME.json, NAME.svg).
    #[arg(long, default_value = "bench/reports")]
    pub(crate) out_dir: PathBuf,
    /// The report's name (default soak-YYYY-MM-DD).
    #[arg(long)]
    pub(crate) name: Option<String>,
    /// Exit 1 when anything was lost, duplicated or refused, a session was dropped, presence was
    /// wrong, a process died, or a process's or store's series grew beyond its limit after the
    /// warm-up (the limits: bench/README.md).
    #[arg(long)]
    pub(crate) check: bool,
    /// Leave the deployment's state directory (logs, data) after deploy/down.
    #[arg(long)]
    pub(crate) keep: bool,
}
