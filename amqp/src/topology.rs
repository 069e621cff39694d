//! Exchange and queue names, and their declaration.
//!
//! ```text
//!  backends --> [herald] topic, durable
//!                  | binding "#"
//!                  v
//!             (herald.publications) durable --> router --valid--> [herald.edges] fanout, durable
//!                                                  |                   --> one queue per edge
//!                                                  |  or (routing.mode = "targeted")
//!                                                  +-------> [herald.edges.targeted] direct, durable
//!                                                  |           key <edge id>: that edge's queue
//!                                                  |           key "": every edge's queue
//!                                                  +--invalid--> [herald.dead] fanout, durable
//!                                                                      --> (herald.dead) durable
//! ```
//!
//! Declarations are idempotent and repeated on every (re)connect, so a broker
//! that lost its definitions gets them back. A name declared earlier with
//! other settings makes the broker close the channel (PRECONDITION_FAILED):
//! the supervisor logs it and retries with backoff.

use lapin::options::{
    ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions,
    QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{Channel, ExchangeKind};

/// The names the router declares and uses. Every one is configurable, so
/// tests (and several Herald installations on one broker) do not collide.
/// Each field is the router's key of its name under `[amqp.topology]`,
/// described once in its row of the router's table of keys
/// (`router/src/config/keys.rs`, docs/configuration.md).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Topology {
    /// Key `amqp.topology.exchange`.
    pub exchange: String,
    /// Key `amqp.topology.queue`.
    pub queue: String,
    /// Key `amqp.topology.dead_exchange`.
    pub dead_exchange: String,
    /// Key `amqp.topology.dead_queue`.
    pub dead_queue: String,
    /// Key `amqp.topology.edges_exchange`.
    pub edges_exchange: String,
    /// Key `amqp.topology.presence_exchange`.
    pub presence_exchange: String,
    /// Key `amqp.topology.presence_queue`.
    pub presence_queue: String,
}

impl Default for Topology {
    fn default() -> Self {
        Topology {
            exchange: "herald".into(),
            queue: "herald.publications".into(),
            dead_exchange: "herald.dead".into(),
            dead_queue: "herald.dead".into(),
            edges_exchange: "herald.edges".into(),
            presence_exchange: super::presence::PRESENCE_EXCHANGE.into(),
            presence_queue: "herald.presence".into(),
        }
    }
}

impl Topology {
    /// The default names, each followed by `suffix` (tests use a random one).
    pub fn with_suffix(suffix: &str) -> Self {
        let d = Topology::default();
        Topology {
            exchange: format!("{}{suffix}", d.exchange),
            queue: format!("{}{suffix}", d.queue),
            dead_exchange: format!("{}{suffix}", d.dead_exchange),
            dead_queue: format!("{}{suffix}", d.dead_queue),
            edges_exchange: format!("{}{suffix}", d.edges_exchange),
            presence_exchange: format!("{}{suffix}", d.presence_exchange),
            presence_queue: format!("{}{suffix}", d.presence_queue),
        }
    }

    /// Every name with its configuration key, for validation.
    pub fn names(&self) -> [(&'static str, &str); 7] {
        [
            ("exchange", &self.exchange),
            ("queue", &self.queue),
            ("dead_exchange", &self.dead_exchange),
            ("dead_queue", &self.dead_queue),
            ("edges_exchange", &self.edges_exchange),
            ("presence_exchange", &self.presence_exchange),
            ("presence_queue", &self.presence_queue),
        ]
    }

    /// Problems with the names: AMQP names are 1 to 255 bytes, and the
    /// default exchange (the empty name) and `amq.*` are the broker's.
    pub fn problems(&self, prefix: &str) -> Vec<String> {
        let mut p = Vec::new();
        for (key, name) in self.names() {
            if name.is_empty() || name.len() > lapin::types::MAX_SHORT_STRING_LENGTH {
                p.push(format!("{prefix}{key} must be 1 to 255 bytes long"));
            } else if name.starts_with("amq.") {
                p.push(format!(
                    "{prefix}{key} {name:?}: names starting with amq. belong to the broker"
                ));
            }
        }
        let stats_exchange = self.stats_exchange();
        let targeted = self.targeted_exchange();
        let sync = self.sync_exchange();
        let exchanges = [
            &self.exchange,
            &self.dead_exchange,
            &self.edges_exchange,
            &self.presence_exchange,
            &stats_exchange,
            &targeted,
            &sync,
        ];
        let distinct = |names: &[&String]| {
            names
                .iter()
                .enumerate()
                .all(|(i, a)| names[i + 1..].iter().all(|b| a != b))
        };
        if !distinct(&exchanges) {
            p.push(format!(
                "{prefix}exchange, dead_exchange, edges_exchange, presence_exchange, presence_exchange + \".stats\", edges_exchange + \".targeted\" and presence_exchange + \".sync\" must all be different exchanges"
            ));
        }
        let stats_queue = self.stats_queue();
        if !distinct(&[
            &self.queue,
            &self.dead_queue,
            &self.presence_queue,
            &stats_queue,
        ]) {
            p.push(format!(
                "{prefix}queue, dead_queue, presence_queue and presence_queue + \".stats\" must be different queues"
            ));
        }
        p
    }

    /// Declare the exchanges, queues and bindings (idempotent).
    pub async fn declare(&self, channel: &Channel) -> lapin::Result<()> {
        let none = FieldTable::default;
        durable_exchange(channel, &self.exchange, ExchangeKind::Topic).await?;
        durable_queue_bound(channel, &self.queue, none(), &self.exchange, "#").await?;
        durable_exchange(channel, &self.dead_exchange, ExchangeKind::Fanout).await?;
        durable_queue_bound(channel, &self.dead_queue, none(), &self.dead_exchange, "").await?;
        durable_exchange(channel, &self.edges_exchange, ExchangeKind::Fanout).await?;
        durable_exchange(channel, &self.targeted_exchange(), ExchangeKind::Direct).await
    }

    /// The direct exchange routers publish to when routing by edge
    /// (`<edges_exchange>.targeted`): every edge binds its queue with its
    /// own id and with [`EVERY_EDGE`].
    pub fn targeted_exchange(&self) -> String {
        targeted_name(&self.edges_exchange)
    }

    /// The fanout exchange edges send their presence snapshots to
    /// (`<presence_exchange>.sync`).
    pub fn sync_exchange(&self) -> String {
        super::presence::sync_name(&self.presence_exchange)
    }

    /// Declare the presence exchange and the routers' shared presence
    /// queue (idempotent). The queue keeps at most `max_length` reports
    /// (policy drop-head: the oldest go; presence is refreshed by the next
    /// report and heartbeat).
    pub async fn declare_presence(&self, channel: &Channel, max_length: u32) -> lapin::Result<()> {
        durable_exchange(channel, &self.presence_exchange, ExchangeKind::Fanout).await?;
        durable_queue_bound(
            channel,
            &self.presence_queue,
            bounded(max_length),
            &self.presence_exchange,
            "",
        )
        .await
    }

    /// The fanout exchange edges publish stats reports to
    /// (`<presence_exchange>.stats`, [`crate::stats`]).
    pub fn stats_exchange(&self) -> String {
        super::stats::stats_name(&self.presence_exchange)
    }

    /// The routers' shared queue of stats reports (`<presence_queue>.stats`).
    pub fn stats_queue(&self) -> String {
        super::stats::stats_name(&self.presence_queue)
    }

    /// Declare the stats exchange and the routers' shared stats queue
    /// (idempotent). The queue keeps at most `max_length` reports (policy
    /// drop-head: the oldest go; every edge sends a newer one with its
    /// next heartbeat).
    pub async fn declare_stats(&self, channel: &Channel, max_length: u32) -> lapin::Result<()> {
        let exchange = self.stats_exchange();
        durable_exchange(channel, &exchange, ExchangeKind::Fanout).await?;
        durable_queue_bound(
            channel,
            &self.stats_queue(),
            bounded(max_length),
            &exchange,
            "",
        )
        .await
    }

    /// Delete everything [`Topology::declare`],
    /// [`Topology::declare_presence`] and [`Topology::declare_stats`] made,
    /// messages included. For tests and teardown scripts.
    pub async fn delete(&self, channel: &Channel) -> lapin::Result<()> {
        let stats_queue = self.stats_queue();
        for queue in [
            &self.queue,
            &self.dead_queue,
            &self.presence_queue,
            &stats_queue,
        ] {
            channel
                .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
                .await?;
        }
        let stats_exchange = self.stats_exchange();
        let targeted = self.targeted_exchange();
        let sync = self.sync_exchange();
        for exchange in [
            &self.exchange,
            &self.dead_exchange,
            &self.edges_exchange,
            &self.presence_exchange,
            &stats_exchange,
            &targeted,
            &sync,
        ] {
            channel
                .exchange_delete(exchange.as_str().into(), ExchangeDeleteOptions::default())
                .await?;
        }
        Ok(())
    }
}

/// The routing key that reaches every edge's queue on the targeted
/// exchange (an edge id is never empty).
pub const EVERY_EDGE: &str = "";

/// The targeted exchange beside the fanout exchange `edges_exchange`.
pub fn targeted_name(edges_exchange: &str) -> String {
    format!("{edges_exchange}.targeted")
}

/// Queue arguments: at most `max_length` messages, the oldest dropped.
pub fn bounded(max_length: u32) -> FieldTable {
    let mut args = FieldTable::default();
    args.insert(
        "x-max-length".into(),
        lapin::types::AMQPValue::LongLongInt(max_length.into()),
    );
    args.insert(
        "x-overflow".into(),
        lapin::types::AMQPValue::LongString("drop-head".into()),
    );
    args
}

/// Declare a durable exchange (idempotent). Shared by the router's
/// topology and an edge's link to its root.
pub async fn durable_exchange(
    channel: &Channel,
    name: &str,
    kind: ExchangeKind,
) -> lapin::Result<()> {
    let options = ExchangeDeclareOptions {
        durable: true,
        ..ExchangeDeclareOptions::default()
    };
    channel
        .exchange_declare(name.into(), kind, options, FieldTable::default())
        .await
}

/// Declare a durable queue with `args` and bind it to `exchange` with
/// `routing_key` (idempotent).
pub async fn durable_queue_bound(
    channel: &Channel,
    queue: &str,
    args: FieldTable,
    exchange: &str,
    routing_key: &str,
) -> lapin::Result<()> {
    let options = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    channel.queue_declare(queue.into(), options, args).await?;
    channel
        .queue_bind(
            queue.into(),
            exchange.into(),
            routing_key.into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_documented_names() {
        let t = Topology::default();
        assert_eq!(t.exchange, "herald");
        assert_eq!(t.queue, "herald.publications");
        assert_eq!(t.dead_exchange, "herald.dead");
        assert_eq!(t.dead_queue, "herald.dead");
        assert_eq!(t.edges_exchange, "herald.edges");
        assert_eq!(t.presence_exchange, "herald.presence");
        assert_eq!(t.presence_queue, "herald.presence");
        assert!(t.problems("amqp.").is_empty());
        assert!(Topology::with_suffix(".t1").problems("").is_empty());
    }

    #[test]
    fn bad_names_are_reported() {
        let t = Topology {
            exchange: "amq.topic".into(),
            queue: String::new(),
            dead_exchange: "x".into(),
            dead_queue: "q".repeat(256),
            edges_exchange: "x".into(),
            ..Topology::default()
        };
        let p = t.problems("amqp.");
        assert_eq!(p.len(), 4, "{p:#?}");
        assert!(p[0].starts_with("amqp.exchange"), "{p:#?}");
    }
}
