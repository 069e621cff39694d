//! The two AMQP clients a root link can run on, behind one interface: the
//! link's loop ([`super::Uplink::serve`]) is written once.
//!
//! - [`Wire`] (`edge.uplink_client = "herald"`, the default, for `amqp://`
//!   roots): herald-amqp's own consumer, whose socket is read by the link's
//!   task itself.
//! - [`LapinLink`] (`"lapin"`, and every `amqps://` root): lapin, which runs
//!   the socket on a thread of its own.

use std::future::Future;

use futures_util::{FutureExt, StreamExt};
use herald_amqp::envelope::body_bytes;
use herald_amqp::wire::{Assembled, Delivery, Wire, WireError};
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ExchangeKind};

use super::{LinkError, Topology};

/// What a root link needs of its client once it consumes.
pub(super) trait RootClient: Send {
    /// Its name in logs (`edge.uplink_client`'s value).
    const NAME: &'static str;
    /// The next delivery, waiting for it. Cancel-safe. (A body above
    /// [`Wire`]'s bound comes as [`Assembled::TooLarge`]; lapin has none.)
    fn next(&mut self) -> impl Future<Output = Result<Assembled, LinkError>> + Send;
    /// A delivery that is here already, without waiting.
    fn ready(&mut self) -> Result<Option<Assembled>, LinkError>;
    /// Publish `body` to `exchange` (routing key `""`), unconfirmed.
    fn publish(
        &mut self,
        exchange: &str,
        properties: BasicProperties,
        body: &[u8],
    ) -> impl Future<Output = Result<(), LinkError>> + Send;
    /// Acknowledge `tag` and every delivery before it.
    fn ack(&mut self, tag: u64) -> impl Future<Output = Result<(), LinkError>> + Send;
}

/// Declare `topology` and consume its queue on `wire`; whether the queue
/// was there before (see [`super::Uplink::relinked`]).
pub(super) async fn consume_on_wire(
    wire: &mut Wire,
    topology: &Topology,
) -> Result<bool, WireError> {
    let existed = wire.queue_exists(&topology.queue).await?;
    for (name, kind) in &topology.exchanges {
        wire.declare_exchange(name, kind_name(kind)).await?;
    }
    wire.declare_queue(&topology.queue, topology.queue_args.clone())
        .await?;
    for (exchange, key) in &topology.bindings {
        wire.bind(&topology.queue, exchange, key).await?;
    }
    wire.consume(&topology.queue, &topology.consumer_tag, topology.prefetch)
        .await?;
    Ok(existed)
}

fn kind_name(kind: &ExchangeKind) -> &str {
    match kind {
        ExchangeKind::Direct => "direct",
        ExchangeKind::Fanout => "fanout",
        ExchangeKind::Headers => "headers",
        ExchangeKind::Topic => "topic",
        ExchangeKind::Custom(name) => name,
    }
}

impl RootClient for Wire {
    const NAME: &'static str = "herald";
    async fn next(&mut self) -> Result<Assembled, LinkError> {
        Ok(Wire::next(self).await?)
    }

    fn ready(&mut self) -> Result<Option<Assembled>, LinkError> {
        Ok(self.try_next()?)
    }

    async fn publish(
        &mut self,
        exchange: &str,
        properties: BasicProperties,
        body: &[u8],
    ) -> Result<(), LinkError> {
        Ok(Wire::publish(self, exchange, "", &properties, body).await?)
    }

    async fn ack(&mut self, tag: u64) -> Result<(), LinkError> {
        Ok(Wire::ack(self, tag, true).await?)
    }
}

/// A root link on lapin: its channel and consumer.
pub(super) struct LapinLink {
    channel: Channel,
    consumer: lapin::Consumer,
}

impl LapinLink {
    /// Declare `topology` on a channel of `conn` and consume its queue;
    /// whether the queue was there before (see [`super::Uplink::relinked`]).
    pub(super) async fn open(
        conn: &Connection,
        topology: &Topology,
    ) -> Result<(Self, bool), lapin::Error> {
        // This client does not tell whether the queue was there: a passive
        // declare of a missing queue left the lapin link unable to go on
        // (the edge never linked; gateway/tests/edge.rs), so it counts as
        // there. The edges' own `wire` client, the default, tells
        // (docs/partitions.md).
        let existed = true;
        let channel = conn.create_channel().await?;
        for (name, kind) in &topology.exchanges {
            herald_amqp::topology::durable_exchange(&channel, name, kind.clone()).await?;
        }
        for (exchange, key) in &topology.bindings {
            herald_amqp::topology::durable_queue_bound(
                &channel,
                &topology.queue,
                topology.queue_args.clone(),
                exchange,
                key,
            )
            .await?;
        }
        channel
            .basic_qos(topology.prefetch, BasicQosOptions::default())
            .await?;
        let consumer = channel
            .basic_consume(
                topology.queue.as_str().into(),
                topology.consumer_tag.as_str().into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        Ok((LapinLink { channel, consumer }, existed))
    }
}

fn from_lapin(
    next: Option<lapin::Result<lapin::message::Delivery>>,
) -> Result<Assembled, LinkError> {
    match next {
        Some(Ok(mut d)) => Ok(Assembled::Delivery(Box::new(Delivery {
            delivery_tag: d.delivery_tag,
            redelivered: d.redelivered,
            // The body becomes the notification's shared payload, uncopied
            // and without the slack lapin's assembly may have left.
            body: body_bytes(std::mem::take(&mut d.data)),
            properties: d.properties,
        }))),
        Some(Err(e)) => Err(e.into()),
        None => Err(LinkError::ConsumerEnded),
    }
}

impl RootClient for LapinLink {
    const NAME: &'static str = "lapin";
    async fn next(&mut self) -> Result<Assembled, LinkError> {
        from_lapin(self.consumer.next().await)
    }

    fn ready(&mut self) -> Result<Option<Assembled>, LinkError> {
        match self.consumer.next().now_or_never() {
            Some(next) => from_lapin(next).map(Some),
            None => Ok(None),
        }
    }

    async fn publish(
        &mut self,
        exchange: &str,
        properties: BasicProperties,
        body: &[u8],
    ) -> Result<(), LinkError> {
        self.channel
            .basic_publish(
                exchange.into(),
                "".into(),
                BasicPublishOptions::default(),
                body,
                properties,
            )
            .await?;
        Ok(())
    }

    async fn ack(&mut self, tag: u64) -> Result<(), LinkError> {
        self.channel
            .basic_ack(tag, BasicAckOptions { multiple: true })
            .await?;
        Ok(())
    }
}
