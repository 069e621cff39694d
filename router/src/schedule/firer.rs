//! The firer: the async shell around the [`Scheduler`]. One task per
//! process; it sleeps until the scheduler's next deadline, claims what is
//! due, and hands it to the [`Link`].
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
//! Marking delivered is the settler's job, a task beside the firer: the
//! firer hands it the ids of each batch the link took and goes on to the
//! next claim without waiting for that commit. The settler writes what has
//! queued up in one [`Store::delivered`] call. Its queue holds at most
//! [`SETTLE_QUEUE`] batches; when it is full the firer waits (policy:
//! backpressure), so a slow store slows firing instead of letting claimed
//! entries pile up towards the end of their lease.
//!
//! A crash anywhere after the claim leaves the entries firing under their
//! lease; another firer (or this one, restarted) claims them again when it
//! expires: at-least-once, with the same `message_id` for edge dedup.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use herald_protocol::envelope::Notification;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::config::ScheduleConfig;
use super::entry::{Entry, Millis};
use super::metrics::DelayedMetrics;
use super::presence::{Asked, Presence};
use super::scheduler::{Action, Scheduler};
use super::store::Store;
use super::timing::now_ms;
use crate::link::Link;

/// How long the firer waits after a store error before trying again.
const STORE_RETRY: Duration = Duration::from_millis(200);
/// Batches waiting for the settler at most (the firer waits beyond).
pub(crate) const SETTLE_QUEUE: usize = 64;
/// Most ids the settler marks in one store call.
const SETTLE_MAX: usize = 20_000;

/// What the firer needs.
pub(crate) struct Firer {
    pub(crate) config: Arc<ScheduleConfig>,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) link: Arc<dyn Link>,
    pub(crate) presence: Arc<dyn Presence>,
    pub(crate) metrics: DelayedMetrics,
    /// Entries accepted by this process: (fire time, id).
    pub(crate) hints: mpsc::Receiver<(Millis, String)>,
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
        let (settle, queue) = mpsc::channel(SETTLE_QUEUE);
        let settler = tokio::spawn(settler(
            Arc::clone(&self.store),
            self.metrics.clone(),
            queue,
        ));
        self.fire_until(&shutdown, &settle).await;
        // The settler marks what it was handed, then ends.
        drop(settle);
        let _ = settler.await;
    }

    async fn fire_until(&mut self, shutdown: &CancellationToken, settle: &Settle) {
        let mut scheduler = Scheduler::new(self.config.scheduler());
        loop {
            if shutdown.is_cancelled() {
                return;
            }
            let now = now_ms();
            match scheduler.poll(now) {
                Action::Refill { until, limit } => match self.store.upcoming(until, limit).await {
                    Ok(items) => scheduler.refilled(now, items, limit),
                    Err(e) => {
                        self.metrics.store_error("upcoming");
                        tracing::warn!(error = %e, "reading upcoming delayed notifications failed");
                        self.pause(shutdown).await;
                    }
                },
                Action::Claim { limit } => {
                    match self.store.claim_due(now, limit, self.config.lease_ms).await {
                        Ok(entries) => {
                            scheduler.claimed(now, entries.len(), limit);
                            self.fire(entries, false, &mut scheduler, settle).await;
                        }
                        Err(e) => {
                            self.metrics.store_error("claim_due");
                            tracing::warn!(error = %e, "claiming due notifications failed");
                            self.pause(shutdown).await;
                        }
                    }
                }
                Action::SleepUntil(t) => {
                    let wait = Duration::from_millis(t.saturating_sub(now).max(1));
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(wait) => {}
                        Some((fire_at, id)) = self.hints.recv() => {
                            scheduler.scheduled(fire_at, id);
                            while let Ok((fire_at, id)) = self.hints.try_recv() {
                                scheduler.scheduled(fire_at, id);
                            }
                        }
                        Some(user) = self.online.recv() => self.user_online(user, &mut scheduler, settle).await,
                    }
                }
            }
        }
    }

    async fn pause(&self, shutdown: &CancellationToken) {
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = tokio::time::sleep(STORE_RETRY) => {}
        }
    }

    /// `user` came online: fire what is held for them.
    async fn user_online(&mut self, user: String, scheduler: &mut Scheduler, settle: &Settle) {
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
                    self.fire(entries, true, scheduler, settle).await;
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
        settle: &Settle,
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
        // postponed to the end of the interval.
        let mut send = self.merge(send);
        send.retain(|(e, ids)| match self.spacing(e, now) {
            Some(at) => {
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
        let mut ids = Vec::with_capacity(send.len());
        let mut batch = Vec::with_capacity(send.len());
        let mut lateness = Vec::with_capacity(send.len());
        for (e, merged_ids) in send {
            if e.attempts == 1 && !from_hold {
                lateness.push(now.saturating_sub(e.due_ms));
            }
            ids.extend(merged_ids);
            batch.push(Arc::new(e.notification));
        }
        match self.link.publish(batch).await {
            Ok(()) => {
                let n = ids.len() as u64;
                self.metrics.fired.inc_by(n);
                for late in lateness {
                    self.metrics.lateness.observe(late as f64 / 1000.0);
                }
                if settle.send(ids).await.is_err() {
                    tracing::warn!(
                        entries = n,
                        "the settler has stopped; these fire again after their lease"
                    );
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, entries = ids.len(), retry_ms = self.config.retry_after_ms, "the link refused due notifications; retrying");
                let retry = now.saturating_add(self.config.retry_after_ms);
                self.release(ids, retry, now, scheduler).await;
            }
        }
    }

    async fn release(&self, ids: Vec<String>, at: Millis, now: Millis, scheduler: &mut Scheduler) {
        let hints: Vec<String> = ids.clone();
        match self.store.release(ids, at, now).await {
            Ok(()) => {
                for id in hints {
                    scheduler.scheduled(at, id);
                }
            }
            Err(e) => {
                self.metrics.store_error("release");
                tracing::warn!(error = %e, "releasing notifications failed; they fire again after their lease");
            }
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

/// Where the firer hands the ids the link took.
type Settle = mpsc::Sender<Vec<String>>;

/// Mark delivered what the firer hands over, a commit for whatever has
/// queued up (at most [`SETTLE_MAX`] ids), until the firer drops its end.
async fn settler(
    store: Arc<dyn Store>,
    metrics: DelayedMetrics,
    mut queue: mpsc::Receiver<Vec<String>>,
) {
    while let Some(mut ids) = queue.recv().await {
        while ids.len() < SETTLE_MAX {
            match queue.try_recv() {
                Ok(more) => ids.extend(more),
                Err(_) => break,
            }
        }
        let n = ids.len();
        if let Err(e) = store.delivered(ids, now_ms()).await {
            metrics.store_error("delivered");
            tracing::warn!(error = %e, entries = n, "marking notifications delivered failed; they fire again after their lease");
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
