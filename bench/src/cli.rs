//! Command-line interface: `herald-bench <command>`. Each command's arguments live with the
//! command ([`crate::connections::ConnectionsArgs`], ...); this module only names the commands.

use clap::{Parser, Subcommand};

use crate::callbacks::CallbacksArgs;
use crate::compare::CompareArgs;
use crate::connections::ConnectionsArgs;
use crate::delayed::DelayedArgs;
use crate::latency::LatencyArgs;
use crate::publish::PublishArgs;
use crate::retained::RetainedArgs;
use crate::router_throughput::RouterThroughputArgs;
use crate::soak::SoakArgs;
use crate::worker::WorkerArgs;

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
    /// Callbacks: a local receiver called by Herald (standalone or router) when notifications
    /// of a callback topic fall due, and by a BullMQ Worker doing the same job on the same
    /// Redis, alternated run by run: throughput, lateness at a rate, a herd, and the ratios.
    Callbacks(CallbacksArgs),
    /// Start a standalone herald-gateway, subscribe sessions, publish notifications one per
    /// request (raw or JSON path) that stay in the users' mailboxes, and measure the gateway's
    /// RSS growth per retained notification.
    Retained(RetainedArgs),
    /// Herald beside the servers its users would pick instead (Nchan), installed and started
    /// by the bench: idle sessions and broadcasts, the same client, one run, ratios round by
    /// round; Markdown and JSON.
    Compare(CompareArgs),
    /// Start a standalone herald-gateway (and, alternated, the build before a change) and
    /// measure what the HTTP publish path costs it: server CPU per notification, one per
    /// request or in batches, one request in flight per connection or pipelined.
    Publish(PublishArgs),
    /// The distributed deployment (deploy/up) under mixed traffic for `--minutes` (30):
    /// session churn, per-user, client and global publications over HTTP and AMQP, delayed and
    /// callback notifications, presence; every process's RSS, descriptors and threads and the
    /// stores' sizes sampled once a minute; nothing may be lost, and the slope of each series
    /// after the warm-up is the figure (goal: flat). Markdown, JSON and an SVG plot.
    Soak(SoakArgs),
    /// Internal: one worker process of a benchmark. Started by the parent, talks JSON lines.
    #[command(hide = true)]
    Worker(WorkerArgs),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::transport::Transport;
    use crate::delayed::args::Scenario;
    use crate::scheduled::system::Target;
    use clap::CommandFactory as _;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_retained() {
        let cli = Cli::try_parse_from([
            "herald-bench",
            "retained",
            "--gateway-bin",
            "/tmp/herald-gateway",
            "--path",
            "json",
        ])
        .unwrap();
        let Command::Retained(args) = cli.command else {
            panic!("not retained");
        };
        assert_eq!(args.path, crate::retained::args::PublishPath::Json);
        assert_eq!((args.users, args.per_user, args.payload), (1000, 50, 100));
        assert_eq!(args.check(), Ok(()));
        let cli = Cli::try_parse_from([
            "herald-bench",
            "retained",
            "--gateway-bin",
            "g",
            "--per-user",
            "256",
        ])
        .unwrap();
        let Command::Retained(args) = cli.command else {
            panic!("not retained");
        };
        assert!(
            args.check()
                .unwrap_err()
                .contains("mailbox.buffer_messages")
        );
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
        assert_eq!(args.target, Target::Router);
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

    fn compare(extra: &[&str]) -> crate::compare::CompareArgs {
        let mut argv = vec!["herald-bench", "compare", "--gateway-bin", "/bin/gw"];
        argv.extend_from_slice(extra);
        let Command::Compare(args) = Cli::try_parse_from(argv).unwrap().command else {
            panic!("not compare");
        };
        args
    }

    #[test]
    fn parses_compare() {
        use crate::compare::args::{Peer, Scenario};
        let args = compare(&[]);
        assert_eq!(
            args.peers,
            vec![Peer::Nchan, Peer::Rabbitmq, Peer::Socketio, Peer::Sockjs]
        );
        assert_eq!(
            args.scenarios,
            vec![
                Scenario::Idle,
                Scenario::Broadcast,
                Scenario::PerUser,
                Scenario::Large
            ]
        );
        assert_eq!((args.large_sessions, args.large_bytes), (1_000, 409_600));
        assert_eq!(
            args.user_rates,
            vec![2_000, 5_000, 10_000, 20_000, 30_000, 40_000]
        );
        assert_eq!((args.user_sessions, args.publishers), (5_000, 16));
        assert_eq!(args.idle_sessions, vec![2_000, 10_000]);
        assert_eq!(args.rates, vec![10_000, 50_000]);
        assert_eq!((args.rounds, args.broadcast_sessions), (2, 5_000));
        assert!(args.peers_dir.ends_with("bench/peers"));
        assert_eq!(args.check(), Ok(()));
        let args = compare(&["--scenarios", "broadcast", "--rates", "1000,20000"]);
        assert!(args.check().unwrap_err().contains("--rates: 1000"));
        let args = compare(&["--idle-sessions", "500,20000"]);
        assert!(args.check().unwrap_err().contains("--idle-sessions: 20000"));
        // Idle counts are not checked when only the broadcast runs.
        let args = compare(&["--idle-sessions", "20000", "--scenarios", "broadcast"]);
        assert_eq!(args.check(), Ok(()));
        let args = compare(&["--payload-bytes", "10"]);
        assert!(args.check().unwrap_err().contains("--payload-bytes"));
        let args = compare(&["--rounds", "0"]);
        assert!(args.check().unwrap_err().contains("--rounds"));
        let args = compare(&["--scenarios", "per-user", "--user-rates", "0"]);
        assert!(args.check().unwrap_err().contains("--user-rates"));
        let args = compare(&["--user-sessions", "10001"]);
        assert!(args.check().unwrap_err().contains("--user-sessions"));
        let args = compare(&["--large-bytes", "2000000"]);
        assert!(args.check().unwrap_err().contains("--large-bytes"));
        let args = compare(&["--publishers", "0"]);
        assert!(args.check().unwrap_err().contains("--publishers"));
        let args = compare(&["--nchan-workers", "0"]);
        assert!(args.check().unwrap_err().contains("--nchan-workers"));
        let args = compare(&["--peers", "baseline"]);
        assert!(args.check().unwrap_err().contains("--baseline-gateway-bin"));
        let args = compare(&["--baseline-gateway-bin", "/bin/old"]);
        assert!(args.check().unwrap_err().contains("does not name baseline"));
        let args = compare(&["--peers", "baseline", "--baseline-gateway-bin", "/bin/old"]);
        assert_eq!(args.peers, vec![Peer::Baseline]);
        assert_eq!(args.check(), Ok(()));
        assert!(
            Cli::try_parse_from([
                "herald-bench",
                "compare",
                "--gateway-bin",
                "g",
                "--peers",
                "x"
            ])
            .is_err()
        );
    }
}
