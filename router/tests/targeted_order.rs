//! Targeted routing against the real RabbitMQ: a forward of several
//! messages (one per edge key) and the forward after it, in flight at once
//! on one publisher, reach an edge's queue in the order they were planned.
//! Each publish hands its frames to the channel when first polled and then
//! waits for them to be written; if a forward yielded between its own
//! messages, the next forward's message would land between them and
//! overtake a notification of the first on the edge.

mod harness;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use harness::{Broker, suffix};
use herald_amqp::Topology;
use herald_amqp::metrics::AmqpMetrics;
use herald_amqp::publisher::{Forwarded, Publisher};
use herald_amqp::routing::recent::RecentConfig;
use herald_amqp::routing::view::ViewConfig;
use herald_amqp::routing::{Routing, RoutingMetrics};
use herald_amqp::topology::EVERY_EDGE;
use herald_engine::presence::PresenceReport;
use herald_engine::presence::view::{MailboxSessions, UserSessions};
use herald_engine::schedule::timing::now_ms;
use herald_protocol::envelope::{Notification, Scope};
use lapin::options::{QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::FieldTable;

const STALE_MS: u64 = 60_000;

fn note(id: &str, scope: Scope, users: &[&str]) -> Arc<Notification> {
    Arc::new(Notification {
        id: id.into(),
        scope,
        users: users.iter().map(|u| (*u).to_owned()).collect(),
        clients: vec![],
        sites: vec![],
        event: "order.test".into(),
        topic: None,
        content_type: "text/plain".into(),
        payload: Bytes::from_static(b"x"),
        payload_is_utf8: true,
        ttl: None,
        encodings: Default::default(),
        accepted: Default::default(),
    })
}

/// The first report of `edge`: `user` has one live session there.
fn holds(edge: &str, user: &str) -> PresenceReport {
    PresenceReport {
        edge: edge.into(),
        boot: "boot-1".into(),
        seq: 1,
        mailbox_ttl_ms: 300_000,
        detail: vec![UserSessions {
            user: user.into(),
            mailboxes: vec![MailboxSessions {
                site: String::new(),
                client: None,
                since_ms: now_ms(),
                by_transport: [("websocket".to_owned(), 1)].into(),
            }],
            missed_since_ms: 0,
        }],
        ..PresenceReport::default()
    }
}

#[tokio::test]
async fn a_forwards_messages_reach_an_edge_before_the_next_forwards() {
    let topology = Topology::with_suffix(&suffix());
    let broker = Broker::connect(topology.clone()).await;
    // The view: edge "near" holds alice, edge "far" holds bob; it has
    // listened long enough to route by edge.
    let routing = Arc::new(Routing::new(
        ViewConfig {
            stale_ms: STALE_MS,
            forget_ms: STALE_MS,
        },
        RecentConfig {
            window_ms: 10_000,
            max: 1_000,
            max_bytes: 1 << 20,
        },
        RoutingMetrics::default(),
    ));
    let now = now_ms();
    routing.start(now - STALE_MS - 1);
    routing.apply(&holds("near", "alice"), now);
    routing.apply(&holds("far", "bob"), now);
    // Edge "near"'s queue, bound as an edge binds it: its id and every-edge.
    let queue = format!("{}.near", topology.edges_exchange);
    let exchange = topology.targeted_exchange();
    broker
        .channel
        .queue_declare(
            queue.as_str().into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    for key in ["near", EVERY_EDGE] {
        broker
            .channel
            .queue_bind(
                queue.as_str().into(),
                exchange.as_str().into(),
                key.into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
    }
    let publisher = Publisher::open(
        &broker.connection,
        &topology.edges_exchange,
        AmqpMetrics::default(),
    )
    .await
    .unwrap()
    .with_routing(&exchange, Arc::clone(&routing));

    for round in 0..20 {
        // Forward 1: a global notification (key "") and one for alice
        // (key "near"): two messages. Forward 2: a global one.
        let first = [
            note(&format!("{round}-1"), Scope::Global, &[]),
            note(&format!("{round}-2"), Scope::User, &["alice"]),
        ];
        let second = note(&format!("{round}-3"), Scope::Global, &[]);
        // Polled in this order, as the ingest polls its forwards in flight.
        let (a, b) =
            futures_util::future::join(publisher.send_bundle(&first), publisher.send(&second))
                .await;
        for sent in [a.unwrap(), b.unwrap()] {
            assert_eq!(publisher.confirmed(sent).await.unwrap(), Forwarded::Routed);
        }
        let got: Vec<String> = broker
            .take_notifications(&queue, 3, Duration::from_secs(10))
            .await
            .into_iter()
            .map(|(n, _)| n.id)
            .collect();
        assert_eq!(
            got,
            [
                format!("{round}-1"),
                format!("{round}-2"),
                format!("{round}-3")
            ],
            "round {round}"
        );
    }
    broker
        .channel
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await
        .unwrap();
    broker.cleanup().await;
}
