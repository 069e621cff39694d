//! The soak's traffic, all through the deployment's front doors: STOMP-over-WebSocket sessions
//! through HAProxy (`/ws?uid=`), the publish and presence API through HAProxy, AMQP straight to
//! the roots' `herald` exchange.
//!
//! - **Steady sessions**: one per steady user (`soak-s-N`, company `soak-co-{N % companies}`),
//!   open for the whole run; every bench `MESSAGE` they get goes to the [`Ledger`]. A steady
//!   session the server ends is a failure; it is opened again (a new session id) and counts
//!   from its new `RECEIPT` on.
//! - **Churn**: slots of sessions of users drawn from a pool (`soak-c-N`), each held 2 to 20 s
//!   and closed, half politely (WebSocket close), half by dropping the socket; then the slot
//!   opens the next one. What they receive is counted, not checked (a session about to close
//!   may or may not get what was published to it).
//! - **Publications** at a fixed rate, alternating HTTP and AMQP (and the two roots): 60 %
//!   per-user (one to three steady users, half the time a churn user too), 25 % client-scoped
//!   (one company), 15 % global. Each is written in the ledger for the steady sessions it must
//!   reach before it is published.
//! - **Delayed** notifications (`delay_ms` / `delay-ms`, 1 to 15 s) to one steady user each.
//! - **Callbacks**: callback-only notifications (`browsers: false`, `delay_ms` 0 to 5 s) to the
//!   bench's receiver on 127.0.0.1, each payload naming its sequence number.
//! - **Presence** queries: a steady user live for [`PRESENCE_SETTLED`] must read online; a
//!   company's presence must answer.
//!
//! [`sessions`] holds the sessions, [`publish`] publishes and queries; both on [`Shared`].

mod publish;
mod sessions;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use self::publish::{callbacks, delayed, immediate, presence};
use self::sessions::{churn, steady};
use super::ledger::{Ledger, SessionId};
use crate::client::session::Target;
use crate::client::session::xhr_streaming::SendPool;
use crate::client::transport::Transport;
use crate::harness::amqp::{self, Publisher};
use crate::harness::token::{Claims, Minter, now_epoch_secs};

/// A steady user live this long must read online (edges report presence within 100 ms and
/// every 10 s; the routers keep an edge's users 35 s after its last report).
pub(crate) const PRESENCE_SETTLED: Duration = Duration::from_secs(30);
/// Handshake deadline of one session.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(20);
/// Wait before opening a session again after a failure.
const RETRY_PAUSE: Duration = Duration::from_millis(500);
/// The users churn sessions are drawn from.
const CHURN_POOL: usize = 400;
/// How long a churn session is held, in ms.
const CHURN_HOLD_MS: std::ops::Range<u64> = 2_000..20_000;
/// A delayed notification's delay, in ms.
const DELAY_MS: std::ops::Range<u64> = 1_000..15_000;
/// A callback's delay, in ms.
const CALLBACK_DELAY_MS: std::ops::Range<u64> = 0..5_000;
/// Failure notes kept for the report.
const NOTES: usize = 50;
/// The exchange backends publish to on a root.
const EXCHANGE: &str = "herald";

/// What the traffic is.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Plan {
    pub(crate) steady: usize,
    pub(crate) churn: usize,
    pub(crate) companies: usize,
    /// Immediate publications per second.
    pub(crate) rate: f64,
    pub(crate) delayed_rate: f64,
    pub(crate) callback_rate: f64,
    pub(crate) presence_rate: f64,
}

/// Counts of what happened, besides the ledger's.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) steady_opened: AtomicU64,
    pub(crate) steady_dropped: AtomicU64,
    pub(crate) open_failures: AtomicU64,
    pub(crate) churn_opened: AtomicU64,
    pub(crate) churn_closed_politely: AtomicU64,
    pub(crate) churn_dropped_socket: AtomicU64,
    pub(crate) churn_ended_by_server: AtomicU64,
    pub(crate) churn_messages: AtomicU64,
    pub(crate) http_published: AtomicU64,
    pub(crate) http_refused: AtomicU64,
    pub(crate) amqp_published: AtomicU64,
    pub(crate) amqp_refused: AtomicU64,
    pub(crate) callbacks_published: AtomicU64,
    pub(crate) presence_queries: AtomicU64,
    pub(crate) presence_wrong: AtomicU64,
}

/// [`Counters`], read.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct CountersSnapshot {
    pub(crate) steady_opened: u64,
    pub(crate) steady_dropped: u64,
    pub(crate) open_failures: u64,
    pub(crate) churn_opened: u64,
    pub(crate) churn_closed_politely: u64,
    pub(crate) churn_dropped_socket: u64,
    pub(crate) churn_ended_by_server: u64,
    pub(crate) churn_messages: u64,
    pub(crate) http_published: u64,
    pub(crate) http_refused: u64,
    pub(crate) amqp_published: u64,
    pub(crate) amqp_refused: u64,
    pub(crate) callbacks_published: u64,
    pub(crate) presence_queries: u64,
    pub(crate) presence_wrong: u64,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> CountersSnapshot {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CountersSnapshot {
            steady_opened: r(&self.steady_opened),
            steady_dropped: r(&self.steady_dropped),
            open_failures: r(&self.open_failures),
            churn_opened: r(&self.churn_opened),
            churn_closed_politely: r(&self.churn_closed_politely),
            churn_dropped_socket: r(&self.churn_dropped_socket),
            churn_ended_by_server: r(&self.churn_ended_by_server),
            churn_messages: r(&self.churn_messages),
            http_published: r(&self.http_published),
            http_refused: r(&self.http_refused),
            amqp_published: r(&self.amqp_published),
            amqp_refused: r(&self.amqp_refused),
            callbacks_published: r(&self.callbacks_published),
            presence_queries: r(&self.presence_queries),
            presence_wrong: r(&self.presence_wrong),
        }
    }
}

/// What the traffic's tasks share.
pub(crate) struct Shared {
    pub(crate) plan: Plan,
    pub(crate) start: Instant,
    pub(crate) ledger: Mutex<Ledger>,
    pub(crate) counters: Counters,
    /// The live session of each steady user (0: none).
    steady_sid: Vec<AtomicU64>,
    /// When each steady user's session came up (ms since the start; `u64::MAX`: down).
    steady_since: Vec<AtomicU64>,
    /// Sequence numbers of the callbacks published.
    pub(crate) callbacks: Mutex<Vec<u64>>,
    pub(crate) notes: Mutex<Vec<String>>,
    next_sid: AtomicU64,
    next_id: AtomicU64,
    minter: Minter,
    proxy: SocketAddr,
    api_key: String,
    callback_url: String,
}

impl Shared {
    pub(crate) fn new(
        plan: Plan,
        proxy: SocketAddr,
        jwt_secret: &str,
        api_key: &str,
        callback_url: String,
    ) -> Self {
        Self {
            steady_sid: (0..plan.steady).map(|_| AtomicU64::new(0)).collect(),
            steady_since: (0..plan.steady).map(|_| AtomicU64::new(u64::MAX)).collect(),
            plan,
            start: Instant::now(),
            ledger: Mutex::new(Ledger::default()),
            counters: Counters::default(),
            callbacks: Mutex::new(Vec::new()),
            notes: Mutex::new(Vec::new()),
            next_sid: AtomicU64::new(1),
            next_id: AtomicU64::new(0),
            minter: Minter::new(jwt_secret),
            proxy,
            api_key: api_key.to_owned(),
            callback_url,
        }
    }

    /// Seconds since the start.
    pub(crate) fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    pub(crate) fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn note(&self, what: String) {
        let mut notes = self.notes.lock().unwrap_or_else(PoisonError::into_inner);
        if notes.len() < NOTES {
            eprintln!("herald-bench soak: {what}");
            notes.push(what);
        }
    }

    /// Steady sessions live now.
    pub(crate) fn steady_live(&self) -> usize {
        self.steady_sid
            .iter()
            .filter(|s| s.load(Ordering::Relaxed) != 0)
            .count()
    }

    fn id(&self, prefix: &str) -> String {
        format!(
            "soak-{prefix}-{}",
            self.next_id.fetch_add(1, Ordering::Relaxed)
        )
    }

    fn company(&self, n: usize) -> String {
        format!("soak-co-{}", n % self.plan.companies)
    }

    fn token(&self, user: &str, company: &str) -> Result<String, String> {
        self.minter
            .mint(&Claims {
                sub: user.to_owned(),
                client: company.to_owned(),
                site: None,
                exp: now_epoch_secs() + 24 * 3600,
            })
            .map_err(|e| format!("minting a token: {e}"))
    }

    fn target(&self, user: &str) -> Target {
        Target {
            transport: Transport::WebSocket,
            host_header: self.proxy.to_string(),
            path: format!("/ws?uid={user}"),
            addr: self.proxy,
            source: None,
            handshake_timeout: HANDSHAKE_TIMEOUT,
            pipelined: false,
            xhr_sends: SendPool::new(1),
        }
    }

    /// Live sessions of the steady users `users`.
    fn sessions_of(&self, users: impl Iterator<Item = usize>) -> Vec<SessionId> {
        users
            .map(|u| self.steady_sid[u].load(Ordering::Relaxed))
            .filter(|&s| s != 0)
            .collect()
    }
}

/// Starts every task of the traffic on `tracker`: they run until `stop` (publishers) or
/// `close` (sessions).
pub(crate) async fn start(
    shared: &Arc<Shared>,
    roots: &[String],
    tracker: &TaskTracker,
    stop: &CancellationToken,
    close: &CancellationToken,
) -> Result<(), String> {
    for user in 0..shared.plan.steady {
        tracker.spawn(steady(shared.clone(), user, close.clone()));
    }
    for slot in 0..shared.plan.churn {
        tracker.spawn(churn(shared.clone(), slot, close.clone()));
    }
    let mut publishers = Vec::new();
    for (k, url) in roots.iter().enumerate() {
        let conn = amqp::connect(url, &format!("herald-bench-soak-{k}"))
            .await
            .map_err(|e| format!("AMQP {url}: {e}"))?;
        let publisher = Publisher::open(&conn, EXCHANGE)
            .await
            .map_err(|e| format!("AMQP {url}: a channel: {e}"))?;
        publishers.push((conn, publisher));
    }
    let publishers = Arc::new(publishers);
    tracker.spawn(immediate(shared.clone(), publishers.clone(), stop.clone()));
    tracker.spawn(delayed(shared.clone(), publishers, stop.clone()));
    tracker.spawn(callbacks(shared.clone(), stop.clone()));
    tracker.spawn(presence(shared.clone(), stop.clone()));
    Ok(())
}

/// Waits until every steady session is live (or `deadline` passes); whether they all are.
pub(crate) async fn steady_ready(shared: &Shared, deadline: Duration) -> bool {
    let until = Instant::now() + deadline;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tick.tick().await;
        if shared.steady_live() == shared.plan.steady {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
    }
}
