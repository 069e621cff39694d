//! One bench session: TCP connect from a chosen source address, WebSocket upgrade with the STOMP
//! subprotocols, `CONNECT` -> `CONNECTED`, `SUBSCRIBE` (with a receipt) -> `RECEIPT`, then
//! draining whatever the server sends until told to close.
//!
//! Memory per open session is kept small because a worker holds up to 19,000 of them: the
//! WebSocket read buffer is [`READ_BUFFER_BYTES`], writes go straight to the socket, and an open
//! session lives in a task of its own whose future is only the socket and the drain loop (the
//! handshake's future and frame buffer are gone; the drain loop does not parse). About 2.5 KiB
//! per session in all, measured as worker RSS.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, mpsc};
use tokio::time::{Instant, timeout_at};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::stomp_client::{self, Decoded, Frame};
use crate::upgrade::{self, UpgradeError};

/// WebSocket read buffer per session, allocated up front for every session. Idle sessions
/// receive almost nothing, and a larger frame reserves room for its own length anyway, so 1 KiB
/// (instead of tungstenite's 128 KiB default: 1.1 GiB for 9,000 sessions) only costs extra
/// reads on large messages.
pub(crate) const READ_BUFFER_BYTES: usize = 1024;
/// Largest WebSocket message a session accepts (larger is a failure, not a buffer without end).
pub(crate) const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// The subprotocols offered in the upgrade, most preferred first.
pub(crate) const SUBPROTOCOLS: &str = "v12.stomp, v11.stomp, v10.stomp";
/// The user destination every session subscribes to.
pub(crate) const DESTINATION: &str = "/user/notifications";
/// How long a closing session waits for the server's close frame.
pub(crate) const CLOSE_GRACE: Duration = Duration::from_secs(2);

pub(crate) type Ws = WebSocketStream<TcpStream>;

/// What every session of a worker shares.
#[derive(Debug)]
pub(crate) struct Target {
    /// `Host` header of the upgrade request (`host:port`).
    pub(crate) host_header: String,
    /// Path (and query) of the upgrade request.
    pub(crate) path: String,
    /// The resolved address to connect to.
    pub(crate) addr: SocketAddr,
    /// Local address to bind before connecting.
    pub(crate) source: Option<IpAddr>,
    /// Deadline for the whole handshake (TCP to RECEIPT).
    pub(crate) handshake_timeout: Duration,
}

/// The handshake step a session was in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    Tcp,
    Upgrade,
    Connected,
    Receipt,
}

impl Stage {
    fn name(self) -> &'static str {
        match self {
            Stage::Tcp => "tcp",
            Stage::Upgrade => "upgrade",
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
    Http(u16),
    Upgrade(UpgradeError),
    WebSocket(String),
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
            Failure::StompError(message) => {
                let mut m: String = message.chars().take(80).collect();
                if m.is_empty() {
                    m.push_str("(no message header)");
                }
                format!("stomp error: {m}")
            }
            Failure::Protocol(e) => format!("protocol: {e}"),
            Failure::Closed(stage) => format!("closed during {}", stage.name()),
            Failure::Timeout(stage) => format!("timeout during {}", stage.name()),
        }
    }

    fn from_upgrade(e: UpgradeError) -> Self {
        match e {
            UpgradeError::Status(status) => Failure::Http(status),
            UpgradeError::Closed => Failure::Closed(Stage::Upgrade),
            UpgradeError::Io(kind) if is_reset(kind) => Failure::Closed(Stage::Upgrade),
            e => Failure::Upgrade(e),
        }
    }

    fn from_ws(stage: Stage, e: tungstenite::Error) -> Self {
        use tungstenite::Error as E;
        match e {
            E::Http(response) => Failure::Http(response.status().as_u16()),
            E::ConnectionClosed | E::AlreadyClosed => Failure::Closed(stage),
            E::Io(io) if is_reset(io.kind()) => Failure::Closed(stage),
            E::Io(io) => Failure::WebSocket(format!("io {:?}", io.kind())),
            E::Protocol(p) => Failure::WebSocket(format!("protocol: {p}")),
            E::Capacity(c) => Failure::WebSocket(format!("capacity: {c}")),
            E::Utf8(_) => Failure::WebSocket("invalid utf-8".into()),
            other => Failure::WebSocket(short_kind(&other)),
        }
    }
}

fn is_reset(kind: std::io::ErrorKind) -> bool {
    matches!(
        kind,
        std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::BrokenPipe
            | std::io::ErrorKind::UnexpectedEof
    )
}

fn short_kind(e: &tungstenite::Error) -> String {
    // Keep the reason key low-cardinality: the variant, not the message.
    let debug = format!("{e:?}");
    debug
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or("other")
        .to_owned()
}

/// The WebSocket settings for bench sessions (see the module docs).
pub(crate) fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER_BYTES)
        .write_buffer_size(0)
        .max_message_size(Some(MAX_MESSAGE_BYTES))
        .max_frame_size(Some(MAX_MESSAGE_BYTES))
}

/// Opens one session and returns it once the subscription is live (RECEIPT received).
pub(crate) async fn open(target: &Target, token: &str) -> Result<Ws, Failure> {
    let deadline = Instant::now() + target.handshake_timeout;

    let tcp = timeout_at(deadline, connect_tcp(target))
        .await
        .map_err(|_| Failure::Timeout(Stage::Tcp))??;

    let mut ws = timeout_at(
        deadline,
        upgrade::upgrade(
            tcp,
            &target.host_header,
            &target.path,
            SUBPROTOCOLS,
            ws_config(),
        ),
    )
    .await
    .map_err(|_| Failure::Timeout(Stage::Upgrade))?
    .map_err(Failure::from_upgrade)?;

    let connect = stomp_client::encode_text(
        "CONNECT",
        &[
            ("accept-version", "1.2"),
            ("host", "herald"),
            ("passcode", token),
            ("heart-beat", "0,0"),
        ],
        "",
    );
    let mut frames = FrameReader::default();
    timeout_at(deadline, async {
        send(&mut ws, connect, Stage::Connected).await?;
        frames
            .expect(&mut ws, Stage::Connected, "CONNECTED")
            .await?;
        let subscribe = stomp_client::encode_text(
            "SUBSCRIBE",
            &[
                ("id", "sub-0"),
                ("destination", DESTINATION),
                ("ack", "auto"),
                ("receipt", "r-0"),
            ],
            "",
        );
        send(&mut ws, subscribe, Stage::Receipt).await?;
        loop {
            let receipt = frames.expect(&mut ws, Stage::Receipt, "RECEIPT").await?;
            if receipt.header("receipt-id") == Some("r-0") {
                return Ok(());
            }
        }
    })
    .await
    .map_err(|_| Failure::Timeout(frames.stage))??;
    Ok(ws)
}

async fn connect_tcp(target: &Target) -> Result<TcpStream, Failure> {
    let socket = if target.addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(|e| Failure::Socket(e.kind()))?;
    if let Some(source) = target.source {
        socket
            .bind(SocketAddr::new(source, 0))
            .map_err(|e| Failure::Bind(e.kind()))?;
    }
    let stream = socket
        .connect(target.addr)
        .await
        .map_err(|e| Failure::Connect(e.kind()))?;
    // Handshake frames are tiny and latency-bound; don't let Nagle hold them.
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

async fn send(ws: &mut Ws, text: String, stage: Stage) -> Result<(), Failure> {
    ws.send(Message::text(text))
        .await
        .map_err(|e| Failure::from_ws(stage, e))
}

/// Collects STOMP frames from WebSocket messages during the handshake. A frame may in principle
/// span messages or share one with the next frame, so leftovers are kept.
struct FrameReader {
    buffer: Vec<u8>,
    /// The step being waited for, to name a timeout.
    stage: Stage,
}

impl Default for FrameReader {
    fn default() -> Self {
        Self {
            buffer: Vec::new(),
            stage: Stage::Connected,
        }
    }
}

impl FrameReader {
    /// Waits for a frame with `command`, skipping heart-beats and `MESSAGE` frames (a replay may
    /// legitimately arrive before the receipt). An `ERROR` frame ends the session.
    async fn expect(&mut self, ws: &mut Ws, stage: Stage, command: &str) -> Result<Frame, Failure> {
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
            match ws.next().await {
                Some(Ok(Message::Text(t))) => self.buffer.extend_from_slice(t.as_bytes()),
                Some(Ok(Message::Binary(b))) => self.buffer.extend_from_slice(&b),
                Some(Ok(Message::Close(_))) | None => return Err(Failure::Closed(stage)),
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(Failure::from_ws(stage, e)),
            }
        }
    }
}

/// How a drained session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// We closed it because `cancel` fired.
    ClosedByUs,
    /// The server or the network ended it first.
    Dropped,
}

/// Reads and discards everything the server sends (so it never sees a stuck reader) until
/// `cancel` fires, then closes the WebSocket politely. Counts STOMP frames (and heart-beats)
/// by counting NUL bytes and lone EOLs, without parsing.
pub(crate) async fn drain(mut ws: Ws, cancel: &CancellationToken, frames: &AtomicU64) -> End {
    loop {
        tokio::select! {
            biased;
            () = cancel.cancelled() => break,
            msg = ws.next() => match msg {
                Some(Ok(Message::Text(t))) => count_frames(t.as_bytes(), frames),
                Some(Ok(Message::Binary(b))) => count_frames(&b, frames),
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return End::Dropped,
                Some(Ok(_)) => {}
            },
        }
    }
    let _ = tokio::time::timeout(CLOSE_GRACE, async {
        if ws.close(None).await.is_ok() {
            // Wait for the server's close frame (or the TCP close) so the close is clean.
            while let Some(Ok(_)) = ws.next().await {}
        }
    })
    .await;
    End::ClosedByUs
}

fn count_frames(bytes: &[u8], frames: &AtomicU64) {
    let n = if bytes == b"\n" || bytes == b"\r\n" {
        1
    } else {
        bytes.iter().filter(|&&b| b == 0).count() as u64
    };
    frames.fetch_add(n, Ordering::Relaxed);
}

/// Per-worker counters shared by its sessions.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) frames_received: AtomicU64,
    pub(crate) dropped: AtomicU64,
}

/// Opens one session. `handshake_slot` is held only while the handshake runs (it bounds the
/// handshakes in flight); the result goes to `outcomes` as soon as it is known. An open session
/// moves to a task of its own on `tracker` ([`hold`]) and this task ends, so the memory of the
/// handshake's future (about 3 KiB) is not kept for the life of the session.
pub(crate) async fn run(
    target: Arc<Target>,
    token: String,
    handshake_slot: OwnedSemaphorePermit,
    outcomes: mpsc::Sender<Result<(), Failure>>,
    cancel: CancellationToken,
    counters: Arc<Counters>,
    tracker: TaskTracker,
) {
    let opened = tokio::select! {
        biased;
        () = cancel.cancelled() => Err(Failure::Closed(Stage::Tcp)),
        result = open(&target, &token) => result,
    };
    drop(handshake_slot);
    let outcome = opened.map(|ws| {
        tracker.spawn(hold(ws, cancel, counters));
    });
    // The receiver lives as long as the worker; if it is gone, we are shutting down anyway.
    let _ = outcomes.send(outcome).await;
}

/// Keeps an open session until `cancel` (see [`drain`]), counting it if it ends early.
pub(crate) async fn hold(mut ws: Ws, cancel: CancellationToken, counters: Arc<Counters>) {
    // tokio-tungstenite keeps the waker of the last task that wrote (the handshake task) until
    // another task writes; that waker keeps the handshake task's memory (about 3 KiB) alive for
    // as long as the session. A flush registers this task's waker instead. Nothing is pending,
    // so it completes at once; an error will show up in the drain below.
    let _ = ws.flush().await;
    if drain(ws, &cancel, &counters.frames_received).await == End::Dropped {
        counters.dropped.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            Failure::Closed(Stage::Upgrade).reason(),
            "closed during upgrade"
        );
        let long = "x".repeat(500);
        assert!(Failure::StompError(long).reason().len() < 100);
    }

    #[test]
    fn counts_frames_without_parsing() {
        let frames = AtomicU64::new(0);
        count_frames(b"\n", &frames);
        count_frames(b"MESSAGE\nseq:1\n\nx\0", &frames);
        count_frames(b"MESSAGE\n\n\0MESSAGE\n\n\0", &frames);
        assert_eq!(frames.load(Ordering::Relaxed), 4);
    }
}
