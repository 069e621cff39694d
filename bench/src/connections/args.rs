//! The arguments of `herald-bench connections`.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::Args;

use crate::client::transport::Transport;
use crate::harness::token::JWT_SECRET_ENV;

#[derive(Debug, Args)]
pub(crate) struct ConnectionsArgs {
    /// How sessions reach the gateway.
    #[arg(long, value_enum, default_value_t = Transport::WebSocket)]
    pub(crate) transport: Transport,

    /// The gateway's STOMP WebSocket endpoint (websocket), or its SockJS service (sockjs-*)
    /// [default: ws://127.0.0.1:8080/ws, or http://127.0.0.1:8080/sockjs].
    #[arg(long, conflicts_with = "spawn_gateway")]
    pub(crate) url: Option<String>,

    /// Number of sessions to open.
    #[arg(long)]
    pub(crate) sessions: usize,

    /// Worker processes to spread the sessions over [default: ceil(sessions / 9000)]. At most
    /// 19,000 sessions per process.
    #[arg(long)]
    pub(crate) processes: Option<usize>,

    /// HS256 secret the gateway verifies tokens with. Required unless --spawn-gateway (which
    /// then uses a random one) or a peer's transport (raw-websocket, broker-stomp: no token).
    #[arg(long, env = JWT_SECRET_ENV, hide_env_values = true)]
    pub(crate) jwt_secret: Option<String>,

    /// Pid of the running gateway, to measure its RSS. Without it (and without
    /// --spawn-gateway) only connect figures are reported.
    #[arg(long, conflicts_with = "spawn_gateway")]
    pub(crate) gateway_pid: Option<u32>,

    /// Start this herald-gateway binary on a free 127.0.0.1 port, measure it, stop it at the
    /// end.
    #[arg(long, value_name = "PATH")]
    pub(crate) spawn_gateway: Option<PathBuf>,

    /// Where the spawned gateway's stdout and stderr go [default: discarded].
    #[arg(long, value_name = "PATH", requires = "spawn_gateway")]
    pub(crate) gateway_log: Option<PathBuf>,

    /// Seconds to wait for a spawned gateway's /readyz to answer 200.
    #[arg(long, default_value_t = 30)]
    pub(crate) startup_timeout: u64,

    /// Source addresses to bind sessions to, round-robin over workers [default: worker i uses
    /// 127.0.0.(2+i) when the target is on loopback].
    #[arg(long, value_delimiter = ',')]
    pub(crate) source_addrs: Vec<IpAddr>,

    /// Handshakes in flight per worker.
    #[arg(long, default_value_t = 256)]
    pub(crate) concurrency: usize,

    /// Seconds one session may take from TCP connect to RECEIPT.
    #[arg(long, default_value_t = 30)]
    pub(crate) handshake_timeout: u64,

    /// STOMP transports: send `SUBSCRIBE` in the same message as `CONNECT` instead of after
    /// `CONNECTED` (one round trip less per session).
    #[arg(long)]
    pub(crate) pipelined: bool,

    /// Seconds to keep the sessions open after measuring.
    #[arg(long, default_value_t = 0)]
    pub(crate) hold: u64,

    /// Print one JSON object instead of the human-readable report.
    #[arg(long)]
    pub(crate) json: bool,
}

impl ConnectionsArgs {
    /// `--url`, or the default for the transport.
    pub(crate) fn url(&self) -> String {
        self.url
            .clone()
            .unwrap_or_else(|| self.transport.url("127.0.0.1:8080"))
    }
}
