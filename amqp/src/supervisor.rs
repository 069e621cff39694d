//! One broker connection, kept alive: connect, run a session, and when the
//! connection or a channel fails, back off and do it again, until shutdown.
//!
//! lapin does not reconnect by itself (its auto-recovery is off here on
//! purpose): the [`Supervisor`] owns recovery, so every reconnect goes
//! through the same path as the first connect, including the idempotent
//! topology declaration the session starts with.
//!
//! ```text
//!   connect --ok--> session(conn, shutdown) --Ok (shutdown)--> close, return
//!      |                |
//!      | error/timeout  | error, or an error event on the connection
//!      v                v
//!   backoff <------- close (unacked deliveries go back to their queue)
//! ```
//!
//! The backoff grows exponentially from `initial` to `max`, with jitter
//! (each delay is drawn from the upper half of its step), and starts over
//! once a session has run for at least `max`.
//!
//! Both binaries run their AMQP sessions under it: the router's intake and
//! presence intake, and each of an edge's root links. Their configuration
//! names the same three settings alike ([`Reconnect`]), and each says what
//! it counts through [`SupervisorEvents`].

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use lapin::{Connection, ConnectionProperties, Event};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use herald_engine::process::redact;
use herald_engine::task::{Task, task_fn};

use super::metrics::AmqpMetrics;

/// How long closing a connection may take before it is dropped.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Reconnect delays: exponential from `initial` to `max`, with jitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Delay before the first retry (before jitter).
    pub initial: Duration,
    /// Longest delay.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(10),
        }
    }
}

impl Backoff {
    /// The delay after `failures` consecutive failures (0 for the first
    /// retry): `step = min(max, initial * 2^failures)`, and the delay is
    /// `step/2 + jitter * step/2` for `jitter` in `[0, 1]`, so retries from
    /// many routers spread out but never hammer the broker.
    pub fn delay(&self, failures: u32, jitter: f64) -> Duration {
        let factor = 1u32.checked_shl(failures.min(31)).unwrap_or(u32::MAX);
        let step = self.initial.saturating_mul(factor).min(self.max);
        let half = step / 2;
        half + half.mul_f64(jitter.clamp(0.0, 1.0))
    }
}

/// The reconnect settings, named alike in every binary's configuration
/// section (`reconnect_initial_ms`, `reconnect_max_ms`,
/// `connect_timeout_ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reconnect {
    /// First reconnect delay (before jitter), ms.
    pub initial_ms: u64,
    /// Longest reconnect delay, ms.
    pub max_ms: u64,
    /// Longest a connection attempt may take, ms.
    pub connect_timeout_ms: u64,
}

impl Default for Reconnect {
    fn default() -> Self {
        let backoff = Backoff::default();
        Reconnect {
            initial_ms: backoff.initial.as_millis() as u64,
            max_ms: backoff.max.as_millis() as u64,
            connect_timeout_ms: 10_000,
        }
    }
}

impl Reconnect {
    /// Every rule on the settings, as problems named `{section}.*`.
    pub fn problems(&self, section: &str) -> Vec<String> {
        let mut p = Vec::new();
        if self.initial_ms > self.max_ms {
            p.push(format!(
                "{section}.reconnect_initial_ms ({}) must not exceed {section}.reconnect_max_ms ({})",
                self.initial_ms, self.max_ms
            ));
        }
        for (name, value) in [
            ("reconnect_initial_ms", self.initial_ms),
            ("reconnect_max_ms", self.max_ms),
            ("connect_timeout_ms", self.connect_timeout_ms),
        ] {
            if value == 0 {
                p.push(format!("{section}.{name} must be greater than 0"));
            }
        }
        p
    }

    /// The backoff these settings make.
    pub fn backoff(&self) -> Backoff {
        Backoff {
            initial: Duration::from_millis(self.initial_ms),
            max: Duration::from_millis(self.max_ms),
        }
    }

    /// The connect timeout.
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms)
    }
}

/// What a [`Supervisor`] tells about its connection as it comes and goes.
/// The router counts it in [`AmqpMetrics`] (`herald_amqp_*`); an edge
/// counts its root links its own way.
pub trait SupervisorEvents: std::fmt::Debug + Send + Sync + 'static {
    /// A connection attempt failed or timed out.
    fn connect_failed(&self);
    /// A connection is up; `again` for every one after the first.
    fn connected(&self, again: bool);
    /// A connection's session ended; `lost` when it ended with an error
    /// (not by shutdown).
    fn disconnected(&self, lost: bool);
}

impl SupervisorEvents for AmqpMetrics {
    fn connect_failed(&self) {
        self.connect_failures.inc();
    }

    fn connected(&self, again: bool) {
        if again {
            self.reconnects.inc();
        }
        self.connected.set(1);
    }

    fn disconnected(&self, lost: bool) {
        self.connected.set(0);
        if lost {
            self.disconnects.inc();
        }
    }
}

/// Where and how to connect.
#[derive(Debug, Clone)]
pub struct SupervisorConfig {
    /// `amqp://user:pass@host:port/vhost` (or `amqps://`); add
    /// `?heartbeat=10` to notice a dead peer within seconds.
    pub url: String,
    /// Connection name shown by the broker (management UI, `rabbitmqctl`).
    pub connection_name: String,
    /// Reconnect delays.
    pub backoff: Backoff,
    /// Longest a connection attempt (TCP, TLS, AMQP handshake) may take.
    pub connect_timeout: Duration,
}

/// Why a session ended other than by shutdown.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SessionError {
    /// The broker or the connection reported an error.
    #[error(transparent)]
    Amqp(#[from] lapin::Error),
    /// The session gave up for a reason of its own.
    #[error("{0}")]
    Lost(String),
}

/// Keeps one connection to one broker alive. See the module docs.
#[derive(Debug)]
pub struct Supervisor {
    config: SupervisorConfig,
    events: Arc<dyn SupervisorEvents>,
    connected: watch::Sender<bool>,
}

impl Supervisor {
    /// A supervisor for `config`, telling `events` (the router's
    /// [`AmqpMetrics`], or an edge's root-link counters) what happens.
    pub fn new(config: SupervisorConfig, events: impl SupervisorEvents) -> Self {
        Supervisor {
            config,
            events: Arc::new(events),
            connected: watch::Sender::new(false),
        }
    }

    /// Whether a connection is up, and its changes.
    pub fn connected(&self) -> watch::Receiver<bool> {
        self.connected.subscribe()
    }

    /// The broker URL without its password, for logs.
    pub fn broker(&self) -> String {
        redact(&self.config.url)
    }

    /// Connect, run `session` on each connection, reconnect when it fails,
    /// until `shutdown` fires.
    ///
    /// `session` gets the connection and the shutdown token. It returns
    /// `Ok(())` once shutdown has fired and it has wound down (cancel
    /// consumers, finish in-flight work), or an error when the connection
    /// or one of its channels failed. The supervisor also watches the
    /// connection's events: on an error event the session future is dropped.
    /// After every session the connection is closed, which hands every
    /// unacknowledged delivery back to its queue.
    pub async fn run<F, Fut>(&self, shutdown: CancellationToken, mut session: F)
    where
        F: FnMut(Arc<Connection>, CancellationToken) -> Fut,
        Fut: Future<Output = Result<(), SessionError>>,
    {
        let broker = self.broker();
        let session = &mut session;
        self.run_with(
            shutdown,
            || self.connect(),
            move |connection: Connection, shutdown| {
                let connection = Arc::new(connection);
                let work = session(Arc::clone(&connection), shutdown);
                let broker = broker.clone();
                async move {
                    let events = connection.events_listener();
                    let outcome = tokio::select! {
                        r = work => r,
                        e = first_error(events) => Err(SessionError::Amqp(e)),
                    };
                    if connection.status().connected() {
                        match tokio::time::timeout(
                            CLOSE_TIMEOUT,
                            connection.close(200, "OK".into()),
                        )
                        .await
                        {
                            Ok(Ok(())) => {}
                            Ok(Err(e)) => {
                                tracing::debug!(%broker, error = %e, "closing the connection")
                            }
                            Err(_) => tracing::debug!(%broker, "closing the connection timed out"),
                        }
                    }
                    outcome
                }
            },
        )
        .await;
    }

    /// [`Supervisor::run`] for any client: `dial` opens a connection (its
    /// error is logged and retried with backoff, as is a dial that takes
    /// longer than the connect timeout), and `session` runs on it and
    /// closes it before it returns. The backoff, the events, the
    /// `connected` flag and the logs are the same for every client.
    pub async fn run_with<C, E, D, DFut, S, SFut>(
        &self,
        shutdown: CancellationToken,
        mut dial: D,
        mut session: S,
    ) where
        E: std::fmt::Display,
        D: FnMut() -> DFut,
        DFut: Future<Output = Result<C, E>>,
        S: FnMut(C, CancellationToken) -> SFut,
        SFut: Future<Output = Result<(), SessionError>>,
    {
        let broker = self.broker();
        let mut failures: u32 = 0;
        let mut connected_before = false;
        loop {
            if shutdown.is_cancelled() {
                break;
            }
            let attempt = tokio::select! {
                _ = shutdown.cancelled() => break,
                r = tokio::time::timeout(self.config.connect_timeout, dial()) => r,
            };
            let connection = match attempt {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => {
                    self.events.connect_failed();
                    let delay = self.config.backoff.delay(failures, rand::random());
                    failures = failures.saturating_add(1);
                    tracing::warn!(%broker, error = %e, failures, retry_in_ms = delay.as_millis() as u64, "cannot connect to the broker");
                    if sleep_or_shutdown(delay, &shutdown).await {
                        break;
                    }
                    continue;
                }
                Err(_) => {
                    self.events.connect_failed();
                    let delay = self.config.backoff.delay(failures, rand::random());
                    failures = failures.saturating_add(1);
                    tracing::warn!(%broker, timeout_ms = self.config.connect_timeout.as_millis() as u64, failures, retry_in_ms = delay.as_millis() as u64, "connecting to the broker timed out");
                    if sleep_or_shutdown(delay, &shutdown).await {
                        break;
                    }
                    continue;
                }
            };
            self.events.connected(connected_before);
            connected_before = true;
            self.connected.send_replace(true);
            tracing::info!(%broker, name = %self.config.connection_name, "connected to the broker");
            let started = Instant::now();
            let outcome = session(connection, shutdown.clone()).await;
            self.events.disconnected(outcome.is_err());
            self.connected.send_replace(false);
            match outcome {
                Ok(()) if shutdown.is_cancelled() => {
                    tracing::info!(%broker, "closed the broker connection");
                    break;
                }
                Ok(()) => tracing::info!(%broker, "session ended; reconnecting"),
                Err(e) => {
                    tracing::warn!(%broker, error = %e, uptime_ms = started.elapsed().as_millis() as u64, "lost the broker connection");
                }
            }
            if started.elapsed() >= self.config.backoff.max {
                failures = 0;
            }
            let delay = self.config.backoff.delay(failures, rand::random());
            failures = failures.saturating_add(1);
            tracing::info!(%broker, retry_in_ms = delay.as_millis() as u64, "reconnecting");
            if sleep_or_shutdown(delay, &shutdown).await {
                break;
            }
        }
    }

    /// This supervisor running `session` on every connection, as a
    /// [`Task`] named `name`.
    pub fn into_task<F, Fut>(self, name: &'static str, session: F) -> impl Task
    where
        F: FnMut(Arc<Connection>, CancellationToken) -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), SessionError>> + Send + 'static,
    {
        task_fn(name, move |shutdown| async move {
            self.run(shutdown, session).await;
        })
    }

    async fn connect(&self) -> lapin::Result<Connection> {
        let properties = ConnectionProperties::default()
            .with_connection_name(self.config.connection_name.as_str().into());
        // Plain connections read their frames through the guard (guarded):
        // lapin's codec recurses into field tables. TLS runs above the
        // socket the guard sees, so amqps:// connects as lapin does.
        if self.config.url.starts_with("amqps://") {
            Connection::connect(&self.config.url, properties).await
        } else {
            Connection::connect_with_runtime(
                &self.config.url,
                properties,
                crate::guarded::runtime(),
            )
            .await
        }
    }
}

/// Sleep `delay`; true if shutdown fired first.
async fn sleep_or_shutdown(delay: Duration, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        _ = shutdown.cancelled() => true,
        _ = tokio::time::sleep(delay) => false,
    }
}

/// The first error event of a connection; other events are logged. Pending
/// forever if the stream ends without one.
async fn first_error(events: impl futures_util::Stream<Item = Event>) -> lapin::Error {
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        match event {
            Event::Error(e) => return e,
            Event::ConnectionBlocked(reason) => {
                tracing::warn!(%reason, "the broker blocked the connection; publishing waits")
            }
            Event::ConnectionUnblocked => tracing::info!("the broker unblocked the connection"),
            other => tracing::debug!(event = ?other, "connection event"),
        }
    }
    std::future::pending().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_its_bound_with_jitter_in_the_upper_half() {
        let b = Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(2),
        };
        assert_eq!(b.delay(0, 0.0), Duration::from_millis(50));
        assert_eq!(b.delay(0, 1.0), Duration::from_millis(100));
        assert_eq!(b.delay(1, 1.0), Duration::from_millis(200));
        assert_eq!(b.delay(3, 0.5), Duration::from_millis(600));
        assert_eq!(b.delay(5, 1.0), Duration::from_secs(2));
        assert_eq!(b.delay(u32::MAX, 1.0), Duration::from_secs(2));
        assert_eq!(b.delay(u32::MAX, 7.0), Duration::from_secs(2));
        for failures in 0..40 {
            let d = b.delay(failures, rand::random());
            assert!(d <= b.max && d >= Duration::from_millis(50), "{d:?}");
        }
    }
}
