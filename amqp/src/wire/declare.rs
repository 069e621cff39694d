//! The declarations and the consumer of a [`Wire`]: each one a
//! synchronous method on its channel and the answer it must get.

use amq_protocol::protocol::AMQPClass;
use amq_protocol::protocol::basic::{self, AMQPMethod as Basic};
use amq_protocol::protocol::channel;
use amq_protocol::protocol::exchange::{self, AMQPMethod as Exchange};
use amq_protocol::protocol::queue::{self, AMQPMethod as Queue};
use amq_protocol::types::{FieldTable, ShortString};

use super::conn::{Wire, WireError};

impl Wire {
    /// Declare a durable exchange of `kind` (`fanout`, `direct`, …).
    pub async fn declare_exchange(&mut self, name: &str, kind: &str) -> Result<(), WireError> {
        let declare = exchange::Declare {
            exchange: ShortString::from(name),
            kind: ShortString::from(kind),
            passive: false,
            durable: true,
            auto_delete: false,
            internal: false,
            nowait: false,
            arguments: FieldTable::default(),
        };
        self.call(AMQPClass::Exchange(Exchange::Declare(declare)), |r| {
            matches!(r, AMQPClass::Exchange(Exchange::DeclareOk(_)))
        })
        .await
    }

    /// Declare a durable queue with `arguments`.
    pub async fn declare_queue(
        &mut self,
        name: &str,
        arguments: FieldTable,
    ) -> Result<(), WireError> {
        let declare = queue::Declare {
            queue: ShortString::from(name),
            passive: false,
            durable: true,
            exclusive: false,
            auto_delete: false,
            nowait: false,
            arguments,
        };
        self.call(AMQPClass::Queue(Queue::Declare(declare)), |r| {
            matches!(r, AMQPClass::Queue(Queue::DeclareOk(_)))
        })
        .await
    }

    /// Whether `queue` exists (a passive declare). The broker answers a
    /// missing queue by closing the channel (404): it is opened again, so
    /// the connection goes on either way.
    pub async fn queue_exists(&mut self, name: &str) -> Result<bool, WireError> {
        let declare = queue::Declare {
            queue: ShortString::from(name),
            passive: true,
            durable: false,
            exclusive: false,
            auto_delete: false,
            nowait: false,
            arguments: FieldTable::default(),
        };
        let asked = self
            .call(AMQPClass::Queue(Queue::Declare(declare)), |r| {
                matches!(r, AMQPClass::Queue(Queue::DeclareOk(_)))
            })
            .await;
        match asked {
            Ok(()) => Ok(true),
            Err(WireError::ChannelClosed { code: 404, .. }) => {
                self.call(
                    AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {})),
                    |r| matches!(r, AMQPClass::Channel(channel::AMQPMethod::OpenOk(_))),
                )
                .await?;
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Bind `queue` to `exchange` with `routing_key`.
    pub async fn bind(
        &mut self,
        queue: &str,
        exchange: &str,
        routing_key: &str,
    ) -> Result<(), WireError> {
        let bind = queue::Bind {
            queue: ShortString::from(queue),
            exchange: ShortString::from(exchange),
            routing_key: ShortString::from(routing_key),
            nowait: false,
            arguments: FieldTable::default(),
        };
        self.call(AMQPClass::Queue(Queue::Bind(bind)), |r| {
            matches!(r, AMQPClass::Queue(Queue::BindOk(_)))
        })
        .await
    }

    /// Start consuming `queue` with at most `prefetch` deliveries
    /// unacknowledged.
    pub async fn consume(
        &mut self,
        queue: &str,
        consumer_tag: &str,
        prefetch: u16,
    ) -> Result<(), WireError> {
        let qos = basic::Qos {
            prefetch_count: prefetch,
            global: false,
        };
        self.call(AMQPClass::Basic(Basic::Qos(qos)), |r| {
            matches!(r, AMQPClass::Basic(Basic::QosOk(_)))
        })
        .await?;
        let consume = basic::Consume {
            queue: ShortString::from(queue),
            consumer_tag: ShortString::from(consumer_tag),
            no_local: false,
            no_ack: false,
            exclusive: false,
            nowait: false,
            arguments: FieldTable::default(),
        };
        self.call(AMQPClass::Basic(Basic::Consume(consume)), |r| {
            matches!(r, AMQPClass::Basic(Basic::ConsumeOk(_)))
        })
        .await
    }
}
