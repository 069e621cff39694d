//! A channel in confirm mode, publishing to the edges (and to the
//! dead-letter exchange). Shared by the ingest loop and the HTTP link.

use bytes::Bytes;
use herald_protocol::envelope::Notification;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::ShortString;
use lapin::{BasicProperties, Channel, Confirmation, Connection, PublisherConfirm};

use std::sync::Arc;

use super::envelope::{bundle_to_amqp, short, to_amqp};
use super::metrics::AmqpMetrics;

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
    metrics: AmqpMetrics,
}

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
            metrics,
        })
    }

    /// The channel (to declare the topology on, or close).
    pub fn channel(&self) -> &Channel {
        &self.channel
    }

    /// Whether the channel is still open.
    pub fn is_open(&self) -> bool {
        self.channel.status().connected()
    }

    /// Publish `n` to the edges exchange (routing key: its event). Resolves
    /// once the message is handed to the connection; await the returned
    /// confirm with [`Publisher::confirmed`].
    pub async fn send(&self, n: &Notification) -> lapin::Result<PublisherConfirm> {
        let (properties, body) = to_amqp(n);
        self.send_raw(self.edges.clone(), short(&n.event), properties, &body)
            .await
    }

    /// Publish `batch` as one bundle to the edges exchange (routing key:
    /// the first notification's event). Resolves like [`Publisher::send`].
    pub async fn send_bundle(
        &self,
        batch: &[Arc<Notification>],
    ) -> lapin::Result<PublisherConfirm> {
        let (properties, body) = bundle_to_amqp(batch);
        self.metrics.bundles.inc();
        self.metrics.bundled.inc_by(batch.len() as u64);
        let key = batch.first().map_or("", |n| n.event.as_str());
        self.send_raw(self.edges.clone(), short(key), properties, &body)
            .await
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

    /// Wait for the broker's confirm of one publish.
    pub async fn confirmed(&self, confirm: PublisherConfirm) -> Result<Forwarded, ForwardError> {
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
