//! STOMP over a raw WebSocket: the async shell around [`StompSession`].
//!
//! The session owns its `TcpStream` (taken back from hyper after the
//! upgrade) and waits for readiness instead of parking a read buffer: an
//! idle session holds no buffer at all. Reads go through a stack buffer into
//! a `BytesMut` that exists only while a frame is partial. Writes are
//! vectored from shared `Bytes`.
//!
//! One loop, one task per session: read, decode, act; pull from the outbox
//! when the write queue is empty; send heart-beats; on shutdown send ERROR
//! "server shutting down", a close frame, and go.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use herald_protocol::stomp::{self, Decoded, HeartBeat, Version, headers, negotiate_heartbeat};
use herald_protocol::websocket::{self, Message, WsError};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tracing::Instrument;

use super::stomp::{Action, Connect, Failure, StompSession, Subscribe};
use super::writer::WriteQueue;
use crate::app::Shared;
use crate::hub::{Attached, Identity, Resume};
use crate::metrics::{ProtocolError, RefuseReason, Transport};
use crate::outbox::{Item, Outbox, QueueLimits, Subscription};

/// Write queue size at which the session stops pulling from its outbox.
const PULL_UNTIL: usize = 64 * 1024;
/// How long a closing session may take to flush its last frames.
const CLOSE_GRACE: Duration = Duration::from_secs(2);
/// Bytes read from the socket per `try_read`.
const READ_CHUNK: usize = 4096;

/// What the upgrade handler hands over.
#[derive(Debug)]
pub struct Upgraded {
    /// The socket.
    pub stream: TcpStream,
    /// Bytes hyper had read past the handshake.
    pub leftover: Bytes,
    /// A token from `?token=` or the upgrade request's `Authorization`.
    pub http_token: Option<String>,
    /// Peer address, for the span.
    pub peer: std::net::SocketAddr,
}

struct Attachment {
    who: Identity,
    attached: Attached,
    /// The resume point for the first SUBSCRIBE: the CONNECT's, or the
    /// mailbox head at CONNECT, so nothing between CONNECT and SUBSCRIBE is
    /// lost.
    first_resume: Option<Resume>,
}

struct Session {
    shared: Arc<Shared>,
    stream: TcpStream,
    http_token: Option<String>,
    inbuf: BytesMut,
    stomp_buf: BytesMut,
    ws: websocket::Decoder,
    limits: stomp::Limits,
    out: WriteQueue,
    machine: StompSession,
    outbox: Arc<Outbox>,
    attachment: Option<Attachment>,
    last_recv: Instant,
    last_send: Instant,
    send_every: Option<Duration>,
    recv_within: Option<Duration>,
    connect_deadline: Option<Instant>,
    /// Set once the session is closing: flush, then go by this instant.
    closing: Option<Instant>,
}

enum Stop {
    Eof,
    Io(io::Error),
}

/// Run one session to its end.
pub async fn run(shared: Arc<Shared>, up: Upgraded) {
    let span = tracing::debug_span!("session", peer = %up.peer, transport = "websocket");
    async move {
        let Upgraded {
            stream,
            leftover,
            http_token,
            ..
        } = up;
        // Copy what hyper read past the handshake and let its buffer go: the
        // `Bytes` may pin hyper's whole read buffer for the session's life.
        let inbuf = BytesMut::from(&leftover[..]);
        drop(leftover);
        let now = Instant::now();
        let cfg = &shared.config.session;
        let session = Session {
            limits: stomp::Limits {
                max_frame_bytes: cfg.max_frame_bytes,
                max_headers: cfg.max_headers,
                max_header_bytes: cfg.max_header_bytes,
            },
            ws: websocket::Decoder::new(cfg.max_frame_bytes),
            machine: StompSession::new(cfg.max_subscriptions),
            outbox: Arc::new(Outbox::new(QueueLimits {
                messages: cfg.queue_messages,
                bytes: cfg.queue_bytes,
                when_full: cfg.when_full,
            })),
            connect_deadline: Some(now + Duration::from_millis(cfg.connect_timeout_ms)),
            inbuf,
            stream,
            http_token,
            stomp_buf: BytesMut::new(),
            out: WriteQueue::default(),
            attachment: None,
            last_recv: now,
            last_send: now,
            send_every: None,
            recv_within: None,
            closing: None,
            shared,
        };
        session.run().await;
    }
    .instrument(span)
    .await
}

impl Session {
    async fn run(mut self) {
        if !self.inbuf.is_empty()
            && let Err(stop) = self.process_input(Instant::now())
        {
            self.finish(stop);
            return;
        }
        let stop = self.event_loop().await;
        self.finish(stop);
    }

    fn finish(mut self, stop: Stop) {
        match stop {
            Stop::Eof => tracing::debug!("peer closed"),
            Stop::Io(e) => tracing::debug!(error = %e, "session i/o ended"),
        }
        if let Some(a) = self.attachment.take() {
            self.shared.hub.detach(&a.who, &self.outbox, Instant::now());
            self.shared
                .metrics
                .sessions_gauge(Transport::Websocket)
                .dec();
        }
        self.shared.release_session();
    }

    async fn event_loop(&mut self) -> Stop {
        loop {
            let now = Instant::now();
            if self.closing.is_none() {
                if self.outbox.is_cut() {
                    self.fail(Failure {
                        message: "slow consumer: the session's queue is full".into(),
                        receipt: None,
                        kind: ProtocolError::Refused,
                        close_code: 1008,
                    });
                } else if self.attachment.is_some() {
                    self.pull_outbox();
                }
            }
            if !self.out.is_empty() {
                match self.out.write_to(&self.stream) {
                    Ok(n) if n > 0 => self.last_send = now,
                    Ok(_) => {}
                    Err(e) => return Stop::Io(e),
                }
            }
            if let Some(deadline) = self.closing {
                if now >= deadline {
                    return Stop::Eof;
                }
                if self.out.is_empty() {
                    // Everything is written: send FIN, then read and discard
                    // until the peer closes, so unread input cannot turn the
                    // close into a reset that loses the last frames.
                    return self.linger(deadline).await;
                }
            }
            // The socket took everything and the outbox still holds more:
            // pull again now. Waiting for a notification here would stall,
            // since the one that woke us was spent on the previous pull.
            if self.closing.is_none()
                && self.attachment.is_some()
                && self.out.len() < PULL_UNTIL
                && !self.outbox.is_empty()
            {
                continue;
            }
            let deadline = self.next_deadline(now);
            let can_pull =
                self.attachment.is_some() && self.closing.is_none() && self.out.len() < PULL_UNTIL;
            tokio::select! {
                biased;
                _ = self.shared.shutdown.cancelled(), if self.closing.is_none() => {
                    self.fail(Failure {
                        message: "server shutting down".into(),
                        receipt: None,
                        kind: ProtocolError::Refused,
                        close_code: 1001,
                    });
                }
                r = self.stream.readable(), if self.closing.is_none() => {
                    if let Err(e) = r {
                        return Stop::Io(e);
                    }
                    if let Err(stop) = self.on_readable() {
                        return stop;
                    }
                }
                r = self.stream.writable(), if !self.out.is_empty() => {
                    if let Err(e) = r {
                        return Stop::Io(e);
                    }
                }
                _ = self.outbox.notified(), if can_pull => {}
                _ = tokio::time::sleep_until(deadline) => self.on_timer(Instant::now()),
            }
        }
    }

    async fn linger(&mut self, deadline: Instant) -> Stop {
        use tokio::io::AsyncWriteExt;
        if let Err(e) = self.stream.shutdown().await {
            return Stop::Io(e);
        }
        self.inbuf = BytesMut::new();
        self.stomp_buf = BytesMut::new();
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
        let far = now + Duration::from_secs(3600);
        let mut d = far;
        if let Some(c) = self.closing {
            return c;
        }
        if let Some(c) = self.connect_deadline {
            d = d.min(c);
        }
        if let Some(every) = self.send_every {
            d = d.min(self.last_send + every);
        }
        if let Some(within) = self.recv_within {
            d = d.min(self.last_recv + within);
        }
        d
    }

    fn on_timer(&mut self, now: Instant) {
        if self.closing.is_some() {
            return;
        }
        if self.connect_deadline.is_some_and(|d| now >= d) {
            self.shared.metrics.refuse(RefuseReason::ConnectTimeout);
            self.fail(Failure {
                message: "no CONNECT frame in time".into(),
                receipt: None,
                kind: ProtocolError::Refused,
                close_code: 1008,
            });
            return;
        }
        if self
            .recv_within
            .is_some_and(|within| now >= self.last_recv + within)
        {
            self.fail(Failure {
                message: "heart-beat timeout: nothing received from the client in time".into(),
                receipt: None,
                kind: ProtocolError::Refused,
                close_code: 1001,
            });
            return;
        }
        if self
            .send_every
            .is_some_and(|every| now >= self.last_send + every)
            && self.out.is_empty()
        {
            self.out.heartbeat();
        }
    }

    /// Read what the socket has, through a stack buffer; the `BytesMut`
    /// holds only a partial frame and is freed when empty.
    fn on_readable(&mut self) -> Result<(), Stop> {
        let now = Instant::now();
        loop {
            let mut chunk = [0u8; READ_CHUNK];
            match self.stream.try_read(&mut chunk) {
                Ok(0) => return Err(Stop::Eof),
                Ok(n) => {
                    self.last_recv = now;
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
        while self.closing.is_none() {
            match self.ws.decode(&mut self.inbuf) {
                Ok(None) => break,
                Ok(Some(Message::Text(t))) => {
                    self.stomp_buf.extend_from_slice(t.as_bytes());
                    self.process_stomp(now);
                }
                Ok(Some(Message::Binary(b))) => {
                    self.stomp_buf.extend_from_slice(&b);
                    self.process_stomp(now);
                }
                Ok(Some(Message::Ping(p))) => self.out.pong(&p),
                Ok(Some(Message::Pong(_))) => {}
                Ok(Some(Message::Close(_))) => {
                    self.out.close(1000, "");
                    self.closing = Some(now + CLOSE_GRACE);
                }
                Err(e) => self.ws_error(&e),
            }
        }
        if self.inbuf.is_empty() {
            self.inbuf = BytesMut::new();
        }
        if self.stomp_buf.is_empty() {
            self.stomp_buf = BytesMut::new();
        }
        Ok(())
    }

    fn ws_error(&mut self, e: &WsError) {
        let kind = match e {
            WsError::InvalidUtf8 => ProtocolError::InvalidUtf8,
            WsError::MessageTooLarge { .. } => ProtocolError::Oversized,
            _ => ProtocolError::Websocket,
        };
        self.fail(Failure {
            message: e.to_string(),
            receipt: None,
            kind,
            close_code: e.close_code(),
        });
    }

    fn process_stomp(&mut self, now: Instant) {
        while self.closing.is_none() {
            match stomp::decode(&mut self.stomp_buf, self.machine.version(), &self.limits) {
                Ok(None) => return,
                Ok(Some(Decoded::Heartbeat)) => {}
                Ok(Some(Decoded::Frame(frame))) => {
                    let action = self.machine.on_frame(&frame);
                    self.act(action, now);
                }
                Err(e) => {
                    let kind = match e {
                        stomp::DecodeError::FrameTooLarge { .. }
                        | stomp::DecodeError::TooManyHeaders { .. }
                        | stomp::DecodeError::HeaderTooLong { .. } => ProtocolError::Oversized,
                        stomp::DecodeError::InvalidUtf8 { .. } => ProtocolError::InvalidUtf8,
                        _ => ProtocolError::MalformedFrame,
                    };
                    let close_code = if kind == ProtocolError::Oversized {
                        1009
                    } else {
                        1002
                    };
                    self.fail(Failure {
                        message: e.to_string(),
                        receipt: None,
                        kind,
                        close_code,
                    });
                }
            }
        }
    }

    fn act(&mut self, action: Action, now: Instant) {
        let v = self.machine.version();
        match action {
            Action::Connect(c) => self.connect(c, now),
            Action::Subscribe(s) => self.subscribe(s, now),
            Action::Unsubscribe { id, receipt } => {
                self.outbox.unsubscribe(&id);
                if let Some(r) = receipt {
                    self.out.receipt(&r, v);
                }
            }
            Action::Disconnect { receipt } => {
                if let Some(r) = receipt {
                    self.out.receipt(&r, v);
                }
                self.out.close(1000, "");
                self.closing = Some(now + CLOSE_GRACE);
            }
            Action::Fail(f) => self.fail(f),
        }
    }

    fn connect(&mut self, c: Connect, now: Instant) {
        let token = c.token.or_else(|| self.http_token.take());
        let identity = match token {
            None => Err(crate::auth::AuthError::Missing),
            Some(t) => self.shared.verifier.verify(&t),
        };
        let who = match identity {
            Ok(who) => who,
            Err(e) => {
                self.shared.metrics.refuse(RefuseReason::Auth);
                tracing::debug!(error = %e, "CONNECT refused");
                self.fail(Failure {
                    message: e.to_string(),
                    receipt: None,
                    kind: ProtocolError::Refused,
                    close_code: 1008,
                });
                return;
            }
        };
        let cfg = &self.shared.config.session;
        let server = HeartBeat {
            cx: cfg.heartbeat_send_ms,
            cy: cfg.heartbeat_receive_ms,
        };
        let (send, recv) = negotiate_heartbeat(c.heartbeat, server);
        self.send_every = send;
        // Allow the client's interval twice over before calling it dead.
        self.recv_within = recv.map(|d| d * 2);
        self.connect_deadline = None;
        self.machine.connected(c.version);
        let attached = self.shared.hub.attach(&who, &self.outbox);
        let hb = HeartBeat {
            cx: send.map_or(0, |d| d.as_millis() as u32),
            cy: recv.map_or(0, |d| d.as_millis() as u32),
        }
        .to_header();
        let session_id = format!("{:016x}", rand::random::<u64>());
        let epoch = attached.epoch.to_string();
        let head = attached.head.to_string();
        self.out.frame(
            stomp::Command::Connected,
            &[
                (headers::VERSION, c.version.as_str()),
                (headers::HEART_BEAT, &hb),
                (
                    headers::SERVER,
                    concat!("Herald/", env!("CARGO_PKG_VERSION")),
                ),
                (headers::SESSION, &session_id),
                ("user-name", &who.user),
                (herald_protocol::envelope::names::EPOCH, &epoch),
                (herald_protocol::envelope::names::SEQ, &head),
            ],
            b"",
            c.version,
        );
        let first_resume = c.resume.or(Some(Resume {
            epoch: attached.epoch,
            last_seq: attached.head,
        }));
        tracing::debug!(user = %who.user, version = c.version.as_str(), "session open");
        self.shared
            .metrics
            .sessions_gauge(Transport::Websocket)
            .inc();
        self.shared
            .metrics
            .sessions_opened
            .get_or_create(&crate::metrics::TransportLabels {
                transport: Transport::Websocket,
            })
            .inc();
        self.attachment = Some(Attachment {
            who,
            attached,
            first_resume,
        });
        let _ = now;
    }

    fn subscribe(&mut self, s: Subscribe, now: Instant) {
        let v = self.machine.version();
        let Some(a) = self.attachment.as_mut() else {
            return;
        };
        let resume = s.resume.or_else(|| a.first_resume.take());
        a.first_resume = None;
        let sub = Subscription {
            key: s.key,
            id: s.id.into(),
            filter: s.filter,
        };
        let result = self
            .shared
            .hub
            .subscribe(&a.who, &self.outbox, sub, resume.as_ref(), now);
        tracing::debug!(?result, "subscribed");
        if let Some(r) = s.receipt {
            self.out.receipt(&r, v);
        }
    }

    /// Move queued messages into the write queue until it holds enough.
    fn pull_outbox(&mut self) {
        let Some(a) = &self.attachment else {
            return;
        };
        let v = self.machine.version();
        let epoch = a.attached.epoch;
        while self.out.len() < PULL_UNTIL {
            let Some(popped) = self.outbox.pop() else {
                return;
            };
            for sub in &popped.subscriptions {
                match &popped.item {
                    Item::Deliver { seq, n, .. } => self.out.message(sub, *seq, epoch, n, v),
                    Item::Gap { seq, reason, .. } => {
                        self.out.gap(sub, *seq, epoch, *reason, v);
                    }
                }
            }
        }
    }

    /// Send ERROR (and a close frame), then close once flushed.
    fn fail(&mut self, f: Failure) {
        self.shared.metrics.error(f.kind);
        tracing::debug!(message = %f.message, "session error");
        let v: Version = self.machine.version();
        self.out.error(&f.message, f.receipt.as_deref(), v);
        self.out.close(f.close_code, "");
        self.closing = Some(Instant::now() + CLOSE_GRACE);
    }
}
