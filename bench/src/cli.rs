//! Command-line interface: `herald-bench <command>`.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::delayed::plan::DueOrder;
use crate::delayed::{DelayedTarget, Scenario};
use crate::transport::Transport;

/// Environment variable through which the parent hands the JWT secret to its workers (not argv,
/// which every user on the machine can read in `ps`).
pub(crate) const JWT_SECRET_ENV: &str = "HERALD_BENCH_JWT_SECRET";

/// Load and measurement tool for Herald.
#[derive(Debug, Parser)]
#[command(name = "herald-bench", version, about, propagate_version = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Open many idle STOMP sessions (over WebSocket or SockJS) and measure what they cost the
    /// gateway (connect rate, RSS per session).
    Connections(ConnectionsArgs),
    /// Start a herald-router on a fresh topology, publish N publications to its exchange as
    /// fast as the broker confirms them, and measure how fast the router forwards them to an
    /// edges queue, and the CPU it uses doing so.
    RouterThroughput(RouterThroughputArgs),
    /// Start a herald-router and an edge herald-gateway, open STOMP sessions on the gateway,
    /// publish at a fixed rate, and measure the latency from AMQP publish to STOMP MESSAGE.
    Latency(LatencyArgs),
    /// Delayed notifications: durable ingest rate, firing lateness at a steady rate, a herd
    /// due in the same second, and the store's bytes per pending notification, on a router
    /// with Redis or a standalone gateway with its embedded store.
    Delayed(DelayedArgs),
    /// Internal: one worker process of a benchmark. Started by the parent, talks JSON lines.
    #[command(hide = true)]
    Worker(WorkerArgs),
}

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
    /// then uses a random one).
    #[arg(long, env = JWT_SECRET_ENV, hide_env_values = true, required_unless_present = "spawn_gateway")]
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

    /// Seconds to wait for a spawned gateway's /healthz to answer 200.
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

/// Environment variable for `--amqp-url`.
pub(crate) const AMQP_URL_ENV: &str = "HERALD_BENCH_AMQP_URL";

#[derive(Debug, Args)]
pub(crate) struct RouterThroughputArgs {
    /// The herald-router binary to start.
    #[arg(long, value_name = "PATH")]
    pub(crate) router_bin: PathBuf,

    /// The broker (the router, the publishers and the edges consumer all use it).
    #[arg(long, env = AMQP_URL_ENV, hide_env_values = true, default_value = crate::amqp::DEFAULT_URL)]
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

    /// Seconds to wait for the router's /healthz to answer 200.
    #[arg(long, default_value_t = 30)]
    pub(crate) startup_timeout: u64,

    /// Where the router's stdout and stderr go [default: discarded].
    #[arg(long, value_name = "PATH")]
    pub(crate) router_log: Option<PathBuf>,

    /// Print one JSON object instead of the human-readable report.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct LatencyArgs {
    /// The herald-router binary to start.
    #[arg(long, value_name = "PATH")]
    pub(crate) router_bin: PathBuf,

    /// The herald-gateway binary to start in edge mode.
    #[arg(long, value_name = "PATH")]
    pub(crate) gateway_bin: PathBuf,

    /// The broker (root of the edge, the router's, and the publisher's).
    #[arg(long, env = AMQP_URL_ENV, hide_env_values = true, default_value = crate::amqp::DEFAULT_URL)]
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

    /// Seconds to wait for the router's and the gateway's /healthz, and for the edge's queue.
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
    #[arg(long, value_enum, default_value_t = DelayedTarget::Router)]
    pub(crate) target: DelayedTarget,

    /// The herald-router binary (target router).
    #[arg(long, value_name = "PATH")]
    pub(crate) router_bin: Option<PathBuf>,

    /// The herald-gateway binary (target standalone, and the edge of target router when there
    /// are sessions).
    #[arg(long, value_name = "PATH")]
    pub(crate) gateway_bin: Option<PathBuf>,

    /// The broker (target router).
    #[arg(long, env = AMQP_URL_ENV, hide_env_values = true, default_value = crate::amqp::DEFAULT_URL)]
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

    /// Seconds to wait for each process's /healthz (and the edge's queue).
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

#[derive(Debug, Args)]
pub(crate) struct WorkerArgs {
    /// This worker's index (user ids are `bench-{index}-{n}`).
    #[arg(long)]
    pub(crate) index: usize,
    #[arg(long)]
    pub(crate) url: String,
    #[arg(long, value_enum)]
    pub(crate) transport: Transport,
    #[arg(long)]
    pub(crate) sessions: usize,
    #[arg(long)]
    pub(crate) source: Option<IpAddr>,
    #[arg(long)]
    pub(crate) concurrency: usize,
    /// Seconds.
    #[arg(long)]
    pub(crate) handshake_timeout: u64,
    /// Seconds the tokens stay valid.
    #[arg(long)]
    pub(crate) token_ttl: u64,
    #[arg(long, env = JWT_SECRET_ENV, hide_env_values = true)]
    pub(crate) jwt_secret: String,
    /// Record the delayed benchmark's messages and report them (websocket only).
    #[arg(long)]
    pub(crate) record: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_connections() {
        let cli = Cli::try_parse_from([
            "herald-bench",
            "connections",
            "--sessions",
            "2000",
            "--jwt-secret",
            "s",
            "--source-addrs",
            "127.0.0.2,127.0.0.3",
            "--json",
        ])
        .unwrap();
        let Command::Connections(args) = cli.command else {
            panic!("not connections");
        };
        assert_eq!(args.sessions, 2000);
        assert_eq!(args.transport, Transport::WebSocket);
        assert_eq!(args.url(), "ws://127.0.0.1:8080/ws");
        assert_eq!(args.concurrency, 256);
        assert_eq!(args.processes, None);
        assert_eq!(args.source_addrs.len(), 2);
        assert!(args.json);
    }

    #[test]
    fn sockjs_transports_default_to_the_sockjs_service() {
        for (name, transport) in [
            ("sockjs-websocket", Transport::SockJsWebSocket),
            ("xhr-streaming", Transport::XhrStreaming),
        ] {
            let cli = Cli::try_parse_from([
                "herald-bench",
                "connections",
                "--sessions",
                "1",
                "--jwt-secret",
                "s",
                "--transport",
                name,
            ])
            .unwrap();
            let Command::Connections(args) = cli.command else {
                panic!("not connections");
            };
            assert_eq!(args.transport, transport);
            assert_eq!(args.url(), "http://127.0.0.1:8080/sockjs");
        }
        assert!(
            Cli::try_parse_from([
                "herald-bench",
                "connections",
                "--sessions",
                "1",
                "--jwt-secret",
                "s",
                "--transport",
                "jsonp",
            ])
            .is_err()
        );
    }

    #[test]
    fn parses_router_throughput_with_defaults() {
        let cli = Cli::try_parse_from([
            "herald-bench",
            "router-throughput",
            "--router-bin",
            "target/release/herald-router",
        ])
        .unwrap();
        let Command::RouterThroughput(args) = cli.command else {
            panic!("not router-throughput");
        };
        assert_eq!(args.messages, 200_000);
        assert_eq!(args.payload_bytes, 200);
        assert_eq!(args.publishers, 2);
        assert_eq!(args.prefetch, None);
        assert!(!args.json);
        assert!(
            Cli::try_parse_from(["herald-bench", "router-throughput"]).is_err(),
            "--router-bin is required"
        );
    }

    #[test]
    fn parses_latency() {
        let cli = Cli::try_parse_from([
            "herald-bench",
            "latency",
            "--router-bin",
            "r",
            "--gateway-bin",
            "g",
            "--rate",
            "1000",
            "--json",
        ])
        .unwrap();
        let Command::Latency(args) = cli.command else {
            panic!("not latency");
        };
        assert_eq!(args.rate, 1000);
        assert_eq!(args.seconds, 10);
        assert_eq!(args.sessions, 100);
        assert!(args.json);
    }

    #[test]
    fn parses_delayed() {
        let cli = Cli::try_parse_from([
            "herald-bench",
            "delayed",
            "--scenario",
            "herd",
            "--router-bin",
            "r",
            "--gateway-bin",
            "g",
            "--count",
            "1000",
        ])
        .unwrap();
        let Command::Delayed(args) = cli.command else {
            panic!("not delayed");
        };
        assert_eq!(args.scenario, Scenario::Herd);
        assert_eq!(args.target, DelayedTarget::Router);
        assert_eq!(args.count, Some(1000));
        assert_eq!(args.batch, 1000);
        assert_eq!(args.rate, 10_000);
        assert!(!args.json);
        assert!(
            Cli::try_parse_from(["herald-bench", "delayed"]).is_err(),
            "--scenario is required"
        );
        assert!(Cli::try_parse_from(["herald-bench", "delayed", "--scenario", "soon"]).is_err());
    }

    #[test]
    fn spawn_gateway_makes_secret_optional_and_conflicts_with_pid() {
        assert!(
            Cli::try_parse_from([
                "herald-bench",
                "connections",
                "--sessions",
                "1",
                "--spawn-gateway",
                "/bin/gw"
            ])
            .is_ok()
        );
        assert!(
            Cli::try_parse_from([
                "herald-bench",
                "connections",
                "--sessions",
                "1",
                "--spawn-gateway",
                "/bin/gw",
                "--gateway-pid",
                "1",
            ])
            .is_err()
        );
    }
}
