//! Firing a claimed batch: deliver, hold or postpone each entry.
//!
//! - a `when-online` entry whose user is offline is held
//!   ([`Store::hold`](crate::schedule::store::Store::hold));
//! - what goes is merged ([`merge`]), then spaced ([`spacing`]): a send
//!   too soon after the user's last is released to fire when the interval
//!   is over;
//! - the rest go to the link as a [`Round`] of batches, each handed to the
//!   confirmer ([`Sent`]) without waiting for the link to take it.

use std::time::Instant;

use super::Firer;
use super::confirm::{Sender, Sent};
use super::merge::{ToSend, merge};
use super::round::Round;
use super::spacing::{Spacing, spacing};
use crate::link::Taken;
use crate::schedule::entry::{Entry, Millis};
use crate::schedule::presence::Asked;
use crate::schedule::scheduler::Scheduler;
use crate::schedule::timing::now_ms;

impl Firer {
    /// Deliver, hold or postpone a claimed batch (`from_hold`: released by
    /// its user coming online).
    pub(super) async fn fire(
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
        let (send, hold) = self.by_presence(entries, from_hold).await;
        self.hold(hold, now).await;
        let merged = merge(send, |topic| self.topics.merges(topic));
        self.metrics.merged.inc_by(merged.folded);
        let send = self.space(merged.sends, now, scheduler).await;
        if send.is_empty() {
            return;
        }
        self.send_round(send, from_hold, confirm).await;
    }

    /// The entries to send, and those to hold with their hold limit
    /// (`when-online`, user offline). Entries released by an online event
    /// are asked about again: the event may come from a backend
    /// (`POST /v1/users/{uid}/online`) while the user has no session and no
    /// mailbox anywhere, and a notification handed to nobody would be lost.
    /// Held again, they keep the limit of their first hold (counted from
    /// their due time), so repeated online events do not hold them forever.
    async fn by_presence(
        &self,
        entries: Vec<Entry>,
        from_hold: bool,
    ) -> (Vec<Entry>, Vec<(String, Millis)>) {
        let asked: Vec<Asked> = entries
            .iter()
            .filter_map(|e| {
                e.online_user().map(|u| Asked {
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
            if e.online_user().is_some() && !online.next().unwrap_or(false) {
                let expires = if from_hold {
                    self.metrics.rehold.inc();
                    e.due_ms.saturating_add(self.config.hold_max_ms).max(now)
                } else {
                    now.saturating_add(self.config.hold_max_ms)
                };
                hold.push((e.id().to_owned(), expires));
                continue;
            }
            send.push(e);
        }
        (send, hold)
    }

    /// Hold entries until their user comes online or their limit passes.
    async fn hold(&self, holds: Vec<(String, Millis)>, now: Millis) {
        let mut by_limit: std::collections::BTreeMap<Millis, Vec<String>> = Default::default();
        for (id, expires) in holds {
            by_limit.entry(expires).or_default().push(id);
        }
        for (expires, ids) in by_limit {
            let n = ids.len() as u64;
            match self.store.hold(ids, expires, now).await {
                Ok(()) => {
                    self.metrics.held.inc_by(n);
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
    async fn send_round(&self, send: Vec<ToSend>, from_hold: bool, confirm: &Sender) {
        let mut round = Round::new(send, from_hold, self.link.batch_limit());
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
