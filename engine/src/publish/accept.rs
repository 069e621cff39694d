//! A publish request once its head passed and its body is read
//! ([`PublishApi::accept`]), in three steps, each refusing with the answer
//! the module's order of checks gives:
//!
//! 1. [`PublishApi::parse`]: the body as notifications (one, or a JSON
//!    batch; or a raw payload with the query string's fields), stamped
//!    accepted now.
//! 2. [`PublishApi::check`]: an unaddressed publication that calls back
//!    becomes a delay-queue job (`parse::Publication::as_job`); then every
//!    notification's fields and callback settings, the key's sites, its
//!    rate.
//! 3. [`PublishApi::dispatch`]: every id claimed in the idempotency ledger
//!    ([`super::ledger`]: a taken one is a duplicate and goes nowhere), then
//!    immediate ones to the link, the rest into the delayed store (refused
//!    there when a notification asks for a store this server has not, or
//!    for a due time it cannot have), then counted.

use std::sync::Arc;

use herald_protocol::envelope::Notification;
use herald_protocol::tenant::public_id;

use super::{
    Accepted, Admitted, ApiError, PublishApi, PublishHead, RequestBody, ScheduledInfo, is_json,
    new_id, parse, validate,
};
use crate::api_key::Caller;
use crate::callback::target;
use crate::metrics::KeyLabels;
use crate::schedule::entry::{Entry, Millis, Phase};
use crate::schedule::store::{Claimed, IdClaim, Insert};
use crate::schedule::timing::{now_ms, rfc3339};
use crate::stats::Event;

/// Publications that passed every check, each with its checked callback
/// settings (`targets[i]` is `publications[i]`'s).
struct CheckedBatch {
    publications: Vec<parse::Publication>,
    targets: Vec<target::Checked>,
    /// More than one: errors name fields `[i].field`.
    batch: bool,
}

/// The intake label of this API's duplicates.
const SOURCE: &str = "http";

/// A batch once its ids are claimed.
struct Claims {
    /// Immediate ones whose ids were free.
    immediate: Vec<Arc<Notification>>,
    /// Delayed ones whose ids were free, for the store.
    delayed: Vec<Entry>,
    /// One per delayed publication, in order: the answer of a duplicate,
    /// `None` for one the store answers.
    answers: Vec<Option<ScheduledInfo>>,
    /// The immediate ones' ids (as the caller gave them) that were taken
    /// (the delayed ones' are read from their answers).
    duplicates: Vec<String>,
}

/// The kept ids of `immediate`, then `delayed`: what a refused request
/// claimed.
fn claimed_ids(immediate: &[Arc<Notification>], mut delayed: Vec<String>) -> Vec<String> {
    let mut ids: Vec<String> = immediate.iter().map(|n| n.id.clone()).collect();
    ids.append(&mut delayed);
    ids
}

/// Where the publications of a batch go.
struct Sorted {
    /// Straight to the link.
    immediate: Vec<Arc<Notification>>,
    /// Into the delayed store.
    delayed: Vec<Entry>,
    /// How many call back (all of them among `delayed`).
    callbacks: usize,
}

impl PublishApi {
    /// The rest of a publish request, its body read: parse, check,
    /// schedule or hand to the link.
    pub(super) async fn accept(
        &self,
        admitted: Admitted,
        head: &PublishHead<'_>,
        body: RequestBody,
    ) -> Result<Accepted, ApiError> {
        let Admitted { caller } = admitted;
        let publications = self.parse(head, body)?;
        let checked = self.check(&caller, publications).await?;
        self.dispatch(&caller, checked).await
    }

    /// The body as notifications, by its content type: a JSON one or batch
    /// (no query string allowed), else one raw payload with the query
    /// string's fields; each stamped accepted now.
    fn parse(
        &self,
        head: &PublishHead<'_>,
        body: RequestBody,
    ) -> Result<Vec<parse::Publication>, ApiError> {
        let content_type = head.content_type.unwrap_or_default();
        let query = head.query;
        let mut publications = if is_json(content_type) {
            if query.is_some_and(|q| !q.is_empty()) {
                return Err(ApiError::invalid(
                    "query",
                    "a JSON body carries its fields in the body; the query string is for raw payloads",
                ));
            }
            parse::parse_json(body.as_slice(), self.inner.config.max_batch, &mut new_id)?
        } else {
            vec![parse::parse_raw(
                query,
                content_type,
                body.into_payload(),
                &mut new_id,
            )?]
        };
        // Delivery latency is measured from here (a delayed one: from its
        // firing, which stamps it again).
        let accepted = herald_protocol::envelope::Accepted::at(std::time::SystemTime::now());
        for p in publications.iter_mut() {
            p.notification.accepted = accepted;
        }
        Ok(publications)
    }

    /// The checks on parsed publications, in order: each one's fields and
    /// callback settings (against the topics in force), then the key's
    /// sites, then its rate (so a refused request costs no tokens).
    async fn check(
        &self,
        caller: &Caller,
        mut publications: Vec<parse::Publication>,
    ) -> Result<CheckedBatch, ApiError> {
        let batch = publications.len() > 1;
        if let Some(d) = self.delayed() {
            // A topic registered through another router a moment ago.
            d.know_topics(
                publications
                    .iter()
                    .filter_map(|p| p.notification.topic.as_deref()),
            )
            .await;
        }
        let mut targets = Vec::with_capacity(publications.len());
        for (i, p) in publications.iter_mut().enumerate() {
            // A topic and a body with a callback: a delay-queue job.
            let calls_back = p.target.callback_url.is_some()
                || self
                    .delayed()
                    .is_some_and(|d| d.topics().calls_back(p.notification.topic.as_deref()));
            p.as_job(calls_back);
            validate(
                &mut p.notification,
                &self.inner.config.limits,
                batch.then_some(i),
            )?;
            targets.push(self.check_target(p, batch.then_some(i))?);
        }
        self.check_sites(caller, &publications, batch)?;
        self.check_rate(caller, publications.len())?;
        Ok(CheckedBatch {
            publications,
            targets,
            batch,
        })
    }

    /// Send checked publications on: the delayed ones into the store, the
    /// immediate ones to the link; then count them per topic and per key.
    async fn dispatch(&self, caller: &Caller, checked: CheckedBatch) -> Result<Accepted, ApiError> {
        let CheckedBatch {
            mut publications,
            targets,
            batch,
        } = checked;
        let ids: Vec<String> = publications
            .iter()
            .map(|p| p.notification.id.clone())
            .collect();
        // From here on each id is kept in the key's tenant's namespace
        // (herald_protocol::tenant): its duplicate window, its store entry.
        if caller.tenant().is_some() {
            for p in &mut publications {
                p.notification.id = caller.scoped_id(&p.notification.id);
            }
        }
        // Counted per topic once accepted: those without one together.
        let untitled = publications
            .iter()
            .filter(|p| p.notification.topic.is_none())
            .count();
        let topics: Vec<String> = publications
            .iter()
            .filter_map(|p| p.notification.topic.clone())
            .collect();
        let now = now_ms();
        let sorted = self.sort(publications, targets, batch, now)?;
        let callbacks = sorted.callbacks;
        let Claims {
            immediate,
            delayed,
            mut answers,
            mut duplicates,
        } = self.claim(sorted, now).await?;
        // The ids to free if the store or the link refuses: read from
        // these only then (the link takes the notifications).
        let sent = immediate.clone();
        let delayed_ids: Vec<String> = delayed.iter().map(|e| e.id().to_owned()).collect();
        let scheduled = match self.store(delayed).await {
            Ok(scheduled) => scheduled,
            Err(e) => {
                self.inner
                    .ledger
                    .release(claimed_ids(&sent, delayed_ids))
                    .await;
                return Err(e);
            }
        };
        // The stored ones' answers fill the slots the ledger left, in the
        // request's order; every duplicate among them (the ledger's, and
        // the store's own: an id it holds past the ledger's hold) is listed.
        let mut stored = scheduled.into_iter();
        for slot in answers.iter_mut().filter(|a| a.is_none()) {
            *slot = stored.next();
        }
        let scheduled: Vec<ScheduledInfo> = answers.into_iter().flatten().collect();
        duplicates.extend(
            scheduled
                .iter()
                .filter(|s| s.duplicate)
                .map(|s| s.id.clone()),
        );
        self.inner
            .ledger
            .count_duplicates(SOURCE, duplicates.len() as u64);
        if !immediate.is_empty()
            && let Err(e) = self.inner.link.publish(immediate).await
        {
            self.inner
                .ledger
                .release(claimed_ids(&sent, Vec::new()))
                .await;
            return Err(ApiError::unavailable(e.to_string()));
        }
        let count = ids.len();
        let stats = &self.inner.metrics.topics;
        if untitled > 0 {
            stats.record(None, Event::Accepted, untitled as u64, now);
        }
        for topic in &topics {
            stats.record(Some(topic), Event::Accepted, 1, now);
        }
        self.inner
            .metrics
            .key_notifications
            .get_or_create(&KeyLabels {
                api_key: caller.name_arc(),
            })
            .inc_by(count as u64);
        // DEBUG, not INFO: a line per request would be thousands a second
        // at a busy gateway's rates, and cost the request a fifth of its
        // CPU (bench/reports/compare.md); the counts per key are
        // `herald_api_key_notifications_total`.
        tracing::debug!(
            api_key = caller.name(),
            notifications = count,
            delayed = scheduled.len(),
            callbacks,
            duplicates = duplicates.len(),
            "publication accepted"
        );
        Ok(Accepted {
            ids,
            scheduled,
            duplicates,
        })
    }

    /// Claim every id of `sorted` in the ledger ([`super::ledger`]): the
    /// publications whose ids were free go on; a taken one goes nowhere,
    /// its id listed as a duplicate (a delayed one's answer carries the
    /// holder's due time). 503 when a shared ledger cannot be reached.
    async fn claim(&self, sorted: Sorted, now: Millis) -> Result<Claims, ApiError> {
        let Sorted {
            immediate, delayed, ..
        } = sorted;
        let ledger = &self.inner.ledger;
        let claims: Vec<IdClaim> = immediate
            .iter()
            .map(|n| ledger.immediate(&n.id, now))
            .chain(
                delayed
                    .iter()
                    .map(|e| ledger.delayed(e.id(), e.due_ms, now)),
            )
            .collect();
        let outcomes = match ledger.claim(claims, now).await {
            Ok(outcomes) => outcomes,
            Err(e) => {
                // The claims may still land (a partition heals and the
                // connection delivers them): free them behind, in order on
                // the same connection, so that the retry is not refused.
                let delayed_ids = delayed.iter().map(|e| e.id().to_owned()).collect();
                ledger.release(claimed_ids(&immediate, delayed_ids)).await;
                return Err(ApiError::unavailable(format!(
                    "the idempotency ledger cannot be reached: {e}"
                )));
            }
        };
        let (first, rest) = outcomes.split_at(immediate.len());
        let mut out = Claims {
            immediate: Vec::with_capacity(immediate.len()),
            delayed: Vec::with_capacity(delayed.len()),
            answers: Vec::with_capacity(delayed.len()),
            duplicates: Vec::new(),
        };
        for (n, outcome) in immediate.into_iter().zip(first) {
            match outcome {
                Claimed::New => out.immediate.push(n),
                Claimed::Taken { .. } => {
                    out.duplicates.push(public_id(&n.id).to_owned());
                }
            }
        }
        for (e, outcome) in delayed.into_iter().zip(rest) {
            match *outcome {
                Claimed::New => {
                    out.answers.push(None);
                    out.delayed.push(e);
                }
                Claimed::Taken { due_ms } => {
                    out.answers.push(Some(ScheduledInfo {
                        id: public_id(e.id()).to_owned(),
                        due_at: rfc3339(due_ms),
                        due_at_ms: due_ms,
                        duplicate: true,
                    }));
                }
            }
        }
        Ok(out)
    }

    /// Sort publications between the link (immediate, no callback) and the
    /// delayed store (delayed, or calling back: a callback is made from the
    /// store, durable and retried, so an immediate notification that calls
    /// back is stored due now, as if published with delay 0). 422 when one
    /// needs a store this server has not, or its due time is refused.
    fn sort(
        &self,
        publications: Vec<parse::Publication>,
        targets: Vec<target::Checked>,
        batch: bool,
        now: Millis,
    ) -> Result<Sorted, ApiError> {
        let mut immediate: Vec<Arc<Notification>> = Vec::new();
        let mut delayed: Vec<Entry> = Vec::new();
        let mut callbacks = 0usize;
        for (i, (p, checked)) in publications.into_iter().zip(targets).enumerate() {
            let at = |field: &str| match batch {
                true => format!("[{i}].{field}"),
                false => field.to_owned(),
            };
            if !p.delay.is_delayed() && !checked.calls_back {
                immediate.push(Arc::new(p.notification));
                continue;
            }
            callbacks += usize::from(checked.calls_back);
            let Some(service) = self.delayed() else {
                let field = if p.delay.delay_ms.is_some() {
                    "delay_ms"
                } else if p.delay.deliver_at.is_some() {
                    "deliver_at"
                } else {
                    "when_online"
                };
                return Err(ApiError::invalid(
                    at(field),
                    "delayed notifications are not enabled on this server (configure [redis] url, or --redis-url)",
                ));
            };
            let due_ms = service
                .due_time(&p.delay, &p.notification, now)
                .map_err(|e| ApiError::invalid(at(e.field), e.message))?;
            delayed.push(Entry {
                notification: p.notification,
                due_ms,
                accepted_ms: now,
                when_online: p.delay.when_online,
                attempts: 0,
                phase: Phase::Deliver,
                fire_ms: 0,
                calls: 0,
                target: checked.target,
            });
        }
        Ok(Sorted {
            immediate,
            delayed,
            callbacks,
        })
    }

    /// Hand `delayed` to the store (503 if it does not take them): each
    /// one's due time for the answer, the stored one for an id already
    /// there (an idempotent resubmit).
    async fn store(&self, delayed: Vec<Entry>) -> Result<Vec<ScheduledInfo>, ApiError> {
        let mut scheduled = Vec::with_capacity(delayed.len());
        if let Some(service) = self.delayed()
            && !delayed.is_empty()
        {
            // Answered by the id as the caller gave it.
            let asked: Vec<(String, u64)> = delayed
                .iter()
                .map(|e| (public_id(e.id()).to_owned(), e.due_ms))
                .collect();
            let outcome = service.accept(delayed).await.map_err(|e| {
                ApiError::unavailable(format!("the delayed store did not take the batch: {e}"))
            })?;
            for ((id, due), insert) in asked.into_iter().zip(outcome) {
                let (due, duplicate) = match insert {
                    Insert::Accepted => (due, false),
                    Insert::Duplicate(status) => (status.due_ms, true),
                };
                scheduled.push(ScheduledInfo {
                    id,
                    due_at: rfc3339(due),
                    due_at_ms: due,
                    duplicate,
                });
            }
        }
        Ok(scheduled)
    }
}
