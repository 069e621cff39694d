//! The arguments of `herald-bench compare`, and their check before anything starts (pure).

use std::path::PathBuf;

use clap::{Args, ValueEnum};

/// Most sessions a server here can hold: one process may have 20,000 file descriptors.
pub(crate) const MAX_IDLE_SESSIONS: usize = 19_000;
/// Most sessions of a ramp (broadcast, per user): they live in the bench's own process,
/// beside its other sockets.
pub(crate) const MAX_RAMP_SESSIONS: usize = 10_000;
/// Most publishing connections.
pub(crate) const MAX_PUBLISHERS: usize = 256;
/// A payload holds the publication's sequence number and its publish time, as text.
pub(crate) const MIN_PAYLOAD_BYTES: usize = 48;
pub(crate) const MAX_PAYLOAD_BYTES: usize = 64 * 1024;
/// Herald's default `publish.max_payload_bytes` (1 MiB) bounds the large message.
pub(crate) const MAX_LARGE_BYTES: usize = 1024 * 1024;

/// A server measured beside Herald.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub(crate) enum Peer {
    /// Another build of Herald (`--baseline-gateway-bin`), measured in turn with this one in
    /// every round: the A/B of a change.
    Baseline,
    /// Nchan, the pub/sub module of nginx (Debian's `nginx-light` + `libnginx-mod-nchan`).
    Nchan,
    /// RabbitMQ Web STOMP (Debian's `rabbitmq-server` and its `rabbitmq_web_stomp` plugin),
    /// published to over AMQP.
    Rabbitmq,
    /// Socket.IO 4 on Node.js (npm `socket.io`, its in-memory adapter), published to over HTTP.
    Socketio,
    /// sockjs-node (npm `sockjs`), published to over HTTP.
    Sockjs,
}

/// What is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Scenario {
    /// Idle sessions (one user each): memory per session, connect rate, server CPU per session.
    Idle,
    /// One message to every session, ramped over delivery rates: deliveries reached with
    /// nothing lost, server CPU per 100,000 deliveries, latency from publish to receipt.
    Broadcast,
    /// A message to one user at a time, in turn, ramped over rates: the same figures.
    #[value(name = "per-user")]
    PerUser,
    /// One large message to every session: peak memory growth while delivering it, time
    /// until every session has it intact.
    Large,
}

#[derive(Debug, Args)]
pub(crate) struct CompareArgs {
    /// The herald-gateway binary, run standalone (required unless --render).
    #[arg(long, value_name = "PATH", required_unless_present = "render")]
    pub(crate) gateway_bin: Option<PathBuf>,

    /// The servers measured beside Herald.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Peer::Nchan, Peer::Rabbitmq, Peer::Socketio, Peer::Sockjs])]
    pub(crate) peers: Vec<Peer>,

    /// The herald-gateway binary of the `baseline` peer (required with it): the previous
    /// build, to measure a change against.
    #[arg(long, value_name = "PATH")]
    pub(crate) baseline_gateway_bin: Option<PathBuf>,

    /// The scenarios, in this order.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Scenario::Idle, Scenario::Broadcast, Scenario::PerUser, Scenario::Large])]
    pub(crate) scenarios: Vec<Scenario>,

    /// Rounds. A round measures every system once, one after another (Herald first, then each
    /// peer), so a change in the machine's speed shows in every system's spread.
    #[arg(long, default_value_t = 2)]
    pub(crate) rounds: usize,

    /// Session counts of the idle scenario (a fresh server for each).
    #[arg(long, value_delimiter = ',', default_values_t = [2_000usize, 10_000])]
    pub(crate) idle_sessions: Vec<usize>,

    /// Idle sessions: STOMP clients (Herald's, RabbitMQ's) send `SUBSCRIBE` in the same message
    /// as `CONNECT` instead of after `CONNECTED`: one round trip less per session.
    #[arg(long)]
    pub(crate) pipelined: bool,

    /// Sessions the broadcast scenario delivers to.
    #[arg(long, default_value_t = 5_000)]
    pub(crate) broadcast_sessions: usize,

    /// The broadcast ramp, in deliveries per second (each publication reaches every session,
    /// so publications per second = rate / sessions).
    #[arg(long, value_delimiter = ',', default_values_t = [10_000u64, 50_000])]
    pub(crate) rates: Vec<u64>,

    /// Sessions (users) the per-user scenario delivers to.
    #[arg(long, default_value_t = 5_000)]
    pub(crate) user_sessions: usize,

    /// The per-user ramp, in deliveries (= publications) per second.
    #[arg(long, value_delimiter = ',', default_values_t = [2_000u64, 5_000, 10_000, 20_000, 30_000, 40_000])]
    pub(crate) user_rates: Vec<u64>,

    /// Sessions the large message goes to.
    #[arg(long, default_value_t = 1_000)]
    pub(crate) large_sessions: usize,

    /// Bytes of the large message.
    #[arg(long, default_value_t = 400 * 1024)]
    pub(crate) large_bytes: usize,

    /// Keep-alive connections publishing, one request in flight each.
    #[arg(long, default_value_t = 16)]
    pub(crate) publishers: usize,

    /// Seconds each step of a ramp publishes.
    #[arg(long, default_value_t = 10)]
    pub(crate) seconds: u64,

    /// Bytes of each payload (broadcast, per user).
    #[arg(long, default_value_t = 100)]
    pub(crate) payload_bytes: usize,

    /// Seconds without an arrival, after a step's last publication, before what has not
    /// arrived counts as lost.
    #[arg(long, default_value_t = 5)]
    pub(crate) drain_timeout: u64,

    /// nginx worker processes serving Nchan [default: one per core, as Herald's runtime has
    /// one thread per core].
    #[arg(long)]
    pub(crate) nchan_workers: Option<usize>,

    /// Where the peers' install scripts are (`{dir}/nchan/install.sh`, ...).
    #[arg(long, value_name = "DIR", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/peers"))]
    pub(crate) peers_dir: PathBuf,

    /// Write `compare.json` and `compare.md` into this directory.
    #[arg(long, value_name = "DIR")]
    pub(crate) out: Option<PathBuf>,

    /// Write each server's stdout and stderr into this directory, a file per start
    /// [default: discarded].
    #[arg(long, value_name = "DIR")]
    pub(crate) log_dir: Option<PathBuf>,

    /// Seconds to wait for a server to answer its readiness check.
    #[arg(long, default_value_t = 30)]
    pub(crate) startup_timeout: u64,

    /// Measure nothing: read an earlier run's `compare.json` and write its report (Markdown,
    /// charts with `--out`) as this build makes it.
    #[arg(long, value_name = "FILE")]
    pub(crate) render: Option<PathBuf>,

    /// Print the report as one JSON object on stdout instead of Markdown.
    #[arg(long)]
    pub(crate) json: bool,
}

impl CompareArgs {
    /// `--gateway-bin` (clap requires it unless `--render`, which starts nothing).
    pub(crate) fn gateway_bin(&self) -> &std::path::Path {
        self.gateway_bin
            .as_deref()
            .unwrap_or(std::path::Path::new("herald-gateway"))
    }

    /// `--baseline-gateway-bin` ([`CompareArgs::check`] requires it with the baseline peer).
    pub(crate) fn baseline_gateway_bin(&self) -> &std::path::Path {
        self.baseline_gateway_bin
            .as_deref()
            .unwrap_or(std::path::Path::new("herald-gateway"))
    }

    /// Checks the arguments; `Err` says which one and why.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.rounds == 0 {
            return Err("--rounds must be at least 1".into());
        }
        if self.scenarios.is_empty() {
            return Err("--scenarios names none".into());
        }
        if self.scenarios.contains(&Scenario::Idle) {
            if self.idle_sessions.is_empty() {
                return Err("--idle-sessions names none".into());
            }
            if let Some(n) = self
                .idle_sessions
                .iter()
                .find(|&&n| n == 0 || n > MAX_IDLE_SESSIONS)
            {
                return Err(format!(
                    "--idle-sessions: {n} is not between 1 and {MAX_IDLE_SESSIONS} (a server \
                     process here may hold 20,000 file descriptors)"
                ));
            }
        }
        let ramps = [
            (
                Scenario::Broadcast,
                "--broadcast-sessions",
                self.broadcast_sessions,
                "--rates",
                &self.rates,
            ),
            (
                Scenario::PerUser,
                "--user-sessions",
                self.user_sessions,
                "--user-rates",
                &self.user_rates,
            ),
        ];
        for (scenario, sessions_flag, sessions, rates_flag, rates) in ramps {
            if !self.scenarios.contains(&scenario) {
                continue;
            }
            if sessions == 0 || sessions > MAX_RAMP_SESSIONS {
                return Err(format!(
                    "{sessions_flag} must be between 1 and {MAX_RAMP_SESSIONS} (they live in \
                     this process)"
                ));
            }
            if rates.is_empty() {
                return Err(format!("{rates_flag} names none"));
            }
            if scenario == Scenario::Broadcast
                && let Some(r) = rates.iter().find(|&&r| r < sessions as u64)
            {
                return Err(format!(
                    "{rates_flag}: {r} deliveries/s is less than one publication a second to \
                     {sessions} sessions"
                ));
            }
            if rates.contains(&0) {
                return Err(format!("{rates_flag}: a rate must be at least 1"));
            }
        }
        let ramping = self.scenarios.contains(&Scenario::Broadcast)
            || self.scenarios.contains(&Scenario::PerUser);
        if ramping {
            if self.seconds == 0 {
                return Err("--seconds must be at least 1".into());
            }
            if !(MIN_PAYLOAD_BYTES..=MAX_PAYLOAD_BYTES).contains(&self.payload_bytes) {
                return Err(format!(
                    "--payload-bytes must be between {MIN_PAYLOAD_BYTES} and {MAX_PAYLOAD_BYTES}"
                ));
            }
            if self.publishers == 0 || self.publishers > MAX_PUBLISHERS {
                return Err(format!(
                    "--publishers must be between 1 and {MAX_PUBLISHERS}"
                ));
            }
        }
        if self.scenarios.contains(&Scenario::Large) {
            if self.large_sessions == 0 || self.large_sessions > MAX_RAMP_SESSIONS {
                return Err(format!(
                    "--large-sessions must be between 1 and {MAX_RAMP_SESSIONS} (they live in \
                     this process)"
                ));
            }
            if !(MIN_PAYLOAD_BYTES..=MAX_LARGE_BYTES).contains(&self.large_bytes) {
                return Err(format!(
                    "--large-bytes must be between {MIN_PAYLOAD_BYTES} and {MAX_LARGE_BYTES}"
                ));
            }
        }
        match (
            self.peers.contains(&Peer::Baseline),
            &self.baseline_gateway_bin,
        ) {
            (true, None) => {
                return Err("--peers baseline needs --baseline-gateway-bin PATH".into());
            }
            (false, Some(_)) => {
                return Err(
                    "--baseline-gateway-bin is given but --peers does not name baseline".into(),
                );
            }
            _ => {}
        }
        if self.nchan_workers == Some(0) {
            return Err("--nchan-workers must be at least 1".into());
        }
        Ok(())
    }
}
