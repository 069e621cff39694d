//! The firer: the async shell around the [`Scheduler`]. One task per
//! process; it sleeps until the scheduler's next deadline, claims what is
//! due, and hands it to the [`Link`].
//!
//! It looks `claim_ahead_ms` ahead: it claims everything due within
//! `claim_ahead_ms` and holds what it claimed in [`Ready`] until each
//! entry's due time, so the claim's commit happens before the due time
//! instead of after it. Nothing goes out before it is due. A claim starts
//! once the earliest entry is due within three quarters of
//! `claim_ahead_ms` (it asks the scheduler as if it were that much later):
//! a steady stream is claimed in slices of a quarter of `claim_ahead_ms`
//! (8 claims a second with the default 500 ms), not one claim per entry
//! crossing the horizon. A pile (a herd: many entries due close together)
//! is claimed earlier, up to `claim_ahead_max_ms`: its claims start when
//! the pace claims were measured to take ([`ClaimPace`]) says they must,
//! for all of it to be claimed by its due time ([`Scheduler::pile`]). At
//! most `max_claimed` entries wait in memory. At shutdown, entries still
//! waiting are released to fire at their time.
//!
//! For each claimed batch:
//! - a `when-online` entry whose user is offline is held
//!   ([`Store::hold`]) until the user comes online or `hold_max_ms` passes;
//! - a `when-online` entry whose user had a send less than the topic's
//!   `min_interval_ms` ago is released to fire when the interval is over;
//! - `when-online` entries of a merging topic for one user become one
//!   notification (payload: a JSON array of their payloads, when all are
//!   JSON);
//! - the rest go to the link in one batch, then are marked delivered. If
//!   the link refuses, they are released to retry after `retry_after_ms`.
//!
//! The firer does not wait for the link to take a batch: it sends it
//! ([`Link::send`], e.g. publishes it to the broker) and hands the wait
//! (e.g. for the broker's confirms) to the confirmer, a task beside it,
//! then goes on with the next batch (of at most [`Link::batch_limit`]
//! notifications: 1,000 over AMQP, a whole claim in process). At most
//! [`CONFIRM_QUEUE`] batches wait there (policy: backpressure, the firer
//! waits for room). The
//! confirmer counts what the link took and hands its ids to the settler;
//! what the link refused it releases to retry after `retry_after_ms`.
//!
//! Marking delivered is the settler's job, a task beside the confirmer:
//! the confirmer hands it the ids of each batch the link took and goes on
//! without waiting for that commit. The settler lets ids pile up for
//! `settle_delay_ms` from the first (or until `max_unsettled` of them),
//! then marks them delivered, [`SETTLE_CHUNK`](settle::SETTLE_CHUNK) ids per
//! [`Store::delivered`] call: a herd goes out before its bookkeeping
//! competes with it for the store and the CPU, and a steady stream makes
//! a few large writes instead of one per batch. (Marking as soon as firing
//! pauses was tried: a herd's firing pauses whenever the broker holds the
//! router back, and the marks then ran inside the herd.) While it is busy
//! (its queue of [`SETTLE_QUEUE`] messages is full), ids pile up on the
//! confirmer's side and go over as one message; past `max_unsettled` of
//! them the confirmer waits (policy: backpressure), and so, once its queue
//! is full, does the firer: a slow store slows firing instead of letting
//! fired entries pile up towards the end of their lease. The bound is
//! large (250,000 by default) so that a herd goes out at the link's pace,
//! not at the pace of marking it delivered. The confirmer hands over its pile whenever it
//! has nothing else to do.
//!
//! A crash anywhere after the claim leaves the entries firing under their
//! lease; another firer (or this one, restarted) claims them again when it
//! expires: at-least-once, with the same `message_id` for edge dedup.
//!
//! # Layout
//! - this file: the loop, one method per event it waits for (a claim or a
//!   refill coming back, a hint, a user coming online, its deadline).
//! - [`plan`]: what the loop does next at `now` (pure).
//! - [`inflight`]: the claim and the refill running beside the loop.
//! - [`fire`]: a claimed batch: hold, [`merge`], [`spacing`], then a
//!   [`round`] of batches to the link.
//! - [`confirm`]: the confirmer; [`settle`]: the settler.
//!
//! ```text
//! loop --Step--> Claiming/Refilling --ClaimDone--> Ready --due--> fire
//! fire --ToSend--> Round --Batch--> Link::send --Sent--> confirmer
//! confirmer --ids taken--> Settle --> settler --> Store::delivered
//!           --ids refused--> Store::release (+ hint back to the loop)
//! ```

mod confirm;
mod fire;
mod inflight;
mod merge;
mod plan;
mod round;
#[cfg(test)]
pub(crate) mod sample;
mod settle;
mod spacing;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use self::confirm::{ConfirmQueue, Confirmer};
use self::inflight::{ClaimDone, Claiming, RefillDone, Refilling};
use self::plan::{Busy, Plan, Step};
use self::settle::{SETTLE_QUEUE, Settle, settler};
use super::config::ScheduleConfig;
use super::entry::{Entry, Millis};
use super::metrics::{DelayedMetrics, ReadLabels};
use super::pace::ClaimPace;
use super::ready::Ready;
use super::scheduler::{Read, Scheduler};
use super::store::{Store, StoreError};
use super::timing::now_ms;
use crate::callback::client::Client;
use crate::callback::topic::Topic;
use crate::link::Link;
use crate::schedule::online::Presence;
use crate::schedule::sender::{CALL_QUEUE, CallQueue, Sender as CallSender};

/// How long the firer waits after a store error before trying again.
const STORE_RETRY: Duration = Duration::from_millis(200);
/// Longest sleep of the firer with nothing scheduled (it wakes earlier
/// for anything that arrives).
const MAX_SLEEP_MS: u64 = 60_000;
/// Batches sent to the link and waiting for it to take them, at most.
const CONFIRM_QUEUE: usize = 8;

/// What the firer needs.
pub(crate) struct Firer {
    pub(crate) config: Arc<ScheduleConfig>,
    pub(crate) topics: super::topics::Topics,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) link: Arc<dyn Link>,
    pub(crate) presence: Arc<dyn Presence>,
    pub(crate) metrics: DelayedMetrics,
    /// Entries accepted by this process: (fire time, id).
    pub(crate) hints: mpsc::Receiver<(Millis, String)>,
    /// The sending end of `hints`, for entries the confirmer releases.
    pub(crate) hint: mpsc::Sender<(Millis, String)>,
    /// Where callback outcomes (and dead letters) are recorded.
    pub(crate) outcomes: super::outcomes::Outcomes,
    /// Users who came online.
    pub(crate) online: mpsc::Receiver<String>,
    /// Last `when-online` send per user (for the minimum interval).
    pub(crate) last_send: HashMap<String, Millis>,
    /// The client callbacks go out through.
    pub(crate) client: Client,
    /// The settings of a callback whose topic is not registered.
    pub(crate) callback_defaults: Arc<Topic>,
    /// The sender's queue, while the firer runs.
    pub(crate) calls: Option<CallQueue>,
    /// Callbacks made at once, at most.
    pub(crate) max_in_flight: usize,
    /// The process's alerts: the sender raises dead letters.
    pub(crate) alerts: crate::callback::alert::Alerts,
}

/// The loop's state between events.
struct Loop {
    plan: Plan,
    scheduler: Scheduler,
    /// Claimed, not yet due.
    ready: Ready,
    pace: ClaimPace,
    /// The claim in flight: it runs beside the loop, so entries already
    /// claimed go out on time while the next claim commits.
    claiming: Option<Claiming>,
    /// The same for a refill (a read of many keys).
    refilling: Option<Refilling>,
    /// After a failed claim or refill, the next one waits until then.
    claim_after: Millis,
    refill_after: Millis,
}

impl Loop {
    fn new(config: &ScheduleConfig) -> Loop {
        Loop {
            plan: Plan::new(config),
            scheduler: Scheduler::new(config.scheduler()),
            ready: Ready::new(config.max_claimed),
            pace: ClaimPace::default(),
            claiming: None,
            refilling: None,
            claim_after: 0,
            refill_after: 0,
        }
    }

    /// What to do at `now`.
    fn next(&self, now: Millis) -> Step {
        let busy = Busy {
            claiming: self.claiming.is_some(),
            refilling: self.refilling.is_some(),
            claim_after: self.claim_after,
            refill_after: self.refill_after,
        };
        self.plan
            .next(now, &self.scheduler, &self.ready, &self.pace, busy)
    }

    /// Claimed entries wait in `ready` for their due time, or their fire
    /// time when later (a callback retry, a release: claimed ahead, they
    /// go no earlier than it); overdue ones go at the next turn.
    fn claimed(&mut self, entries: Vec<Entry>) {
        for e in entries {
            self.ready.push(e.due_ms.max(e.fire_ms), e, false);
        }
    }
}

impl Firer {
    /// Run until `shutdown`. A batch being fired when shutdown comes is
    /// finished first (its entries are claimed; finishing avoids waiting
    /// out their lease after a restart).
    pub(crate) async fn run(mut self, shutdown: CancellationToken) {
        let (tx, queue) = mpsc::channel(SETTLE_QUEUE);
        let max = self.config.max_unsettled;
        let settler = tokio::spawn(settler(
            Arc::clone(&self.store),
            self.metrics.clone(),
            queue,
            max,
            Duration::from_millis(self.config.settle_delay_ms()),
        ));
        let (calls, queue) = mpsc::channel(CALL_QUEUE);
        let sender = tokio::spawn(
            CallSender {
                client: self.client.clone(),
                store: Arc::clone(&self.store),
                metrics: self.metrics.clone(),
                outcomes: self.outcomes.clone(),
                max_in_flight: self.max_in_flight,
                alerts: self.alerts.clone(),
            }
            .run(queue),
        );
        let (sent, queue) = mpsc::channel(CONFIRM_QUEUE);
        let confirmer = tokio::spawn(
            Confirmer {
                store: Arc::clone(&self.store),
                metrics: self.metrics.clone(),
                hint: self.hint.clone(),
                retry_after_ms: self.config.retry_after_ms,
                settle: Settle::new(tx, max),
                calls: calls.clone(),
            }
            .run(queue),
        );
        self.calls = Some(calls);
        self.fire_until(&shutdown, &sent).await;
        // The confirmer waits for what was sent, hands it to the settler
        // and the sender, and ends; the settler marks what it was handed,
        // the sender finishes the calls running and puts back the others,
        // then they end.
        drop(sent);
        self.calls = None;
        let _ = confirmer.await;
        let _ = settler.await;
        let _ = sender.await;
    }

    /// The loop: fire what is due, else start what the plan says, else
    /// wait for the next event.
    async fn fire_until(&mut self, shutdown: &CancellationToken, confirm: &ConfirmQueue) {
        let mut lp = Loop::new(&self.config);
        loop {
            if shutdown.is_cancelled() {
                self.stop(&mut lp).await;
                return;
            }
            let now = now_ms();
            if self.fire_due(&mut lp, now, confirm).await {
                continue;
            }
            match lp.next(now) {
                Step::Refill { read, at } => self.start_refill(&mut lp, read, at),
                Step::Claim { limit, reach } => self.start_claim(&mut lp, limit, reach),
                Step::Wait { until } => self.wait(&mut lp, now, until, shutdown, confirm).await,
            }
        }
    }

    /// Wait until `until` (at most [`MAX_SLEEP_MS`]) or the first event.
    async fn wait(
        &mut self,
        lp: &mut Loop,
        now: Millis,
        until: Millis,
        shutdown: &CancellationToken,
        confirm: &ConfirmQueue,
    ) {
        let wait = Duration::from_millis(until.saturating_sub(now).clamp(1, MAX_SLEEP_MS));
        tokio::select! {
            // The next turn releases what waits in `ready`.
            _ = shutdown.cancelled() => {}
            done = Claiming::done(&mut lp.claiming) => self.claim_came_back(lp, done),
            done = Refilling::done(&mut lp.refilling) => self.refill_came_back(lp, done),
            _ = tokio::time::sleep(wait) => {}
            Some(hint) = self.hints.recv() => self.hinted(&mut lp.scheduler, hint),
            Some(user) = self.online.recv() => self.user_online(user, &mut lp.scheduler, confirm).await,
        }
    }

    /// Fire what is due in `ready` at `now`; whether there was any.
    async fn fire_due(&mut self, lp: &mut Loop, now: Millis, confirm: &ConfirmQueue) -> bool {
        let due = lp.ready.take_due(now);
        if due.scheduled.is_empty() && due.from_hold.is_empty() {
            return false;
        }
        self.fire(due.scheduled, false, &mut lp.scheduler, confirm)
            .await;
        self.fire(due.from_hold, true, &mut lp.scheduler, confirm)
            .await;
        true
    }

    /// Start `read` (at `at`, the scheduler's clock) beside the loop.
    fn start_refill(&self, lp: &mut Loop, read: Read, at: Millis) {
        lp.scheduler.reading(read);
        self.metrics
            .refills
            .get_or_create(&ReadLabels::of(read.is_whole()))
            .inc();
        lp.refilling = Some(Refilling::start(
            Arc::clone(&self.store),
            at,
            read,
            self.config.max_window,
        ));
    }

    /// Start a claim of up to `limit` entries due by `reach` beside the
    /// loop.
    fn start_claim(&self, lp: &mut Loop, limit: usize, reach: Millis) {
        self.metrics.claims.inc();
        lp.claiming = Some(Claiming::start(
            Arc::clone(&self.store),
            reach,
            limit,
            self.config.lease_ms,
        ));
    }

    /// The claim in flight came back: what it claimed waits in `ready`;
    /// if it failed, the next claim waits [`STORE_RETRY`].
    fn claim_came_back(&self, lp: &mut Loop, done: ClaimDone) {
        match self.claim_done(lp, done) {
            Some(entries) => lp.claimed(entries),
            None => lp.claim_after = now_ms().saturating_add(STORE_RETRY.as_millis() as u64),
        }
    }

    /// The outcome of a claim: the entries, or `None` when it failed.
    /// Feeds its duration to the pace and its size to the scheduler.
    fn claim_done(&self, lp: &mut Loop, done: ClaimDone) -> Option<Vec<Entry>> {
        let outcome = done.outcome.map(|(claimed, took)| {
            if let Ok(entries) = &claimed {
                lp.pace.observe(entries.len(), took);
            }
            claimed
        });
        match joined(outcome) {
            Ok(entries) => {
                lp.scheduler.claimed(done.at, entries.len(), done.limit);
                Some(entries)
            }
            Err(e) => {
                self.metrics.store_error("claim_due");
                tracing::warn!(error = %e, "claiming due notifications failed");
                None
            }
        }
    }

    /// The refill in flight came back: its window goes into the
    /// scheduler; if it failed, the next refill waits [`STORE_RETRY`].
    fn refill_came_back(&self, lp: &mut Loop, done: RefillDone) {
        match joined(done.outcome) {
            Ok(window) => {
                self.metrics
                    .refill_items
                    .get_or_create(&ReadLabels::of(done.read.is_whole()))
                    .inc_by(window.len() as u64);
                let old = lp.scheduler.install(done.at, done.read, window);
                // Freeing a window's ids takes a while too.
                tokio::spawn(async move { drop(old) });
            }
            Err(e) => {
                lp.scheduler.read_failed();
                self.metrics.store_error("upcoming");
                tracing::warn!(error = %e, "reading upcoming delayed notifications failed");
                lp.refill_after = now_ms().saturating_add(STORE_RETRY.as_millis() as u64);
            }
        }
    }

    /// Entries accepted (or released) by this process: `first`, and every
    /// other hint already queued.
    fn hinted(&mut self, scheduler: &mut Scheduler, first: (Millis, String)) {
        let (fire_at, id) = first;
        scheduler.scheduled(fire_at, id);
        while let Ok((fire_at, id)) = self.hints.try_recv() {
            scheduler.scheduled(fire_at, id);
        }
    }

    /// `user` came online: fire what is held for them.
    async fn user_online(
        &mut self,
        user: String,
        scheduler: &mut Scheduler,
        confirm: &ConfirmQueue,
    ) {
        let batch = self.config.claim_batch;
        loop {
            let now = now_ms();
            match self
                .store
                .claim_held(&user, now, batch, self.config.lease_ms)
                .await
            {
                Ok(entries) => {
                    let full = entries.len() >= batch;
                    if entries.is_empty() {
                        return;
                    }
                    tracing::debug!(user = %user, entries = entries.len(), "releasing held notifications");
                    self.fire(entries, true, scheduler, confirm).await;
                    if !full {
                        return;
                    }
                }
                Err(e) => {
                    self.metrics.store_error("claim_held");
                    tracing::warn!(error = %e, user = %user, "claiming held notifications failed; the user's next connect retries");
                    return;
                }
            }
        }
    }

    /// Shutdown: the claim in flight is waited for, and entries claimed
    /// ahead go back to the queue at their time.
    async fn stop(&self, lp: &mut Loop) {
        if let Some(c) = lp.claiming.take() {
            let done = c.join().await;
            if let Some(entries) = self.claim_done(lp, done) {
                lp.claimed(entries);
            }
        }
        let mut by_time: BTreeMap<Millis, Vec<String>> = BTreeMap::new();
        for (at, e) in lp.ready.drain() {
            by_time.entry(at).or_default().push(e.id().to_owned());
        }
        let now = now_ms();
        for (at, ids) in by_time {
            self.release(ids, at, now, &mut lp.scheduler).await;
        }
    }

    /// Release `ids` to fire at `at`, and tell the scheduler.
    async fn release(&self, ids: Vec<String>, at: Millis, now: Millis, scheduler: &mut Scheduler) {
        for id in released(&*self.store, &self.metrics, ids, at, now).await {
            scheduler.scheduled(at, id);
        }
    }
}

/// The outcome of a store call run as a task: a task that failed (it
/// panicked) is a store error like any other.
fn joined<T>(done: Result<Result<T, StoreError>, tokio::task::JoinError>) -> Result<T, StoreError> {
    done.map_err(|e| StoreError::Unavailable(format!("the store task failed: {e}")))?
}

/// Release `ids` to fire at `at`: the ids, once the store took them; none
/// when it failed (counted and logged: they fire again after their lease).
async fn released(
    store: &dyn Store,
    metrics: &DelayedMetrics,
    ids: Vec<String>,
    at: Millis,
    now: Millis,
) -> Vec<String> {
    match store.release(ids.clone(), at, now).await {
        Ok(()) => ids,
        Err(e) => {
            metrics.store_error("release");
            tracing::warn!(error = %e, "releasing notifications failed; they fire again after their lease");
            Vec::new()
        }
    }
}
