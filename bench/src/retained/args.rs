//! The arguments of `herald-bench retained`, checked (pure).

use std::path::PathBuf;

use clap::{Args, ValueEnum};

/// The most notifications per user: the gateway's replay buffer keeps 256 per mailbox by
/// default (`mailbox.buffer_messages`); past that the oldest are evicted and no longer retained.
pub(crate) const MAX_PER_USER: usize = 256;

#[derive(Debug, Args)]
pub(crate) struct RetainedArgs {
    /// The herald-gateway binary to start standalone (its own data directory, ports, keys).
    #[arg(long, value_name = "PATH")]
    pub(crate) gateway_bin: PathBuf,

    /// How the notifications are published: `raw` (`Content-Type: text/plain`, the envelope in
    /// the query string) or `json` (`application/json`, the payload a JSON string).
    #[arg(long, value_enum, default_value_t = PublishPath::Raw)]
    pub(crate) path: PublishPath,

    /// Users, one subscribed STOMP session each.
    #[arg(long, default_value_t = 1000)]
    pub(crate) users: usize,

    /// Notifications to each user, published one per request, round-robin over the users.
    #[arg(long, default_value_t = 50)]
    pub(crate) per_user: usize,

    /// Bytes of each payload as delivered (on the JSON path, a JSON string of this many bytes,
    /// quotes included).
    #[arg(long, default_value_t = 100)]
    pub(crate) payload: usize,

    /// Notifications to each user before the baseline, not counted: the code paths, connections
    /// and first buffers then exist before it is read.
    #[arg(long, default_value_t = 1)]
    pub(crate) warmup: usize,

    /// Keep-alive HTTP connections publishing in parallel, one request in flight each.
    #[arg(long, default_value_t = 4)]
    pub(crate) connections: usize,

    /// Worker processes holding the sessions [default: one per 9,000].
    #[arg(long)]
    pub(crate) processes: Option<usize>,

    /// Seconds one session may take from TCP connect to RECEIPT.
    #[arg(long, default_value_t = 30)]
    pub(crate) handshake_timeout: u64,

    /// Seconds to wait for the gateway's /readyz.
    #[arg(long, default_value_t = 30)]
    pub(crate) startup_timeout: u64,

    /// Seconds to wait, after the last publication, for every notification to arrive.
    #[arg(long, default_value_t = 60)]
    pub(crate) drain_timeout: u64,

    /// Where the gateway's stdout and stderr go [default: discarded].
    #[arg(long, value_name = "PATH")]
    pub(crate) gateway_log: Option<PathBuf>,

    /// Print one JSON object instead of the human-readable report.
    #[arg(long)]
    pub(crate) json: bool,
}

/// How a notification reaches `POST /v1/notifications`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum PublishPath {
    /// The body is the payload (`text/plain`); the envelope is in the query string.
    Raw,
    /// The body is a JSON object whose `payload` is a JSON string.
    Json,
}

impl PublishPath {
    pub(crate) fn name(self) -> &'static str {
        match self {
            PublishPath::Raw => "raw",
            PublishPath::Json => "json",
        }
    }
}

impl RetainedArgs {
    /// Why these arguments cannot make a run, if they cannot.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.users == 0 {
            return Err("--users must be at least 1".into());
        }
        if self.per_user == 0 {
            return Err("--per-user must be at least 1".into());
        }
        if self.per_user + self.warmup > MAX_PER_USER {
            return Err(format!(
                "--per-user + --warmup is {}; the gateway retains at most {MAX_PER_USER} per user \
                 (mailbox.buffer_messages), the rest would be evicted, not retained",
                self.per_user + self.warmup
            ));
        }
        if self.connections == 0 {
            return Err("--connections must be at least 1".into());
        }
        if self.path == PublishPath::Json && self.payload < 2 {
            return Err("--payload must be at least 2 on the JSON path (the quotes)".into());
        }
        Ok(())
    }
}
