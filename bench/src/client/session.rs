//! One bench session: TCP connect from a chosen source address, the transport's opening
//! (WebSocket upgrade, SockJS open frame, or xhr_streaming response), `CONNECT` -> `CONNECTED`,
//! `SUBSCRIBE` (with a receipt) -> `RECEIPT`, then holding the session idle, reading whatever
//! the server sends, until told to close.
//!
//! # Layout
//! - this module: what every transport shares: the [`Target`], failures and their reasons,
//!   the STOMP handshake over a [`Link`], and [`run`], which opens a session and moves it to a
//!   task of its own.
//! - [`websocket`]: STOMP over WebSocket, raw (`/ws`) or inside SockJS frames.
//! - [`xhr_streaming`]: STOMP inside SockJS frames over an xhr_streaming response, with
//!   `xhr_send` requests on a keep-alive connection the worker's sessions share.
//! - [`record`]: an open `/ws` session that parses and time-stamps the delayed benchmark's
//!   messages (`worker --record`).
//!
//! Memory per open session is kept small because a worker holds up to 19,000 of them: see each
//! transport's module docs.

pub(crate) mod record;
pub(crate) mod websocket;
pub(crate) mod xhr_streaming;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::client::stomp_client::{self, Decoded, Frame};
use crate::client::transport::Transport;
use crate::client::upgrade::UpgradeError;

/// The user destination every session subscribes to.
pub(crate) const DESTINATION: &str = "/user/notifications";

/// What every session of a worker shares.
#[derive(Debug)]
pub(crate) struct Target {
    pub(crate) transport: Transport,
    /// `Host` header of the requests (`host:port`).
    pub(crate) host_header: String,
    /// Path of the STOMP WebSocket endpoint, or of the SockJS service (no trailing `/`).
    pub(crate) path: String,
    /// The resolved address to connect to.
    pub(crate) addr: SocketAddr,
    /// Local address to bind before connecting.
    pub(crate) source: Option<IpAddr>,
    /// Deadline for the whole handshake (TCP to RECEIPT).
    pub(crate) handshake_timeout: Duration,
    /// STOMP: `SUBSCRIBE` in the same message as `CONNECT`, not after `CONNECTED`.
    pub(crate) pipelined: bool,
    /// The keep-alive connections xhr-streaming sessions send on (unused by the others).
    pub(crate) xhr_sends: xhr_streaming::SendPool,
}

/// The handshake step a session was in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    Tcp,
    Upgrade,
    /// The `POST .../xhr_streaming` request and its response head.
    Stream,
    /// Waiting for the SockJS open frame.
    Open,
    /// Waiting for Socket.IO's open packet (Engine.IO's `0`).
    SocketIoOpen,
    Connected,
    Receipt,
}

impl Stage {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Stage::Tcp => "tcp",
            Stage::Upgrade => "upgrade",
            Stage::Stream => "xhr_streaming request",
            Stage::Open => "sockjs open",
            Stage::SocketIoOpen => "socket.io open",
            Stage::Connected => "connected",
            Stage::Receipt => "receipt",
        }
    }
}

/// Why a session did not open. [`Failure::reason`] is the key failures are counted under, so it
/// keeps few distinct values (error kinds, not messages with addresses in them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    Token(String),
    Socket(std::io::ErrorKind),
    Bind(std::io::ErrorKind),
    Connect(std::io::ErrorKind),
    /// The WebSocket upgrade was answered with this status.
    Http(u16),
    Upgrade(UpgradeError),
    WebSocket(String),
    /// The xhr_streaming request was answered with this status.
    StreamHttp(u16),
    /// An xhr_send request was answered with this status (not 204).
    SendHttp(u16),
    /// An HTTP response the bench could not read.
    HttpProtocol(String),
    /// A socket error other than a reset, during `Stage`.
    Io(Stage, std::io::ErrorKind),
    /// The server sent a SockJS close frame.
    SockJsClosed {
        code: u16,
        reason: String,
    },
    /// Bytes that are not SockJS framing.
    SockJs(String),
    /// The server answered with a STOMP `ERROR` frame; carries its `message` header.
    StompError(String),
    Protocol(String),
    Closed(Stage),
    Timeout(Stage),
}

impl Failure {
    pub(crate) fn reason(&self) -> String {
        match self {
            Failure::Token(e) => format!("token: {e}"),
            Failure::Socket(kind) => format!("socket: {kind:?}"),
            Failure::Bind(kind) => format!("bind: {kind:?}"),
            Failure::Connect(kind) => format!("connect: {kind:?}"),
            Failure::Http(status) => format!("upgrade: http {status}"),
            Failure::Upgrade(e) => format!("upgrade: {e}"),
            Failure::WebSocket(e) => format!("websocket: {e}"),
            Failure::StreamHttp(status) => format!("xhr_streaming: http {status}"),
            Failure::SendHttp(status) => format!("xhr_send: http {status}"),
            Failure::HttpProtocol(e) => format!("http: {e}"),
            Failure::Io(stage, kind) => format!("io {kind:?} during {}", stage.name()),
            Failure::SockJsClosed { code, reason } => {
                format!("sockjs close {code}: {}", short(reason, "(no reason)"))
            }
            Failure::SockJs(e) => format!("sockjs: {e}"),
            Failure::StompError(message) => {
                format!("stomp error: {}", short(message, "(no message header)"))
            }
            Failure::Protocol(e) => format!("protocol: {e}"),
            Failure::Closed(stage) => format!("closed during {}", stage.name()),
            Failure::Timeout(stage) => format!("timeout during {}", stage.name()),
        }
    }

    /// A socket error during `stage`: a reset counts as the server closing.
    pub(crate) fn io(stage: Stage, e: &std::io::Error) -> Self {
        if is_reset(e.kind()) {
            Failure::Closed(stage)
        } else {
            Failure::Io(stage, e.kind())
        }
    }
}

/// A server-chosen text, cut to keep the reason keys short; `empty` stands for no text.
fn short(text: &str, empty: &str) -> String {
    if text.is_empty() {
        return empty.to_owned();
    }
    text.chars().take(80).collect()
}

pub(crate) fn is_reset(kind: std::io::ErrorKind) -> bool {
    matches!(
        kind,
        std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::BrokenPipe
            | std::io::ErrorKind::UnexpectedEof
    )
}

/// A TCP connection to `addr`, from `source` if given, without Nagle (the handshake's frames
/// are small and latency-bound).
pub(crate) async fn connect_tcp(
    addr: SocketAddr,
    source: Option<IpAddr>,
) -> Result<TcpStream, Failure> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(|e| Failure::Socket(e.kind()))?;
    if let Some(source) = source {
        socket
            .bind(SocketAddr::new(source, 0))
            .map_err(|e| Failure::Bind(e.kind()))?;
    }
    let stream = socket
        .connect(addr)
        .await
        .map_err(|e| Failure::Connect(e.kind()))?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// The STOMP conversation of a session during its handshake, over whichever transport.
pub(crate) trait Link {
    /// Sends one STOMP frame.
    async fn send_frame(&mut self, frame: &str, stage: Stage) -> Result<(), Failure>;
    /// Waits for more of the server's STOMP byte stream and appends it to `buffer`.
    async fn receive(&mut self, buffer: &mut Vec<u8>, stage: Stage) -> Result<(), Failure>;
}

/// Who a STOMP session is and what it subscribes to.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Login<'a> {
    /// Herald: the JWT as passcode, the user's destination [`DESTINATION`].
    Jwt(&'a str),
    /// A broker (RabbitMQ Web STOMP): `guest` on the vhost `/`, the destination
    /// `/topic/{topic}`.
    BrokerGuest { topic: &'a str },
}

impl<'a> Login<'a> {
    /// The login of a session over `transport` with `credential` (see [`run`]).
    pub(crate) fn of(transport: Transport, credential: &'a str) -> Self {
        if transport == Transport::BrokerStomp {
            Login::BrokerGuest { topic: credential }
        } else {
            Login::Jwt(credential)
        }
    }

    fn connect_frame(self) -> String {
        let headers: &[(&str, &str)] = match self {
            Login::Jwt(token) => &[
                ("accept-version", "1.2"),
                ("host", "herald"),
                ("passcode", token),
                ("heart-beat", "0,0"),
            ],
            Login::BrokerGuest { .. } => &[
                ("accept-version", "1.2"),
                ("host", "/"),
                ("login", "guest"),
                ("passcode", "guest"),
                ("heart-beat", "0,0"),
            ],
        };
        stomp_client::encode_text("CONNECT", headers, "")
    }

    fn destination(self) -> String {
        match self {
            Login::Jwt(_) => DESTINATION.to_owned(),
            Login::BrokerGuest { topic } => format!("/topic/{topic}"),
        }
    }
}

/// `CONNECT` -> `CONNECTED`, `SUBSCRIBE` with a receipt -> `RECEIPT`, as `login`; `pipelined`:
/// `CONNECT` and `SUBSCRIBE` in one message, then `CONNECTED` and `RECEIPT` (one round trip
/// less). `frames.stage` says how far it got (to name a timeout).
pub(crate) async fn stomp_handshake<L: Link>(
    link: &mut L,
    login: Login<'_>,
    frames: &mut FrameReader,
    pipelined: bool,
) -> Result<(), Failure> {
    let connect = login.connect_frame();
    frames.stage = Stage::Connected;
    let subscribe = stomp_client::encode_text(
        "SUBSCRIBE",
        &[
            ("id", "sub-0"),
            ("destination", &login.destination()),
            ("ack", "auto"),
            ("receipt", "r-0"),
        ],
        "",
    );
    let first = if pipelined {
        format!("{connect}{subscribe}")
    } else {
        connect
    };
    link.send_frame(&first, Stage::Connected).await?;
    frames.expect(link, Stage::Connected, "CONNECTED").await?;
    if !pipelined {
        link.send_frame(&subscribe, Stage::Receipt).await?;
    }
    frames.stage = Stage::Receipt;
    loop {
        let receipt = frames.expect(link, Stage::Receipt, "RECEIPT").await?;
        if receipt.header("receipt-id") == Some("r-0") {
            return Ok(());
        }
    }
}

/// Collects STOMP frames from a [`Link`] during the handshake. A frame may in principle span
/// messages or share one with the next frame, so leftovers are kept.
pub(crate) struct FrameReader {
    buffer: Vec<u8>,
    /// The step being waited for, to name a timeout.
    pub(crate) stage: Stage,
}

impl FrameReader {
    pub(crate) fn new(stage: Stage) -> Self {
        Self {
            buffer: Vec::new(),
            stage,
        }
    }

    /// Waits for a frame with `command`, skipping heart-beats and `MESSAGE` frames (a replay may
    /// legitimately arrive before the receipt). An `ERROR` frame ends the session.
    async fn expect<L: Link>(
        &mut self,
        link: &mut L,
        stage: Stage,
        command: &str,
    ) -> Result<Frame, Failure> {
        self.stage = stage;
        loop {
            match stomp_client::decode(&self.buffer) {
                Ok(Some((decoded, used))) => {
                    self.buffer.drain(..used);
                    match decoded {
                        Decoded::HeartBeat => {}
                        Decoded::Frame(f) if f.command == command => return Ok(f),
                        Decoded::Frame(f) if f.command == "ERROR" => {
                            return Err(Failure::StompError(
                                f.header("message").unwrap_or_default().to_owned(),
                            ));
                        }
                        Decoded::Frame(f) if f.command == "MESSAGE" => {}
                        Decoded::Frame(f) => {
                            return Err(Failure::Protocol(format!(
                                "expected {command}, got {}",
                                f.command
                            )));
                        }
                    }
                    continue;
                }
                Ok(None) => {}
                Err(e) => return Err(Failure::Protocol(e.to_string())),
            }
            link.receive(&mut self.buffer, stage).await?;
        }
    }
}

/// Per-worker counters shared by its sessions.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// STOMP frames and heart-beats received on open sessions (SockJS heartbeats included).
    pub(crate) frames_received: AtomicU64,
    pub(crate) dropped: AtomicU64,
}

/// An open session, ready to be held.
enum Opened {
    WebSocket(websocket::Ws, websocket::Framing),
    XhrStreaming(xhr_streaming::Stream),
}

async fn open(target: &Arc<Target>, token: &str) -> Result<Opened, Failure> {
    // `token` is the credential of `run`.
    let framing = match target.transport {
        Transport::XhrStreaming => {
            return xhr_streaming::open(target.clone(), token)
                .await
                .map(Opened::XhrStreaming);
        }
        Transport::WebSocket | Transport::BrokerStomp => websocket::Framing::Stomp,
        Transport::SockJsWebSocket => websocket::Framing::SockJs,
        Transport::RawWebSocket => websocket::Framing::Raw,
        Transport::SocketIo => websocket::Framing::SocketIo,
        Transport::SockJsPlain => websocket::Framing::SockJsPlain,
    };
    websocket::open(target, token, framing)
        .await
        .map(|ws| Opened::WebSocket(ws, framing))
}

/// Opens one session with `credential`: the JWT of a Herald session, or the channel (topic) a
/// peer's session subscribes to (see [`Transport::presents_jwt`]). `handshake_slot` is held only while
/// the handshake runs (it bounds the handshakes in flight); the result goes to `outcomes` as
/// soon as it is known. An open session moves to a task of its own on `tracker` and this task
/// ends, so the memory of the handshake's future (about 3 KiB) is not kept for the life of the
/// session. With a `recorder` (only over
/// [`Transport::WebSocket`]), the open session records what it receives ([`record`]).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run(
    target: Arc<Target>,
    credential: String,
    handshake_slot: OwnedSemaphorePermit,
    outcomes: mpsc::Sender<Result<(), Failure>>,
    cancel: CancellationToken,
    counters: Arc<Counters>,
    tracker: TaskTracker,
    recorder: Option<Arc<record::Recorder>>,
) {
    let opened = tokio::select! {
        biased;
        () = cancel.cancelled() => Err(Failure::Closed(Stage::Tcp)),
        result = open(&target, &credential) => result,
    };
    drop(handshake_slot);
    let outcome = opened.map(|session| match (session, recorder) {
        (Opened::WebSocket(ws, websocket::Framing::Stomp), Some(recorder)) => {
            tracker.spawn(record::hold(ws, cancel, counters, recorder));
        }
        (Opened::WebSocket(ws, framing), _) => {
            tracker.spawn(websocket::hold(ws, framing, cancel, counters));
        }
        (Opened::XhrStreaming(stream), _) => {
            tracker.spawn(xhr_streaming::hold(stream, cancel, counters));
        }
    });
    // The receiver lives as long as the worker; if it is gone, we are shutting down anyway.
    let _ = outcomes.send(outcome).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that answers each message it is sent with the next canned answer.
    struct Scripted {
        sent: Vec<String>,
        answers: std::collections::VecDeque<&'static str>,
    }

    impl Link for Scripted {
        async fn send_frame(&mut self, frame: &str, _stage: Stage) -> Result<(), Failure> {
            self.sent.push(frame.to_owned());
            Ok(())
        }

        async fn receive(&mut self, buffer: &mut Vec<u8>, stage: Stage) -> Result<(), Failure> {
            let answer = self.answers.pop_front().ok_or(Failure::Timeout(stage))?;
            buffer.extend_from_slice(answer.as_bytes());
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_pipelined_handshake_sends_connect_and_subscribe_in_one_message() {
        for pipelined in [false, true] {
            let mut link = Scripted {
                sent: Vec::new(),
                answers: if pipelined {
                    ["CONNECTED\nversion:1.2\n\n\0RECEIPT\nreceipt-id:r-0\n\n\0"].into()
                } else {
                    [
                        "CONNECTED\nversion:1.2\n\n\0",
                        "RECEIPT\nreceipt-id:r-0\n\n\0",
                    ]
                    .into()
                },
            };
            let mut frames = FrameReader::new(Stage::Connected);
            stomp_handshake(&mut link, Login::Jwt("tok"), &mut frames, pipelined)
                .await
                .unwrap();
            let commands: Vec<Vec<&str>> = link
                .sent
                .iter()
                .map(|m| {
                    m.split('\0')
                        .filter(|f| !f.is_empty())
                        .map(|f| f.lines().next().unwrap())
                        .collect()
                })
                .collect();
            if pipelined {
                assert_eq!(commands, [vec!["CONNECT", "SUBSCRIBE"]]);
            } else {
                assert_eq!(commands, [vec!["CONNECT"], vec!["SUBSCRIBE"]]);
            }
        }
    }

    #[test]
    fn failure_reasons_are_stable_keys() {
        assert_eq!(
            Failure::Connect(std::io::ErrorKind::ConnectionRefused).reason(),
            "connect: ConnectionRefused"
        );
        assert_eq!(
            Failure::Bind(std::io::ErrorKind::AddrNotAvailable).reason(),
            "bind: AddrNotAvailable"
        );
        assert_eq!(Failure::Http(401).reason(), "upgrade: http 401");
        assert_eq!(Failure::StreamHttp(404).reason(), "xhr_streaming: http 404");
        assert_eq!(Failure::SendHttp(500).reason(), "xhr_send: http 500");
        assert_eq!(
            Failure::SockJsClosed {
                code: 3000,
                reason: "Go away!".into()
            }
            .reason(),
            "sockjs close 3000: Go away!"
        );
        assert_eq!(
            Failure::StompError("invalid token".into()).reason(),
            "stomp error: invalid token"
        );
        assert_eq!(
            Failure::StompError(String::new()).reason(),
            "stomp error: (no message header)"
        );
        assert_eq!(
            Failure::Timeout(Stage::Receipt).reason(),
            "timeout during receipt"
        );
        assert_eq!(
            Failure::Timeout(Stage::Open).reason(),
            "timeout during sockjs open"
        );
        assert_eq!(
            Failure::Closed(Stage::Upgrade).reason(),
            "closed during upgrade"
        );
        assert_eq!(
            Failure::io(
                Stage::Stream,
                &std::io::Error::from(std::io::ErrorKind::ConnectionReset)
            ),
            Failure::Closed(Stage::Stream)
        );
        assert_eq!(
            Failure::io(
                Stage::Stream,
                &std::io::Error::from(std::io::ErrorKind::PermissionDenied)
            )
            .reason(),
            "io PermissionDenied during xhr_streaming request"
        );
        let long = "x".repeat(500);
        assert!(Failure::StompError(long).reason().len() < 100);
    }
}
