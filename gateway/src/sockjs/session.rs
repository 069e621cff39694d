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
//! gets `c[2010,"Another connection still open"]`, after waiting up to
//! [`HOLDER_GRACE`] for the holder to go away: a client that aborts a
//! pending poll and polls again at once (as the SockJS protocol suite's
//! `test_abort_xhr_polling` does) has closed the first connection before
//! it opened the second, but the end of the first is noticed by hyper on
//! another worker thread, and may be noticed after the second request
//! arrived.

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
/// How long a receiving request that finds the slot held waits for the
/// holder to leave before it is answered `c[2010,…]`.
pub const HOLDER_GRACE: Duration = Duration::from_millis(250);
/// How long, once the gateway is shutting down, a session with no receiver
/// keeps its notice (STOMP `ERROR` "server shutting down", then the close
/// frame) for the client's next receiving request. A polling client is
/// between two polls for about a round trip, and the keep-alive connection
/// its last poll came on stays open as long for the next one
/// ([`ReceivedOn`]); a client that does not come back costs the drain this
/// much, bounded by `shutdown_grace_ms`.
pub const SHUTDOWN_LINGER: Duration = Duration::from_secs(1);
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
    /// Wakes receiving requests waiting for the slot: it was vacated.
    vacated: Notify,
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
                    self.session.vacated.notify_waiters();
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
            // Closed from now on, before the driver hears of it: a
            // receiver that comes in between gets the close frame, not a
            // slot the driver is about to take back.
            inbox.closed.get_or_insert(sockjs::close::INTERRUPTED);
            drop(inbox);
            self.session.wake.notify_one();
            self.session.vacated.notify_waiters();
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
    /// A session made by a receiving request of `kind`.
    fn new(kind: Kind) -> Self {
        HttpSession {
            inbox: Mutex::new(Inbox {
                last_kind: Some(kind),
                ..Inbox::default()
            }),
            wake: Notify::new(),
            out: Notify::new(),
            vacated: Notify::new(),
        }
    }

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

    /// Take the receiver slot, waiting up to [`HOLDER_GRACE`] for a holder
    /// to leave.
    pub async fn attach(self: &Arc<Self>, kind: Kind) -> Attach {
        // The slot is free nearly always: take it without registering.
        if let Some(attach) = self.try_attach(kind) {
            return attach;
        }
        let deadline = Instant::now() + HOLDER_GRACE;
        loop {
            // Registered before the slot is looked at, so a holder that
            // leaves in between still wakes this request.
            let vacated = self.vacated.notified();
            let mut vacated = std::pin::pin!(vacated);
            vacated.as_mut().enable();
            match self.try_attach(kind) {
                Some(attach) => return attach,
                None => {
                    if tokio::time::timeout_at(deadline, vacated).await.is_err() {
                        let (code, reason) = sockjs::close::ANOTHER_CONNECTION;
                        let mut c = BytesMut::new();
                        sockjs::encode_close(code, reason, &mut c);
                        return Attach::Refused(c.freeze());
                    }
                }
            }
        }
    }

    /// Take the receiver slot now; None while another receiver holds it.
    fn try_attach(self: &Arc<Self>, kind: Kind) -> Option<Attach> {
        let mut inbox = self.inbox.lock();
        if let Some((code, reason)) = inbox.closed {
            let mut c = BytesMut::new();
            sockjs::encode_close(code, reason, &mut c);
            return Some(Attach::Refused(c.freeze()));
        }
        if inbox.receiver.is_some() {
            return None;
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
        Some(Attach::Stream(ReceiverHandle {
            session: Arc::clone(self),
            generation,
        }))
    }
}

/// A request extension the front's hyper side puts on every request of a
/// connection: set when a receiving request was served on it, so that on
/// shutdown the connection stays open up to [`SHUTDOWN_LINGER`] for the
/// client's next poll, which gets the session's notice.
#[derive(Clone, Default)]
pub struct ReceivedOn(Arc<std::sync::atomic::AtomicBool>);

impl ReceivedOn {
    /// Mark the connection as one a receiving request came on.
    pub fn mark(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether a receiving request came on the connection.
    pub fn marked(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
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
        let session = Arc::new(HttpSession::new(kind));
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
            shutdown_at: None,
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
    /// When the driver saw the gateway shut down with the session open.
    shutdown_at: Option<Instant>,
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
            // Shutting down with no receiver: once the notice went out,
            // there is nothing to wait for (a late receiver still gets the
            // close frame, see `finish`); until then, the client's next
            // receiving request gets it, if it comes within the linger.
            if self.shared.shutdown.is_cancelled() && self.close.is_some() && !attached {
                let told = self.pending.messages.is_empty() && self.held.is_none();
                let lingered = self
                    .shutdown_at
                    .is_none_or(|at| now >= at + SHUTDOWN_LINGER);
                if told || lingered {
                    break;
                }
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
            if let Some(at) = self.shutdown_at {
                deadline = deadline.min(at + SHUTDOWN_LINGER);
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
                    self.close = Some(sockjs::close::GOING_AWAY);
                    self.shutdown_at = Some(Instant::now());
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
        self.session.vacated.notify_waiters();
        self.held = None;
        self.pending = Pending::new(self.shared.config.session.queue_bytes);
        if self.close.is_none() {
            self.close = Some(close);
            self.app.peer_closed();
        }
    }

    fn finish(self) {
        if self.shared.shutdown.is_cancelled() {
            // The registry goes with the process: a receiving request that
            // comes late gets the close frame rather than a new session.
            let close = self.close.unwrap_or(sockjs::close::GOING_AWAY);
            self.session.inbox.lock().closed.get_or_insert(close);
        } else {
            self.registry.remove(&self.id);
        }
        // A receiver still attached ends once it has what was queued.
        if let Some(r) = self.session.inbox.lock().receiver.as_mut() {
            r.released = true;
        }
        self.session.out.notify_one();
        self.app.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(attach: Attach) -> Bytes {
        match attach {
            Attach::Refused(frame) => frame,
            Attach::Stream(_) => panic!("expected a refusal, got the slot"),
        }
    }

    #[tokio::test]
    async fn a_receiver_gone_while_another_waits_closes_the_session_as_interrupted() {
        let session = Arc::new(HttpSession::new(Kind::XhrPolling));
        let Attach::Stream(first) = session.attach(Kind::XhrPolling).await else {
            panic!("the slot was free");
        };
        let second = tokio::spawn({
            let session = Arc::clone(&session);
            async move { session.attach(Kind::XhrPolling).await }
        });
        // The client aborted the first poll: its handle goes away whether
        // the second request is already waiting or not yet looking.
        drop(first);
        let frame = refused(second.await.unwrap());
        assert_eq!(&frame[..], b"c[1002,\"Connection interrupted\"]");
        // And so does every later receiver: the session is over.
        let later = refused(session.attach(Kind::XhrStreaming).await);
        assert_eq!(&later[..], b"c[1002,\"Connection interrupted\"]");
    }

    #[tokio::test(start_paused = true)]
    async fn a_holder_that_stays_gets_the_next_receiver_refused_after_the_grace() {
        let session = Arc::new(HttpSession::new(Kind::XhrPolling));
        let Attach::Stream(_first) = session.attach(Kind::XhrPolling).await else {
            panic!("the slot was free");
        };
        let started = Instant::now();
        let frame = refused(session.attach(Kind::XhrPolling).await);
        assert_eq!(&frame[..], b"c[2010,\"Another connection still open\"]");
        assert!(started.elapsed() >= HOLDER_GRACE);
    }
}
