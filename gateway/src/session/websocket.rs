//! STOMP over a WebSocket: the async shell around [`StompCore`], for the
//! raw framing (`/ws`, `/sockjs/websocket`) and SockJS framing
//! (`/sockjs/{server}/{session}/websocket`).
//!
//! The session owns its `TcpStream` (taken back from hyper after the
//! upgrade) and waits for readiness instead of parking a read buffer: an
//! idle session holds no buffer at all. Reads go through a stack buffer into
//! a `BytesMut` that exists only while a frame is partial. Writes are
//! vectored from shared `Bytes`.

use std::future::poll_fn;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use herald_protocol::sockjs;
use herald_protocol::websocket::{self, Message, OpCode, WsError};
use prometheus_client::metrics::counter::Counter;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tracing::Instrument;

use super::core::{Sink, StompCore};
use super::host::Host;
use super::sockjs_frame::{WsSockjs, close_reason};
use super::writer::{RawStomp, WriteQueue};
use crate::app::Shared;
use crate::metrics::{ProtocolError, Transport};

/// Write queue size at which the session stops pulling from its outbox.
pub const PULL_UNTIL: usize = 64 * 1024;
/// How long a closing session may take to flush its last frames.
const CLOSE_GRACE: Duration = Duration::from_secs(2);
/// Bytes read from the socket per `try_read`.
const READ_CHUNK: usize = 4096;

/// How STOMP frames are wrapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// One STOMP frame per WebSocket message.
    Raw,
    /// SockJS: `o`, `h`, `a["…"]`, `c[code,"reason"]` in WebSocket messages.
    Sockjs,
}

/// What the upgrade handler hands over.
#[derive(Debug)]
pub struct Upgraded {
    /// The socket.
    pub stream: TcpStream,
    /// Bytes hyper had read past the handshake.
    pub leftover: Bytes,
    /// A token from `?token=` or the upgrade request's `Authorization`.
    pub http_token: Option<String>,
    /// The client's address (behind a trusted proxy, the one it named),
    /// for the span and the session's log lines.
    pub peer: std::net::SocketAddr,
    /// The framing.
    pub framing: Framing,
}

struct Session {
    shared: Arc<Shared>,
    core: StompCore,
    stream: TcpStream,
    inbuf: BytesMut,
    ws: websocket::Decoder,
    out: WriteQueue,
    framing: Framing,
    /// SockJS heart-beat interval (`h` frames), SockJS framing only.
    sockjs_heartbeat: Option<Duration>,
    /// Set once the session is closing: flush, then go by this instant.
    closing: Option<Instant>,
    /// Control bytes of `out` last added to the gateway's gauge.
    reported: i64,
    /// Bytes read from the client, this transport's counter.
    received: Counter,
}

enum Stop {
    Eof,
    Io(io::Error),
}

/// Run one session to its end.
pub async fn run(shared: Arc<Shared>, up: Upgraded) {
    let transport = match up.framing {
        Framing::Raw => Transport::Websocket,
        Framing::Sockjs => Transport::SockjsWebsocket,
    };
    let span = tracing::debug_span!("session", client = %up.peer, transport = transport.as_str());
    let client = up.peer;
    async move {
        let Upgraded {
            stream,
            leftover,
            http_token,
            framing,
            ..
        } = up;
        // Copy what hyper read past the handshake and let its buffer go: the
        // `Bytes` may pin hyper's whole read buffer for the session's life.
        let inbuf = BytesMut::from(&leftover[..]);
        drop(leftover);
        let meter = shared.metrics.traffic.meter(transport).clone();
        meter.bytes_received.inc_by(inbuf.len() as u64);
        let now = Instant::now();
        let max_frame = shared.config.session.max_frame_bytes;
        let queue_bytes = shared.config.session.queue_bytes;
        let sockjs_heartbeat = (framing == Framing::Sockjs)
            .then(|| Duration::from_millis(shared.config.sockjs.heartbeat_ms));
        let mut session = Session {
            core: StompCore::new(
                Arc::clone(&shared) as Arc<dyn Host>,
                transport,
                http_token,
                now,
            )
            .with_client(client),
            shared,
            stream,
            inbuf,
            ws: websocket::Decoder::new(max_frame),
            received: meter.bytes_received.clone(),
            out: WriteQueue::new(queue_bytes).with_meter(meter),
            framing,
            sockjs_heartbeat,
            closing: None,
            reported: 0,
        };
        if framing == Framing::Sockjs {
            session.out.control_frame(OpCode::Text, &[sockjs::OPEN]);
        }
        let stop = session.run().await;
        match stop {
            Stop::Eof => tracing::debug!("session ended"),
            Stop::Io(e) => tracing::debug!(error = %e, "session i/o ended"),
        }
        // The write queue goes with the session: nothing of it stays counted.
        session.out = WriteQueue::new(0);
        session.report_queued();
        session.core.finish();
    }
    .instrument(span)
    .await
}

impl Session {
    /// Run `f` on the core with this session's sink; then, if a control
    /// frame did not fit in the bound, cut the session as a slow consumer.
    fn with_sink<R>(&mut self, f: impl FnOnce(&mut StompCore, &mut dyn Sink) -> R) -> R {
        let sink: &mut dyn Sink = match self.framing {
            Framing::Raw => &mut RawStomp(&mut self.out),
            Framing::Sockjs => &mut WsSockjs(&mut self.out),
        };
        let r = f(&mut self.core, sink);
        self.core.check_queue(sink);
        r
    }

    /// Bring the gateway's gauge of queued control bytes up to date.
    fn report_queued(&mut self) {
        let now = self.out.control_len() as i64;
        if now != self.reported {
            self.shared
                .metrics
                .queued_control_bytes
                .inc_by(now - self.reported);
            self.reported = now;
        }
    }

    async fn run(&mut self) -> Stop {
        if !self.inbuf.is_empty()
            && let Err(stop) = self.process_input(Instant::now())
        {
            return stop;
        }
        // What the loop waits on, made once and kept across its turns. Made
        // afresh each turn (that is, for every delivery), each wait
        // registered a waiter with the shutdown token every session shares,
        // with the outbox and with the timer wheel, then took it out again.
        let shared = Arc::clone(&self.shared);
        let outbox = Arc::clone(self.core.outbox());
        let shutdown = shared.shutdown.cancelled();
        tokio::pin!(shutdown);
        let wakeup = outbox.wakeup();
        tokio::pin!(wakeup);
        let timer = tokio::time::sleep_until(self.next_deadline(Instant::now()));
        tokio::pin!(timer);
        loop {
            let now = Instant::now();
            if self.closing.is_none() {
                self.with_sink(|core, sink| core.pull(sink, PULL_UNTIL, now));
                if let Some(code) = self.core.close_code() {
                    self.start_closing(code, now);
                }
            }
            if !self.out.is_empty() {
                match self.out.write_to(&self.stream) {
                    Ok(n) if n > 0 => self.core.sent(now),
                    Ok(_) => {}
                    Err(e) => return Stop::Io(e),
                }
            }
            self.report_queued();
            if let Some(deadline) = self.closing {
                if now >= deadline {
                    return Stop::Eof;
                }
                if self.out.is_empty() {
                    return self.linger(deadline).await;
                }
            }
            // The socket took everything and the outbox still holds more:
            // pull again now. Waiting for a notification here would stall,
            // since the one that woke us was spent on the previous pull.
            if self.closing.is_none() && self.out.len() < PULL_UNTIL && self.core.has_pending() {
                // A session reading a long backlog from its mailbox over a
                // fast socket yields now and then rather than hold its
                // worker thread until it has caught up.
                tokio::task::coop::consume_budget().await;
                continue;
            }
            // The timer only moves earlier. A later deadline (a heart-beat
            // or the lag clock pushed back by a write, which is every
            // delivery) waits for the armed one to fire: `on_timer` checks
            // each deadline against the clock, so an early fire only
            // re-arms it.
            let deadline = self.next_deadline(now);
            if deadline < timer.deadline() || timer.is_elapsed() {
                timer.as_mut().reset(deadline);
            }
            // Not behind (`has_pending` above), so the wake-up is all there
            // is to wait for.
            let can_pull =
                self.closing.is_none() && self.core.can_pull() && self.out.len() < PULL_UNTIL;
            tokio::select! {
                biased;
                _ = &mut shutdown, if self.closing.is_none() => {
                    self.with_sink(|core, sink| core.shutdown(sink));
                }
                r = poll_fn(|cx| self.stream.poll_read_ready(cx)), if self.closing.is_none() => {
                    if let Err(e) = r {
                        return Stop::Io(e);
                    }
                    if let Err(stop) = self.on_readable() {
                        return stop;
                    }
                }
                r = poll_fn(|cx| self.stream.poll_write_ready(cx)), if !self.out.is_empty() => {
                    if let Err(e) = r {
                        return Stop::Io(e);
                    }
                }
                _ = &mut wakeup, if can_pull => wakeup.set(outbox.wakeup()),
                _ = &mut timer => self.on_timer(Instant::now()),
            }
        }
    }

    fn start_closing(&mut self, code: u16, now: Instant) {
        if self.closing.is_some() {
            return;
        }
        if self.framing == Framing::Sockjs {
            let mut c = BytesMut::new();
            sockjs::encode_close(code, close_reason(code), &mut c);
            self.out.control_frame(OpCode::Text, &[&c]);
            self.out.close(1000, "");
        } else {
            self.out.close(code, "");
        }
        self.closing = Some(now + CLOSE_GRACE);
    }

    /// Everything is written: send FIN, then read and discard until the
    /// peer closes, so unread input cannot turn the close into a reset that
    /// loses the last frames.
    async fn linger(&mut self, deadline: Instant) -> Stop {
        use tokio::io::AsyncWriteExt;
        if let Err(e) = self.stream.shutdown().await {
            return Stop::Io(e);
        }
        self.inbuf = BytesMut::new();
        loop {
            tokio::select! {
                r = self.stream.readable() => {
                    if let Err(e) = r {
                        return Stop::Io(e);
                    }
                    let mut chunk = [0u8; READ_CHUNK];
                    match self.stream.try_read(&mut chunk) {
                        Ok(0) => return Stop::Eof,
                        Ok(_) => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => return Stop::Io(e),
                    }
                }
                _ = tokio::time::sleep_until(deadline) => return Stop::Eof,
            }
        }
    }

    fn next_deadline(&self, now: Instant) -> Instant {
        if let Some(c) = self.closing {
            return c;
        }
        let far = now + Duration::from_secs(3600);
        let mut d = self.core.next_deadline().unwrap_or(far);
        if let Some(h) = self.sockjs_heartbeat {
            d = d.min(self.core.last_send() + h);
        }
        d
    }

    fn on_timer(&mut self, now: Instant) {
        if self.closing.is_some() {
            return;
        }
        self.with_sink(|core, sink| core.on_timer(now, sink));
        if let Some(h) = self.sockjs_heartbeat
            && now >= self.core.last_send() + h
            && self.out.is_empty()
        {
            self.out.control_frame(OpCode::Text, &[sockjs::HEARTBEAT]);
        }
    }

    /// Read what the socket has, through a stack buffer; the `BytesMut`
    /// holds only a partial frame and is freed when empty.
    fn on_readable(&mut self) -> Result<(), Stop> {
        let now = Instant::now();
        loop {
            let mut chunk = [0u8; READ_CHUNK];
            match read_draining(&self.stream, &mut chunk) {
                Ok(0) => return Err(Stop::Eof),
                Ok(n) => {
                    self.received.inc_by(n as u64);
                    self.core.received(now);
                    self.inbuf.extend_from_slice(&chunk[..n]);
                    self.process_input(now)?;
                    if self.closing.is_some() || n < READ_CHUNK {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(Stop::Io(e)),
            }
        }
        Ok(())
    }

    fn process_input(&mut self, now: Instant) -> Result<(), Stop> {
        while self.closing.is_none() && self.core.close_code().is_none() {
            match self.ws.decode(&mut self.inbuf) {
                Ok(None) => break,
                Ok(Some(Message::Text(t))) => self.on_data(t.as_bytes(), now),
                Ok(Some(Message::Binary(b))) => self.on_data(&b, now),
                Ok(Some(Message::Ping(p))) => {
                    self.out.pong(&p);
                    self.with_sink(|_, _| {});
                }
                Ok(Some(Message::Pong(_))) => {}
                Ok(Some(Message::Close(_))) => {
                    self.core.peer_closed();
                    self.out.close(1000, "");
                    self.closing = Some(now + CLOSE_GRACE);
                }
                Err(e) => self.ws_error(&e),
            }
        }
        if let Some(code) = self.core.close_code() {
            self.start_closing(code, now);
        }
        if self.inbuf.is_empty() {
            self.inbuf = BytesMut::new();
        }
        Ok(())
    }

    fn on_data(&mut self, data: &[u8], now: Instant) {
        match self.framing {
            Framing::Raw => self.with_sink(|core, sink| core.on_stomp_bytes(data, now, sink)),
            Framing::Sockjs => {
                if data.is_empty() {
                    return;
                }
                match sockjs::decode_messages(data, true) {
                    Ok(messages) => {
                        for m in messages {
                            self.with_sink(|core, sink| {
                                core.on_stomp_bytes(m.as_bytes(), now, sink)
                            });
                        }
                    }
                    Err(e) => {
                        // SockJS: broken framing ends the session.
                        self.shared.metrics.error(ProtocolError::Websocket);
                        tracing::debug!(error = %e, "broken SockJS framing");
                        self.core.peer_closed();
                        self.out.close(1002, "");
                        self.closing = Some(now + CLOSE_GRACE);
                    }
                }
            }
        }
    }

    fn ws_error(&mut self, e: &WsError) {
        let kind = match e {
            WsError::InvalidUtf8 => ProtocolError::InvalidUtf8,
            WsError::MessageTooLarge { .. } => ProtocolError::Oversized,
            _ => ProtocolError::Websocket,
        };
        let message = e.to_string();
        let code = e.close_code();
        self.with_sink(|core, sink| core.transport_error(&message, kind, code, sink));
    }
}

/// Read what `stream` has into `chunk`, without waiting. A read shorter
/// than `chunk` took everything the socket had (epoll, as tokio's own
/// `poll_read` assumes), so it is reported to tokio as `WouldBlock`: its
/// readiness is cleared and the session's next wait sleeps until new bytes
/// come, where `try_read` would leave it set and cost a read that finds
/// nothing (a system call per request the client sends).
fn read_draining(stream: &TcpStream, chunk: &mut [u8]) -> io::Result<usize> {
    use std::io::Read;
    let mut drained = None;
    let read = stream.try_io(tokio::io::Interest::READABLE, || {
        let n = (&*socket2::SockRef::from(stream)).read(chunk)?;
        if n > 0 && n < chunk.len() {
            drained = Some(n);
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    });
    match drained {
        Some(n) => Ok(n),
        None => read,
    }
}
