//! STOMP over WebSocket, in two framings:
//! - [`Framing::Stomp`]: the gateway's `/ws` endpoint, subprotocols `v1x.stomp`, one STOMP frame
//!   per WebSocket message;
//! - [`Framing::SockJs`]: the SockJS websocket transport, `{prefix}/{server}/{session}/websocket`
//!   without subprotocols; the server opens with `o`, then sends `a[...]` arrays of STOMP frames
//!   (JSON strings), `h` heartbeats and finally `c[code,"reason"]`; the client sends each STOMP
//!   frame as a one-string array `["CONNECT\n..."]` (see [`crate::client::sockjs`]);
//!
//! and, for the peers of `herald-bench compare`, three framings without STOMP: [`Framing::Raw`]
//! (Nchan), [`Framing::SocketIo`] (Socket.IO 4, see [`crate::client::socketio`]) and
//! [`Framing::SockJsPlain`] (sockjs-node).
//!
//! Memory per open session is kept small because a worker holds up to 19,000 of them: the
//! WebSocket read buffer is [`READ_BUFFER_BYTES`], writes go straight to the socket, and an open
//! session lives in a task of its own whose future is only the socket and the drain loop (the
//! handshake's future and frame buffer are gone; the drain loop does not parse). About 2.5 KiB
//! per session in all, measured as worker RSS.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout_at};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_util::sync::CancellationToken;

use super::{Counters, Failure, FrameReader, Link, Stage, Target, connect_tcp, is_reset};
use crate::client::socketio::{self, Packet};
use crate::client::sockjs;
use crate::client::upgrade::{self, UpgradeError};

/// WebSocket read buffer per session, allocated up front for every session. Idle sessions
/// receive almost nothing, and a larger frame reserves room for its own length anyway, so 1 KiB
/// (instead of tungstenite's 128 KiB default: 1.1 GiB for 9,000 sessions) only costs extra
/// reads on large messages.
pub(crate) const READ_BUFFER_BYTES: usize = 1024;
/// Largest WebSocket message a session accepts (larger is a failure, not a buffer without end).
pub(crate) const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// The subprotocols offered in the `/ws` upgrade, most preferred first.
pub(crate) const SUBPROTOCOLS: &str = "v12.stomp, v11.stomp, v10.stomp";
/// How long a closing session waits for the server's close frame.
pub(crate) const CLOSE_GRACE: Duration = Duration::from_secs(2);

pub(crate) type Ws = WebSocketStream<TcpStream>;

/// How STOMP frames travel in WebSocket messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// One STOMP frame per message (`/ws`).
    Stomp,
    /// SockJS frames (the SockJS websocket transport).
    SockJs,
    /// No STOMP: a plain WebSocket to `{path}/{channel}`, open once upgraded, every message
    /// one notification ([`crate::client::transport::Transport::RawWebSocket`]).
    Raw,
    /// No STOMP: Socket.IO 4 (`{path}/?EIO=4&transport=websocket&channel={channel}`), open once
    /// connected to the main namespace, every event one notification, pings answered
    /// ([`crate::client::transport::Transport::SocketIo`]).
    SocketIo,
    /// No STOMP: SockJS frames (`{path}/{server}/{session}/websocket?channel={channel}`), open at
    /// `o`, every message of an `a[...]` frame one notification
    /// ([`crate::client::transport::Transport::SockJsPlain`]).
    SockJsPlain,
}

impl Framing {
    /// Whether its sessions speak STOMP (Herald, RabbitMQ) rather than carry notifications
    /// bare (the other peers).
    pub(crate) fn is_stomp(self) -> bool {
        matches!(self, Framing::Stomp | Framing::SockJs)
    }
}

impl Failure {
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

/// Opens one session and returns it once the subscription is live (RECEIPT received; for
/// [`Framing::Raw`], upgraded; for [`Framing::SocketIo`], connected; for
/// [`Framing::SockJsPlain`], open). `token` is the JWT, or for the framings without STOMP the
/// channel.
pub(crate) async fn open(target: &Target, token: &str, framing: Framing) -> Result<Ws, Failure> {
    let deadline = Instant::now() + target.handshake_timeout;

    let tcp = timeout_at(deadline, connect_tcp(target.addr, target.source))
        .await
        .map_err(|_| Failure::Timeout(Stage::Tcp))??;

    let (path, offer) = match framing {
        Framing::Stomp => (target.path.clone(), Some(SUBPROTOCOLS)),
        Framing::SockJs => (
            format!("{}{}/websocket", target.path, sockjs::new_session_path()),
            None,
        ),
        Framing::Raw => (format!("{}/{token}", target.path), None),
        Framing::SocketIo => (
            format!("{}/?EIO=4&transport=websocket&channel={token}", target.path),
            None,
        ),
        Framing::SockJsPlain => (
            format!(
                "{}{}/websocket?channel={token}",
                target.path,
                sockjs::new_session_path()
            ),
            None,
        ),
    };
    let mut ws = timeout_at(
        deadline,
        upgrade::upgrade(tcp, &target.host_header, &path, offer, ws_config()),
    )
    .await
    .map_err(|_| Failure::Timeout(Stage::Upgrade))?
    .map_err(Failure::from_upgrade)?;

    if framing == Framing::Raw {
        return Ok(ws);
    }
    let mut frames = FrameReader::new(Stage::Open);
    timeout_at(deadline, async {
        match framing {
            Framing::Raw => Ok(()),
            Framing::Stomp => {
                let login = super::Login::of(target.transport, token);
                super::stomp_handshake(
                    &mut StompLink(&mut ws),
                    login,
                    &mut frames,
                    target.pipelined,
                )
                .await
            }
            Framing::SockJs => {
                let mut link = SockJsLink {
                    ws: &mut ws,
                    opened: false,
                };
                link.wait_open().await?;
                let login = super::Login::Jwt(token);
                super::stomp_handshake(&mut link, login, &mut frames, target.pipelined).await
            }
            Framing::SocketIo => socketio_connect(&mut ws, &mut frames.stage).await,
            Framing::SockJsPlain => {
                SockJsLink {
                    ws: &mut ws,
                    opened: false,
                }
                .wait_open()
                .await
            }
        }
    })
    .await
    .map_err(|_| Failure::Timeout(frames.stage))??;
    Ok(ws)
}

/// Socket.IO's opening: the Engine.IO open packet, then `40` (connect to the main namespace)
/// until the server's `40` (connected); pings on the way are answered. `stage` says which of
/// the two is awaited.
async fn socketio_connect(ws: &mut Ws, stage: &mut Stage) -> Result<(), Failure> {
    *stage = Stage::SocketIoOpen;
    let send = async |ws: &mut Ws, text: &str, stage: Stage| {
        ws.send(Message::text(text))
            .await
            .map_err(|e| Failure::from_ws(stage, e))
    };
    loop {
        let packet = match ws.next().await {
            Some(Ok(Message::Text(t))) => socketio::parse(t.as_bytes())
                .map_err(|e| Failure::Protocol(format!("socket.io: {e}")))?,
            Some(Ok(Message::Binary(_))) => {
                return Err(Failure::Protocol("socket.io: binary message".into()));
            }
            Some(Ok(Message::Close(_))) | None => return Err(Failure::Closed(*stage)),
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(Failure::from_ws(*stage, e)),
        };
        match packet {
            Packet::Open if *stage == Stage::SocketIoOpen => {
                send(ws, socketio::CONNECT, *stage).await?;
                *stage = Stage::Connected;
            }
            Packet::Connected if *stage == Stage::Connected => return Ok(()),
            Packet::Ping => send(ws, socketio::PONG, *stage).await?,
            Packet::ConnectError(message) => {
                return Err(Failure::Protocol(format!(
                    "socket.io connect_error: {}",
                    message.chars().take(80).collect::<String>()
                )));
            }
            Packet::Close => return Err(Failure::Closed(*stage)),
            Packet::Other => {}
            other => {
                return Err(Failure::Protocol(format!(
                    "socket.io: unexpected {other:?} during {}",
                    stage.name()
                )));
            }
        }
    }
}

/// STOMP frames as WebSocket messages.
struct StompLink<'a>(&'a mut Ws);

impl Link for StompLink<'_> {
    async fn send_frame(&mut self, frame: &str, stage: Stage) -> Result<(), Failure> {
        self.0
            .send(Message::text(frame))
            .await
            .map_err(|e| Failure::from_ws(stage, e))
    }

    async fn receive(&mut self, buffer: &mut Vec<u8>, stage: Stage) -> Result<(), Failure> {
        loop {
            match self.0.next().await {
                Some(Ok(Message::Text(t))) => buffer.extend_from_slice(t.as_bytes()),
                Some(Ok(Message::Binary(b))) => buffer.extend_from_slice(&b),
                Some(Ok(Message::Close(_))) | None => return Err(Failure::Closed(stage)),
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(Failure::from_ws(stage, e)),
            }
            return Ok(());
        }
    }
}

/// STOMP frames inside SockJS frames inside WebSocket text messages.
struct SockJsLink<'a> {
    ws: &'a mut Ws,
    opened: bool,
}

impl SockJsLink<'_> {
    /// The next SockJS frame.
    async fn next_frame(&mut self, stage: Stage) -> Result<sockjs::Frame, Failure> {
        loop {
            match self.ws.next().await {
                Some(Ok(Message::Text(t))) => {
                    return sockjs::parse(t.as_bytes()).map_err(|e| Failure::SockJs(e.to_string()));
                }
                Some(Ok(Message::Binary(_))) => {
                    return Err(Failure::SockJs("binary message".into()));
                }
                Some(Ok(Message::Close(_))) | None => return Err(Failure::Closed(stage)),
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(Failure::from_ws(stage, e)),
            }
        }
    }

    /// Waits for the open frame `o`.
    async fn wait_open(&mut self) -> Result<(), Failure> {
        match self.next_frame(Stage::Open).await? {
            sockjs::Frame::Open => {
                self.opened = true;
                Ok(())
            }
            sockjs::Frame::Close { code, reason } => Err(Failure::SockJsClosed { code, reason }),
            other => Err(Failure::SockJs(format!("expected o, got {other:?}"))),
        }
    }
}

impl Link for SockJsLink<'_> {
    async fn send_frame(&mut self, frame: &str, stage: Stage) -> Result<(), Failure> {
        self.ws
            .send(Message::text(sockjs::encode(&[frame])))
            .await
            .map_err(|e| Failure::from_ws(stage, e))
    }

    async fn receive(&mut self, buffer: &mut Vec<u8>, stage: Stage) -> Result<(), Failure> {
        loop {
            match self.next_frame(stage).await? {
                sockjs::Frame::Messages(messages) => {
                    for m in messages {
                        buffer.extend_from_slice(m.as_bytes());
                    }
                    return Ok(());
                }
                sockjs::Frame::Heartbeat => {}
                sockjs::Frame::Open if !self.opened => self.opened = true,
                sockjs::Frame::Open => return Err(Failure::SockJs("second open frame".into())),
                sockjs::Frame::Close { code, reason } => {
                    return Err(Failure::SockJsClosed { code, reason });
                }
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
/// without parsing: NUL bytes and lone EOLs, or for SockJS escaped NULs and `h` frames; a
/// SockJS close frame ends the session. Without STOMP it counts messages (raw), events
/// (Socket.IO, whose pings it answers) or the messages of `a[...]` frames (SockJS).
pub(crate) async fn drain(
    mut ws: Ws,
    framing: Framing,
    cancel: &CancellationToken,
    frames: &AtomicU64,
) -> End {
    loop {
        tokio::select! {
            biased;
            () = cancel.cancelled() => break,
            msg = ws.next() => match msg {
                Some(Ok(Message::Text(t))) => match framing {
                    Framing::Stomp => count_frames(t.as_bytes(), frames),
                    Framing::Raw => {
                        frames.fetch_add(1, Ordering::Relaxed);
                    }
                    Framing::SockJs if t.as_bytes().first() == Some(&b'c') => return End::Dropped,
                    Framing::SockJs => {
                        frames.fetch_add(sockjs::count_stomp_frames(t.as_bytes()), Ordering::Relaxed);
                    }
                    Framing::SockJsPlain => match sockjs::parse(t.as_bytes()) {
                        Ok(sockjs::Frame::Messages(m)) => {
                            frames.fetch_add(m.len() as u64, Ordering::Relaxed);
                        }
                        Ok(sockjs::Frame::Close { .. }) | Err(_) => return End::Dropped,
                        Ok(_) => {}
                    },
                    Framing::SocketIo => match t.as_bytes() {
                        socketio::PING => {
                            let pong = ws.send(Message::text(socketio::PONG)).await;
                            if pong.is_err() {
                                return End::Dropped;
                            }
                        }
                        [b'4', b'2', ..] => {
                            frames.fetch_add(1, Ordering::Relaxed);
                        }
                        b"1" | b"41" => return End::Dropped,
                        _ => {}
                    },
                },
                Some(Ok(Message::Binary(_))) if !framing.is_stomp() => {
                    frames.fetch_add(1, Ordering::Relaxed);
                }
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

/// Keeps an open session until `cancel` (see [`drain`]), counting it if it ends early.
pub(crate) async fn hold(
    mut ws: Ws,
    framing: Framing,
    cancel: CancellationToken,
    counters: Arc<Counters>,
) {
    // tokio-tungstenite keeps the waker of the last task that wrote (the handshake task) until
    // another task writes; that waker keeps the handshake task's memory (about 3 KiB) alive for
    // as long as the session. A flush registers this task's waker instead. Nothing is pending,
    // so it completes at once; an error will show up in the drain below.
    let _ = ws.flush().await;
    if drain(ws, framing, &cancel, &counters.frames_received).await == End::Dropped {
        counters.dropped.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use tokio::task::JoinHandle;
    use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};

    use super::*;
    use crate::client::transport::Transport;

    #[test]
    fn counts_frames_without_parsing() {
        let frames = AtomicU64::new(0);
        count_frames(b"\n", &frames);
        count_frames(b"MESSAGE\nseq:1\n\nx\0", &frames);
        count_frames(b"MESSAGE\n\n\0MESSAGE\n\n\0", &frames);
        assert_eq!(frames.load(Ordering::Relaxed), 4);
    }

    /// A one-connection WebSocket server on 127.0.0.1: `check` sees the upgrade request, then
    /// `script` plays the server.
    async fn stand_in<F, Fut>(check: fn(&Request), script: F) -> (SocketAddr, JoinHandle<()>)
    where
        F: FnOnce(Ws) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (s, _) = listener.accept().await.unwrap();
            #[allow(clippy::result_large_err)]
            let cb = move |req: &Request, resp: Response| {
                check(req);
                Ok(resp)
            };
            script(tokio_tungstenite::accept_hdr_async(s, cb).await.unwrap()).await;
        });
        (addr, server)
    }

    fn target_at(addr: SocketAddr, transport: Transport, path: &str) -> Target {
        Target {
            transport,
            host_header: addr.to_string(),
            path: path.into(),
            addr,
            source: None,
            handshake_timeout: Duration::from_secs(10),
            pipelined: false,
            xhr_sends: super::super::xhr_streaming::SendPool::new(1),
        }
    }

    async fn ws_text(ws: &mut Ws) -> String {
        match ws.next().await {
            Some(Ok(Message::Text(t))) => t.to_string(),
            other => panic!("expected a text message, got {other:?}"),
        }
    }

    async fn send_all(ws: &mut Ws, texts: &[&str]) {
        for text in texts {
            ws.send(Message::text(*text)).await.unwrap();
        }
    }

    /// Opens a session of `framing` on `server`, drains it until the server ends it, and
    /// returns the frames counted.
    async fn open_and_drain(
        addr: SocketAddr,
        server: JoinHandle<()>,
        transport: Transport,
        path: &str,
        credential: &str,
        framing: Framing,
    ) -> u64 {
        let ws = open(&target_at(addr, transport, path), credential, framing)
            .await
            .unwrap();
        let frames = AtomicU64::new(0);
        let end = drain(ws, framing, &CancellationToken::new(), &frames).await;
        assert_eq!(end, End::Dropped);
        server.await.unwrap();
        frames.load(Ordering::Relaxed)
    }

    /// A SockJS websocket server: checks the upgrade offers no subprotocol, sends `o`, answers
    /// CONNECT and SUBSCRIBE inside `a[...]` frames (with a heartbeat in between), then closes
    /// with `c[...]`.
    #[tokio::test]
    async fn sockjs_handshake_against_a_stand_in() {
        let check = |req: &Request| {
            assert!(req.headers().get("Sec-WebSocket-Protocol").is_none());
            let path = req.uri().path();
            assert!(path.starts_with("/sockjs/"), "{path}");
            assert!(path.ends_with("/websocket"), "{path}");
            assert_eq!(path.split('/').count(), 5, "{path}");
        };
        let (addr, server) = stand_in(check, |mut ws| async move {
            send_all(&mut ws, &["o"]).await;
            let connect: Vec<String> = serde_json::from_str(&ws_text(&mut ws).await).unwrap();
            assert!(connect[0].starts_with("CONNECT\naccept-version:1.2\n"));
            assert!(connect[0].contains("\npasscode:tok\n"));
            assert!(connect[0].ends_with("\n\n\0"));
            send_all(&mut ws, &[r#"a["CONNECTED\nversion:1.2\n\n\u0000"]"#]).await;
            let subscribe = ws_text(&mut ws).await;
            assert!(subscribe.starts_with(r#"["SUBSCRIBE\n"#), "{subscribe}");
            send_all(
                &mut ws,
                &[
                    "h",
                    r#"a["RECEIPT\nreceipt-id:r-0\n\n\u0000","MESSAGE\nseq:1\n\n{}\u0000"]"#,
                    "h",
                    r#"c[3000,"Go away!"]"#,
                ],
            )
            .await;
            let _ = ws.next().await;
        })
        .await;
        let t = Transport::SockJsWebSocket;
        // The MESSAGE that came with the RECEIPT was consumed by the handshake; the `h` after
        // it is counted, and the close frame ends the session.
        assert_eq!(
            open_and_drain(addr, server, t, "/sockjs", "tok", Framing::SockJs).await,
            1
        );
    }

    /// A Socket.IO server: checks the query names the channel, sends the open packet and a
    /// ping (which must be ponged after the client's `40`), `40` once `40` arrived; then a
    /// ping (ponged by the drain), an event, and a disconnect, which ends the session.
    #[tokio::test]
    async fn socketio_connect_and_pings_against_a_stand_in() {
        let check = |req: &Request| {
            assert_eq!(req.uri().path(), "/socket.io/");
            assert_eq!(
                req.uri().query(),
                Some("EIO=4&transport=websocket&channel=u7")
            );
        };
        let (addr, server) = stand_in(check, |mut ws| async move {
            let open = r#"0{"sid":"s","pingInterval":25000,"pingTimeout":20000}"#;
            send_all(&mut ws, &[open, "2"]).await;
            assert_eq!(ws_text(&mut ws).await, "40");
            assert_eq!(ws_text(&mut ws).await, "3");
            send_all(&mut ws, &[r#"40{"sid":"n"}"#, "2"]).await;
            assert_eq!(ws_text(&mut ws).await, "3");
            send_all(&mut ws, &[r#"42["n","1 2 xx"]"#, "41"]).await;
            let _ = ws.next().await;
        })
        .await;
        let t = Transport::SocketIo;
        assert_eq!(
            open_and_drain(addr, server, t, "/socket.io", "u7", Framing::SocketIo).await,
            1
        );
    }

    /// A refused namespace connect (`44`) is a failure that names it.
    #[tokio::test]
    async fn a_refused_socketio_connect_fails_the_session() {
        let (addr, server) = stand_in(
            |_| {},
            |mut ws| async move {
                send_all(&mut ws, &[r#"0{"sid":"s"}"#]).await;
                assert_eq!(ws_text(&mut ws).await, "40");
                send_all(&mut ws, &[r#"44{"message":"no channel"}"#]).await;
                let _ = ws.next().await;
            },
        )
        .await;
        let target = target_at(addr, Transport::SocketIo, "/socket.io");
        let failure = open(&target, "u7", Framing::SocketIo).await.unwrap_err();
        assert_eq!(
            failure.reason(),
            "protocol: socket.io connect_error: no channel"
        );
        server.await.unwrap();
    }

    /// sockjs-node's subscribers: the channel in the query, open at `o`, each message of an
    /// `a[...]` frame counted, `c[...]` the end.
    #[tokio::test]
    async fn plain_sockjs_against_a_stand_in() {
        let check = |req: &Request| {
            assert!(req.uri().path().starts_with("/sockjs/"));
            assert!(req.uri().path().ends_with("/websocket"));
            assert_eq!(req.uri().query(), Some("channel=u3"));
        };
        let (addr, server) = stand_in(check, |mut ws| async move {
            let frames = ["o", "h", r#"a["1 2 x","3 4 x"]"#, r#"c[3000,"bye"]"#];
            send_all(&mut ws, &frames).await;
            let _ = ws.next().await;
        })
        .await;
        let t = Transport::SockJsPlain;
        assert_eq!(
            open_and_drain(addr, server, t, "/sockjs", "u3", Framing::SockJsPlain).await,
            2
        );
    }
}
