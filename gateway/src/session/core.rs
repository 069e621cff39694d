//! The transport-independent part of a browser session: STOMP decoding, the
//! state machine's actions (auth, hub attachment, subscriptions), the pull
//! from the outbox, heart-beat timing, the token's expiry and the close
//! decision.
//!
//! A transport shell (raw WebSocket, SockJS over WebSocket, SockJS over
//! HTTP) feeds it the STOMP byte stream the client sent and gives it a
//! [`Sink`] that frames STOMP frames its own way. Everything it needs of
//! the gateway (tokens, mailboxes, presence, metrics, limits) goes through
//! a [`Host`], so it is unit-tested on values (`core/tests.rs`).

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use herald_protocol::envelope::{Notification, names};
use herald_protocol::stomp::{
    self, Command, Decoded, HeartBeat, Version, headers, negotiate_heartbeat,
};
use tokio::time::Instant;

use super::host::Host;
use super::stomp::{Action, Connect, Failure, StompSession, Subscribe};
use crate::hub::{Attached, Identity, Missed, Resume};
use crate::metrics::{DropReason, ProtocolError, RefuseReason, Transport, TransportLabels};
use crate::outbox::{GapReason, Item, Outbox, QueueLimits, Subscription};

/// How a transport writes STOMP frames.
pub trait Sink {
    /// A whole frame (control frames: CONNECTED, RECEIPT, ERROR, gap markers).
    fn frame(&mut self, command: Command, headers: &[(&str, &str)], body: &[u8], v: Version);
    /// A MESSAGE for one subscription: per-recipient head, shared payload.
    fn message(&mut self, subscription: &str, seq: u64, epoch: u64, n: &Notification, v: Version);
    /// A STOMP heart-beat (one EOL).
    fn heartbeat(&mut self);
    /// Bytes written but not yet taken by the socket.
    fn queued(&self) -> usize;
    /// Whether a control frame did not fit in the session's bound since the
    /// last call (the session must be cut as a slow consumer). The first
    /// `true` lets the ERROR and close that end the session through.
    fn take_overflow(&mut self) -> bool {
        false
    }
}

fn error(sink: &mut dyn Sink, message: &str, receipt: Option<&str>, v: Version) {
    let mut hdrs = vec![
        (headers::MESSAGE, message),
        (headers::CONTENT_TYPE, "text/plain"),
    ];
    if let Some(r) = receipt {
        hdrs.push((headers::RECEIPT_ID, r));
    }
    sink.frame(Command::Error, &hdrs, message.as_bytes(), v);
}

fn receipt(sink: &mut dyn Sink, id: &str, v: Version) {
    sink.frame(Command::Receipt, &[(headers::RECEIPT_ID, id)], b"", v);
}

fn gap(sink: &mut dyn Sink, sub: &str, seq: u64, epoch: u64, reason: GapReason, v: Version) {
    let seq = seq.to_string();
    let epoch = epoch.to_string();
    let id = format!("gap-{epoch}-{seq}");
    sink.frame(
        Command::Message,
        &[
            (headers::SUBSCRIPTION, sub),
            (headers::DESTINATION, super::stomp::DESTINATION),
            (names::MESSAGE_ID, &id),
            (names::SEQ, &seq),
            (names::EPOCH, &epoch),
            (names::EVENT, names::GAP_EVENT),
            ("reason", reason.as_str()),
            (headers::CONTENT_LENGTH, "0"),
        ],
        b"",
        v,
    );
}

struct Attachment {
    who: Identity,
    attached: Attached,
    /// The resume point for the first SUBSCRIBE: the CONNECT's, or the
    /// mailbox head at CONNECT, so nothing between CONNECT and SUBSCRIBE is
    /// lost.
    first_resume: Option<Resume>,
}

/// The STOMP side of one session.
pub struct StompCore {
    host: Arc<dyn Host>,
    transport: Transport,
    http_token: Option<String>,
    stomp_buf: BytesMut,
    limits: stomp::Limits,
    machine: StompSession,
    outbox: Arc<Outbox>,
    attachment: Option<Attachment>,
    last_recv: Instant,
    last_send: Instant,
    send_every: Option<Duration>,
    recv_within: Option<Duration>,
    connect_deadline: Option<Instant>,
    /// When the token stops being valid (`exp` plus the leeway): the
    /// session ends with ERROR "token expired" so the client reconnects
    /// with a fresh one. None before CONNECT, or when it is beyond what
    /// an `Instant` can hold.
    token_deadline: Option<Instant>,
    /// Set when the session must end; the value is the WebSocket close code
    /// (SockJS maps it to its own close frame).
    close: Option<u16>,
    /// While something waits for the client: when it last took bytes (or
    /// when the wait began). None while nothing waits.
    waiting_since: Option<Instant>,
    /// The client's address (behind a trusted proxy, the one it named),
    /// for the log lines of the session's start and end.
    client: Option<std::net::SocketAddr>,
}

impl StompCore {
    /// A session that waits for CONNECT. `http_token` is a token that came
    /// with the HTTP request (`?token=` or `Authorization`).
    pub fn new(
        host: Arc<dyn Host>,
        transport: Transport,
        http_token: Option<String>,
        now: Instant,
    ) -> Self {
        let cfg = host.config();
        StompCore {
            limits: stomp::Limits {
                max_frame_bytes: cfg.max_frame_bytes,
                max_headers: cfg.max_headers,
                max_header_bytes: cfg.max_header_bytes,
            },
            machine: StompSession::new(cfg.max_subscriptions),
            outbox: Arc::new(
                Outbox::new(QueueLimits {
                    messages: cfg.queue_messages,
                    bytes: cfg.queue_bytes,
                    when_full: cfg.when_full,
                })
                .over(transport),
            ),
            connect_deadline: Some(now + Duration::from_millis(cfg.connect_timeout_ms)),
            token_deadline: None,
            transport,
            http_token,
            stomp_buf: BytesMut::new(),
            attachment: None,
            last_recv: now,
            last_send: now,
            send_every: None,
            recv_within: None,
            close: None,
            waiting_since: None,
            client: None,
            host,
        }
    }

    /// The client's address, for the session's log lines.
    pub fn with_client(mut self, client: std::net::SocketAddr) -> Self {
        self.client = Some(client);
        self
    }

    /// The session's outbox (to wait on its notifications).
    pub fn outbox(&self) -> &Arc<Outbox> {
        &self.outbox
    }

    /// The close code once the session must end.
    pub fn close_code(&self) -> Option<u16> {
        self.close
    }

    /// Whether pulling from the outbox makes sense now.
    pub fn can_pull(&self) -> bool {
        self.attachment.is_some() && self.close.is_none()
    }

    /// Whether there is something to pull: queued in the outbox, or in
    /// the mailbox for a session that fell behind.
    pub fn has_pending(&self) -> bool {
        self.can_pull() && self.outbox.has_work()
    }

    /// The client sent something (any byte counts for heart-beats).
    pub fn received(&mut self, now: Instant) {
        self.last_recv = now;
    }

    /// Bytes went out: write progress.
    pub fn sent(&mut self, now: Instant) {
        self.last_send = now;
        if self.waiting_since.is_some() {
            self.waiting_since = Some(now);
        }
    }

    /// Longest the client may go without taking bytes while something
    /// waits for it (`session.max_lag_ms`).
    fn max_lag(&self) -> Duration {
        Duration::from_millis(self.host.config().max_lag_ms)
    }

    /// Start or stop the lag clock: it runs while something waits for the
    /// client (in the sink, the outbox or, behind, the mailbox).
    fn track_lag(&mut self, sink: &dyn Sink, now: Instant) {
        let waiting = sink.queued() > 0 || self.outbox.has_work();
        match (waiting, self.waiting_since) {
            (true, None) => self.waiting_since = Some(now),
            (false, Some(_)) => self.waiting_since = None,
            _ => {}
        }
    }

    /// When bytes last went out.
    pub fn last_send(&self) -> Instant {
        self.last_send
    }

    /// Feed bytes of the client's STOMP stream.
    pub fn on_stomp_bytes(&mut self, data: &[u8], now: Instant, sink: &mut dyn Sink) {
        self.last_recv = now;
        self.stomp_buf.extend_from_slice(data);
        while self.close.is_none() {
            match stomp::decode(&mut self.stomp_buf, self.machine.version(), &self.limits) {
                Ok(None) => break,
                Ok(Some(Decoded::Heartbeat)) => {}
                Ok(Some(Decoded::Frame(frame))) => {
                    let action = self.machine.on_frame(&frame);
                    self.act(action, now, sink);
                    self.check_queue(sink);
                }
                Err(e) => self.fail(Failure::undecodable(&e), sink),
            }
        }
        if self.stomp_buf.is_empty() {
            self.stomp_buf = BytesMut::new();
        }
    }

    fn act(&mut self, action: Action, now: Instant, sink: &mut dyn Sink) {
        let v = self.machine.version();
        match action {
            Action::Connect(c) => self.connect(c, now, sink),
            Action::Subscribe(s) => self.subscribe(s, now, sink),
            Action::Unsubscribe { id, receipt: r } => {
                self.outbox.unsubscribe(&id);
                if let Some(r) = r {
                    receipt(sink, &r, v);
                }
            }
            Action::Disconnect { receipt: r } => {
                if let Some(r) = r {
                    receipt(sink, &r, v);
                }
                self.close = Some(1000);
            }
            Action::Fail(f) => self.fail(f, sink),
        }
    }

    fn connect(&mut self, c: Connect, now: Instant, sink: &mut dyn Sink) {
        let token = c.token.or_else(|| self.http_token.take());
        let identity = match token {
            None => Err(crate::auth::AuthError::Missing),
            Some(t) => self.host.verify(&t),
        };
        let who = match identity {
            Ok(verified) => {
                self.token_deadline = now.checked_add(verified.valid_for);
                verified.who
            }
            Err(e) => {
                self.host.metrics().refuse(RefuseReason::Auth);
                tracing::debug!(error = %e, client = self.client.map(tracing::field::display), "CONNECT refused");
                self.fail(
                    Failure {
                        message: e.to_string(),
                        receipt: None,
                        kind: ProtocolError::Refused,
                        close_code: 1008,
                    },
                    sink,
                );
                return;
            }
        };
        let missed = c.resume.as_ref().zip(c.offline_ms).map(|(r, ms)| Missed {
            epoch: r.epoch,
            offline_ms: ms,
        });
        let attached = match self.host.attach(&who, &self.outbox, missed.as_ref()) {
            Ok(attached) => attached,
            Err(too_many) => {
                self.host.metrics().refuse(RefuseReason::UserSessionLimit);
                tracing::debug!(user = %who.user, client = self.client.map(tracing::field::display), max = too_many.max, "CONNECT refused: too many sessions for this user");
                self.fail(
                    Failure {
                        message: format!(
                            "too many sessions for this user: at most {} at once on this server (session.max_per_user)",
                            too_many.max
                        ),
                        receipt: None,
                        kind: ProtocolError::Refused,
                        close_code: 1008,
                    },
                    sink,
                );
                return;
            }
        };
        let cfg = self.host.config();
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
        if attached.came_online {
            self.host.user_online(&who);
        }
        let hb = HeartBeat {
            cx: send.map_or(0, |d| d.as_millis() as u32),
            cy: recv.map_or(0, |d| d.as_millis() as u32),
        }
        .to_header();
        let session_id = format!("{:016x}", rand::random::<u64>());
        let epoch = attached.epoch.to_string();
        let head = attached.head.to_string();
        // Name the edge, so a client (and an operator) can tell where a
        // session landed behind the proxy.
        let server = self.host.server_name();
        sink.frame(
            Command::Connected,
            &[
                (headers::VERSION, c.version.as_str()),
                (headers::HEART_BEAT, &hb),
                (headers::SERVER, &server),
                (headers::SESSION, &session_id),
                ("user-name", &who.user),
                (names::EPOCH, &epoch),
                (names::SEQ, &head),
            ],
            b"",
            c.version,
        );
        let first_resume = c.resume.or(Some(Resume {
            epoch: attached.epoch,
            last_seq: attached.head,
        }));
        tracing::debug!(user = %who.user, client = self.client.map(tracing::field::display), version = c.version.as_str(), "session open");
        let labels = TransportLabels {
            transport: self.transport,
        };
        let metrics = self.host.metrics();
        metrics.sessions.get_or_create(&labels).inc();
        metrics.sessions_opened.get_or_create(&labels).inc();
        self.attachment = Some(Attachment {
            who,
            attached,
            first_resume,
        });
    }

    fn subscribe(&mut self, s: Subscribe, now: Instant, sink: &mut dyn Sink) {
        let v = self.machine.version();
        let Some(a) = self.attachment.as_mut() else {
            return;
        };
        if let (Some(r), Some(ms)) = (&s.resume, s.offline_ms) {
            self.host.missed(
                &a.who,
                &Missed {
                    epoch: r.epoch,
                    offline_ms: ms,
                },
            );
        }
        let resume = s.resume.or_else(|| a.first_resume.take());
        a.first_resume = None;
        let sub = Subscription {
            key: s.key,
            id: s.id.into(),
            filter: s.filter,
        };
        let result = self
            .host
            .subscribe(&a.who, &self.outbox, sub, resume.as_ref(), now);
        tracing::debug!(?result, "subscribed");
        if let Some(r) = s.receipt {
            receipt(sink, &r, v);
        }
    }

    /// Move queued messages into the sink until it holds `limit` bytes;
    /// a session that fell behind refills its outbox from its mailbox as
    /// it goes.
    pub fn pull(&mut self, sink: &mut dyn Sink, limit: usize, now: Instant) {
        if self.close.is_some() {
            return;
        }
        if let Some(reason) = self.outbox.kicked() {
            // An operator's disconnect (POST /v1/users/{uid}/disconnect):
            // no protocol error of the client's, so not counted as one.
            tracing::info!(%reason, "session ended by an operator");
            let message = format!("disconnected by an operator: {reason}");
            self.end(&message, None, 1008, sink);
            return;
        }
        if self.outbox.is_cut() {
            // Counted by the hub when its mailbox evicted what the session
            // had not been sent.
            self.fail(
                Failure {
                    message: "slow consumer: what the session was not sent yet \
                              outgrew its mailbox (mailbox.unsent_bytes)"
                        .into(),
                    receipt: None,
                    kind: ProtocolError::Refused,
                    close_code: 1008,
                },
                sink,
            );
            return;
        }
        let Some(a) = &self.attachment else {
            return;
        };
        let v = self.machine.version();
        let epoch = a.attached.epoch;
        while sink.queued() < limit {
            let popped = match self.outbox.pop() {
                Some(p) => p,
                None if self.outbox.is_behind() => {
                    self.host.refill(&a.who, &self.outbox, now);
                    match self.outbox.pop() {
                        Some(p) => p,
                        None => break,
                    }
                }
                None => break,
            };
            for sub in &popped.subscriptions {
                match &popped.item {
                    Item::Deliver { seq, n, .. } => sink.message(sub, *seq, epoch, n, v),
                    Item::Gap { seq, reason, .. } => gap(sink, sub, *seq, epoch, *reason, v),
                }
            }
        }
        self.track_lag(sink, now);
    }

    /// The next instant [`Self::on_timer`] has work, if any.
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.close.is_some() {
            return None;
        }
        [
            self.connect_deadline,
            self.token_deadline,
            self.send_every.map(|e| self.last_send + e),
            self.recv_within.map(|w| self.last_recv + w),
            self.waiting_since.map(|t| t + self.max_lag()),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Connect timeout, token expiry, heart-beat timeout, a client that
    /// does not read, heart-beats due.
    pub fn on_timer(&mut self, now: Instant, sink: &mut dyn Sink) {
        if self.close.is_some() {
            return;
        }
        if self.connect_deadline.is_some_and(|d| now >= d) {
            self.host.metrics().refuse(RefuseReason::ConnectTimeout);
            self.fail(
                Failure {
                    message: "no CONNECT frame in time".into(),
                    receipt: None,
                    kind: ProtocolError::Refused,
                    close_code: 1008,
                },
                sink,
            );
            return;
        }
        if self.token_deadline.is_some_and(|d| now >= d) {
            // Not a protocol error: the client did nothing wrong, its token
            // ran out. It reconnects with a fresh one and resumes.
            self.host.metrics().sessions_token_expired.inc();
            tracing::debug!("token expired: session ends");
            self.end(
                &crate::auth::AuthError::Expired.to_string(),
                None,
                1008,
                sink,
            );
            return;
        }
        if self
            .recv_within
            .is_some_and(|within| now >= self.last_recv + within)
        {
            self.fail(
                Failure {
                    message: "heart-beat timeout: nothing received from the client in time".into(),
                    receipt: None,
                    kind: ProtocolError::Refused,
                    close_code: 1001,
                },
                sink,
            );
            return;
        }
        if let Some(since) = self.waiting_since
            && now >= since + self.max_lag()
        {
            self.track_lag(sink, now);
            if self.waiting_since.is_some() {
                self.host.metrics().drop_one(DropReason::SlowConsumer);
                tracing::debug!(
                    lag_ms = (now - since).as_millis() as u64,
                    "slow consumer cut"
                );
                self.fail(
                    Failure {
                        message: format!(
                            "slow consumer: the client took nothing of what waits for it \
                             in {} ms (session.max_lag_ms)",
                            self.max_lag().as_millis()
                        ),
                        receipt: None,
                        kind: ProtocolError::Refused,
                        close_code: 1008,
                    },
                    sink,
                );
                return;
            }
        }
        if self
            .send_every
            .is_some_and(|every| now >= self.last_send + every)
            && sink.queued() == 0
        {
            sink.heartbeat();
            self.last_send = now;
        }
    }

    /// Cut the session as a slow consumer if the sink refused a control
    /// frame at its bound (policy `disconnect`, counted as
    /// `herald_dropped_total{reason="slow_consumer"}`); whether it did.
    /// Shells call this after writing frames of their own (pongs, SockJS
    /// heart-beats); the core calls it after each frame it answers.
    pub fn check_queue(&mut self, sink: &mut dyn Sink) -> bool {
        if !sink.take_overflow() {
            return false;
        }
        if self.close.is_none() {
            self.host.metrics().drop_one(DropReason::SlowConsumer);
            self.fail(
                Failure {
                    message: "slow consumer: the client does not read what the session sends \
                              (pongs, receipts) and its queue is full"
                        .into(),
                    receipt: None,
                    kind: ProtocolError::Refused,
                    close_code: 1008,
                },
                sink,
            );
        }
        true
    }

    /// Send ERROR and mark the session for closing.
    pub fn fail(&mut self, f: Failure, sink: &mut dyn Sink) {
        if self.close.is_some() {
            return;
        }
        self.host.metrics().error(f.kind);
        tracing::debug!(message = %f.message, "session error");
        self.end(&f.message, f.receipt.as_deref(), f.close_code, sink);
    }

    /// ERROR with `message`, then close with `code`.
    fn end(&mut self, message: &str, receipt: Option<&str>, code: u16, sink: &mut dyn Sink) {
        error(sink, message, receipt, self.machine.version());
        self.close = Some(code);
    }

    /// Shutdown: ERROR "server shutting down", close 1001.
    pub fn shutdown(&mut self, sink: &mut dyn Sink) {
        if self.close.is_some() {
            return;
        }
        self.end("server shutting down", None, 1001, sink);
    }

    /// The transport failed underneath (a protocol error of the framing).
    pub fn transport_error(
        &mut self,
        message: &str,
        kind: ProtocolError,
        code: u16,
        sink: &mut dyn Sink,
    ) {
        self.fail(
            Failure {
                message: message.to_owned(),
                receipt: None,
                kind,
                close_code: code,
            },
            sink,
        );
    }

    /// Mark for closing without a frame (the peer closed).
    pub fn peer_closed(&mut self) {
        self.close.get_or_insert(1000);
    }

    /// Leave the mailbox (the shell's permit gives the slot back).
    pub fn finish(mut self) {
        if let Some(a) = self.attachment.take() {
            tracing::debug!(user = %a.who.user, client = self.client.map(tracing::field::display), close = ?self.close, "session closed");
            let went_offline = self.host.detach(&a.who, &self.outbox, Instant::now());
            if went_offline {
                self.host.user_offline(&a.who);
            }
            self.host
                .metrics()
                .sessions
                .get_or_create(&TransportLabels {
                    transport: self.transport,
                })
                .dec();
        }
    }
}

#[cfg(test)]
mod tests;
