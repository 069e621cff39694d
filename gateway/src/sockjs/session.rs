//! Sessions of the SockJS HTTP transports.
//!
//! A session lives in its service's registry from the first receiving
//! request until it closes or has had no receiver for
//! `sockjs.session_timeout_ms`. One driver task per session owns the
//! [`Application`] (the STOMP core, or a test app the routes chose), takes what `xhr_send`
//! queued, pulls notifications, and writes SockJS frames to whichever
//! receiver holds the slot: a streaming response (xhr-streaming,
//! EventSource, closed after `sockjs.streaming_limit_bytes`) or a polling
//! response (one frame, then done). A second receiver while one is active
//! gets `c[2010,"Another connection still open"]`.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use herald_protocol::sockjs;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::application::Application;
pub use super::pending::{Kind, Pending};
use crate::app::Shared;
use crate::metrics::Transport;
use crate::metrics::traffic::now_micros;
use crate::permit::SessionPermit;
use crate::session::websocket::PULL_UNTIL;

/// Most messages `xhr_send` may queue ahead of the driver; beyond, 503.
pub const MAX_INBOUND_MESSAGES: usize = 1024;
/// Most bytes of messages `xhr_send` may queue ahead of the driver; beyond,
/// 503 (policy refuse-newest, counted as
/// `herald_connections_refused_total{reason="inbound_full"}`). One request
/// (at most `sockjs.max_send_bytes`) is always taken into an empty queue.
pub const MAX_INBOUND_BYTES: usize = 1024 * 1024;
/// SockJS frames queued for a receiver; the driver keeps one more and waits
/// for room (backpressure from a slow receiver).
const RECEIVER_QUEUE: usize = 4;

/// One SockJS frame, as chunks (wrapped for the receiver's transport).
pub type Frame = Vec<Bytes>;

/// The receiver slot: frames queued for the current receiving request.
struct Receiver {
    generation: u64,
    kind: Kind,
    sent: usize,
    frames: VecDeque<Frame>,
    /// No more frames will come: the receiver ends once the queue is empty.
    released: bool,
}

#[derive(Default)]
struct Inbox {
    inbound: VecDeque<String>,
    /// Bytes of `inbound`.
    inbound_bytes: usize,
    receiver: Option<Receiver>,
    generation: u64,
    /// A receiver went away before it was released.
    interrupted: bool,
    /// The driver ended: new receivers get this close frame.
    closed: Option<(u16, &'static str)>,
    /// The transport of the latest receiver, or of the request that made
    /// the session (what `xhr_send` bytes are counted under).
    last_kind: Option<Kind>,
}

/// One SockJS session of the HTTP transports.
pub struct HttpSession {
    inbox: Mutex<Inbox>,
    /// Wakes the driver: inbound messages, a receiver came, took a frame or left.
    wake: Notify,
    /// Wakes the receiver: frames queued or released.
    out: Notify,
}

/// A receiving request's hold on the slot. Dropping it before the stream
/// was released (the client went away) interrupts the session.
pub struct ReceiverHandle {
    session: Arc<HttpSession>,
    generation: u64,
}

impl ReceiverHandle {
    /// The next frame, or None when the stream is over.
    pub async fn next(&self) -> Option<Frame> {
        loop {
            {
                let mut inbox = self.session.inbox.lock();
                let r = inbox
                    .receiver
                    .as_mut()
                    .filter(|r| r.generation == self.generation)?;
                if let Some(frame) = r.frames.pop_front() {
                    drop(inbox);
                    self.session.wake.notify_one();
                    return Some(frame);
                }
                if r.released {
                    inbox.receiver = None;
                    drop(inbox);
                    self.session.wake.notify_one();
                    return None;
                }
            }
            self.session.out.notified().await;
        }
    }
}

impl Drop for ReceiverHandle {
    fn drop(&mut self) {
        let mut inbox = self.session.inbox.lock();
        if inbox
            .receiver
            .as_ref()
            .is_some_and(|r| r.generation == self.generation)
        {
            inbox.receiver = None;
            inbox.interrupted = true;
            drop(inbox);
            self.session.wake.notify_one();
        }
    }
}

/// What a receiving request gets.
pub enum Attach {
    /// The response body: frames until the stream is released.
    Stream(ReceiverHandle),
    /// Another receiver holds the slot, or the session is closed: this frame.
    Refused(Bytes),
}

impl HttpSession {
    /// Queue messages from `xhr_send`; false when the inbox is full.
    pub fn send(&self, messages: Vec<String>) -> bool {
        let mut inbox = self.inbox.lock();
        let bytes: usize = messages.iter().map(String::len).sum();
        if inbox.inbound.len() + messages.len() > MAX_INBOUND_MESSAGES
            || (!inbox.inbound.is_empty() && inbox.inbound_bytes + bytes > MAX_INBOUND_BYTES)
        {
            return false;
        }
        inbox.inbound_bytes += bytes;
        inbox.inbound.extend(messages);
        drop(inbox);
        self.wake.notify_one();
        true
    }

    /// The transport the session receives with (its latest receiver's, or
    /// the one it was made by).
    pub fn transport(&self) -> Option<Transport> {
        self.inbox.lock().last_kind.map(Kind::transport)
    }

    /// Take the receiver slot.
    pub fn attach(self: &Arc<Self>, kind: Kind) -> Attach {
        let mut inbox = self.inbox.lock();
        if let Some((code, reason)) = inbox.closed {
            let mut c = BytesMut::new();
            sockjs::encode_close(code, reason, &mut c);
            return Attach::Refused(c.freeze());
        }
        if inbox.receiver.is_some() {
            let (code, reason) = sockjs::close::ANOTHER_CONNECTION;
            let mut c = BytesMut::new();
            sockjs::encode_close(code, reason, &mut c);
            return Attach::Refused(c.freeze());
        }
        inbox.generation += 1;
        let generation = inbox.generation;
        inbox.last_kind = Some(kind);
        inbox.receiver = Some(Receiver {
            generation,
            kind,
            sent: 0,
            frames: VecDeque::new(),
            released: false,
        });
        drop(inbox);
        self.wake.notify_one();
        Attach::Stream(ReceiverHandle {
            session: Arc::clone(self),
            generation,
        })
    }
}

/// The sessions of one SockJS service.
#[derive(Default)]
pub struct Registry {
    sessions: Mutex<HashMap<Arc<str>, Arc<HttpSession>>>,
}

impl Registry {
    /// An existing session.
    pub fn get(&self, id: &str) -> Option<Arc<HttpSession>> {
        self.sessions.lock().get(id).cloned()
    }

    /// The session `id`, created if new by a receiving request of `kind`:
    /// its driver runs what `app` makes. None when the gateway is at
    /// `session.max_sessions`.
    pub fn get_or_create(
        self: &Arc<Self>,
        id: &str,
        kind: Kind,
        service: super::Service,
        shared: &Arc<Shared>,
        app: impl FnOnce() -> Box<dyn Application>,
    ) -> Option<Arc<HttpSession>> {
        let mut map = self.sessions.lock();
        if let Some(s) = map.get(id) {
            return Some(Arc::clone(s));
        }
        let permit = shared.acquire_session()?;
        let session = Arc::new(HttpSession {
            inbox: Mutex::new(Inbox {
                last_kind: Some(kind),
                ..Inbox::default()
            }),
            wake: Notify::new(),
            out: Notify::new(),
        });
        let id: Arc<str> = id.into();
        map.insert(Arc::clone(&id), Arc::clone(&session));
        drop(map);
        let driver = Driver {
            id,
            registry: Arc::clone(self),
            session: Arc::clone(&session),
            streaming_limit: service.streaming_limit_bytes,
            app: app(),
            shared: Arc::clone(shared),
            pending: Pending::new(shared.config.session.queue_bytes),
            opened: false,
            close: None,
            last_send: Instant::now(),
            receiver_left: Some(Instant::now()),
            held: None,
            _permit: permit,
        };
        shared.tracker.spawn(driver.run());
        Some(session)
    }

    fn remove(&self, id: &str) {
        self.sessions.lock().remove(id);
    }
}

struct Driver {
    id: Arc<str>,
    streaming_limit: usize,
    registry: Arc<Registry>,
    session: Arc<HttpSession>,
    app: Box<dyn Application>,
    shared: Arc<Shared>,
    pending: Pending,
    opened: bool,
    close: Option<(u16, &'static str)>,
    last_send: Instant,
    /// When the last receiver left; None while one is attached.
    receiver_left: Option<Instant>,
    /// A frame the receiver's channel had no room for, and whether the
    /// receiver is released once it is sent.
    held: Option<(Frame, bool)>,
    /// The session's slot, given back when the driver ends.
    _permit: SessionPermit,
}

impl Driver {
    async fn run(mut self) {
        let cfg = self.shared.config.sockjs.clone();
        let timeout = Duration::from_millis(cfg.session_timeout_ms);
        let heartbeat = Duration::from_millis(cfg.heartbeat_ms);
        loop {
            let now = Instant::now();
            self.take_inbound(now);
            if self.close.is_none() {
                self.app.pull(&mut self.pending, PULL_UNTIL, now);
                self.app.check_queue(&mut self.pending);
                self.close = self.app.close();
            }
            if std::mem::take(&mut self.session.inbox.lock().interrupted) {
                self.interrupted();
            }
            self.deliver(now, self.streaming_limit);
            let attached = self
                .session
                .inbox
                .lock()
                .receiver
                .as_ref()
                .is_some_and(|r| !r.released);
            if attached {
                self.receiver_left = None;
            } else if self.receiver_left.is_none() {
                self.receiver_left = Some(now);
            }
            if let Some(close) = self.close
                && self.pending.messages.is_empty()
                && self.held.is_none()
            {
                // From now on every receiving request gets the close frame,
                // until the session times out of the registry.
                self.session.inbox.lock().closed = Some(close);
            }
            if let Some(left) = self.receiver_left
                && now >= left + timeout
            {
                break;
            }
            // Shutting down: once the close went out (or nobody is there to
            // take it), there is nothing to wait for.
            if self.shared.shutdown.is_cancelled() && self.close.is_some() && !attached {
                break;
            }
            let mut deadline = now + Duration::from_secs(3600);
            if let Some(left) = self.receiver_left {
                deadline = deadline.min(left + timeout);
            }
            if attached {
                deadline = deadline.min(self.last_send + heartbeat);
            }
            if let Some(d) = self.app.next_deadline() {
                deadline = deadline.min(d);
            }
            let shared = Arc::clone(&self.shared);
            let outbox = if self.pending.bytes < PULL_UNTIL {
                self.app.outbox()
            } else {
                None
            };
            tokio::select! {
                _ = shared.shutdown.cancelled(), if self.close.is_none() => {
                    self.app.shutdown(&mut self.pending);
                    self.close = Some((1001, "Going away"));
                }
                _ = self.session.wake.notified() => {}
                _ = async { outbox.as_ref().unwrap().notified().await }, if outbox.is_some() => {}
                _ = tokio::time::sleep_until(deadline) => {
                    let now = Instant::now();
                    self.app.on_timer(now, &mut self.pending);
                    self.app.check_queue(&mut self.pending);
                    if attached && now >= self.last_send + heartbeat {
                        self.send_to_receiver(vec![Bytes::from_static(sockjs::HEARTBEAT)], now, usize::MAX);
                    }
                }
            }
        }
        self.finish();
    }

    fn take_inbound(&mut self, now: Instant) {
        let inbound = {
            let mut inbox = self.session.inbox.lock();
            inbox.inbound_bytes = 0;
            std::mem::take(&mut inbox.inbound)
        };
        for m in inbound {
            self.app.on_message(&m, now, &mut self.pending);
            self.app.check_queue(&mut self.pending);
        }
        if let Some(close) = self.app.close() {
            self.close.get_or_insert(close);
        }
    }

    /// Write what is pending to the receiver, if there is one.
    fn deliver(&mut self, now: Instant, limit: usize) {
        let has_receiver = self
            .session
            .inbox
            .lock()
            .receiver
            .as_ref()
            .is_some_and(|r| !r.released);
        if !has_receiver {
            // Whatever was held for a receiver that left is lost with it, as
            // with any SockJS server; STOMP resume recovers it by sequence.
            self.held = None;
            return;
        }
        if let Some((frame, release)) = self.held.take()
            && !self.queue(frame, release)
        {
            return;
        }
        if !self.opened {
            self.opened = true;
            self.send_to_receiver(vec![Bytes::from_static(sockjs::OPEN)], now, limit);
            if let Some(close) = self.app.opened() {
                self.close = Some(close);
            }
            if self.held.is_some()
                || self
                    .session
                    .inbox
                    .lock()
                    .receiver
                    .as_ref()
                    .is_none_or(|r| r.released)
            {
                return;
            }
        }
        if let Some(frame) = self.pending.take_frame() {
            let accepted = std::mem::take(&mut self.pending.accepted);
            if let Some(transport) = self.send_to_receiver(frame, now, limit)
                && !accepted.is_empty()
            {
                let meter = self.shared.metrics.traffic.meter(transport);
                let handed = now_micros();
                for a in accepted {
                    meter.delivered(a, handed);
                }
            }
        }
        if let Some((code, reason)) = self.close
            && self.pending.messages.is_empty()
            && self.held.is_none()
            && self
                .session
                .inbox
                .lock()
                .receiver
                .as_ref()
                .is_some_and(|r| !r.released)
        {
            let mut c = BytesMut::new();
            sockjs::encode_close(code, reason, &mut c);
            self.session.inbox.lock().closed = Some((code, reason));
            self.send_to_receiver(vec![c.freeze()], now, 0);
        }
    }

    /// Send one SockJS frame; polling receivers and streams past their
    /// byte limit are released afterwards. The transport of the receiver
    /// it was handed to (counted there), if there was one.
    fn send_to_receiver(
        &mut self,
        frame: Vec<Bytes>,
        now: Instant,
        limit: usize,
    ) -> Option<Transport> {
        let (frame, release, transport) = {
            let mut inbox = self.session.inbox.lock();
            let r = inbox.receiver.as_mut().filter(|r| !r.released)?;
            let frame = r.kind.wrap(frame);
            let len = frame.iter().map(Bytes::len).sum::<usize>();
            r.sent += len;
            let transport = r.kind.transport();
            self.shared
                .metrics
                .traffic
                .meter(transport)
                .bytes_sent
                .inc_by(len as u64);
            (
                frame,
                r.kind == Kind::XhrPolling || r.sent >= limit,
                transport,
            )
        };
        self.queue(frame, release);
        self.last_send = now;
        self.app.sent(now);
        Some(transport)
    }

    /// Queue a wrapped frame for the receiver; when its queue is full, hold
    /// it (and return false) until the receiver takes one.
    fn queue(&mut self, frame: Frame, release: bool) -> bool {
        let mut inbox = self.session.inbox.lock();
        let Some(r) = inbox.receiver.as_mut() else {
            return true;
        };
        if r.frames.len() >= RECEIVER_QUEUE {
            self.held = Some((frame, release));
            return false;
        }
        r.frames.push_back(frame);
        r.released |= release;
        drop(inbox);
        self.session.out.notify_one();
        true
    }

    /// The receiver went away before the frame that ends it: SockJS closes
    /// the session with `c[1002,"Connection interrupted"]` (the client opens
    /// a new one; STOMP resume recovers what it missed).
    fn interrupted(&mut self) {
        let close = sockjs::close::INTERRUPTED;
        let mut inbox = self.session.inbox.lock();
        inbox.receiver = None;
        inbox.interrupted = false;
        inbox.closed.get_or_insert(close);
        drop(inbox);
        self.held = None;
        self.pending = Pending::new(self.shared.config.session.queue_bytes);
        if self.close.is_none() {
            self.close = Some(close);
            self.app.peer_closed();
        }
    }

    fn finish(self) {
        self.registry.remove(&self.id);
        // A receiver still attached ends once it has what was queued.
        if let Some(r) = self.session.inbox.lock().receiver.as_mut() {
            r.released = true;
        }
        self.session.out.notify_one();
        self.app.finish();
    }
}
