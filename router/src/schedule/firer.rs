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
//! (its queue of [`SETTLE_QUEUE`](settle::SETTLE_QUEUE) messages is full),
//! ids pile up on the confirmer's side and go over as one message; past
//! `max_unsettled` of them the confirmer waits (policy: backpressure), and
//! so, once its queue is full, does the
//! firer: a slow store slows firing instead of letting fired entries pile
//! up towards the end of their lease. The bound is large (250,000 by
//! default) so that a herd goes out at the link's pace, not at the pace
//! of marking it delivered. The confirmer hands over its pile whenever it
//! has nothing else to do.
//!
//! A crash anywhere after the claim leaves the entries firing under their
//! lease; another firer (or this one, restarted) claims them again when it
//! expires: at-least-once, with the same `message_id` for edge dedup.
//!
//! # Layout
//! - this file: the loop.
//! - [`fire`]: a claimed batch: hold, [`merge`], [`spacing`], then a
//!   [`round`] of batches to the link.
//! - [`confirm`]: the confirmer; [`settle`]: the settler.
//!
//! ```text
//! loop --claim--> Ready --due--> fire
//! fire --ToSend--> Round --Batch--> Link::send --Sent--> confirmer
//! confirmer --ids taken--> Settle --> settler --> Store::delivered
//!           --ids refused--> Store::release (+ hint back to the loop)
//! ```

mod confirm;
mod fire;
mod merge;
mod round;
#[cfg(test)]
mod sample;
mod settle;
mod spacing;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use self::confirm::{Confirmer, Sender};
use self::settle::{SETTLE_QUEUE, Settle, settler};
use super::config::ScheduleConfig;
use super::entry::{Entry, Millis};
use super::metrics::{DelayedMetrics, ReadLabels};
use super::pace::ClaimPace;
use super::presence::Presence;
use super::ready::Ready;
use super::scheduler::{Action, Read, Scheduler, Window};
use super::store::{Store, StoreError};
use super::timing::now_ms;
use crate::link::Link;

/// How long the firer waits after a store error before trying again.
const STORE_RETRY: Duration = Duration::from_millis(200);
/// Longest sleep of the firer with nothing scheduled (it wakes earlier
/// for anything that arrives).
const MAX_SLEEP_MS: u64 = 60_000;
/// Batches sent to the link and waiting for it to take them, at most.
const CONFIRM_QUEUE: usize = 8;
/// A claim takes everything due within `claim_ahead_ms`, and the next one
/// starts once something is due within all but 1/`CLAIM_SLICES` of it.
const CLAIM_SLICES: u64 = 4;

/// What the firer needs.
pub(crate) struct Firer {
    pub(crate) config: Arc<ScheduleConfig>,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) link: Arc<dyn Link>,
    pub(crate) presence: Arc<dyn Presence>,
    pub(crate) metrics: DelayedMetrics,
    /// Entries accepted by this process: (fire time, id).
    pub(crate) hints: mpsc::Receiver<(Millis, String)>,
    /// The sending end of `hints`, for entries the confirmer releases.
    pub(crate) hint: mpsc::Sender<(Millis, String)>,
    /// Users who came online.
    pub(crate) online: mpsc::Receiver<String>,
    /// Last `when-online` send per user (for the minimum interval).
    pub(crate) last_send: HashMap<String, Millis>,
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
        let settle = Settle::new(tx, max);
        let (sent, queue) = mpsc::channel(CONFIRM_QUEUE);
        let confirmer = tokio::spawn(
            Confirmer {
                store: Arc::clone(&self.store),
                metrics: self.metrics.clone(),
                hint: self.hint.clone(),
                retry_after_ms: self.config.retry_after_ms,
                settle,
            }
            .run(queue),
        );
        self.fire_until(&shutdown, &sent).await;
        // The confirmer waits for what was sent, hands it to the settler
        // and ends; the settler marks what it was handed, then ends.
        drop(sent);
        let _ = confirmer.await;
        let _ = settler.await;
    }

    async fn fire_until(&mut self, shutdown: &CancellationToken, confirm: &Sender) {
        let mut scheduler = Scheduler::new(self.config.scheduler());
        // Claimed, not yet due.
        let mut ready = Ready::new(self.config.max_claimed);
        let mut pace = ClaimPace::default();
        let ahead_ms = self.config.claim_ahead_ms;
        let ahead_max_ms = self.config.claim_ahead_max_ms();
        // The scheduler's clock runs this far ahead: a claim starts when
        // something is due within it, and takes all due within `ahead_ms`.
        let trigger_ms = ahead_ms - ahead_ms / CLAIM_SLICES;
        // The claim in flight: it runs beside the loop, so entries already
        // claimed go out on time while the next claim commits.
        let mut claiming: Option<Claiming> = None;
        // The same for a refill (a read of many keys).
        let mut refilling: Option<Refilling> = None;
        // After a failed claim or refill, the next one waits until then.
        let mut claim_after: Millis = 0;
        let mut refill_after: Millis = 0;
        loop {
            if shutdown.is_cancelled() {
                if let Some(c) = claiming.take() {
                    let (entries, _) =
                        self.claim_done(c.task.await, (c.at, c.limit), &mut pace, &mut scheduler);
                    for e in entries {
                        ready.push(e.due_ms, e, false);
                    }
                }
                self.release_ready(&mut ready, &mut scheduler).await;
                return;
            }
            let now = now_ms();
            let due = ready.take_due(now);
            if !due.scheduled.is_empty() || !due.from_hold.is_empty() {
                self.fire(due.scheduled, false, &mut scheduler, confirm)
                    .await;
                self.fire(due.from_hold, true, &mut scheduler, confirm)
                    .await;
                continue;
            }
            let ahead = now.saturating_add(ahead_ms);
            let clock = now.saturating_add(trigger_ms);
            // A pile whose claims must start by now reaches as far as it
            // needs; otherwise the usual claim-ahead, and a wake-up when
            // the pile's claims must start or when the next bucket comes
            // into view (a herd must be seen as soon as it may be
            // claimed, not at the next refill).
            let view = now.saturating_add(ahead_max_ms);
            let pile = scheduler.pile(view, pace.planned_us());
            let wake = [
                pile.map(|p| p.start),
                scheduler.next_bucket_after(view).map(|b| b - ahead_max_ms),
            ]
            .into_iter()
            .flatten()
            .min();
            let (polled, reach) = match (pile, scheduler.poll(clock)) {
                (Some(p), _) if p.start <= now => {
                    // What falls due while a claim runs waits for it.
                    let first = ready.last_at().or(scheduler.next_fire()).unwrap_or(now);
                    let limit = pace.pile_claim(first.saturating_sub(now), self.config.claim_batch);
                    (Action::Claim { limit }, p.until.max(ahead))
                }
                (_, Action::SleepUntil(t)) => (
                    Action::SleepUntil(wake.map_or(t, |w| t.min(w.saturating_add(trigger_ms)))),
                    ahead,
                ),
                (_, other) => (other, ahead),
            };
            let action = match polled {
                // Wait for the claim in flight, or for room in `ready`.
                Action::Claim { .. } if claiming.is_some() || ready.is_full() => None,
                Action::Claim { .. } if now < claim_after => {
                    Some(Action::SleepUntil(claim_after.saturating_add(trigger_ms)))
                }
                Action::Refill(_) if refilling.is_some() => None,
                Action::Refill(_) if now < refill_after => {
                    Some(Action::SleepUntil(refill_after.saturating_add(trigger_ms)))
                }
                other => Some(other),
            };
            match action {
                Some(Action::Refill(read)) => {
                    let store = Arc::clone(&self.store);
                    let max_window = self.config.max_window;
                    scheduler.reading(read);
                    self.metrics
                        .refills
                        .get_or_create(&ReadLabels::of(read.is_whole()))
                        .inc();
                    // Indexed in the task, off this loop.
                    refilling = Some(Refilling {
                        at: clock,
                        read,
                        task: tokio::spawn(async move {
                            let items = store.upcoming(read.from, read.until, read.limit).await?;
                            Ok(Window::indexed(items, read.limit, max_window))
                        }),
                    });
                }
                Some(Action::Claim { limit }) => {
                    self.metrics.claims.inc();
                    let store = Arc::clone(&self.store);
                    let lease = self.config.lease_ms;
                    claiming = Some(Claiming {
                        at: reach,
                        limit,
                        task: tokio::spawn(async move {
                            let started = Instant::now();
                            let claimed = store.claim_due(reach, limit, lease).await;
                            (claimed, started.elapsed())
                        }),
                    });
                }
                sleep => {
                    // On the scheduler's clock, `trigger_ms` early.
                    let until = match sleep {
                        Some(Action::SleepUntil(t)) => t.saturating_sub(trigger_ms),
                        _ => Millis::MAX,
                    };
                    let wake = until.min(ready.next_at().unwrap_or(Millis::MAX));
                    let wait =
                        Duration::from_millis(wake.saturating_sub(now).clamp(1, MAX_SLEEP_MS));
                    tokio::select! {
                        // The next turn releases what waits in `ready`.
                        _ = shutdown.cancelled() => {}
                        done = async { (&mut claiming.as_mut().expect("guarded").task).await }, if claiming.is_some() => {
                            let c = claiming.take().expect("guarded");
                            let (entries, failed) =
                                self.claim_done(done, (c.at, c.limit), &mut pace, &mut scheduler);
                            if failed {
                                claim_after = now_ms().saturating_add(STORE_RETRY.as_millis() as u64);
                            }
                            // Overdue ones (late, retried, re-claimed) go at
                            // the next turn of the loop.
                            for e in entries {
                                ready.push(e.due_ms, e, false);
                            }
                        }
                        done = async { (&mut refilling.as_mut().expect("guarded").task).await }, if refilling.is_some() => {
                            let r = refilling.take().expect("guarded");
                            match joined(done) {
                                Ok(window) => {
                                    self.metrics
                                        .refill_items
                                        .get_or_create(&ReadLabels::of(r.read.is_whole()))
                                        .inc_by(window.len() as u64);
                                    let old = scheduler.install(r.at, r.read, window);
                                    // Freeing a window's ids takes a while too.
                                    tokio::spawn(async move { drop(old) });
                                }
                                Err(e) => {
                                    scheduler.read_failed();
                                    self.metrics.store_error("upcoming");
                                    tracing::warn!(error = %e, "reading upcoming delayed notifications failed");
                                    refill_after = now_ms().saturating_add(STORE_RETRY.as_millis() as u64);
                                }
                            }
                        }
                        _ = tokio::time::sleep(wait) => {}
                        Some((fire_at, id)) = self.hints.recv() => {
                            scheduler.scheduled(fire_at, id);
                            while let Ok((fire_at, id)) = self.hints.try_recv() {
                                scheduler.scheduled(fire_at, id);
                            }
                        }
                        Some(user) = self.online.recv() => self.user_online(user, &mut scheduler, confirm).await,
                    }
                }
            }
        }
    }

    /// The outcome of a claim up to `at` (scheduler clock) for `limit`:
    /// the entries, and whether it failed.
    fn claim_done(
        &self,
        done: Result<Claimed, tokio::task::JoinError>,
        (at, limit): (Millis, usize),
        pace: &mut ClaimPace,
        scheduler: &mut Scheduler,
    ) -> (Vec<Entry>, bool) {
        let done = done.map(|(claimed, took)| {
            if let Ok(entries) = &claimed {
                pace.observe(entries.len(), took);
            }
            claimed
        });
        match joined(done) {
            Ok(entries) => {
                scheduler.claimed(at, entries.len(), limit);
                (entries, false)
            }
            Err(e) => {
                self.metrics.store_error("claim_due");
                tracing::warn!(error = %e, "claiming due notifications failed");
                (Vec::new(), true)
            }
        }
    }

    /// Shutdown: entries claimed ahead go back to the queue at their time.
    async fn release_ready(&self, ready: &mut Ready, scheduler: &mut Scheduler) {
        let mut by_time: std::collections::BTreeMap<Millis, Vec<String>> = Default::default();
        for (at, e) in ready.drain() {
            by_time.entry(at).or_default().push(e.id().to_owned());
        }
        let now = now_ms();
        for (at, ids) in by_time {
            self.release(ids, at, now, scheduler).await;
        }
    }

    /// `user` came online: fire what is held for them.
    async fn user_online(&mut self, user: String, scheduler: &mut Scheduler, confirm: &Sender) {
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

/// A refill running beside the firer's loop.
struct Refilling {
    /// The scheduler's clock it reads at.
    at: Millis,
    read: Read,
    task: tokio::task::JoinHandle<Result<Window, StoreError>>,
}

/// A claim running beside the firer's loop.
struct Claiming {
    /// The time it claims up to (`claim_ahead_ms` ahead, or a pile's
    /// reach): everything due by then, when the claim comes back short.
    at: Millis,
    limit: usize,
    task: tokio::task::JoinHandle<Claimed>,
}

/// What a claim returned, and how long it took.
type Claimed = (Result<Vec<Entry>, StoreError>, Duration);
