//! The sender: a task beside the firer that makes the callbacks of due
//! notifications and records what came of each.
//!
//! It is handed [`Call`]s in groups: by the confirmer once the link took
//! the browser part of a batch (notifications that go to browsers and call
//! out), and by the firer directly for callback-only notifications and for
//! entries claimed for their callback alone (a retry, a replayed dead
//! letter). Each group's entries are marked with the step they start at
//! (`rechecking` or `calling`, [`Store::mark_step`], written beside the
//! calls, skipped while the previous mark is being written), then each call runs
//! as a task of its own ([`exchange::run`]: the signed recheck, then the
//! signed call). Their outcomes are recorded in batches
//! ([`record::Recorder`]): `retry_wait` at the time the retry policy says,
//! or `delivered`, `declined`, `dead`. Until an outcome is recorded the
//! entry stays firing under its claim's lease, so a crash repeats the call
//! (with the same `webhook-id`) instead of losing it.
//!
//! # Bounds
//! - At most [`CALL_QUEUE`] groups wait to be taken (policy: backpressure:
//!   the confirmer, then the firer, wait for room).
//! - At most `max_in_flight` calls (`[callbacks] max_in_flight`) run at once, and no more than that many
//!   wait to start (policy: backpressure: the queue is not read while they
//!   do). Each destination host has its own concurrency limit
//!   (`[callbacks] max_per_host`) and breaker in the [`Client`].
//! - A call is started only if its claim's lease leaves room for its
//!   requests' timeouts ([`Call::needs_ms`]); otherwise it is put back
//!   (`retry_wait` due now, no attempt used), so that no other firer claims
//!   it while its request is on its way.
//!
//! At shutdown the calls running are finished and recorded; those not
//! started are put back the same way.

mod record;
mod resolve;

use std::collections::VecDeque;
use std::sync::Arc;

use herald_protocol::envelope::{Notification, Scope};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};

pub(crate) use self::record::failed_attempt;
use self::record::{Done, Recorder};
pub(crate) use self::resolve::{Resolution, Resolved, defaults, resolve};
use super::config::ScheduleConfig;
use super::entry::{Millis, Step};
use super::metrics::DelayedMetrics;
use super::store::{RetryWait, Store};
use super::timing::now_ms;
use crate::callback::alert::Alerts;
use crate::callback::client::Client;
use crate::callback::exchange::{self, Job};
use crate::callback::step::Next;

/// Groups of calls waiting for the sender, at most.
pub(crate) const CALL_QUEUE: usize = 16;

/// Room kept in a lease beyond a call's timeouts: a tenth of the lease,
/// at most 1 s.
fn lease_margin_ms(lease_ms: u64) -> u64 {
    (lease_ms / 10).min(1_000)
}

/// When the lease of an entry fired at `now` ends at the earliest, less
/// the margin: entries waiting in `ready` were claimed up to a pile's
/// reach (`claim_ahead_max_ms`) before their due time, so their lease ends
/// that much sooner.
pub(crate) fn lease_until(config: &ScheduleConfig, now: Millis) -> Millis {
    now.saturating_add(config.lease_ms)
        .saturating_sub(config.claim_ahead_max_ms())
        .saturating_sub(lease_margin_ms(config.lease_ms))
}

/// The longest per-request timeout a topic may have under `config`: a
/// recheck and a call must both fit in what a claim's lease leaves once
/// the entry is due ([`lease_until`]). A notification may bring its own
/// `recheck_url`, so two requests are counted even for a topic without
/// one.
pub(crate) fn longest_timeout_ms(config: &ScheduleConfig) -> u64 {
    lease_until(config, 0) / 2
}

/// The callback of one due entry.
#[derive(Debug)]
pub(crate) struct Call {
    /// The notification (shared with the link when it also went to
    /// browsers).
    pub(crate) notification: Arc<Notification>,
    /// Where it goes and under which settings.
    pub(crate) resolved: Resolved,
    /// Attempts of the policy made before this one.
    pub(crate) calls: u32,
    /// When its claim's lease ends, at the earliest, less a margin
    /// ([`lease_until`]).
    pub(crate) lease_until: Millis,
}

impl Call {
    /// The notification id.
    pub(crate) fn id(&self) -> &str {
        &self.notification.id
    }

    /// How long its requests may take at most: one timeout per request.
    fn needs_ms(&self) -> u64 {
        let requests = if self.resolved.recheck_url.is_some() {
            2
        } else {
            1
        };
        self.resolved.settings.timeout_ms.saturating_mul(requests)
    }

    /// The request it starts with.
    fn first_step(&self) -> Step {
        if self.resolved.recheck_url.is_some() {
            Step::Rechecking
        } else {
            Step::Calling
        }
    }

    /// Its one user, if it is for exactly one.
    fn user(&self) -> Option<&str> {
        let n = &self.notification;
        match (n.scope, n.users.as_slice()) {
            (Scope::User, [user]) => Some(user.as_str()),
            _ => None,
        }
    }
}

/// The firer's and the confirmer's end of the sender.
pub(crate) type CallQueue = mpsc::Sender<Vec<Call>>;

/// What the sender needs.
pub(crate) struct Sender {
    pub(crate) client: Client,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) metrics: DelayedMetrics,
    /// Where outcomes are recorded (retries due soon go back to the
    /// firer's window from there).
    pub(crate) outcomes: super::outcomes::Outcomes,
    pub(crate) max_in_flight: usize,
    /// Where dead letters are raised.
    pub(crate) alerts: Alerts,
}

impl Sender {
    /// Until every end of `queue` is dropped and every call is recorded.
    pub(crate) async fn run(self, mut queue: mpsc::Receiver<Vec<Call>>) {
        let max = self.max_in_flight.max(1);
        let mut recorder = Recorder::new(
            self.outcomes.clone(),
            self.metrics.clone(),
            self.alerts.clone(),
        );
        let mut waiting: VecDeque<Call> = VecDeque::new();
        let mut running: JoinSet<Done> = JoinSet::new();
        let mut open = true;
        let mut marking: Option<JoinHandle<()>> = None;
        loop {
            while running.len() < max {
                let Some(call) = waiting.pop_front() else {
                    break;
                };
                self.start(call, &mut running, &mut recorder);
            }
            if recorder.is_full() {
                recorder.flush().await;
            }
            if !open && waiting.is_empty() && running.is_empty() {
                break;
            }
            tokio::select! {
                biased;
                Some(done) = running.join_next(), if !running.is_empty() => match done {
                    Ok(done) => recorder.push(done),
                    Err(e) => {
                        // The call's entry stays firing and is claimed
                        // again when its lease ends.
                        self.metrics.callbacks.in_flight.dec();
                        tracing::error!(error = %e, "a callback task failed; it is made again after its lease");
                    }
                },
                group = queue.recv(), if open && waiting.len() < max => match group {
                    Some(group) => {
                        self.metrics
                            .callbacks
                            .in_flight
                            .inc_by(i64::try_from(group.len()).unwrap_or(i64::MAX));
                        if marking.as_ref().is_none_or(JoinHandle::is_finished) {
                            marking = Some(self.mark(&group));
                        }
                        waiting.extend(group);
                    }
                    None => {
                        open = false;
                        // Shutdown: what has not started goes back.
                        for call in waiting.drain(..) {
                            recorder.put_back(call, now_ms());
                        }
                    }
                },
                _ = recorder.due(), if recorder.has_pending() => recorder.flush().await,
            }
        }
        recorder.flush().await;
    }

    /// Mark a group's entries with the step they start at (shown in their
    /// status), beside the calls: they do not wait for the write (a
    /// durable commit). A failure is counted and logged; the calls go on.
    /// The step is for display: a mark that lands after its call was
    /// recorded changes nothing (the entry is no longer firing), and while
    /// one mark is being written the next groups go unmarked (policy: skip
    /// when busy), so marks never queue up behind a slow store.
    fn mark(&self, group: &[Call]) -> JoinHandle<()> {
        let by_step: Vec<(Step, Vec<String>)> = [Step::Rechecking, Step::Calling]
            .into_iter()
            .map(|step| {
                let ids = group
                    .iter()
                    .filter(|c| c.first_step() == step)
                    .map(|c| c.id().to_owned())
                    .collect();
                (step, ids)
            })
            .collect();
        let store = Arc::clone(&self.store);
        let metrics = self.metrics.clone();
        tokio::spawn(async move {
            for (step, ids) in by_step {
                if ids.is_empty() {
                    continue;
                }
                if let Err(e) = store.mark_step(ids, step, now_ms()).await {
                    metrics.store_error("mark_step");
                    tracing::warn!(error = %e, %step, "marking callbacks' step failed");
                }
            }
        })
    }

    /// Start `call` in a task of its own, unless its lease is too short
    /// for it: then it goes back, due now, without using an attempt.
    fn start(&self, call: Call, running: &mut JoinSet<Done>, recorder: &mut Recorder) {
        let now = now_ms();
        if now.saturating_add(call.needs_ms()) > call.lease_until {
            tracing::debug!(id = call.id(), "too little lease left to call; put back");
            recorder.put_back(call, now);
            return;
        }
        let client = self.client.clone();
        running.spawn(async move {
            let now = now_ms();
            let n = &call.notification;
            let job = Job {
                id: &n.id,
                topic_name: n.topic.as_deref(),
                topic: &call.resolved.settings,
                callback_url: &call.resolved.callback_url,
                recheck_url: call.resolved.recheck_url.as_ref(),
                user: call.user(),
                content_type: &n.content_type,
                payload: &n.payload,
                attempt: call.calls.saturating_add(1),
            };
            let started = std::time::Instant::now();
            let mut outcome = exchange::run(&client, &job, now, rand::random::<f64>()).await;
            // The policy's delay counts from the answer, not from the
            // request: the next attempt never starts sooner than that
            // after the last one ended.
            if let Next::RetryAt { at_ms, .. } = &mut outcome.next {
                let took = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                *at_ms = at_ms.saturating_add(took);
            }
            Done { call, outcome }
        });
    }
}

/// A call that cannot start now goes back: `retry_wait` due at `now`,
/// nothing logged, no attempt used.
fn put_back(id: String, now: Millis) -> RetryWait {
    RetryWait {
        id,
        at_ms: now,
        recheck: None,
        attempt: None,
        counted: false,
    }
}
