//! The systems a comparison runs: Herald (a standalone `herald-gateway`) and each peer, behind
//! one face: start, where sessions connect and with what, where a notification is published, the
//! CPU and memory of every process the server runs, stop.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::args::{CompareArgs, Peer};
use super::audience::Audience;
use super::nchan::{self, Nchan};
use super::node_peer::{self, NodePeer};
use super::rabbitmq::Rabbit;
use crate::client::transport::Transport;
use crate::harness::cpu::CpuTime;
use crate::harness::interrupt::interruptible;
use crate::harness::outcome::BenchError;
use crate::harness::proctree;
use crate::harness::rss::Reading;
use crate::harness::standalone::{Gateway, Launch};

/// The `event` of Herald's notifications.
const EVENT: &str = "bench.compare";

/// Which system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum System {
    Herald,
    /// Another build of Herald (`--baseline-gateway-bin`), run exactly as Herald is.
    #[serde(rename = "herald-baseline")]
    Baseline,
    Nchan,
    Rabbitmq,
    /// Socket.IO 4 on Node.js.
    #[serde(rename = "socketio")]
    SocketIo,
    /// sockjs-node.
    Sockjs,
}

impl System {
    pub(crate) fn of(peer: Peer) -> Self {
        match peer {
            Peer::Baseline => System::Baseline,
            Peer::Nchan => System::Nchan,
            Peer::Rabbitmq => System::Rabbitmq,
            Peer::Socketio => System::SocketIo,
            Peer::Sockjs => System::Sockjs,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            System::Herald => "herald",
            System::Baseline => "herald-baseline",
            System::Nchan => "nchan",
            System::Rabbitmq => "rabbitmq",
            System::SocketIo => "socketio",
            System::Sockjs => "sockjs",
        }
    }

    /// How its sessions connect.
    pub(crate) fn transport(self) -> Transport {
        match self {
            System::Herald | System::Baseline => Transport::WebSocket,
            System::Nchan => Transport::RawWebSocket,
            System::Rabbitmq => Transport::BrokerStomp,
            System::SocketIo => Transport::SocketIo,
            System::Sockjs => Transport::SockJsPlain,
        }
    }

    /// What it does that the others may not, for the report.
    pub(crate) fn notes(self, args: &CompareArgs) -> String {
        match self {
            System::Herald => "standalone herald-gateway, its defaults; every session checks a \
                               JWT (HS256), speaks STOMP 1.2 over WebSocket, has a mailbox \
                               that keeps its notifications for replay; tokio runtime with one \
                               thread per core"
                .to_owned(),
            System::Baseline => "the herald-gateway of --baseline-gateway-bin, run exactly as \
                                 Herald is (its defaults, the same client)"
                .to_owned(),
            System::Nchan => format!(
                "nginx with Nchan, {} worker process(es); no authentication; raw WebSocket \
                 messages, no STOMP; a channel per user, or one channel for all (broadcast); \
                 its message buffer at its defaults",
                nchan_workers(args)
            ),
            System::Rabbitmq => "a RabbitMQ node of its own with rabbitmq_web_stomp, its \
                                 defaults; STOMP 1.2 over WebSocket as guest (no token); a \
                                 queue per subscription on amq.topic (/topic/{user}, or \
                                 /topic/broadcast); published over AMQP, transient, confirmed"
                .to_owned(),
            System::SocketIo => "Socket.IO 4 in one Node.js process (its in-memory adapter \
                                 cannot span processes), websocket transport only, its \
                                 defaults (ping every 25 s, no connection-state recovery); no \
                                 authentication; a room per user, or one room for all \
                                 (broadcast); published over HTTP to the same process, each \
                                 notification emitted as the event `n`"
                .to_owned(),
            System::Sockjs => "sockjs-node in one Node.js process, its websocket transport, \
                               its defaults (heartbeat every 25 s); no authentication; a set of \
                               sessions per channel (a user, or one for all), kept by the peer's \
                               script; published over HTTP to the same process"
                .to_owned(),
        }
    }
}

/// At least this long for a RabbitMQ node to boot.
const RABBIT_STARTUP: Duration = Duration::from_secs(90);

/// nginx workers for Nchan: `--nchan-workers`, or one per core.
pub(crate) fn nchan_workers(args: &CompareArgs) -> usize {
    args.nchan_workers
        .unwrap_or_else(crate::harness::cpu::cores)
        .max(1)
}

/// Where a publication goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PublishTo {
    /// `POST` to this path (with its query) on the server's address.
    Http(String),
    /// An AMQP message to [`super::rabbitmq::EXCHANGE`] with this routing key.
    Amqp { routing_key: String },
}

/// A running server.
pub(crate) struct Server {
    pub(crate) system: System,
    pub(crate) addr: SocketAddr,
    /// The exact command it runs, for the report.
    pub(crate) command: String,
    inner: Inner,
}

enum Inner {
    Herald(Gateway),
    Nchan(Nchan),
    Rabbit(Rabbit),
    Node(NodePeer),
}

impl Server {
    /// Starts `system`; `label` names its log file in `--log-dir`.
    pub(crate) async fn start(
        system: System,
        args: &CompareArgs,
        label: &str,
    ) -> Result<Self, BenchError> {
        let log: Option<PathBuf> = args
            .log_dir
            .as_ref()
            .map(|dir| dir.join(format!("{}-{label}.log", system.name())));
        let timeout = Duration::from_secs(args.startup_timeout);
        match system {
            System::Herald | System::Baseline => {
                let bin = match system {
                    System::Baseline => args.baseline_gateway_bin(),
                    _ => args.gateway_bin(),
                };
                let gateway = Gateway::start(&Launch {
                    bin,
                    log: log.as_deref(),
                    startup_timeout: timeout,
                })
                .await?;
                Ok(Self {
                    system,
                    addr: gateway.addr,
                    command: gateway.command(),
                    inner: Inner::Herald(gateway),
                })
            }
            System::Nchan => {
                let nchan = Nchan::start(nchan_workers(args), log.as_deref(), timeout).await?;
                Ok(Self {
                    system,
                    addr: nchan.addr,
                    command: nchan.command.clone(),
                    inner: Inner::Nchan(nchan),
                })
            }
            System::Rabbitmq => {
                // A node takes longer to boot than the others.
                let timeout = timeout.max(RABBIT_STARTUP);
                let rabbit = Rabbit::start(log.as_deref(), timeout).await?;
                Ok(Self {
                    system,
                    addr: rabbit.addr,
                    command: rabbit.command.clone(),
                    inner: Inner::Rabbit(rabbit),
                })
            }
            System::SocketIo | System::Sockjs => {
                let kind = if system == System::SocketIo {
                    node_peer::Kind::SocketIo
                } else {
                    node_peer::Kind::Sockjs
                };
                let peer = NodePeer::start(kind, &args.peers_dir, log.as_deref(), timeout).await?;
                Ok(Self {
                    system,
                    addr: peer.addr,
                    command: peer.command.clone(),
                    inner: Inner::Node(peer),
                })
            }
        }
    }

    /// Starts `system`, runs `measure` on it, and stops it whatever came of that (saying on
    /// stderr how it stopped when the measurement failed).
    pub(crate) async fn with_fresh<T>(
        system: System,
        args: &CompareArgs,
        label: &str,
        measure: impl AsyncFnOnce(&Server) -> Result<T, BenchError>,
    ) -> Result<T, BenchError> {
        let server = Server::start(system, args, label).await?;
        // Interrupted, the measurement is dropped and the server still stopped its own way.
        let measured = interruptible(measure(&server)).await;
        let how = server.finish().await;
        if measured.is_err() {
            eprintln!("herald-bench: {} {how}", system.name());
        }
        measured
    }

    fn root_pid(&self) -> u32 {
        match &self.inner {
            Inner::Herald(g) => g.pid(),
            Inner::Nchan(n) => n.pid(),
            Inner::Rabbit(r) => r.pid(),
            Inner::Node(n) => n.pid(),
        }
    }

    /// The processes it runs now.
    pub(crate) fn pids(&self) -> Vec<u32> {
        proctree::pids(self.root_pid())
    }

    /// CPU time used so far by all its processes.
    pub(crate) fn cpu(&self) -> Result<CpuTime, BenchError> {
        proctree::cpu(self.root_pid())
            .map_err(|e| BenchError::Failed(format!("{}: reading CPU: {e}", self.system.name())))
    }

    /// Its processes' summed proportional set size, once settled.
    pub(crate) async fn settled_pss(&self) -> Result<Reading, BenchError> {
        proctree::settled_pss(self.root_pid())
            .await
            .map_err(|e| BenchError::Failed(format!("{}: reading PSS: {e}", self.system.name())))
    }

    /// Where sessions connect (for [`System::transport`]).
    pub(crate) fn session_url(&self) -> String {
        self.system.transport().url(&self.addr.to_string())
    }

    /// The HS256 secret Herald checks tokens with; `None` for a peer without authentication.
    pub(crate) fn jwt_secret(&self) -> Option<&str> {
        match &self.inner {
            Inner::Herald(g) => Some(&g.jwt_secret),
            Inner::Nchan(_) | Inner::Rabbit(_) | Inner::Node(_) => None,
        }
    }

    /// The AMQP URL publications go to, for a peer published to over AMQP.
    pub(crate) fn amqp_url(&self) -> Option<&str> {
        match &self.inner {
            Inner::Rabbit(r) => Some(&r.amqp_url),
            Inner::Herald(_) | Inner::Nchan(_) | Inner::Node(_) => None,
        }
    }

    /// The API key for publishing (any value for a peer that checks none).
    pub(crate) fn api_key(&self) -> &str {
        match &self.inner {
            Inner::Herald(g) => &g.api_key,
            Inner::Nchan(_) | Inner::Rabbit(_) | Inner::Node(_) => "none",
        }
    }

    /// The channel a raw session subscribes to for `audience`, as user `user`.
    pub(crate) fn channel(&self, audience: Audience, user: &str) -> String {
        match audience {
            Audience::Broadcast => nchan::BROADCAST_CHANNEL.to_owned(),
            Audience::PerUser => user.to_owned(),
        }
    }

    /// Where one notification to `audience` (to `user` when per user) is published; the body
    /// is the payload (`text/plain` over HTTP).
    pub(crate) fn publish_to(&self, audience: Audience, user: &str) -> PublishTo {
        match (self.system, audience) {
            (System::Herald | System::Baseline, Audience::Broadcast) => {
                PublishTo::Http(format!("/v1/notifications?scope=global&event={EVENT}"))
            }
            (System::Herald | System::Baseline, Audience::PerUser) => {
                PublishTo::Http(format!("/v1/notifications?users={user}&event={EVENT}"))
            }
            // The Node peers take Nchan's publishing interface.
            (System::Nchan | System::SocketIo | System::Sockjs, _) => {
                PublishTo::Http(format!("/pub/{}", self.channel(audience, user)))
            }
            (System::Rabbitmq, _) => PublishTo::Amqp {
                routing_key: self.channel(audience, user),
            },
        }
    }

    /// Whether an HTTP publish answer means accepted.
    pub(crate) fn accepted(&self, status: u16) -> bool {
        match self.system {
            System::Herald | System::Baseline => status == 202,
            // 201 Created (no subscriber yet) or 202 Accepted (queued for subscribers).
            System::Nchan => status == 201 || status == 202,
            System::SocketIo | System::Sockjs => status == 202,
            System::Rabbitmq => false,
        }
    }

    /// Stops it and removes its files; how it ended.
    pub(crate) async fn finish(self) -> String {
        match self.inner {
            Inner::Herald(g) => g.finish().await,
            Inner::Nchan(n) => n.finish().await,
            Inner::Rabbit(r) => r.finish().await,
            Inner::Node(n) => n.finish().await,
        }
    }
}
