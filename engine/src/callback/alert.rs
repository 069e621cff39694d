//! Alerts: a callback that ran out of attempts (a dead letter), and the
//! delayed store failing and coming back. Every alert is a log line (WARN,
//! structured fields) and a metric; a deployment can also have them sent
//! to a Slack-compatible webhook and by mail (`[callbacks.alerts]`).
//!
//! [`Alerts`] is the handle (cheap to clone) the sender and the store
//! watch call; its methods never block. What goes to the webhook and mail
//! waits in a bounded queue of [`QUEUE`] alerts (policy when full: drop the
//! newest, counted in `herald_callback_alerts_dropped_total`; the alert's
//! log line is written either way) for the [`AlertTask`], which coalesces
//! them: at most one message per kind of alert per channel per
//! `min_interval_ms`, the rest in one summary when the interval is over
//! ("and 41 more dead letters since ..."). A send that fails is logged and
//! counted, never retried.
//!
//! # Layout
//! - this file: [`Alerts`], what an alert is ([`DeadLetter`], [`Kind`]).
//! - [`config`]: `[callbacks.alerts]` and its checks.
//! - `coalesce`: one message per kind per interval, the rest summarised
//!   (pure, takes `now`).
//! - `message`: the subject and text of a message (pure).
//! - `task`: [`AlertTask`], the loop that coalesces and sends.
//! - `webhook`, `mail`: the two channels.
//! - [`metrics`]: the counters `herald_callback_alerts_total{kind,channel,outcome}` and
//!   `herald_callback_alerts_dropped_total`.
//!
//! ```text
//! dead_letter | store_unavailable | store_recovered     (never block)
//!   |-- WARN log line, alerts_total{channel="log"}
//!   v try_send (queue of QUEUE; full: drop newest, counted)
//! AlertTask: Coalescer per kind --at once--> Message --> webhook, mail
//!                      \--held--> one summary at the interval's end
//! ```

mod coalesce;
pub mod config;
mod mail;
mod message;
pub mod metrics;
mod task;
mod webhook;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use self::config::AlertsConfig;
use self::metrics::AlertMetrics;
pub use self::task::AlertTask;

/// Alerts waiting for the [`AlertTask`], at most. Beyond that the newest
/// are dropped (and counted): the task only does arithmetic on them, so
/// the queue fills only if it is starved, and what matters of a flood is
/// its first alerts and its count.
pub const QUEUE: usize = 1024;

/// Longest a webhook POST or one SMTP command may take.
pub(crate) const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// A callback that used its last attempt: the notification is dead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// The notification's id.
    pub id: String,
    /// Its topic, when it has one.
    pub topic: Option<String>,
    /// What went wrong on the last attempt.
    pub reason: String,
    /// Attempts made.
    pub attempts: u32,
}

/// The kinds of alert (the `kind` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A callback ran out of attempts.
    DeadLetter,
    /// The delayed store has been failing.
    StoreUnavailable,
    /// The delayed store works again.
    StoreRecovered,
}

impl Kind {
    /// Every kind, in [`Kind::index`] order.
    pub const ALL: [Kind; 3] = [
        Kind::DeadLetter,
        Kind::StoreUnavailable,
        Kind::StoreRecovered,
    ];

    /// The `kind` label.
    pub fn label(self) -> &'static str {
        match self {
            Kind::DeadLetter => "dead_letter",
            Kind::StoreUnavailable => "store_unavailable",
            Kind::StoreRecovered => "store_recovered",
        }
    }

    /// Position in [`Kind::ALL`].
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// One alert, as queued for the task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Alert {
    DeadLetter(DeadLetter),
    StoreUnavailable {
        /// The first error of the last failed round.
        error: String,
        /// When the store started failing (epoch ms).
        since_ms: u64,
    },
    StoreRecovered {
        /// When it started failing.
        since_ms: u64,
        /// When it worked again.
        at_ms: u64,
    },
}

impl Alert {
    pub(crate) fn kind(&self) -> Kind {
        match self {
            Alert::DeadLetter(_) => Kind::DeadLetter,
            Alert::StoreUnavailable { .. } => Kind::StoreUnavailable,
            Alert::StoreRecovered { .. } => Kind::StoreRecovered,
        }
    }
}

/// The alerts of a process. Cheap to clone; every method returns at once.
#[derive(Clone)]
pub struct Alerts {
    inner: Arc<Shared>,
}

struct Shared {
    /// To the task; `None` when neither the webhook nor mail is set.
    queue: Option<mpsc::Sender<Alert>>,
    metrics: AlertMetrics,
    store_unavailable_after_ms: u64,
    /// The task, until [`Alerts::task`] takes it.
    task: parking_lot::Mutex<Option<AlertTask>>,
}

impl std::fmt::Debug for Alerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Alerts")
            .field("sends", &self.inner.queue.is_some())
            .finish_non_exhaustive()
    }
}

impl Default for Alerts {
    /// Log lines and metrics only, with the default settings.
    fn default() -> Self {
        Alerts::new(&AlertsConfig::default(), AlertMetrics::default())
    }
}

impl Alerts {
    /// Alerts as `config` says (validated at load: a problem found now
    /// is logged, and alerts are then log lines and metrics only). With
    /// a webhook or mail, [`Alerts::task`] gives the task that sends them.
    pub fn new(config: &AlertsConfig, metrics: AlertMetrics) -> Alerts {
        let outs = match config.channels() {
            Ok(channels) => task::outs(channels),
            Err(problems) => {
                tracing::error!(
                    problems = %problems.join("; "),
                    "[callbacks.alerts] is invalid: alerts are log lines and metrics only"
                );
                Vec::new()
            }
        };
        let (queue, task) = if outs.is_empty() {
            (None, None)
        } else {
            let (tx, rx) = mpsc::channel(QUEUE);
            let task = AlertTask::new(rx, outs, config.min_interval_ms, metrics.clone());
            (Some(tx), Some(task))
        };
        Alerts {
            inner: Arc::new(Shared {
                queue,
                metrics,
                store_unavailable_after_ms: config.store_unavailable_after_ms,
                task: parking_lot::Mutex::new(task),
            }),
        }
    }

    /// The task that sends to the webhook and mail, to spawn once: the
    /// first call gives it, later ones `None` (and so does a configuration
    /// with neither).
    pub fn task(&self) -> Option<AlertTask> {
        self.inner.task.lock().take()
    }

    /// The metrics (to register).
    pub fn metrics(&self) -> &AlertMetrics {
        &self.inner.metrics
    }

    /// How long the store must have been failing to count as unavailable
    /// (`callbacks.alerts.store_unavailable_after_ms`).
    pub fn store_unavailable_after_ms(&self) -> u64 {
        self.inner.store_unavailable_after_ms
    }

    /// A callback used its last attempt.
    pub fn dead_letter(&self, dead: DeadLetter) {
        tracing::warn!(
            alert = Kind::DeadLetter.label(),
            id = %dead.id,
            topic = dead.topic.as_deref().unwrap_or(""),
            attempts = dead.attempts,
            reason = %dead.reason,
            "callback dead letter: no attempts left"
        );
        self.raise(Alert::DeadLetter(dead));
    }

    /// The delayed store has been failing since `since_ms` (epoch ms);
    /// `error` is the latest failure.
    pub fn store_unavailable(&self, error: &str, since_ms: u64) {
        tracing::warn!(
            alert = Kind::StoreUnavailable.label(),
            since = %message::rfc3339(since_ms),
            error,
            "the delayed-notification store is unavailable"
        );
        self.raise(Alert::StoreUnavailable {
            error: error.to_owned(),
            since_ms,
        });
    }

    /// The delayed store, failing since `since_ms`, works again at `at_ms`.
    pub fn store_recovered(&self, since_ms: u64, at_ms: u64) {
        tracing::warn!(
            alert = Kind::StoreRecovered.label(),
            since = %message::rfc3339(since_ms),
            failing_ms = at_ms.saturating_sub(since_ms),
            "the delayed-notification store is available again"
        );
        self.raise(Alert::StoreRecovered { since_ms, at_ms });
    }

    /// Count the log line; queue for the task, or drop (counted) when full.
    fn raise(&self, alert: Alert) {
        let kind = alert.kind();
        self.inner.metrics.count(kind.label(), "log", "sent", 1);
        let Some(queue) = &self.inner.queue else {
            return;
        };
        if queue.try_send(alert).is_err() {
            self.inner.metrics.dropped.inc();
            tracing::debug!(
                alert = kind.label(),
                "alert queue full (or closed): not sent to the webhook or mail"
            );
        }
    }
}

/// The wall clock in epoch milliseconds.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
