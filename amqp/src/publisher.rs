//! A channel in confirm mode, publishing to the edges (and to the
//! dead-letter exchange). Shared by the ingest loop and the HTTP link.
//!
//! In fanout mode a forward is one message to `herald.edges`. With a
//! [`Routing`] (targeted mode) it is one message per edge key the routing
//! view chooses, to `herald.edges.targeted` ([`crate::routing`]); a
//! forward is confirmed once every one of its messages is.

use bytes::Bytes;
use herald_protocol::envelope::Notification;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::ShortString;
use lapin::{BasicProperties, Channel, Confirmation, Connection, PublisherConfirm};

use std::sync::Arc;

use herald_engine::schedule::timing::now_ms;

use super::envelope::{bundle_to_amqp, short, to_amqp};
use super::metrics::AmqpMetrics;
use super::routing::Routing;

/// What the broker did with a confirmed message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forwarded {
    /// Routed to at least one queue.
    Routed,
    /// Taken, but no queue was bound to the exchange (no edge is
    /// listening): counted in `herald_amqp_unroutable_total`.
    Unroutable,
}

/// The broker did not take a message.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ForwardError {
    /// `basic.nack`: the broker refused it (internal error, or a queue's
    /// `reject-publish` overflow policy).
    #[error("the broker refused the message (basic.nack)")]
    Nacked,
    /// The channel or connection failed before the confirm.
    #[error(transparent)]
    Amqp(#[from] lapin::Error),
    /// The delayed store did not take a delayed publication.
    #[error("the delayed store failed: {0}")]
    Store(String),
}

/// A confirm-mode channel and the exchange notifications go to. Clones
/// share the channel.
#[derive(Debug, Clone)]
pub struct Publisher {
    channel: Channel,
    edges: ShortString,
    /// Targeted mode: the direct exchange and the routing view.
    targeted: Option<(ShortString, Arc<Routing>)>,
    metrics: AmqpMetrics,
}

/// The messages of one forward on their way: wait for them with
/// [`Publisher::confirmed`]. None when the routing view sent the
/// notifications to no edge.
#[derive(Debug, Default)]
#[must_use = "a forward is taken once its confirms are in"]
pub struct Sent(Vec<PublisherConfirm>);

impl Publisher {
    /// Open a channel on `connection` and put it in confirm mode.
    pub async fn open(
        connection: &Connection,
        edges_exchange: &str,
        metrics: AmqpMetrics,
    ) -> lapin::Result<Self> {
        let channel = connection.create_channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        Ok(Publisher {
            channel,
            edges: short(edges_exchange),
            targeted: None,
            metrics,
        })
    }

    /// Route by edge from now on: publish to the direct exchange
    /// `exchange`, with the keys `routing` chooses.
    pub fn with_routing(mut self, exchange: &str, routing: Arc<Routing>) -> Self {
        self.targeted = Some((short(exchange), routing));
        self
    }

    /// The channel (to declare the topology on, or close).
    pub fn channel(&self) -> &Channel {
        &self.channel
    }

    /// Whether the channel is still open.
    pub fn is_open(&self) -> bool {
        self.channel.status().connected()
    }

    /// Publish `n` to the edges (fanout: routing key its event). Resolves
    /// once the messages are handed to the connection; await their
    /// confirms with [`Publisher::confirmed`].
    pub async fn send(&self, n: &Arc<Notification>) -> lapin::Result<Sent> {
        self.send_bundle(std::slice::from_ref(n)).await
    }

    /// Publish `batch` to the edges: fanout, as one bundle (routing key:
    /// the first notification's event; one notification goes plain);
    /// targeted, as one message per edge key the routing view chooses.
    /// Resolves like [`Publisher::send`].
    pub async fn send_bundle(&self, batch: &[Arc<Notification>]) -> lapin::Result<Sent> {
        let Some((exchange, routing)) = &self.targeted else {
            let key = batch.first().map_or("", |n| n.event.as_str());
            let confirm = self.publish(self.edges.clone(), short(key), batch).await?;
            return Ok(Sent(vec![confirm]));
        };
        let plan = routing.plan(batch, now_ms());
        let parts: Vec<Vec<Arc<Notification>>> = plan
            .iter()
            .map(|m| m.items.iter().map(|&i| Arc::clone(&batch[i])).collect())
            .collect();
        for m in &plan {
            if m.key.is_empty() {
                routing.metrics().every_publications.inc();
            } else {
                routing.metrics().edge_publications.inc();
            }
        }
        // Every message of the plan is handed to the channel now, in plan
        // order, before this future first yields: a forward planned after
        // this one (another delivery's, polled while this one waits) cannot
        // put a message between two of these and overtake a notification
        // of this batch on an edge's queue.
        let publishes = plan
            .iter()
            .zip(&parts)
            .map(|(m, part)| self.publish(exchange.clone(), short(&m.key), part));
        Ok(Sent(in_order(publishes).await?))
    }

    /// Publish a control message ([`crate::control`]) to every edge: the
    /// edges exchange (fanout), or the targeted exchange's every-edge key.
    /// Resolves like [`Publisher::send`].
    pub async fn send_control(
        &self,
        properties: BasicProperties,
        body: &Bytes,
    ) -> lapin::Result<Sent> {
        let (exchange, key) = match &self.targeted {
            None => (self.edges.clone(), short("")),
            Some((exchange, _)) => (exchange.clone(), short(crate::topology::EVERY_EDGE)),
        };
        let confirm = self.send_raw(exchange, key, properties, body).await?;
        Ok(Sent(vec![confirm]))
    }

    /// Publish `batch` to one edge's key on the targeted exchange, as is
    /// (the catch-up of an edge a recipient arrived on).
    pub async fn send_to_edge(
        &self,
        edge: &str,
        batch: &[Arc<Notification>],
    ) -> lapin::Result<Sent> {
        let Some((exchange, routing)) = &self.targeted else {
            return Ok(Sent::default());
        };
        routing.metrics().edge_publications.inc();
        let confirm = self.publish(exchange.clone(), short(edge), batch).await?;
        Ok(Sent(vec![confirm]))
    }

    /// One message: `batch` as a bundle, or one notification plain.
    async fn publish(
        &self,
        exchange: ShortString,
        key: ShortString,
        batch: &[Arc<Notification>],
    ) -> lapin::Result<PublisherConfirm> {
        let (properties, body) = match batch {
            [one] => to_amqp(one),
            several => {
                self.metrics.bundles.inc();
                self.metrics.bundled.inc_by(several.len() as u64);
                bundle_to_amqp(several)
            }
        };
        self.send_raw(exchange, key, properties, &body).await
    }

    /// Publish a message as is (`mandatory`, so an unroutable message is
    /// reported).
    pub async fn send_raw(
        &self,
        exchange: ShortString,
        routing_key: ShortString,
        properties: BasicProperties,
        body: &Bytes,
    ) -> lapin::Result<PublisherConfirm> {
        let options = BasicPublishOptions {
            mandatory: true,
            ..BasicPublishOptions::default()
        };
        self.channel
            .basic_publish(exchange, routing_key, options, body, properties)
            .await
    }

    /// Wait for the broker's confirms of a forward's messages: routed when
    /// at least one was (or there were none), refused when one was.
    pub async fn confirmed(&self, sent: Sent) -> Result<Forwarded, ForwardError> {
        let mut out = if sent.0.is_empty() {
            Forwarded::Routed
        } else {
            Forwarded::Unroutable
        };
        for confirm in sent.0 {
            if self.confirmed_one(confirm).await? == Forwarded::Routed {
                out = Forwarded::Routed;
            }
        }
        Ok(out)
    }

    /// Wait for the broker's confirm of one publish.
    pub async fn confirmed_one(
        &self,
        confirm: PublisherConfirm,
    ) -> Result<Forwarded, ForwardError> {
        match confirm.await? {
            Confirmation::Ack(None) | Confirmation::NotRequested => Ok(Forwarded::Routed),
            Confirmation::Ack(Some(_returned)) => {
                self.metrics.unroutable.inc();
                Ok(Forwarded::Unroutable)
            }
            Confirmation::Nack(_) => {
                self.metrics.nacked.inc();
                Err(ForwardError::Nacked)
            }
        }
    }
}

/// Await `futures` together, polling them in the order given, every one
/// on each poll of the whole until it is done: each one's first poll comes
/// in the first poll of the whole, in order. A publish hands its frames to
/// the channel on its first poll (then waits for them to be written), so
/// the messages go out in this order with nothing of another task's
/// between them. The first error ends the wait (the rest are dropped).
pub(crate) async fn in_order<F, T, E>(futures: impl IntoIterator<Item = F>) -> Result<Vec<T>, E>
where
    F: std::future::Future<Output = Result<T, E>>,
{
    let mut futures: Vec<std::pin::Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut done: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(move |cx| {
        let mut pending = false;
        for (future, slot) in futures.iter_mut().zip(done.iter_mut()) {
            if slot.is_some() {
                continue;
            }
            match future.as_mut().poll(cx) {
                std::task::Poll::Ready(Ok(v)) => *slot = Some(v),
                std::task::Poll::Ready(Err(e)) => return std::task::Poll::Ready(Err(e)),
                std::task::Poll::Pending => pending = true,
            }
        }
        if pending {
            return std::task::Poll::Pending;
        }
        std::task::Poll::Ready(Ok(done.iter_mut().filter_map(Option::take).collect()))
    })
    .await
}
