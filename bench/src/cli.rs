//! Command-line interface: `herald-bench <command>`. Each command's arguments live with the
//! command ([`crate::connections::ConnectionsArgs`], ...); this module only names the commands.

use clap::{Parser, Subcommand};

use crate::callbacks::CallbacksArgs;
use crate::connections::ConnectionsArgs;
use crate::delayed::DelayedArgs;
use crate::latency::LatencyArgs;
use crate::retained::RetainedArgs;
use crate::router_throughput::RouterThroughputArgs;
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
}
