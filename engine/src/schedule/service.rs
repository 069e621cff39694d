//! [`Delayed`]: the front of delayed notifications. The HTTP API and the
//! AMQP intake hand it what they accepted; it stores it, tells the firer,
//! and answers cancel, status and list. [`Delayed::scheduling`] gives the firer
//! and the maintenance task (expire held entries, purge old statuses,
//! refresh the pending gauges, and watch whether the store is down: see
//! `outage`), and the [`Alerts`] of the process, which the firer's
//! callbacks and that watch raise.

use crate::stats::Event;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use herald_protocol::envelope::{FieldError, Notification};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

mod outage;
mod topics;

use super::config::ScheduleConfig;
use super::entry::{Entry, Millis, Status};
use super::firer::Firer;
use super::metrics::{DUE_BUCKET_NAMES, DUE_BUCKETS_MS, DelayedMetrics, DueLabels};
use super::outcomes::Outcomes;
use super::store::{
    Cancel, Cursor, Finish, Insert, ListFilter, Page, Replay, RetryWait, Settled, Store, StoreError,
};
use super::timing::{DelayRequest, due_time, now_ms};
use super::topics::Topics;
use crate::callback::alert::{AlertTask, Alerts};
use crate::callback::attempt::Attempt;
use crate::callback::client::{Client, ClientConfig};
use crate::link::Link;
use crate::schedule::online::Presence;
use crate::task::{Task, TaskFuture};
use outage::{Change, Outage};

/// Most entries expired or purged per maintenance round (the rest wait
/// for the next round).
const MAINTENANCE_BATCH: usize = 10_000;

/// The delayed-notification service. Cheap to clone.
#[derive(Clone)]
pub struct Delayed {
    inner: Arc<Inner>,
}

struct Inner {
    config: Arc<ScheduleConfig>,
    store: Arc<dyn Store>,
    topics: Topics,
    metrics: DelayedMetrics,
    hints: mpsc::Sender<(Millis, String)>,
    /// Where callback outcomes are recorded.
    outcomes: Outcomes,
    online: mpsc::Sender<String>,
    receivers: parking_lot::Mutex<Option<Receivers>>,
    alerts: Alerts,
    /// Whether the store is down, from the maintenance rounds.
    outage: parking_lot::Mutex<Outage>,
    /// How many callbacks go out at once (`[callbacks]`), read when the
    /// firer starts.
    sending: parking_lot::Mutex<Sending>,
}

/// How many callbacks go out at once: `[callbacks] max_per_host` and
/// `max_in_flight`.
#[derive(Debug, Clone, Copy)]
struct Sending {
    per_host: usize,
    in_flight: usize,
}

struct Receivers {
    hints: mpsc::Receiver<(Millis, String)>,
    online: mpsc::Receiver<String>,
}

impl std::fmt::Debug for Delayed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delayed")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// The firer and the maintenance of a [`Delayed`] service, and the task
/// that sends its alerts (when a webhook or mail is configured), as one
/// [`Task`] (from [`Delayed::scheduling`]): each runs in a task of its own
/// until the shutdown token fires.
pub struct Scheduling {
    firer: Firer,
    delayed: Delayed,
    alerts: Option<AlertTask>,
}

impl std::fmt::Debug for Scheduling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduling").finish_non_exhaustive()
    }
}

impl Task for Scheduling {
    fn name(&self) -> &'static str {
        "scheduling"
    }

    fn run(self: Box<Self>, shutdown: CancellationToken) -> TaskFuture {
        let Scheduling {
            firer,
            delayed,
            alerts,
        } = *self;
        Box::pin(async move {
            let alerts = alerts
                .map(|task| tokio::spawn(Box::new(task).run(shutdown.clone()).in_current_span()));
            // The registered topics are in force before anything fires.
            if let Err(e) = delayed.inner.topics.refresh(&*delayed.inner.store).await {
                delayed.inner.metrics.store_error("topics");
                tracing::warn!(error = %e, "reading the registered topics failed; the maintenance round tries again");
            }
            let firer = tokio::spawn(firer.run(shutdown.clone()).in_current_span());
            let watch = {
                let (delayed, shutdown) = (delayed.clone(), shutdown.clone());
                tokio::spawn(async move { delayed.watch_topics(shutdown).await }.in_current_span())
            };
            let maintenance =
                tokio::spawn(async move { delayed.maintain(shutdown).await }.in_current_span());
            let _ = firer.await;
            let _ = maintenance.await;
            let _ = watch.await;
            if let Some(alerts) = alerts {
                let _ = alerts.await;
            }
        })
    }
}

impl Delayed {
    /// A service over `store`, with the topics of `config` in force
    /// (callbacks may reach public addresses only) and alerts as log lines
    /// and metrics only.
    pub fn new(config: ScheduleConfig, store: Arc<dyn Store>, metrics: DelayedMetrics) -> Self {
        let topics = Topics::new(&config, Vec::new());
        Delayed::with_topics(config, store, topics, metrics, Alerts::default())
    }

    /// A service over `store` with `topics` in force, raising `alerts`
    /// (from `[callbacks.alerts]`; [`Delayed::scheduling`] runs the task
    /// that sends them).
    pub fn with_topics(
        config: ScheduleConfig,
        store: Arc<dyn Store>,
        topics: Topics,
        metrics: DelayedMetrics,
        alerts: Alerts,
    ) -> Self {
        let (hints_tx, hints_rx) = mpsc::channel(config.hint_queue);
        let (online_tx, online_rx) = mpsc::channel(config.online_queue);
        let outcomes = Outcomes::new(
            Arc::clone(&store),
            metrics.clone(),
            hints_tx.clone(),
            config.horizon_ms,
        );
        Delayed {
            inner: Arc::new(Inner {
                config: Arc::new(config),
                store,
                topics,
                metrics,
                hints: hints_tx,
                outcomes,
                online: online_tx,
                receivers: parking_lot::Mutex::new(Some(Receivers {
                    hints: hints_rx,
                    online: online_rx,
                })),
                outage: parking_lot::Mutex::new(Outage::new(alerts.store_unavailable_after_ms())),
                sending: parking_lot::Mutex::new(Sending {
                    per_host: crate::callback::config::MAX_PER_HOST,
                    in_flight: crate::callback::config::MAX_IN_FLIGHT,
                }),
                alerts,
            }),
        }
    }

    /// How many callbacks go out at once, from `[callbacks]`
    /// (`max_per_host`, `max_in_flight`): in force for the firer
    /// [`Delayed::scheduling`] starts after this.
    pub fn send_callbacks(&self, config: &crate::callback::config::CallbackConfig) {
        *self.inner.sending.lock() = Sending {
            per_host: config.max_per_host,
            in_flight: config.max_in_flight,
        };
    }

    /// The settings.
    pub fn config(&self) -> &ScheduleConfig {
        &self.inner.config
    }

    /// The topics in force.
    pub fn topics(&self) -> &Topics {
        &self.inner.topics
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// The metrics.
    pub fn metrics(&self) -> &DelayedMetrics {
        &self.inner.metrics
    }

    /// The alerts: [`Alerts::dead_letter`] when a callback runs out of
    /// attempts.
    pub fn alerts(&self) -> &Alerts {
        &self.inner.alerts
    }

    /// The firer (handing due entries to `link`), the maintenance task and
    /// the alerts' task, ready to spawn as one [`Task`]. Only the first
    /// call gives them; later calls return `None`.
    pub fn scheduling(
        &self,
        link: Arc<dyn Link>,
        presence: Arc<dyn Presence>,
    ) -> Option<Scheduling> {
        let sending = *self.inner.sending.lock();
        let client = match Client::new(
            ClientConfig {
                allowed: self.inner.topics.allowed().to_vec(),
                per_host: sending.per_host,
                idle_per_host: sending.per_host,
                ..ClientConfig::default()
            },
            Arc::new(self.inner.metrics.callbacks.clone()),
        ) {
            Ok(client) => client,
            Err(e) => {
                tracing::error!(error = %e, "the callback client cannot be built; nothing fires");
                return None;
            }
        };
        let receivers = self.inner.receivers.lock().take()?;
        let firer = Firer {
            config: Arc::clone(&self.inner.config),
            topics: self.inner.topics.clone(),
            store: Arc::clone(&self.inner.store),
            link,
            presence,
            metrics: self.inner.metrics.clone(),
            hints: receivers.hints,
            hint: self.inner.hints.clone(),
            outcomes: self.inner.outcomes.clone(),
            online: receivers.online,
            last_send: HashMap::new(),
            client,
            callback_defaults: crate::schedule::sender::defaults(),
            calls: None,
            max_in_flight: sending.in_flight,
            alerts: self.inner.alerts.clone(),
        };
        Some(Scheduling {
            firer,
            delayed: self.clone(),
            alerts: self.inner.alerts.task(),
        })
    }

    /// The due time of a publication accepted now, or the field that is
    /// wrong with its timing.
    pub fn due_time(
        &self,
        req: &DelayRequest,
        n: &Notification,
        now: Millis,
    ) -> Result<Millis, FieldError> {
        let jitter_ms = self.inner.topics.policy(n.topic.as_deref()).jitter_ms;
        due_time(req, n, now, &self.inner.config, jitter_ms, |max| {
            rand::random_range(0..=max)
        })
    }

    /// Store accepted entries durably (their due times fixed by
    /// [`Delayed::due_time`]). `Ok` means durable: answer 202 or ack only
    /// then.
    pub async fn accept(&self, entries: Vec<Entry>) -> Result<Vec<Insert>, StoreError> {
        let now = now_ms();
        let fire: Vec<(Millis, String)> = entries
            .iter()
            .map(|e| (e.due_ms, e.id().to_owned()))
            .collect();
        let outcome = self
            .inner
            .store
            .insert(entries, now)
            .await
            .inspect_err(|_| {
                self.inner.metrics.store_error("insert");
            })?;
        for (insert, (due, id)) in outcome.iter().zip(fire) {
            match insert {
                Insert::Accepted => {
                    self.inner.metrics.accepted.inc();
                    // Due beyond the horizon: the refill will find it.
                    if due <= now.saturating_add(self.inner.config.horizon_ms)
                        && self.inner.hints.try_send((due, id)).is_err()
                    {
                        self.inner.metrics.hints_dropped.inc();
                    }
                }
                Insert::Duplicate(_) => {
                    self.inner.metrics.duplicates.inc();
                }
            }
        }
        Ok(outcome)
    }

    /// Cancel an undelivered notification.
    pub async fn cancel(&self, id: &str) -> Result<Cancel, StoreError> {
        let now = now_ms();
        let out = self.inner.store.cancel(id, now).await.inspect_err(|_| {
            self.inner.metrics.store_error("cancel");
        })?;
        match &out {
            // A repeated cancel answers the first one's status: count once.
            Cancel::Cancelled(s) if s.updated_ms == now => {
                self.inner.metrics.cancelled.inc();
                let topics = &self.inner.metrics.topics;
                topics.record(s.topic.as_deref(), Event::Cancelled, 1, now);
            }
            Cancel::TooLate(_) => {
                self.inner.metrics.cancel_too_late.inc();
            }
            _ => {}
        }
        Ok(out)
    }

    /// When the store began keeping tenants' ids apart
    /// ([`Store::tenants_since`]).
    pub fn tenants_since(&self) -> Millis {
        self.inner.store.tenants_since()
    }

    /// The status of one notification.
    pub async fn status(&self, id: &str) -> Result<Option<Status>, StoreError> {
        self.inner.store.status(id).await.inspect_err(|_| {
            self.inner.metrics.store_error("status");
        })
    }

    /// The attempt log of one notification (its callback's requests),
    /// oldest first.
    pub async fn attempts(&self, id: &str) -> Result<Vec<Attempt>, StoreError> {
        self.inner.store.attempts(id).await.inspect_err(|_| {
            self.inner.metrics.store_error("attempts");
        })
    }

    /// Firing callbacks to be tried again ([`Store::retry_wait`], at the
    /// wall clock): those due within the horizon go to the firer's window
    /// at once, as accepted entries do; attempt records dropped by the
    /// log's bound are counted.
    pub async fn retry_wait(&self, items: Vec<RetryWait>) -> Result<Settled, StoreError> {
        self.inner.outcomes.retry_wait(items, now_ms()).await
    }

    /// Firing callbacks that end ([`Store::finish`], at the wall clock);
    /// attempt records dropped by the log's bound are counted.
    pub async fn finish(&self, items: Vec<Finish>) -> Result<Settled, StoreError> {
        self.inner.outcomes.finish(items, now_ms()).await
    }

    /// Send a dead letter again: it is due now, and its callback is made
    /// again from attempt 1 (its attempt log goes on).
    pub async fn replay(&self, id: &str) -> Result<Replay, StoreError> {
        let now = now_ms();
        let out = self.inner.store.replay(id, now).await.inspect_err(|_| {
            self.inner.metrics.store_error("replay");
        })?;
        match &out {
            Replay::Replayed(_) => {
                self.inner.metrics.replayed.inc();
                tracing::info!(id, "dead letter replayed");
                if self.inner.hints.try_send((now, id.to_owned())).is_err() {
                    self.inner.metrics.hints_dropped.inc();
                }
            }
            Replay::NotDead(_) => {
                self.inner.metrics.replay_not_dead.inc();
            }
            Replay::NotFound => {}
        }
        Ok(out)
    }

    /// A page of statuses.
    pub async fn list(
        &self,
        filter: ListFilter,
        after: Option<Cursor>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        self.inner
            .store
            .list(filter, after, limit)
            .await
            .inspect_err(|_| {
                self.inner.metrics.store_error("list");
            })
    }

    /// `user` came online (a session started, or a backend said so): fire
    /// what is held for them. Never blocks; when the queue is full the
    /// event is dropped and counted.
    pub fn user_online(&self, user: &str) {
        if self.inner.online.try_send(user.to_owned()).is_err() {
            self.inner.metrics.online_dropped.inc();
        }
    }

    async fn maintain(self, shutdown: CancellationToken) {
        let every = Duration::from_millis(self.inner.config.maintenance_every_ms);
        let mut every = crate::task::Every::new(every);
        while every.tick(&shutdown).await {
            self.maintenance_round().await;
        }
    }

    /// One round: read the topics again if another process changed them,
    /// expire, purge, count; then alert if the store has been failing for
    /// `callbacks.alerts.store_unavailable_after_ms`, or works again after
    /// that.
    pub async fn maintenance_round(&self) {
        let failed = self.maintenance_calls().await;
        let now = now_ms();
        let change = match &failed {
            Some(_) => self.inner.outage.lock().failed(now),
            None => self.inner.outage.lock().worked(),
        };
        match (change, failed) {
            (Some(Change::Unavailable { since_ms }), Some(error)) => {
                self.inner.alerts.store_unavailable(&error, since_ms);
            }
            (Some(Change::Recovered { since_ms }), _) => {
                self.inner.alerts.store_recovered(since_ms, now);
            }
            _ => {}
        }
    }

    /// The store calls of a round; the first failure (`op: error`), if any.
    async fn maintenance_calls(&self) -> Option<String> {
        let (store, metrics, config) = (&self.inner.store, &self.inner.metrics, &self.inner.config);
        let mut failed: Option<String> = None;
        let mut fail = |op: &str, e: &dyn std::fmt::Display| {
            failed.get_or_insert_with(|| format!("{op}: {e}"));
        };
        if let Err(e) = self.inner.topics.refresh(&**store).await {
            metrics.store_error("topics");
            tracing::warn!(error = %e, "reading the registered topics failed; the last ones read stay in force");
            fail("topics", &e);
        }
        let now = now_ms();
        match store.expire(now, MAINTENANCE_BATCH).await {
            Ok(topics) => {
                metrics.expired.inc_by(topics.len() as u64);
                for topic in &topics {
                    metrics
                        .topics
                        .record(topic.as_deref(), Event::Expired, 1, now);
                }
            }
            Err(e) => {
                metrics.store_error("expire");
                tracing::warn!(error = %e, "expiring held notifications failed");
                fail("expire", &e);
            }
        }
        match store
            .purge(now.saturating_sub(config.retention_ms), MAINTENANCE_BATCH)
            .await
        {
            Ok(n) if n > 0 => tracing::debug!(purged = n, "old statuses purged"),
            Ok(_) => {}
            Err(e) => {
                metrics.store_error("purge");
                tracing::warn!(error = %e, "purging old statuses failed");
                fail("purge", &e);
            }
        }
        match store.counts(now, DUE_BUCKETS_MS.to_vec()).await {
            Ok(c) => {
                for (name, n) in DUE_BUCKET_NAMES.iter().zip(&c.scheduled) {
                    metrics
                        .pending
                        .get_or_create(&DueLabels { due: name })
                        .set(*n as i64);
                }
                metrics.firing.set(c.firing as i64);
                metrics.held_pending.set(c.held as i64);
                metrics.retry_wait_pending.set(c.retry_wait as i64);
            }
            Err(e) => {
                metrics.store_error("counts");
                tracing::warn!(error = %e, "counting pending notifications failed");
                fail("counts", &e);
            }
        }
        failed
    }
}
