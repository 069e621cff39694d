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
//! [`CONFIRM_QUEUE`] batches wait there (policy: backpressure, the firer waits for room). The
//! confirmer counts what the link took and hands its ids to the settler;
//! what the link refused it releases to retry after `retry_after_ms`.
//!
//! Marking delivered is the settler's job, a task beside the confirmer:
//! the confirmer hands it the ids of each batch the link took and goes on
//! without waiting for that commit. The settler lets ids pile up for
//! `settle_delay_ms` from the first (or until `max_unsettled` of them),
//! then marks them delivered, [`SETTLE_CHUNK`] ids per
//! [`Store::delivered`] call: a herd goes out before its bookkeeping
//! competes with it for the store and the CPU, and a steady stream makes
//! a few large writes instead of one per batch. (Marking as soon as firing
//! pauses was tried: a herd's firing pauses whenever the broker holds the
//! router back, and the marks then ran inside the herd.) While it is busy (its queue of
//! [`SETTLE_QUEUE`] messages is full), ids pile up on the confirmer's side
//! and go over as one message; past `max_unsettled` of them the confirmer
//! waits (policy: backpressure), and so, once its queue is full, does the
//! firer: a slow store slows firing instead of letting fired entries pile
//! up towards the end of their lease. The bound is large (250,000 by
//! default) so that a herd goes out at the link's pace, not at the pace
//! of marking it delivered. The confirmer hands over its pile whenever it
//! has nothing else to do.
//!
//! A crash anywhere after the claim leaves the entries firing under their
//! lease; another firer (or this one, restarted) claims them again when it
//! expires: at-least-once, with the same `message_id` for edge dedup.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, BytesMut};
use herald_protocol::envelope::{Notification, Scope};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::config::ScheduleConfig;
use super::entry::{Entry, Millis};
use super::metrics::{DelayedMetrics, ReadLabels};
use super::pace::ClaimPace;
use super::presence::{Asked, Presence};
use super::ready::Ready;
use super::scheduler::{Action, Read, Scheduler, Window};
use super::store::{Store, StoreError};
use super::timing::now_ms;
use crate::link::{Link, Taken};

/// How long the firer waits after a store error before trying again.
const STORE_RETRY: Duration = Duration::from_millis(200);
/// Longest sleep of the firer with nothing scheduled (it wakes earlier
/// for anything that arrives).
const MAX_SLEEP_MS: u64 = 60_000;
/// Messages waiting for the settler at most.
const SETTLE_QUEUE: usize = 4;
/// Most ids the settler marks in one store call: a store call is one
/// commit, and other calls (the firer's claims) wait behind it.
const SETTLE_CHUNK: usize = 2_000;
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
        let settle = Settle {
            tx,
            pile: Vec::new(),
            max,
        };
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

    /// Deliver, hold or postpone a claimed batch.
    async fn fire(
        &mut self,
        entries: Vec<Entry>,
        from_hold: bool,
        scheduler: &mut Scheduler,
        confirm: &Sender,
    ) {
        if entries.is_empty() {
            return;
        }
        let now = now_ms();
        let mut hold = Vec::new();
        let mut postpone: Vec<(String, Millis)> = Vec::new();
        let mut send: Vec<Entry> = Vec::with_capacity(entries.len());
        // Released by an online event (a session, or the backend saying
        // so), entries go out without asking presence again.
        let asked: Vec<Asked> = if from_hold {
            Vec::new()
        } else {
            entries
                .iter()
                .filter_map(|e| {
                    e.online_user().map(|u| Asked {
                        user: u.to_owned(),
                        sites: e.notification.sites.clone(),
                    })
                })
                .collect()
        };
        let mut online = if asked.is_empty() {
            Vec::new()
        } else {
            self.presence.online(&asked).await
        }
        .into_iter();
        for e in entries {
            if e.attempts > 1 && !from_hold {
                self.metrics.refired.inc();
            }
            if e.online_user().is_some() && !from_hold && !online.next().unwrap_or(false) {
                hold.push(e.id().to_owned());
                continue;
            }
            send.push(e);
        }
        if !hold.is_empty() {
            let n = hold.len() as u64;
            let expires = now.saturating_add(self.config.hold_max_ms);
            match self.store.hold(hold, expires, now).await {
                Ok(()) => {
                    self.metrics.held.inc_by(n);
                }
                Err(e) => {
                    self.metrics.store_error("hold");
                    tracing::warn!(error = %e, entries = n, "holding notifications failed; they fire again after their lease");
                }
            }
        }
        // Merge first (a merged group is one send), then space the sends
        // to each user by the topic's minimum interval: a send too soon
        // after the last one to that user (in this batch or before) is
        // postponed to the end of the interval. Released entries come back
        // claimed ahead (their due time has passed, so they go when
        // claimed): released `claim_ahead_ms` after the interval's end,
        // they go no earlier than it.
        let mut send = self.merge(send);
        let ahead_ms = self.config.claim_ahead_ms;
        send.retain(|(e, ids)| match self.spacing(e, now) {
            Some(at) => {
                let at = at.saturating_add(ahead_ms);
                postpone.extend(ids.iter().map(|id| (id.clone(), at)));
                false
            }
            None => true,
        });
        for (id, at) in postpone {
            self.metrics.postponed.inc();
            self.release(vec![id], at, now, scheduler).await;
        }
        if send.is_empty() {
            return;
        }
        // To the link in batches of at most its limit, each waited for on
        // its own by the confirmer.
        let limit = self.link.batch_limit().max(1);
        let send = outs(send, from_hold, limit);
        let mut send = send.into_iter().peekable();
        while send.peek().is_some() {
            let mut ids = Vec::new();
            let mut batch = Vec::new();
            let mut lateness = Vec::new();
            // Lateness as of this batch: a herd's last batches go out
            // later than its first.
            let sending = now_ms();
            for out in send.by_ref().take(limit) {
                if let Some(due) = out.first_due {
                    lateness.push(sending.saturating_sub(due));
                }
                ids.extend(out.ids);
                batch.push(out.notification);
            }
            // A batch the link refuses at once goes the way of one it does
            // not take later: the confirmer releases it for a retry.
            let waiting = Instant::now();
            let taken = match self.link.send(batch).await {
                Ok(taken) => taken,
                Err(e) => Box::pin(std::future::ready(Err(e))) as Taken,
            };
            let sent = Sent {
                taken,
                ids,
                lateness,
            };
            if confirm.send(sent).await.is_err() {
                tracing::warn!("the confirmer has stopped; these fire again after their lease");
            }
            self.metrics
                .link_wait
                .inc_by(waiting.elapsed().as_secs_f64());
        }
    }

    async fn release(&self, ids: Vec<String>, at: Millis, now: Millis, scheduler: &mut Scheduler) {
        for id in released(&*self.store, &self.metrics, ids, at, now).await {
            scheduler.scheduled(at, id);
        }
    }

    /// Group merging `when-online` entries per (user, topic): each group
    /// becomes its first entry carrying a JSON array of the payloads. Each
    /// output carries the ids it stands for.
    fn merge(&self, send: Vec<Entry>) -> Vec<(Entry, Vec<String>)> {
        let mut out: Vec<(Entry, Vec<String>)> = Vec::with_capacity(send.len());
        let mut groups: HashMap<(String, Option<String>), usize> = HashMap::new();
        let mut members: Vec<Vec<Entry>> = Vec::new();
        for e in send {
            let topic = e.notification.topic.clone();
            let mergeable = e.when_online
                && e.notification.content_type == "application/json"
                && self.config.merges(topic.as_deref());
            match (mergeable, e.online_user()) {
                (true, Some(user)) => {
                    let key = (user.to_owned(), topic);
                    match groups.get(&key) {
                        Some(&slot) => members[slot].push(e),
                        None => {
                            groups.insert(key, members.len());
                            members.push(vec![e]);
                        }
                    }
                }
                _ => {
                    let id = e.id().to_owned();
                    out.push((e, vec![id]));
                }
            }
        }
        for group in members {
            let ids: Vec<String> = group.iter().map(|e| e.id().to_owned()).collect();
            if group.len() == 1 {
                let e = group.into_iter().next().expect("one");
                out.push((e, ids));
                continue;
            }
            self.metrics.merged.inc_by(group.len() as u64 - 1);
            out.push((merged(group), ids));
        }
        out
    }

    /// For a `when-online` send to a user who had one less than the topic's
    /// minimum interval ago: when it may go. Otherwise records this send
    /// (when an interval applies) and answers `None`.
    fn spacing(&mut self, e: &Entry, now: Millis) -> Option<Millis> {
        let user = e.online_user()?;
        let interval = self.config.min_interval_ms(e.notification.topic.as_deref());
        if interval == 0 {
            return None;
        }
        if let Some(last) = self.last_send.get(user)
            && now < last.saturating_add(interval)
        {
            return Some(last + interval);
        }
        if self.last_send.len() >= self.config.max_tracked_users
            && !self.last_send.contains_key(user)
        {
            self.forget_old_sends(now);
            if self.last_send.len() >= self.config.max_tracked_users {
                self.metrics.untracked_users.inc();
                return None;
            }
        }
        self.last_send.insert(user.to_owned(), now);
        None
    }

    /// Drop sends older than every interval in force: they no longer
    /// postpone anything.
    fn forget_old_sends(&mut self, now: Millis) {
        let longest = self
            .config
            .topics
            .values()
            .filter_map(|t| t.min_interval_ms)
            .chain([self.config.min_interval_ms])
            .max()
            .unwrap_or(0);
        self.last_send
            .retain(|_, last| last.saturating_add(longest) > now);
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

/// The firer's end of the confirmer.
type Sender = mpsc::Sender<Sent>;

/// A batch sent to the link.
struct Sent {
    /// Resolves when the link has taken it.
    taken: Taken,
    /// The ids it stands for.
    ids: Vec<String>,
    /// The lateness of its first attempts, to count once it is taken.
    lateness: Vec<Millis>,
}

/// Waits, in order, for the link to take each batch sent; counts and
/// settles what it took, releases what it refused.
struct Confirmer {
    store: Arc<dyn Store>,
    metrics: DelayedMetrics,
    hint: mpsc::Sender<(Millis, String)>,
    retry_after_ms: u64,
    settle: Settle,
}

impl Confirmer {
    /// Until the firer drops its end and every batch sent is done.
    async fn run(mut self, mut queue: mpsc::Receiver<Sent>) {
        loop {
            let sent = tokio::select! {
                biased;
                sent = queue.recv() => match sent {
                    Some(sent) => sent,
                    None => break,
                },
                // Hand over the pile while nothing else is to do.
                _ = self.settle.flush(), if !self.settle.pile.is_empty() => continue,
            };
            self.confirm(sent).await;
        }
        self.settle.flush().await;
    }

    async fn confirm(&mut self, sent: Sent) {
        match sent.taken.await {
            Ok(()) => {
                self.metrics.fired.inc_by(sent.ids.len() as u64);
                for late in sent.lateness {
                    self.metrics.lateness.observe(late as f64 / 1000.0);
                }
                self.settle.hand(sent.ids).await;
            }
            Err(e) => {
                tracing::warn!(error = %e, entries = sent.ids.len(), retry_ms = self.retry_after_ms, "the link did not take due notifications; retrying");
                let now = now_ms();
                let retry = now.saturating_add(self.retry_after_ms);
                for id in released(&*self.store, &self.metrics, sent.ids, retry, now).await {
                    // A hint that does not fit is found by the next refill.
                    if self.hint.try_send((retry, id)).is_err() {
                        self.metrics.hints_dropped.inc();
                    }
                }
            }
        }
    }
}

/// The confirmer's end of the settler: ids the link took, piled up while
/// the settler is busy.
struct Settle {
    tx: mpsc::Sender<Vec<String>>,
    pile: Vec<String>,
    /// `max_unsettled`: beyond this many ids, wait for the settler.
    max: usize,
}

impl Settle {
    /// Hand over `ids`, with the pile, if the settler has room; wait for
    /// room only once the pile holds `max` ids.
    async fn hand(&mut self, ids: Vec<String>) {
        self.pile.extend(ids);
        match self.tx.try_send(std::mem::take(&mut self.pile)) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(pile)) => {
                self.pile = pile;
                if self.pile.len() >= self.max {
                    self.flush().await;
                }
            }
            Err(mpsc::error::TrySendError::Closed(pile)) => {
                tracing::warn!(
                    entries = pile.len(),
                    "the settler has stopped; these fire again after their lease"
                );
            }
        }
    }

    /// Hand over the pile, waiting for room. Cancel-safe: the pile is
    /// taken only once there is room.
    async fn flush(&mut self) {
        if self.pile.is_empty() {
            return;
        }
        match self.tx.reserve().await {
            Ok(permit) => permit.send(std::mem::take(&mut self.pile)),
            Err(_) => tracing::warn!(
                entries = self.pile.len(),
                "the settler has stopped; these fire again after their lease"
            ),
        }
    }
}

/// Mark delivered what the firer hands over: what piled up over `delay`
/// from the first id (at most `max` ids at once), [`SETTLE_CHUNK`] per
/// store call, until the firer drops its end.
async fn settler(
    store: Arc<dyn Store>,
    metrics: DelayedMetrics,
    mut queue: mpsc::Receiver<Vec<String>>,
    max: usize,
    delay: Duration,
) {
    while let Some(mut ids) = queue.recv().await {
        let linger = tokio::time::sleep(delay);
        tokio::pin!(linger);
        while ids.len() < max {
            tokio::select! {
                more = queue.recv() => match more {
                    Some(more) => ids.extend(more),
                    // The firer is done: mark what is here, then end.
                    None => break,
                },
                _ = &mut linger => break,
            }
        }
        while ids.len() < max {
            match queue.try_recv() {
                Ok(more) => ids.extend(more),
                Err(_) => break,
            }
        }
        // Chunks off the end: splitting off the front would move the rest
        // each time (quadratic in a herd's pile).
        while !ids.is_empty() {
            let chunk = ids.split_off(ids.len().saturating_sub(SETTLE_CHUNK));
            let n = chunk.len();
            metrics.settles.inc();
            if let Err(e) = store.delivered(chunk, now_ms()).await {
                metrics.store_error("delivered");
                tracing::warn!(error = %e, entries = n, "marking notifications delivered failed; they fire again after their lease");
            }
        }
    }
}

/// One notification standing for `group` (same user and topic, JSON
/// payloads, due order): the first entry's envelope with the payloads as a
/// JSON array.
fn merged(group: Vec<Entry>) -> Entry {
    let size: usize = group.iter().map(|e| e.notification.payload.len() + 1).sum();
    let mut payload = BytesMut::with_capacity(size + 2);
    payload.put_u8(b'[');
    for (i, e) in group.iter().enumerate() {
        if i > 0 {
            payload.put_u8(b',');
        }
        payload.put_slice(&e.notification.payload);
    }
    payload.put_u8(b']');
    let mut first = group.into_iter().next().expect("a group has a first entry");
    first.notification = Notification {
        payload: payload.freeze(),
        encodings: Default::default(),
        ..first.notification
    };
    first
}

/// One send of a round, ready for the link.
struct Out {
    /// Who it goes to (a hash: equal for the same recipient), in a round
    /// that is grouped; 0 in one that keeps its order.
    recipient: u64,
    notification: Arc<Notification>,
    /// The entries it stands for (several when merged).
    ids: Vec<String>,
    /// Its due time when this is its first attempt (for the lateness
    /// histogram; refires and released holds are not counted).
    first_due: Option<Millis>,
}

/// A round's sends, ready for the link in batches of `limit`. A round of
/// more than one batch (a herd) is ordered by recipient (stable: a
/// recipient's own keep their (due, id) order): everything in a round is
/// due already, so the order among recipients is free, and grouped, a
/// recipient's notifications that fall due together travel in the same
/// bundle and reach the edge at once, where its session writes them with
/// one write instead of one each (a herd of 200,000 to 10,000 users: 20 per
/// write instead of 1; the edge's CPU for the herd halved). A steady
/// stream's rounds (a few entries each) keep their order. Sorts small
/// records, not the entries.
fn outs(send: Vec<(Entry, Vec<String>)>, from_hold: bool, limit: usize) -> Vec<Out> {
    let herd = send.len() > limit;
    let mut out: Vec<Out> = send
        .into_iter()
        .map(|(e, ids)| Out {
            recipient: if herd { recipient(&e.notification) } else { 0 },
            first_due: (e.attempts == 1 && !from_hold).then_some(e.due_ms),
            notification: Arc::new(e.notification),
            ids,
        })
        .collect();
    if herd {
        out.sort_by_key(|o| o.recipient);
    }
    out
}

/// A hash of who `n` goes to: equal for the same recipient.
fn recipient(n: &Notification) -> u64 {
    let who = match n.scope {
        Scope::User => n.users.first(),
        Scope::Client => n.clients.first(),
        Scope::Global => None,
    };
    let mut h = std::hash::DefaultHasher::new();
    (n.scope, who).hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use herald_protocol::envelope::Encodings;

    use super::*;

    fn entry(id: &str, user: &str, attempts: u32) -> (Entry, Vec<String>) {
        let e = Entry {
            notification: Notification {
                id: id.into(),
                scope: Scope::User,
                users: vec![user.into()],
                clients: vec![],
                sites: vec![],
                event: "e".into(),
                topic: None,
                content_type: "text/plain".into(),
                payload: Bytes::from_static(b"x"),
                payload_is_utf8: true,
                ttl: None,
                encodings: Encodings::default(),
            },
            due_ms: 1_000,
            accepted_ms: 0,
            when_online: false,
            attempts,
        };
        (e, vec![id.to_owned()])
    }

    fn ids(outs: &[Out]) -> Vec<&str> {
        outs.iter().map(|o| o.notification.id.as_str()).collect()
    }

    #[test]
    fn a_round_larger_than_a_batch_goes_grouped_by_recipient_in_order() {
        let round = vec![
            entry("a1", "alice", 1),
            entry("b1", "bob", 1),
            entry("a2", "alice", 1),
            entry("c1", "carol", 2),
            entry("b2", "bob", 1),
            entry("a3", "alice", 1),
        ];
        let out = outs(round, false, 4);
        let got = ids(&out);
        // Each recipient's sends are adjacent and keep their order.
        for user in ["a", "b", "c"] {
            let at: Vec<usize> = (0..got.len())
                .filter(|&i| got[i].starts_with(user))
                .collect();
            assert!(at.windows(2).all(|w| w[1] == w[0] + 1), "{got:?}");
            let mine: Vec<&str> = at.iter().map(|&i| got[i]).collect();
            let mut sorted = mine.clone();
            sorted.sort();
            assert_eq!(mine, sorted, "{got:?}");
        }
        // Lateness is counted for first attempts only.
        let c1 = out.iter().find(|o| o.notification.id == "c1").unwrap();
        assert_eq!(c1.first_due, None);
        assert!(
            out.iter()
                .filter(|o| o.notification.id != "c1")
                .all(|o| o.first_due == Some(1_000))
        );
    }

    #[test]
    fn a_round_of_one_batch_keeps_its_order_and_released_holds_are_not_timed() {
        let round = vec![
            entry("a1", "alice", 1),
            entry("b1", "bob", 1),
            entry("a2", "alice", 1),
        ];
        let out = outs(round, true, 4);
        assert_eq!(ids(&out), ["a1", "b1", "a2"]);
        assert!(out.iter().all(|o| o.first_due.is_none()));
    }
}
