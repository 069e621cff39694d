//! Firing a claimed batch: deliver, call, hold or postpone each entry.
//!
//! - an entry claimed for its callback alone ([`Phase::Callback`]: its
//!   browsers had it) goes to the sender;
//! - a `when-online` entry whose user is offline is held
//!   ([`Store::hold`](crate::schedule::store::Store::hold));
//! - a callback-only entry (`browsers: false`) goes to the sender;
//! - what goes to browsers is merged ([`merge`]; not the entries that
//!   call out), then spaced ([`spacing`]): a send too soon after the
//!   user's last is released to fire when the interval is over;
//! - the rest go to the link as a [`Round`] of batches, each handed to the
//!   confirmer ([`Sent`]) without waiting for the link to take it; the
//!   confirmer hands the callbacks of what the link took to the sender;
//! - an entry with nothing left to do (no browsers and no callback any
//!   more: its topic lost its `callback_url`) is a dead letter saying so.

use std::time::Instant;

use super::Firer;
use super::confirm::{ConfirmQueue, Sent};
use super::merge::{ToSend, merge};
use super::round::Round;
use super::spacing::{Spacing, spacing};
use crate::callback::alert::DeadLetter;
use crate::link::Taken;
use crate::schedule::entry::{Entry, Millis, Phase};
use crate::schedule::online::Asked;
use crate::schedule::scheduler::Scheduler;
use crate::schedule::sender::{Call, Resolution, Resolved, failed_attempt, lease_until, resolve};
use crate::schedule::store::{Ending, Finish};
use crate::schedule::timing::now_ms;
use crate::stats::Event;

impl Firer {
    /// Deliver, hold or postpone a claimed batch (`from_hold`: released by
    /// its user coming online).
    pub(super) async fn fire(
        &mut self,
        entries: Vec<Entry>,
        from_hold: bool,
        scheduler: &mut Scheduler,
        confirm: &ConfirmQueue,
    ) {
        if entries.is_empty() {
            return;
        }
        let now = now_ms();
        let lease_until = lease_until(&self.config, now);
        let topics = self.topics.snapshot();
        let mut calls: Vec<Call> = Vec::new();
        let mut broken: Vec<(String, Option<String>, String)> = Vec::new();
        let (again, entries): (Vec<Entry>, Vec<Entry>) = entries
            .into_iter()
            .partition(|e| e.phase == Phase::Callback);
        for e in again {
            match resolve(&e, &topics, &self.callback_defaults) {
                Resolution::Call { resolved, .. } => calls.push(call(e, resolved, lease_until)),
                Resolution::Browsers => broken.push(buried(
                    e,
                    "its callback is gone: neither it nor its topic has a callback_url any more"
                        .into(),
                )),
                Resolution::Broken(why) => broken.push(buried(e, why)),
            }
        }
        let (send, hold) = self.by_presence(entries, from_hold).await;
        self.hold(hold, now).await;
        let mut browsers = Vec::with_capacity(send.len());
        let mut both = Vec::new();
        for e in send {
            match resolve(&e, &topics, &self.callback_defaults) {
                Resolution::Browsers => browsers.push(e),
                Resolution::Call {
                    resolved,
                    browsers: true,
                } => both.push(ToSend::with_call(e, resolved)),
                Resolution::Call {
                    resolved,
                    browsers: false,
                } => calls.push(call(e, resolved, lease_until)),
                Resolution::Broken(why) => broken.push(buried(e, why)),
            }
        }
        let merged = merge(browsers, |topic| self.topics.merges(topic));
        self.metrics.merged.inc_by(merged.folded);
        let mut sends = merged.sends;
        sends.extend(both);
        let send = self.space(sends, now, scheduler).await;
        if !send.is_empty() {
            self.send_round(send, from_hold, lease_until, confirm).await;
        }
        self.bury(broken).await;
        if !calls.is_empty() {
            self.metrics.fired.inc_by(calls.len() as u64);
            let queue = self
                .calls
                .as_ref()
                .expect("the sender runs while the firer does");
            if let Err(e) = queue.send(calls).await {
                tracing::warn!(
                    entries = e.0.len(),
                    "the sender has stopped; these are called after their lease"
                );
            }
        }
    }

    /// Entries with nothing left to do: dead letters, each with its reason
    /// as its last attempt.
    async fn bury(&self, broken: Vec<(String, Option<String>, String)>) {
        if broken.is_empty() {
            return;
        }
        let now = now_ms();
        let finish: Vec<Finish> = broken
            .into_iter()
            .map(|(id, topic, reason)| {
                self.metrics.callbacks.outcome("dead");
                self.metrics
                    .topics
                    .record(topic.as_deref(), Event::CallbacksDead, 1, now);
                self.alerts.dead_letter(DeadLetter {
                    id: id.clone(),
                    topic,
                    reason: reason.clone(),
                    attempts: 0,
                });
                Finish {
                    id,
                    ending: Ending::Dead,
                    recheck: None,
                    attempt: Some(failed_attempt(reason, now)),
                }
            })
            .collect();
        let n = finish.len();
        if let Err(e) = self.outcomes.finish(finish, now).await {
            tracing::warn!(error = %e, entries = n, "recording dead letters failed; they fire again after their lease");
        }
    }

    /// The entries to send, and those to hold with their hold limit
    /// (`when-online`, user offline). Entries released by an online event
    /// that go to browsers are asked about again: the event may come from
    /// a backend (`POST /v1/users/{uid}/online`) while the user has no
    /// session and no mailbox anywhere, and a notification handed to
    /// nobody would be lost. A callback-only one (`browsers: false`) is
    /// sent: its recipient is the callback, and the online event, from a
    /// session or from the backend that knows the user is online on
    /// another channel, is what it waited for. Held again, they keep the
    /// limit of their first hold (counted from their due time), so
    /// repeated online events do not hold them forever.
    async fn by_presence(
        &self,
        entries: Vec<Entry>,
        from_hold: bool,
    ) -> (Vec<Entry>, Vec<(String, Millis, Option<String>)>) {
        let asked: Vec<Asked> = entries
            .iter()
            .filter_map(|e| {
                waiting_for(e, from_hold).map(|u| Asked {
                    user: u.to_owned(),
                    sites: e.notification.sites.clone(),
                })
            })
            .collect();
        let mut online = if asked.is_empty() {
            Vec::new()
        } else {
            self.presence.online(&asked).await
        }
        .into_iter();
        let now = now_ms();
        let mut hold = Vec::new();
        let mut send: Vec<Entry> = Vec::with_capacity(entries.len());
        for e in entries {
            if e.attempts > 1 && !from_hold {
                self.metrics.refired.inc();
            }
            if waiting_for(&e, from_hold).is_some() && !online.next().unwrap_or(false) {
                let expires = if from_hold {
                    self.metrics.rehold.inc();
                    e.due_ms.saturating_add(self.config.hold_max_ms).max(now)
                } else {
                    now.saturating_add(self.config.hold_max_ms)
                };
                hold.push((e.id().to_owned(), expires, e.notification.topic.clone()));
                continue;
            }
            send.push(e);
        }
        (send, hold)
    }

    /// Hold entries until their user comes online or their limit passes.
    async fn hold(&self, holds: Vec<(String, Millis, Option<String>)>, now: Millis) {
        type Group = (Vec<String>, Vec<Option<String>>);
        let mut by_limit: std::collections::BTreeMap<Millis, Group> = Default::default();
        for (id, expires, topic) in holds {
            let (ids, topics) = by_limit.entry(expires).or_default();
            ids.push(id);
            topics.push(topic);
        }
        for (expires, (ids, topics)) in by_limit {
            let n = ids.len() as u64;
            match self.store.hold(ids, expires, now).await {
                Ok(()) => {
                    self.metrics.held.inc_by(n);
                    for t in &topics {
                        self.metrics
                            .topics
                            .record(t.as_deref(), Event::Held, 1, now);
                    }
                }
                Err(e) => {
                    self.metrics.store_error("hold");
                    tracing::warn!(error = %e, entries = n, "holding notifications failed; they fire again after their lease");
                }
            }
        }
    }

    /// Space the sends to each user by the topic's minimum interval: a
    /// send too soon after the last one to that user (in this batch or
    /// before) is postponed to the end of the interval. Answers the sends
    /// that go now. Released entries come back claimed ahead (their due
    /// time has passed, so they go when claimed): released
    /// `claim_ahead_ms` after the interval's end, they go no earlier than
    /// it.
    async fn space(
        &mut self,
        mut send: Vec<ToSend>,
        now: Millis,
        scheduler: &mut Scheduler,
    ) -> Vec<ToSend> {
        let ahead_ms = self.config.claim_ahead_ms;
        let mut postpone: Vec<(String, Millis)> = Vec::new();
        send.retain(|s| {
            match spacing(
                &mut self.last_send,
                &self.config,
                &self.topics,
                &s.entry,
                now,
            ) {
                Spacing::Go => true,
                Spacing::Untracked => {
                    self.metrics.untracked_users.inc();
                    true
                }
                Spacing::Wait(at) => {
                    let at = at.saturating_add(ahead_ms);
                    postpone.extend(s.ids.iter().map(|id| (id.clone(), at)));
                    false
                }
            }
        });
        for (id, at) in postpone {
            self.metrics.postponed.inc();
            self.release(vec![id], at, now, scheduler).await;
        }
        send
    }

    /// To the link in batches of at most its limit, each waited for on its
    /// own by the confirmer.
    async fn send_round(
        &self,
        send: Vec<ToSend>,
        from_hold: bool,
        lease_until: Millis,
        confirm: &ConfirmQueue,
    ) {
        let fired = herald_protocol::envelope::Accepted::at(std::time::SystemTime::now());
        let mut round = Round::new(send, from_hold, self.link.batch_limit(), lease_until, fired);
        while !round.is_done() {
            let batch = round.batch(now_ms());
            // A batch the link refuses at once goes the way of one it does
            // not take later: the confirmer releases it for a retry.
            let waiting = Instant::now();
            let taken = match self.link.send(batch.notifications).await {
                Ok(taken) => taken,
                Err(e) => Box::pin(std::future::ready(Err(e))) as Taken,
            };
            let sent = Sent {
                taken,
                ids: batch.ids,
                lateness: batch.lateness,
                lateness_topics: batch.lateness_topics,
                calls: batch.calls,
            };
            if confirm.send(sent).await.is_err() {
                tracing::warn!("the confirmer has stopped; these fire again after their lease");
            }
            self.metrics
                .link_wait
                .inc_by(waiting.elapsed().as_secs_f64());
        }
    }
}

/// The callback of `e`, claimed until `lease_until` at least.
fn call(e: Entry, resolved: Resolved, lease_until: Millis) -> Call {
    Call {
        calls: e.calls,
        notification: std::sync::Arc::new(e.notification),
        resolved,
        lease_until,
    }
}

/// `e` as a dead letter for `reason`: (id, topic, reason).
fn buried(e: Entry, reason: String) -> (String, Option<String>, String) {
    (e.notification.id, e.notification.topic, reason)
}

/// The user an entry waits for to be online: a `when-online` entry's,
/// unless it is callback-only and an online event released it.
fn waiting_for(e: &Entry, from_hold: bool) -> Option<&str> {
    e.online_user().filter(|_| e.target.browsers || !from_hold)
}
