//! The bench's side of the broker: publications made the way `docs/amqp.md` tells backends
//! to (independently of the router's own envelope code, so the bench tests the contract),
//! pipelined publishing with confirms, and the queues a run declares, watches and deletes.

use futures_util::future::join_all;
use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions, ExchangeDeleteOptions,
    QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldArray, FieldTable, LongString, ShortString};
use lapin::{
    BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, ExchangeKind,
    PublisherConfirm,
};

use crate::harness::configs::Topology;

/// The broker the bench uses unless told otherwise.
pub(crate) const DEFAULT_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
/// Environment variable for `--amqp-url`.
pub(crate) const AMQP_URL_ENV: &str = "HERALD_BENCH_AMQP_URL";
/// Delivery mode 2: persistent, as the contract asks.
const PERSISTENT: u8 = 2;
/// Delivery mode 1: transient (`router-throughput --transient`).
const TRANSIENT: u8 = 1;
/// How long a queue the bench declares outlives its last consumer if the bench dies before
/// deleting it (`x-expires`).
pub(crate) const QUEUE_EXPIRES_MS: i64 = 10 * 60 * 1000;

/// A connection named `name` (shown by `rabbitmqctl list_connections`).
pub(crate) async fn connect(url: &str, name: &str) -> lapin::Result<Connection> {
    let properties = ConnectionProperties::default().with_connection_name(name.into());
    Connection::connect(url, properties).await
}

/// A user-scoped publication for `user`, as `docs/amqp.md` describes it: `message_id`,
/// `content_type`, persistent (unless not `persistent`), `event` and `users` headers.
pub(crate) fn publication(
    message_id: &str,
    event: &str,
    user: &str,
    persistent: bool,
) -> BasicProperties {
    let mut headers = FieldTable::default();
    headers.insert(
        "event".into(),
        AMQPValue::LongString(LongString::from(event)),
    );
    headers.insert(
        "users".into(),
        AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::LongString(
            LongString::from(user),
        )])),
    );
    BasicProperties::default()
        .with_message_id(ShortString::from(message_id))
        .with_content_type("application/json".into())
        .with_delivery_mode(if persistent { PERSISTENT } else { TRANSIENT })
        .with_headers(headers)
}

/// A JSON body of exactly `bytes` bytes when `bytes` is large enough for `{"seq":N,"pad":""}`,
/// else that object alone.
pub(crate) fn payload(seq: u64, bytes: usize) -> Vec<u8> {
    let head = format!("{{\"seq\":{seq},\"pad\":\"");
    let tail = "\"}";
    let pad = bytes.saturating_sub(head.len() + tail.len());
    let mut body = Vec::with_capacity(head.len() + pad + tail.len());
    body.extend_from_slice(head.as_bytes());
    body.resize(head.len() + pad, b'x');
    body.extend_from_slice(tail.as_bytes());
    body
}

/// One message to publish.
pub(crate) struct Outgoing {
    pub(crate) routing_key: ShortString,
    pub(crate) properties: BasicProperties,
    pub(crate) body: Vec<u8>,
}

/// A channel in confirm mode publishing to one exchange. Clones share the channel.
#[derive(Clone)]
pub(crate) struct Publisher {
    channel: Channel,
    exchange: ShortString,
}

/// What the broker said about a batch of publishes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Confirmed {
    pub(crate) acked: u64,
    pub(crate) nacked: u64,
    /// Publishes whose confirm failed (channel or connection closed).
    pub(crate) failed: u64,
}

impl Confirmed {
    pub(crate) fn add(&mut self, other: Confirmed) {
        self.acked += other.acked;
        self.nacked += other.nacked;
        self.failed += other.failed;
    }
}

impl Publisher {
    /// A new channel on `connection`, in confirm mode.
    pub(crate) async fn open(connection: &Connection, exchange: &str) -> lapin::Result<Self> {
        let channel = connection.create_channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        Ok(Self {
            channel,
            exchange: exchange.into(),
        })
    }

    /// Publishes a batch without waiting between messages: every publish is handed to the
    /// connection in order, and this returns once all are written, with their confirms to
    /// await later ([`settle`]).
    pub(crate) async fn publish_batch(
        &self,
        batch: Vec<Outgoing>,
    ) -> lapin::Result<Vec<PublisherConfirm>> {
        let publishes = batch.iter().map(|m| {
            self.channel.basic_publish(
                self.exchange.clone(),
                m.routing_key.clone(),
                BasicPublishOptions::default(),
                &m.body,
                m.properties.clone(),
            )
        });
        join_all(publishes).await.into_iter().collect()
    }

    pub(crate) async fn close(&self) {
        let _ = self.channel.close(200, "bench done".into()).await;
    }
}

/// Waits for the confirms of a batch.
pub(crate) async fn settle(confirms: Vec<PublisherConfirm>) -> Confirmed {
    let mut c = Confirmed::default();
    for outcome in join_all(confirms).await {
        match outcome {
            Ok(Confirmation::Ack(_) | Confirmation::NotRequested) => c.acked += 1,
            Ok(Confirmation::Nack(_)) => c.nacked += 1,
            Err(_) => c.failed += 1,
        }
    }
    c
}

/// Declares a queue with `x-expires` (so a bench that dies leaves it for 10 minutes at most),
/// durable as an edge's is unless not `durable`, and binds it to the fanout `exchange`.
pub(crate) async fn declare_bound_queue(
    channel: &Channel,
    queue: &str,
    exchange: &str,
    durable: bool,
) -> lapin::Result<()> {
    let mut args = FieldTable::default();
    args.insert("x-expires".into(), AMQPValue::LongLongInt(QUEUE_EXPIRES_MS));
    channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                durable,
                ..QueueDeclareOptions::default()
            },
            args,
        )
        .await?;
    channel
        .queue_bind(
            queue.into(),
            exchange.into(),
            "".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
}

/// Declares the router's topology exactly as the router does (same kinds, durable, no
/// arguments), so the router's own declarations later agree with it.
pub(crate) async fn declare_topology(channel: &Channel, t: &Topology) -> lapin::Result<()> {
    let exchange = ExchangeDeclareOptions {
        durable: true,
        ..ExchangeDeclareOptions::default()
    };
    let queue = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    let none = FieldTable::default;
    let bind = QueueBindOptions::default();
    channel
        .exchange_declare(
            t.exchange.as_str().into(),
            ExchangeKind::Topic,
            exchange,
            none(),
        )
        .await?;
    channel
        .queue_declare(t.queue.as_str().into(), queue, none())
        .await?;
    channel
        .queue_bind(
            t.queue.as_str().into(),
            t.exchange.as_str().into(),
            "#".into(),
            bind,
            none(),
        )
        .await?;
    channel
        .exchange_declare(
            t.dead_exchange.as_str().into(),
            ExchangeKind::Fanout,
            exchange,
            none(),
        )
        .await?;
    channel
        .queue_declare(t.dead_queue.as_str().into(), queue, none())
        .await?;
    channel
        .queue_bind(
            t.dead_queue.as_str().into(),
            t.dead_exchange.as_str().into(),
            "".into(),
            bind,
            none(),
        )
        .await?;
    channel
        .exchange_declare(
            t.edges_exchange.as_str().into(),
            ExchangeKind::Fanout,
            exchange,
            none(),
        )
        .await
}

/// Messages ready in `queue` and its consumers, or `None` if it does not exist. A passive
/// declare of a missing queue closes its channel, so each look uses a channel of its own.
pub(crate) async fn queue_state(
    connection: &Connection,
    queue: &str,
) -> lapin::Result<Option<(u32, u32)>> {
    let channel = connection.create_channel().await?;
    let declared = channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await;
    match declared {
        Ok(q) => {
            let _ = channel.close(200, "OK".into()).await;
            Ok(Some((q.message_count(), q.consumer_count())))
        }
        // 404 NOT_FOUND: the broker closed the channel.
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

fn is_not_found(e: &lapin::Error) -> bool {
    let text = e.to_string();
    text.contains("NOT_FOUND") || text.contains("404")
}

/// Deletes a run's queues and exchanges (the router's topology and whatever queues the run
/// added). Returns what could not be deleted, for the report; deleting a name that is already
/// gone is not a failure.
pub(crate) async fn delete_run(
    connection: &Connection,
    topology: &Topology,
    extra_queues: &[String],
) -> Vec<String> {
    let mut problems = Vec::new();
    let queues = [
        &topology.queue,
        &topology.dead_queue,
        &topology.presence_queue,
    ]
    .into_iter()
    .chain(extra_queues);
    for queue in queues {
        let outcome = match connection.create_channel().await {
            Ok(ch) => {
                let r = ch
                    .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
                    .await
                    .map(|_| ());
                let _ = ch.close(200, "OK".into()).await;
                r
            }
            Err(e) => Err(e),
        };
        if let Err(e) = outcome.or_else(|e| if is_not_found(&e) { Ok(()) } else { Err(e) }) {
            problems.push(format!("queue {queue}: {e}"));
        }
    }
    for exchange in [
        &topology.exchange,
        &topology.dead_exchange,
        &topology.edges_exchange,
        &topology.presence_exchange,
    ] {
        let outcome = match connection.create_channel().await {
            Ok(ch) => {
                let r = ch
                    .exchange_delete(exchange.as_str().into(), ExchangeDeleteOptions::default())
                    .await;
                let _ = ch.close(200, "OK".into()).await;
                r
            }
            Err(e) => Err(e),
        };
        if let Err(e) = outcome.or_else(|e| if is_not_found(&e) { Ok(()) } else { Err(e) }) {
            problems.push(format!("exchange {exchange}: {e}"));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_have_the_asked_size() {
        for bytes in [0, 10, 30, 200, 4096] {
            let p = payload(123_456, bytes);
            let v: serde_json::Value = serde_json::from_slice(&p).unwrap();
            assert_eq!(v["seq"], 123_456);
            if bytes >= 30 {
                assert_eq!(p.len(), bytes);
            } else {
                assert_eq!(p, br#"{"seq":123456,"pad":""}"#);
            }
        }
    }

    #[test]
    fn publications_follow_the_contract() {
        let p = publication("tp-7", "bench.throughput", "bench-0-7", true);
        assert_eq!(p.message_id().as_ref().unwrap().as_str(), "tp-7");
        assert_eq!(
            p.content_type().as_ref().unwrap().as_str(),
            "application/json"
        );
        assert_eq!(*p.delivery_mode(), Some(2));
        let headers = p.headers().as_ref().unwrap().inner();
        assert_eq!(
            headers.get("event"),
            Some(&AMQPValue::LongString("bench.throughput".into()))
        );
        match headers.get("users") {
            Some(AMQPValue::FieldArray(users)) => {
                assert_eq!(
                    users.as_slice(),
                    [AMQPValue::LongString("bench-0-7".into())]
                );
            }
            other => panic!("users: {other:?}"),
        }
        assert!(!headers.contains_key("scope"), "user is the default scope");
        let p = publication("tp-7", "bench.throughput", "bench-0-7", false);
        assert_eq!(*p.delivery_mode(), Some(1));
    }

    /// The router's own parser takes the bench's publications as the valid notifications they
    /// are meant to be.
    #[test]
    fn the_router_accepts_the_publications() {
        use herald_amqp::envelope::from_amqp;
        let properties = publication("lat-3-99", "bench.latency", "bench-0-3", true);
        let body = payload(3, 200);
        let limits = herald_protocol::envelope::Limits::default();
        let n = from_amqp(&properties, &body, &limits, || "generated".into()).unwrap();
        assert_eq!(n.id, "lat-3-99");
        assert_eq!(n.event, "bench.latency");
        assert_eq!(n.users, ["bench-0-3"]);
        assert_eq!(n.content_type, "application/json");
        assert_eq!(&n.payload[..], &body[..]);
    }
}
