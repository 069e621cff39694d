//! The plan for one delivery: what to do with it ([`Plan`]: forward to
//! the edges, store, cancel or dead-letter), and the forward that carries
//! it out, up to the broker's confirm (or the store's answer).

use std::time::SystemTime;

use bytes::Bytes;
use herald_protocol::envelope::{Accepted, Notification};
use lapin::message::Delivery;
use lapin::types::{DeliveryTag, ShortString};

use super::{Confirmed, Forward, Ingest, Sent};
use herald_amqp::envelope::{
    DELAYED_DISABLED, Rejection, body_bytes, cancel_from_amqp, dead_letter_properties,
    delay_from_amqp, headers, publication_from_amqp_bytes, short, target_header,
};
use herald_amqp::publisher::{ForwardError, Forwarded, Publisher};
use herald_engine::callback::target;
use herald_engine::metrics::RejectReason;
use herald_engine::publish::IdLedger;
use herald_engine::schedule::entry::{Entry, Phase};
use herald_engine::schedule::service::Delayed;
use herald_engine::schedule::store::{Cancel, Claimed, Insert};
use herald_engine::schedule::timing::now_ms;

impl Ingest {
    /// Parse one delivery and build the forward that carries out its plan
    /// (it starts once pushed into the forwards in flight).
    pub(super) fn forward(&self, delivery: Delivery, publisher: &Publisher) -> Forward {
        let Delivery {
            delivery_tag,
            routing_key,
            redelivered,
            properties,
            data,
            ..
        } = delivery;
        let body = body_bytes(data);
        let plan = self.plan(&properties, body.clone());
        let ledger = self.inner.ledger.clone();
        // A redelivery's first delivery took its id: not claimed again.
        let plan = match plan {
            Plan::Edges(n) if !redelivered => claimed(&ledger, n),
            plan => plan,
        };
        match plan {
            Plan::Duplicate(id) => Box::pin(std::future::ready(Confirmed {
                delivery_tag,
                outcome: Ok(Forwarded::Routed),
                sent: Sent::Duplicate { id },
            })),
            Plan::Edges(n) => {
                let publisher = publisher.clone();
                Box::pin(async move {
                    let n = std::sync::Arc::new(n);
                    let outcome = match publisher.send(&n).await {
                        Ok(confirm) => publisher.confirmed(confirm).await,
                        Err(e) => Err(ForwardError::from(e)),
                    };
                    Confirmed {
                        delivery_tag,
                        outcome,
                        sent: Sent::Edges {
                            notification: n,
                            redelivered,
                        },
                    }
                })
            }
            Plan::Store(delayed, entry) => {
                let stored = self.inner.storing.start(entry.id());
                Box::pin(async move {
                    let _stored = stored;
                    let id = entry.id().to_owned();
                    let due_ms = entry.due_ms;
                    let topic = entry.notification.topic.clone();
                    let (outcome, duplicate) =
                        store_once(&ledger, &delayed, entry, redelivered).await;
                    Confirmed {
                        delivery_tag,
                        outcome,
                        sent: Sent::Stored {
                            id,
                            due_ms,
                            duplicate,
                            topic,
                        },
                    }
                })
            }
            Plan::Cancel(delayed, id) => {
                let exchange = short(&self.inner.config.topology.dead_exchange);
                let publisher = publisher.clone();
                let stored = self.inner.storing.finished(&id);
                Box::pin(async move {
                    stored.await;
                    let too_late = match delayed.cancel(&id).await {
                        Ok(Cancel::Cancelled(_)) => false,
                        Ok(Cancel::TooLate(_)) => true,
                        Ok(Cancel::NotFound) => {
                            let rejection = Rejection::invalid(
                                headers::MESSAGE_ID_PROPERTY,
                                format!("no delayed notification {id:?} to cancel"),
                            );
                            return dead_letter(
                                publisher,
                                exchange,
                                delivery_tag,
                                routing_key,
                                properties,
                                rejection,
                                body,
                            )
                            .await;
                        }
                        Err(e) => {
                            return Confirmed {
                                delivery_tag,
                                outcome: Err(ForwardError::Store(e.to_string())),
                                sent: Sent::Cancelled {
                                    id,
                                    too_late: false,
                                },
                            };
                        }
                    };
                    Confirmed {
                        delivery_tag,
                        outcome: Ok(Forwarded::Routed),
                        sent: Sent::Cancelled { id, too_late },
                    }
                })
            }
            Plan::Dead(rejection) => {
                let exchange = short(&self.inner.config.topology.dead_exchange);
                Box::pin(dead_letter(
                    publisher.clone(),
                    exchange,
                    delivery_tag,
                    routing_key,
                    properties,
                    rejection,
                    body,
                ))
            }
        }
    }

    /// What to do with a delivery: forward, store, cancel or dead-letter.
    fn plan(&self, properties: &lapin::BasicProperties, body: Bytes) -> Plan {
        let delayed = self.inner.delayed.as_ref();
        if let Some(cancel) = cancel_from_amqp(properties) {
            return match (cancel, delayed) {
                (Err(rejection), _) => Plan::Dead(rejection),
                (Ok(_), None) => Plan::Dead(disabled(headers::TYPE_PROPERTY)),
                (Ok(id), Some(d)) => Plan::Cancel(d.clone(), id),
            };
        }
        let limits = &self.inner.config.limits;
        let topic_calls_back = |t: Option<&str>| delayed.is_some_and(|d| d.topics().calls_back(t));
        let parsed = publication_from_amqp_bytes(
            properties,
            body,
            limits,
            herald_engine::publish::new_id,
            topic_calls_back,
        );
        let (n, request) = match parsed {
            Ok((mut n, request)) => {
                // Delivery latency is measured from here (a delayed one:
                // from its firing, which stamps it again).
                n.accepted = Accepted::at(SystemTime::now());
                (n, request)
            }
            Err(rejection) => return Plan::Dead(rejection),
        };
        let timing = match delay_from_amqp(properties) {
            Ok(t) => t,
            Err(rejection) => return Plan::Dead(rejection),
        };
        let (topic_calls_back, allowed) = match delayed {
            Some(d) => (
                d.topics().calls_back(n.topic.as_deref()),
                d.topics().allowed(),
            ),
            None if request.callback_url.is_some() => {
                return Plan::Dead(disabled(headers::CALLBACK_URL));
            }
            None => (false, &[][..]),
        };
        let checked = match target::check(request, topic_calls_back, allowed) {
            Ok(c) => c,
            Err(e) => return Plan::Dead(Rejection::invalid(target_header(e.field), e.message)),
        };
        // A callback is made from the store (durable, retried): an
        // immediate publication that calls back is stored due now, as if
        // it had `delay-ms: 0`.
        if !timing.is_delayed() && !checked.calls_back {
            return Plan::Edges(n);
        }
        let Some(delayed) = delayed else {
            let field = if timing.delay_ms.is_some() {
                headers::DELAY_MS
            } else if timing.deliver_at.is_some() {
                headers::DELIVER_AT
            } else {
                headers::WHEN_ONLINE
            };
            return Plan::Dead(disabled(field));
        };
        let now = now_ms();
        match delayed.due_time(&timing, &n, now) {
            Ok(due_ms) => Plan::Store(
                delayed.clone(),
                Entry {
                    notification: n,
                    due_ms,
                    accepted_ms: now,
                    when_online: timing.when_online,
                    attempts: 0,
                    phase: Phase::Deliver,
                    fire_ms: 0,
                    calls: 0,
                    target: checked.target,
                },
            ),
            Err(e) => {
                let field = match e.field {
                    "delay_ms" => headers::DELAY_MS,
                    "deliver_at" => headers::DELIVER_AT,
                    "when_online" => headers::WHEN_ONLINE,
                    other => other,
                };
                Plan::Dead(Rejection::invalid(field, e.message))
            }
        }
    }
}

/// Claim an immediate publication's id: on to the edges when it was free
/// (it is taken now), else a duplicate.
fn claimed(ledger: &IdLedger, n: Notification) -> Plan {
    let now = now_ms();
    match ledger.claim_here(ledger.immediate(&n.id, now), now) {
        Claimed::New => Plan::Edges(n),
        Claimed::Taken { .. } => Plan::Duplicate(n.id),
    }
}

/// Store a delayed publication unless the ledger holds its id: whether it
/// was stored (else why not), and whether it was a duplicate. A
/// redelivery goes to the store whatever the ledger says (its first
/// delivery may have taken the id and died before storing it): the store
/// knows whether it holds it. Its claim is released when the store fails.
async fn store_once(
    ledger: &IdLedger,
    delayed: &Delayed,
    entry: Entry,
    redelivered: bool,
) -> (Result<Forwarded, ForwardError>, bool) {
    let now = now_ms();
    let id = entry.id().to_owned();
    let claim = ledger.delayed(&id, entry.due_ms, now);
    match ledger.claim(vec![claim], now).await {
        Ok(out) if !redelivered && out.first() != Some(&Claimed::New) => {
            return (Ok(Forwarded::Routed), true);
        }
        Ok(_) => {}
        Err(e) => {
            // The claim may still land once Redis is reached again: free it
            // behind it, so the redelivery is not refused.
            ledger.release(vec![id]).await;
            return (Err(ForwardError::Store(e.to_string())), false);
        }
    }
    match delayed.accept(vec![entry]).await {
        Ok(out) => (
            Ok(Forwarded::Routed),
            matches!(out.first(), Some(Insert::Duplicate(_))),
        ),
        Err(e) => {
            ledger.release(vec![id]).await;
            (Err(ForwardError::Store(e.to_string())), false)
        }
    }
}

/// What [`Ingest::plan`] decided for a delivery.
enum Plan {
    /// Forward to the edges now.
    Edges(Notification),
    /// An immediate publication whose id the ledger holds: ack it alone.
    Duplicate(String),
    /// Store for later.
    Store(Delayed, Entry),
    /// Cancel this id.
    Cancel(Delayed, String),
    /// Refuse, with the reason.
    Dead(Rejection),
}

/// The refusal of a timing header, a callback or a cancel by a router
/// without a delayed store.
fn disabled(field: &'static str) -> Rejection {
    Rejection {
        reason: format!("{field}: {DELAYED_DISABLED}"),
        field,
        kind: RejectReason::Unsupported,
    }
}

/// Publish a refused delivery to the dead-letter exchange and wait for the
/// confirm.
async fn dead_letter(
    publisher: Publisher,
    exchange: ShortString,
    delivery_tag: DeliveryTag,
    routing_key: ShortString,
    properties: lapin::BasicProperties,
    rejection: Rejection,
    body: Bytes,
) -> Confirmed {
    let dead = dead_letter_properties(&properties, &rejection, routing_key.as_str());
    let message_id = properties.message_id().clone();
    let outcome = match publisher
        .send_raw(exchange, routing_key.clone(), dead, &body)
        .await
    {
        Ok(confirm) => publisher.confirmed_one(confirm).await,
        Err(e) => Err(ForwardError::from(e)),
    };
    Confirmed {
        delivery_tag,
        outcome,
        sent: Sent::Dead {
            rejection,
            message_id,
            routing_key,
        },
    }
}
