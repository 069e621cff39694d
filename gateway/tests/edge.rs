//! Edge mode against the real RabbitMQ on 127.0.0.1:5672: a root link
//! delivers into the same hub standalone uses, drops duplicate ids, and
//! comes back after the broker closes its connection.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::gated_root::GatedRoot;
use common::*;
use herald_protocol::envelope::{Accepted, Notification, Scope};
use lapin::options::BasicPublishOptions;
use lapin::options::ConfirmSelectOptions;
use lapin::{Connection, ConnectionProperties};

const AMQP: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

fn note(id: &str, user: &str, event: &str) -> Notification {
    Notification {
        id: id.into(),
        scope: Scope::User,
        users: vec![user.into()],
        clients: vec![],
        sites: vec![],
        event: event.into(),
        topic: None,
        content_type: "application/json".into(),
        payload: Bytes::from_static(b"{\"via\":\"amqp\"}"),
        payload_is_utf8: true,
        ttl: None,
        encodings: Default::default(),
        accepted: Default::default(),
    }
}

/// A router stand-in: publishes validated notifications to the edges
/// exchange with confirms, exactly as `herald-router` forwards them.
struct Root {
    channel: lapin::Channel,
    exchange: String,
}

impl Root {
    async fn connect(exchange: &str) -> Root {
        let conn = Connection::connect(AMQP, ConnectionProperties::default())
            .await
            .expect("RabbitMQ on 127.0.0.1:5672 (scripts/test.sh starts it)");
        let channel = conn.create_channel().await.unwrap();
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .unwrap();
        Root {
            channel,
            exchange: exchange.to_owned(),
        }
    }

    /// Remove the test's exchange from the shared broker.
    async fn cleanup(self) {
        let _ = self
            .channel
            .exchange_delete(
                self.exchange.as_str().into(),
                lapin::options::ExchangeDeleteOptions::default(),
            )
            .await;
    }

    /// Publish all of `batch` at once, then wait for every confirm: the
    /// edge's queue fills faster than one delivery at a time.
    async fn forward_all(&self, batch: &[Notification]) {
        let mut confirms = Vec::with_capacity(batch.len());
        for n in batch {
            let (properties, body) = herald_amqp::envelope::to_amqp(n);
            confirms.push(self.publish(properties, &body).await);
        }
        for c in confirms {
            c.await.unwrap();
        }
    }

    /// Publish a message as is; its confirm, to await.
    async fn publish(
        &self,
        properties: lapin::BasicProperties,
        body: &[u8],
    ) -> lapin::PublisherConfirm {
        self.channel
            .basic_publish(
                self.exchange.as_str().into(),
                "".into(),
                BasicPublishOptions::default(),
                body,
                properties,
            )
            .await
            .unwrap()
    }

    /// Publish a message as is and wait for its confirm.
    async fn forward_raw(&self, properties: lapin::BasicProperties, body: &[u8]) {
        self.publish(properties, body).await.await.unwrap();
    }

    async fn forward(&self, n: &Notification) {
        self.forward_all(std::slice::from_ref(n)).await;
    }
}

/// Close the broker connection whose client-given name is `name`.
fn close_connection(name: &str) {
    let out = std::process::Command::new("rabbitmqctl")
        .args(["list_connections", "--silent", "pid", "client_properties"])
        .output()
        .expect("rabbitmqctl");
    let listing = String::from_utf8_lossy(&out.stdout);
    let pid = listing
        .lines()
        .find(|l| l.contains(name))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("no connection named {name:?} in:\n{listing}"))
        .to_owned();
    let status = std::process::Command::new("rabbitmqctl")
        .args(["close_connection", &pid, "herald test: drop the link"])
        .status()
        .expect("rabbitmqctl");
    assert!(status.success());
}

async fn edge(exchange: &str) -> (TestGateway, String) {
    edge_with_id(exchange, format!("test-{}", rand::random::<u32>())).await
}

/// An edge with a given id: a second edge with the same id consumes the
/// first one's queue.
async fn edge_with_id(exchange: &str, id: String) -> (TestGateway, String) {
    edge_with(exchange, id, |_| {}).await
}

/// An edge with a given id and `more` settings.
async fn edge_with(
    exchange: &str,
    id: String,
    more: impl FnOnce(&mut herald_gateway::config::Config),
) -> (TestGateway, String) {
    let edge_id = id.clone();
    let exchange = exchange.to_owned();
    let gw = start(move |c| {
        c.edge.roots = vec![AMQP.into()];
        c.edge.id = Some(id);
        c.edge.exchange = exchange;
        c.edge.queue_expires_secs = 60;
        c.edge.reconnect_initial_ms = 50;
        c.edge.reconnect_max_ms = 200;
        more(c);
    })
    .await;
    (gw, edge_id)
}

/// A delivery above the link's body bound (16 MiB: no router bundles
/// more) is dropped, acked and counted; the next one arrives.
#[tokio::test]
async fn a_delivery_above_the_bound_is_dropped_and_counted() {
    let exchange = format!("herald.edges.test-{}", rand::random::<u32>());
    let (gw, _) = edge(&exchange).await;
    gw.until_metric("herald_root_links", 1.0).await;
    let root = Root::connect(&exchange).await;
    let mut frank = gw.session(&token("frank", None, None)).await;
    let huge = vec![b'x'; (16 << 20) + 1];
    root.forward_raw(lapin::BasicProperties::default(), &huge)
        .await;
    root.forward(&note("after-huge", "frank", "x")).await;
    assert_eq!(
        frank.message().await.header("message-id"),
        Some("after-huge")
    );
    gw.until_metric("herald_uplink_rejected_total", 1.0).await;
    root.cleanup().await;
}

/// Tenants' ids (`id:tenant`, as routers forward a site-limited key's
/// publications): the same id of two tenants is two notifications, and a
/// browser reads the id as published.
#[tokio::test]
async fn tenants_ids_arrive_apart_and_read_as_published() {
    let exchange = format!("herald.edges.test-{}", rand::random::<u32>());
    let (gw, _) = edge(&exchange).await;
    gw.until_metric("herald_root_links", 1.0).await;
    let root = Root::connect(&exchange).await;
    let mut gina = gw.session(&token("gina", None, None)).await;
    root.forward(&note("invoice-77:a", "gina", "x")).await;
    root.forward(&note("invoice-77:b", "gina", "x")).await;
    root.forward(&note("invoice-77:a", "gina", "x")).await;
    root.forward(&note("after", "gina", "x")).await;
    for id in ["invoice-77", "invoice-77", "after"] {
        assert_eq!(gina.message().await.header("message-id"), Some(id));
    }
    let metrics = gw.metrics().await;
    assert_eq!(sample(&metrics, "herald_duplicates_total"), Some(1.0));
    assert_eq!(sample(&metrics, "herald_uplink_rejected_total"), Some(0.0));
    root.cleanup().await;
}

/// `edge.uplink_client = "lapin"` links, delivers and acks as the default
/// client does.
#[tokio::test]
async fn the_lapin_client_links_and_delivers_too() {
    let exchange = format!("herald.edges.test-{}", rand::random::<u32>());
    let id = format!("test-{}", rand::random::<u32>());
    let (gw, _) = edge_with(&exchange, id, |c| {
        c.edge.uplink_client = herald_gateway::config::UplinkClient::Lapin;
    })
    .await;
    gw.until_metric("herald_root_links", 1.0).await;
    let root = Root::connect(&exchange).await;
    let mut erin = gw.session(&token("erin", None, None)).await;
    root.forward(&note("via-lapin", "erin", "x")).await;
    assert_eq!(erin.message().await.header("message-id"), Some("via-lapin"));
    gw.until_metric("herald_uplink_acks_total", 1.0).await;
    root.cleanup().await;
}

#[tokio::test]
async fn notifications_from_a_root_reach_sessions_once() {
    let exchange = format!("herald.edges.test-{}", rand::random::<u32>());
    let (gw, _) = edge(&exchange).await;
    gw.until_metric("herald_root_links", 1.0).await;
    let root = Root::connect(&exchange).await;
    let mut alice = gw.session(&token("alice", None, None)).await;
    let server = alice
        .connected
        .as_ref()
        .unwrap()
        .header("server")
        .unwrap()
        .to_owned();
    assert!(
        server.starts_with("Herald/") && server.contains(" test-"),
        "{server}"
    );

    root.forward(&note("n-1", "alice", "first")).await;
    // The same id again (a redelivery, or a second root): dropped.
    root.forward(&note("n-1", "alice", "first")).await;
    root.forward(&note("n-2", "alice", "second")).await;
    assert_eq!(alice.message().await.header("message-id"), Some("n-1"));
    let m = alice.message().await;
    assert_eq!(m.header("message-id"), Some("n-2"));
    assert_eq!(m.header("seq"), Some("2"));
    assert_eq!(&m.body[..], b"{\"via\":\"amqp\"}");
    gw.until_metric("herald_duplicates_total", 1.0).await;
    // Without `x-herald-accepted-us` (an older router): delivered, not
    // measured.
    let m = gw.metrics().await;
    assert_eq!(
        sample(
            &m,
            "herald_delivery_latency_seconds_count{transport=\"websocket\"}"
        ),
        Some(0.0)
    );
    // One root configured, one linked: what the alert rules compare.
    assert_eq!(sample(&m, "herald_root_links_configured"), Some(1.0));
    assert_eq!(sample(&m, "herald_root_links"), Some(1.0));

    // The publish API is a router's job in a distributed deployment.
    let (status, _) = gw
        .publish(serde_json::json!({"users": ["alice"], "event": "x"}))
        .await;
    assert_eq!(status, 404);
    root.cleanup().await;
}

#[tokio::test]
async fn a_burst_is_routed_in_order_and_acked_in_full() {
    let exchange = format!("herald.edges.test-{}", rand::random::<u32>());
    let (mut gw, id) = edge(&exchange).await;
    gw.until_metric("herald_root_links", 1.0).await;
    let root = Root::connect(&exchange).await;
    let mut carol = gw.session(&token("carol", None, None)).await;
    let burst: Vec<Notification> = (0..600)
        .map(|i| note(&format!("b-{i}"), "carol", "burst"))
        .collect();
    root.forward_all(&burst).await;
    for i in 0..600 {
        let m = carol.message().await;
        assert_eq!(m.header("message-id"), Some(format!("b-{i}").as_str()));
    }
    let acks = sample(&gw.metrics().await, "herald_uplink_acks_total").unwrap();
    assert!(
        (1.0..=600.0).contains(&acks),
        "600 deliveries took {acks} acks"
    );
    // A second edge with the same id takes over the queue: had any of the
    // 600 gone unacked, the broker would redeliver it before the marker.
    gw.shutdown.cancel();
    let (_, task) = gw.local.take().unwrap();
    task.await.unwrap();
    let (again, _) = edge_with_id(&exchange, id).await;
    again.until_metric("herald_root_links", 1.0).await;
    let mut carol = again.session(&token("carol", None, None)).await;
    root.forward(&note("marker", "carol", "after")).await;
    assert_eq!(carol.message().await.header("message-id"), Some("marker"));
    again
        .until_metric("herald_uplink_received_total", 1.0)
        .await;
    root.cleanup().await;
}

/// Publish to `exchange` a message whose headers hold arrays nested
/// `levels` deep (5 bytes a level), written by hand: lapin's codec, as the
/// edge's, would recurse to write or read it.
async fn publish_poison(exchange: &str, levels: usize) {
    use herald_amqp::wire::{Wire, WireConfig};
    // Property flags: headers only; then the table.
    let mut properties = (1u16 << 13).to_be_bytes().to_vec();
    properties.extend(herald_amqp::wire::nesting::hostile_table(levels));
    let mut wire = Wire::open(&WireConfig {
        url: AMQP.into(),
        connection_name: "poison-publisher".into(),
        max_body: 1 << 20,
    })
    .await
    .unwrap();
    wire.publish_encoded(exchange, "", &properties, b"{}")
        .await
        .unwrap();
    // The broker answers the close after it has routed the publish.
    wire.close(Duration::from_secs(10)).await.unwrap();
}

/// Issue 36, item 2: a message whose headers are nested 1,500 levels deep
/// waits in an edge's queue while it is down (as after a crash). The edge
/// starts, reads it without recursing into it, drops it with its reason
/// and counts it; the message is acknowledged, not requeued, so the next
/// start finds nothing of it.
#[tokio::test]
async fn a_poison_message_is_dropped_with_its_reason_and_the_edge_lives_on() {
    let exchange = format!("herald.edges.test-{}", rand::random::<u32>());
    let (mut gw, id) = edge(&exchange).await;
    gw.until_metric("herald_root_links", 1.0).await;
    let root = Root::connect(&exchange).await;
    gw.shutdown.cancel();
    let (_, task) = gw.local.take().unwrap();
    task.await.unwrap();
    publish_poison(&exchange, 1_500).await;
    root.forward(&note("after-poison", "hank", "x")).await;

    let (mut again, _) = edge_with_id(&exchange, id.clone()).await;
    again
        .until_metric("herald_uplink_received_total", 2.0)
        .await;
    again
        .until_metric("herald_uplink_rejected_total", 1.0)
        .await;
    // Alive, and delivering.
    let mut hank = again.session(&token("hank", None, None)).await;
    root.forward(&note("marker-1", "hank", "x")).await;
    assert_eq!(hank.message().await.header("message-id"), Some("marker-1"));

    // Nothing of it is left for the next start.
    again.shutdown.cancel();
    let (_, task) = again.local.take().unwrap();
    task.await.unwrap();
    let (third, _) = edge_with_id(&exchange, id).await;
    third.until_metric("herald_root_links", 1.0).await;
    let mut hank = third.session(&token("hank", None, None)).await;
    root.forward(&note("marker-2", "hank", "x")).await;
    assert_eq!(hank.message().await.header("message-id"), Some("marker-2"));
    let metrics = third.metrics().await;
    assert_eq!(sample(&metrics, "herald_uplink_rejected_total"), Some(0.0));
    assert_eq!(sample(&metrics, "herald_uplink_received_total"), Some(1.0));
    root.cleanup().await;
}

#[tokio::test]
async fn a_bundle_reaches_sessions_in_order_and_bad_parts_are_dropped_alone() {
    let exchange = format!("herald.edges.test-{}", rand::random::<u32>());
    let (gw, _) = edge(&exchange).await;
    gw.until_metric("herald_root_links", 1.0).await;
    let root = Root::connect(&exchange).await;
    let mut dana = gw.session(&token("dana", None, None)).await;
    let mut erin = gw.session(&token("erin", None, None)).await;

    // Exactly what a router sends for a batch: one message, several
    // notifications, one of them invalid (no users for scope user), each
    // accepted by the router 200 ms ago.
    let accepted = Accepted::at(std::time::SystemTime::now() - Duration::from_millis(200));
    let stamped = |mut n: Notification| {
        n.accepted = accepted;
        n
    };
    let mut invalid = note("bad", "dana", "b");
    invalid.users.clear();
    let batch: Vec<std::sync::Arc<Notification>> = vec![
        stamped(note("d-1", "dana", "b")).into(),
        stamped(note("e-1", "erin", "b")).into(),
        stamped(invalid).into(),
        stamped(note("d-2", "dana", "b")).into(),
        // Already seen in this bundle: dropped as a duplicate.
        stamped(note("d-1", "dana", "b")).into(),
    ];
    let (properties, body) = herald_amqp::envelope::bundle_to_amqp(&batch);
    root.forward_raw(properties.clone(), &body).await;
    // A bundle that cannot be read is dropped whole; the link goes on.
    root.forward_raw(properties, b"\x01\x05\x00\x00\x00garbage")
        .await;
    root.forward(&stamped(note("d-3", "dana", "single"))).await;

    for (id, seq) in [("d-1", "1"), ("d-2", "2"), ("d-3", "3")] {
        let m = dana.message().await;
        assert_eq!(m.header("message-id"), Some(id));
        assert_eq!(m.header("seq"), Some(seq));
        assert_eq!(&m.body[..], b"{\"via\":\"amqp\"}");
    }
    assert_eq!(erin.message().await.header("message-id"), Some("e-1"));
    gw.until_metric("herald_uplink_received_total", 6.0).await;
    let metrics = gw.metrics().await;
    assert_eq!(sample(&metrics, "herald_uplink_bundles_total"), Some(2.0));
    assert_eq!(sample(&metrics, "herald_uplink_rejected_total"), Some(2.0));
    assert_eq!(sample(&metrics, "herald_duplicates_total"), Some(1.0));
    // The four delivered were measured from the router's acceptance, which
    // the bundle's table and the single message's header carried: 200 ms
    // and more, not the moments they reached the edge.
    gw.until_metric(
        "herald_delivery_latency_seconds_count{transport=\"websocket\"}",
        4.0,
    )
    .await;
    let metrics = gw.metrics().await;
    let bucket = |le: &str| {
        sample(
            &metrics,
            &format!(
                "herald_delivery_latency_seconds_bucket{{le=\"{le}\",transport=\"websocket\"}}"
            ),
        )
    };
    assert_eq!(bucket("0.1"), Some(0.0), "{metrics}");
    assert_eq!(bucket("60.0"), Some(4.0), "{metrics}");
    root.cleanup().await;
}

#[tokio::test]
async fn the_link_comes_back_after_the_broker_drops_it() {
    let exchange = format!("herald.edges.test-{}", rand::random::<u32>());
    let (gw, id) = edge(&exchange).await;
    gw.until_metric("herald_root_links", 1.0).await;
    let mut bob = gw.session(&token("bob", None, None)).await;
    // Close this edge's connection from the broker side (only this one:
    // other tests share the broker).
    close_connection(&format!("herald-edge herald.edge.{id}"));
    gw.until_metric("herald_root_reconnects_total", 1.0).await;
    gw.until_metric("herald_root_links", 1.0).await;
    let root = Root::connect(&exchange).await;
    root.forward(&note("after-drop", "bob", "again")).await;
    assert_eq!(bob.message().await.header("message-id"), Some("after-drop"));
    root.cleanup().await;
}

/// Read presence reports from `queue` until `found` says one is the one
/// wanted, failing after [`WAIT`].
async fn until_report(
    channel: &lapin::Channel,
    queue: &str,
    found: impl Fn(&herald_amqp::presence::PresenceReport) -> bool,
) -> herald_amqp::presence::PresenceReport {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let got = channel
            .basic_get(
                queue.into(),
                lapin::options::BasicGetOptions { no_ack: true },
            )
            .await
            .unwrap();
        match got {
            Some(m) => {
                let report = <herald_amqp::presence::PresenceReport as herald_amqp::presence::PresenceAmqp>::from_amqp(
                    &m.delivery.properties,
                    &m.delivery.data,
                )
                .expect("a well-formed presence report");
                if found(&report) {
                    return report;
                }
            }
            None => {
                assert!(tokio::time::Instant::now() < deadline, "no such report");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

#[tokio::test]
async fn an_edge_reports_users_coming_online_and_going_offline() {
    let suffix = rand::random::<u32>();
    let exchange = format!("herald.edges.test-{suffix}");
    let presence = format!("herald.presence.test-{suffix}");
    let root = Root::connect(&exchange).await;
    // Bind a queue to the presence exchange, as the routers of a root do.
    root.channel
        .exchange_declare(
            presence.as_str().into(),
            lapin::ExchangeKind::Fanout,
            lapin::options::ExchangeDeclareOptions {
                durable: true,
                ..Default::default()
            },
            lapin::types::FieldTable::default(),
        )
        .await
        .unwrap();
    let queue = root
        .channel
        .queue_declare(
            "".into(),
            lapin::options::QueueDeclareOptions {
                exclusive: true,
                ..Default::default()
            },
            lapin::types::FieldTable::default(),
        )
        .await
        .unwrap();
    let queue = queue.name().as_str().to_owned();
    root.channel
        .queue_bind(
            queue.as_str().into(),
            presence.as_str().into(),
            "".into(),
            lapin::options::QueueBindOptions::default(),
            lapin::types::FieldTable::default(),
        )
        .await
        .unwrap();
    let id = format!("test-{suffix}");
    let (edge_id, exchange_name, presence_name) = (id.clone(), exchange.clone(), presence.clone());
    let gw = start(move |c| {
        c.edge.roots = vec![AMQP.into()];
        c.edge.id = Some(edge_id);
        c.edge.exchange = exchange_name;
        c.edge.presence_exchange = presence_name;
        c.edge.queue_expires_secs = 60;
        c.edge.presence_batch_ms = 20;
    })
    .await;
    gw.until_metric("herald_root_links", 1.0).await;
    let pia = gw.session(&token("pia", None, None)).await;
    let online = until_report(&root.channel, &queue, |r| {
        r.online.iter().any(|u| u == "pia")
    })
    .await;
    assert_eq!(online.edge, id);
    assert!(!online.boot.is_empty());
    drop(pia);
    let offline = until_report(&root.channel, &queue, |r| {
        r.offline.iter().any(|u| u == "pia")
    })
    .await;
    assert_eq!(
        (offline.edge.as_str(), offline.boot.as_str()),
        (id.as_str(), online.boot.as_str())
    );
    let _ = root
        .channel
        .exchange_delete(presence.as_str().into(), Default::default())
        .await;
    root.cleanup().await;
}

#[tokio::test]
async fn an_edge_is_ready_only_once_linked_to_a_root() {
    let exchange = format!("herald.edges.test-{}", rand::random::<u32>());
    let root = GatedRoot::start().await;
    let url = root.url.clone();
    let gw = start(move |c| {
        c.edge.roots = vec![url];
        c.edge.id = Some(format!("test-{}", rand::random::<u32>()));
        c.edge.exchange = exchange;
        c.edge.queue_expires_secs = 60;
        c.edge.reconnect_initial_ms = 50;
        c.edge.reconnect_max_ms = 200;
    })
    .await;
    // Its only root refuses: alive, but not ready, and it says why.
    let (status, body) = gw.get_json("/healthz").await;
    assert_eq!((status, body["status"].as_str()), (200, Some("ok")));
    let (status, body) = gw.get_json("/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["status"], "unavailable");
    assert_eq!(body["reasons"], serde_json::json!(["no root link"]));
    // The root comes up: the link follows, and readiness with it.
    root.switch_on();
    let body = gw.until_status("/readyz", 200).await;
    assert_eq!(body["status"], "ready");
    assert_eq!(sample(&gw.metrics().await, "herald_root_links"), Some(1.0));
    // The root's socket just ends: the link is gone, and so is readiness.
    root.switch_off();
    let body = gw.until_status("/readyz", 503).await;
    assert_eq!(body["reasons"], serde_json::json!(["no root link"]));
    assert_eq!(sample(&gw.metrics().await, "herald_root_links"), Some(0.0));
}

#[tokio::test]
async fn a_draining_edge_is_not_ready() {
    use tower::ServiceExt;
    let exchange = format!("herald.edges.test-{}", rand::random::<u32>());
    let (gw, _) = edge(&exchange).await;
    gw.until_status("/readyz", 200).await;
    let (shared, task) = gw.local.expect("an in-process gateway");
    let (routes, _) = herald_gateway::http::routes(shared, axum::Router::new());
    gw.shutdown.cancel();
    // Linked or not, an edge that is shutting down takes no new sessions.
    // (Asked in process: once the token fires the listener is closed.)
    let ask = |path: &'static str| {
        let routes = routes.clone();
        async move {
            let r = routes
                .oneshot(
                    axum::http::Request::get(path)
                        .body(axum::body::Body::empty())
                        .unwrap(),
                )
                .await
                .unwrap();
            let status = r.status().as_u16();
            let body = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
            (
                status,
                serde_json::from_slice::<serde_json::Value>(&body).unwrap(),
            )
        }
    };
    let (status, body) = ask("/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body["reasons"]
            .as_array()
            .unwrap()
            .contains(&"draining".into()),
        "{body}"
    );
    let (status, body) = ask("/healthz").await;
    assert_eq!((status, body["status"].as_str()), (200, Some("draining")));
    tokio::time::timeout(WAIT, task).await.unwrap().unwrap();
}
