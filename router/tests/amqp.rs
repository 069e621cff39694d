//! The router against the real RabbitMQ (127.0.0.1:5672, guest/guest, or
//! `HERALD_TEST_AMQP_URL`). No mocks: a backend publishes with lapin, an
//! edge stand-in reads the edges exchange through its own queue.
//!
//! Every test uses its own exchange and queue names (a random suffix) and
//! deletes them at the end, so tests run in parallel with each other and
//! with other suites on the same broker.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use herald_amqp::Topology;
use herald_amqp::envelope::{DELAYED_DISABLED, from_amqp, headers};
use herald_protocol::envelope::Limits;
use lapin::BasicProperties;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, ConfirmSelectOptions,
    QueueBindOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use tokio_util::sync::CancellationToken;
mod harness;

use harness::*;

/// A publication the router must refuse, and what it must say.
struct Invalid<'a> {
    id: &'a str,
    headers: FieldTable,
    content_type: &'a str,
    body: &'a [u8],
    field: &'a str,
    words: &'a str,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_publication_reaches_the_edges_and_is_acked() {
    let topology = Topology::with_suffix(&suffix());
    let broker = Broker::connect(topology.clone()).await;
    let router = Router::start(&topology, |_| {}).await;
    router.wait_ready().await;

    // Headers of the types the router forwards with: forwarded unchanged.
    let mut full = FieldTable::default();
    full.insert("scope".into(), text("client"));
    full.insert("clients".into(), strings(&["acme", "beta"]));
    full.insert("sites".into(), strings(&["eu"]));
    full.insert("event".into(), text("deploy.reload"));
    full.insert("topic".into(), text("ops"));
    full.insert("ttl-ms".into(), AMQPValue::LongLongInt(60_000));
    let body = br#"{"reload":true,"text":"caf\u00e9 \u00e9t\u00e9"}"#;
    let before = accepted_now();
    assert!(
        broker
            .publish("ops.deploy", publication("n-full", full.clone()), body)
            .await
    );
    // A minimal one: no scope, an `I` (32-bit) TTL, no message_id, binary.
    let mut minimal = FieldTable::default();
    minimal.insert("users".into(), strings(&["alice"]));
    minimal.insert("event".into(), text("file.ready"));
    minimal.insert("ttl-ms".into(), AMQPValue::LongInt(5000));
    let binary: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
    let minimal_props = BasicProperties::default().with_headers(minimal);
    assert!(broker.publish("", minimal_props.clone(), &binary).await);

    let got = broker
        .take(&broker.edge_queue, 2, Duration::from_secs(10))
        .await;
    let after = accepted_now();
    let first = &got[0];
    assert_eq!(first.data, body);
    // Plus when the router accepted it, for the edges' latency histogram.
    let at = herald_amqp::envelope::accepted_from_amqp(&first.properties)
        .unix_micros()
        .expect("x-herald-accepted-us");
    assert!(
        (before..=after).contains(&at),
        "{before} <= {at} <= {after}"
    );
    let mut forwarded_headers = first.properties.headers().clone().unwrap();
    assert!(
        forwarded_headers
            .inner()
            .contains_key("x-herald-accepted-us")
    );
    forwarded_headers = FieldTable::from(
        forwarded_headers
            .inner()
            .iter()
            .filter(|(k, _)| k.as_str() != "x-herald-accepted-us")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<BTreeMap<_, _>>(),
    );
    assert_eq!(forwarded_headers, full);
    assert_eq!(
        first.properties.message_id().as_ref().unwrap().as_str(),
        "n-full"
    );
    assert_eq!(
        first.properties.content_type().as_ref().unwrap().as_str(),
        "application/json"
    );
    assert_eq!(first.routing_key.as_str(), "deploy.reload");

    let second = &got[1];
    assert_eq!(second.data, binary);
    let limits = Limits::default();
    let expected = from_amqp(&minimal_props, &binary, &limits, || "x".into()).unwrap();
    let forwarded = from_amqp(&second.properties, &second.data, &limits, || {
        panic!("the router gives every forward an id")
    })
    .unwrap();
    assert!(!forwarded.id.is_empty());
    assert_eq!(forwarded.id.len(), 32, "a generated id: {}", forwarded.id);
    assert_eq!(
        herald_protocol::envelope::Notification {
            id: "x".into(),
            ..forwarded.clone()
        },
        expected
    );
    assert_eq!(forwarded.content_type, "application/octet-stream");

    router
        .metrics_showing(&["herald_notifications_accepted_total{source=\"amqp\"} 2"])
        .await;
    router.stop().await;
    assert_eq!(
        broker.ready(&topology.queue).await,
        0,
        "every delivery acked"
    );
    assert_eq!(broker.ready(&broker.edge_queue).await, 0);
    broker.cleanup().await;
}

/// Issue 36, item 2: a publication whose headers are nested 1,500 levels
/// deep (lapin's codec reads them by recursion, on its I/O thread) waits
/// in the publications queue while no router runs. A router starts: the
/// guarded socket (herald_amqp::guarded) hands lapin the headers replaced
/// by the reason, the router dead-letters it with that reason, and the
/// publication behind it flows. A second start finds nothing of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_publication_is_dead_lettered_and_the_router_lives_on() {
    use herald_amqp::wire::{Wire, WireConfig, nesting};
    let topology = Topology::with_suffix(&suffix());
    let broker = Broker::connect(topology.clone()).await;
    // Property flags: headers and message_id; the table, then the id.
    let mut properties = ((1u16 << 13) | (1 << 7)).to_be_bytes().to_vec();
    properties.extend(nesting::hostile_table(1_500));
    properties.push(8);
    properties.extend_from_slice(b"poison-1");
    let mut wire = Wire::open(&WireConfig {
        url: amqp_url(),
        connection_name: "poison-publisher".into(),
        max_body: 1 << 20,
    })
    .await
    .unwrap();
    wire.publish_encoded(&topology.exchange, "chat.room.1", &properties, b"{}")
        .await
        .unwrap();
    wire.close(Duration::from_secs(10)).await.unwrap();
    let mut fine = FieldTable::default();
    fine.insert("users".into(), strings(&["alice"]));
    fine.insert("event".into(), text("chat.message"));
    assert!(
        broker
            .publish(
                "chat.room.1",
                publication("after-poison", fine.clone()),
                b"{}"
            )
            .await
    );

    let router = Router::start(&topology, |_| {}).await;
    router.wait_ready().await;
    let dead = broker
        .take(&topology.dead_queue, 1, Duration::from_secs(10))
        .await;
    let d = &dead[0];
    assert_eq!(
        d.properties.message_id().as_ref().unwrap().as_str(),
        "poison-1"
    );
    assert_eq!(
        header_text(&d.properties, headers::FIELD).as_deref(),
        Some("headers")
    );
    let reason = header_text(&d.properties, headers::ERROR).unwrap();
    assert_eq!(
        reason,
        "headers: not read: field table nested deeper than 32 levels"
    );
    let forwarded = broker
        .take_notifications(&broker.edge_queue, 1, Duration::from_secs(10))
        .await;
    assert_eq!(forwarded[0].0.id, "after-poison");
    router.stop().await;

    // Nothing of it is left: the next router forwards the next one at once.
    let router = Router::start(&topology, |_| {}).await;
    router.wait_ready().await;
    assert!(
        broker
            .publish("chat.room.1", publication("after-restart", fine), b"{}")
            .await
    );
    let forwarded = broker
        .take_notifications(&broker.edge_queue, 1, Duration::from_secs(10))
        .await;
    assert_eq!(forwarded[0].0.id, "after-restart");
    assert_eq!(broker.ready(&topology.dead_queue).await, 0);
    router.stop().await;
    broker.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_publications_are_dead_lettered_with_the_reason() {
    let topology = Topology::with_suffix(&suffix());
    let broker = Broker::connect(topology.clone()).await;
    let router = Router::start(&topology, |c| c.publish.max_payload_bytes = 1024).await;
    router.wait_ready().await;

    let base = || {
        let mut t = FieldTable::default();
        t.insert("users".into(), strings(&["alice"]));
        t.insert("event".into(), text("chat.message"));
        t
    };
    let with = |name: &str, value: AMQPValue| {
        let mut t = base();
        t.insert(name.into(), value);
        t
    };
    let without = |name: &str| {
        let mut t = base().inner().clone();
        t.remove(name);
        FieldTable::from(t)
    };
    let many: Vec<String> = (0..51).map(|i| format!("u{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let big = vec![b'x'; 2000];
    // (message id, headers, content type, body, field, words in the reason)
    // Each case: message id, headers, the field named, words in the reason.
    let json = |id, headers, field, words| Invalid {
        id,
        headers,
        content_type: "application/json",
        body: b"{}",
        field,
        words,
    };
    let cases = vec![
        json(
            "users-string",
            with("users", text("alice")),
            "users",
            "array of strings",
        ),
        json(
            "users-int",
            with(
                "users",
                AMQPValue::FieldArray(vec![text("a"), AMQPValue::LongInt(7)].into()),
            ),
            "users",
            "entry 1 is an integer",
        ),
        json(
            "too-many-users",
            with("users", strings(&many)),
            "users",
            "the limit is 50",
        ),
        json(
            "unknown-scope",
            with("scope", text("everyone")),
            "scope",
            "everyone",
        ),
        json("missing-event", without("event"), "event", "required"),
        Invalid {
            content_type: "application/octet-stream",
            body: &big,
            ..json("oversized", base(), "body", "the limit is 1024")
        },
        Invalid {
            content_type: "text/plain",
            body: b"caf\xe9",
            ..json("not-utf8", base(), "body", "UTF-8")
        },
        json(
            "ttl-string",
            with("ttl-ms", text("5000")),
            "ttl-ms",
            "integer",
        ),
        json(
            "delay",
            with("delay-ms", AMQPValue::LongInt(1000)),
            "delay-ms",
            DELAYED_DISABLED,
        ),
        json(
            "deliver-at",
            with("deliver-at", AMQPValue::LongLongInt(1_900_000_000_000)),
            "deliver-at",
            DELAYED_DISABLED,
        ),
        json(
            "when-online",
            with("when-online", AMQPValue::Boolean(true)),
            "when-online",
            DELAYED_DISABLED,
        ),
        // Callbacks are made from the delayed store: none here.
        json(
            "callback",
            with("callback-url", text("https://push.example.com/cb")),
            "callback-url",
            DELAYED_DISABLED,
        ),
        json(
            "callback-only",
            with("browsers", text("false")),
            "browsers",
            "no callback",
        ),
        json(
            "browsers-type",
            with("browsers", AMQPValue::LongInt(0)),
            "browsers",
            "boolean",
        ),
        json("bad id", base(), "message_id", "characters"),
    ];
    for c in &cases {
        let props = publication(c.id, c.headers.clone()).with_content_type(c.content_type.into());
        assert!(broker.publish("chat.room.1", props, c.body).await);
    }
    // A valid one after them still flows.
    assert!(
        broker
            .publish("chat.room.1", publication("fine", base()), b"{}")
            .await
    );

    let dead = broker
        .take(&topology.dead_queue, cases.len(), Duration::from_secs(10))
        .await;
    let dead: HashMap<String, &lapin::message::Delivery> = dead
        .iter()
        .map(|d| (d.properties.message_id().as_ref().unwrap().to_string(), d))
        .collect();
    for Invalid {
        id,
        headers: sent,
        content_type,
        body,
        field,
        words,
    } in &cases
    {
        let d = dead
            .get(*id)
            .unwrap_or_else(|| panic!("{id} not dead-lettered"));
        let reason = header_text(&d.properties, headers::ERROR).unwrap();
        assert_eq!(
            header_text(&d.properties, headers::FIELD).as_deref(),
            Some(*field),
            "{id}: {reason}"
        );
        assert!(reason.starts_with(&format!("{field}: ")), "{id}: {reason}");
        assert!(reason.contains(words), "{id}: {reason}");
        assert_eq!(
            header_text(&d.properties, headers::ROUTING_KEY).as_deref(),
            Some("chat.room.1")
        );
        // The original is kept: body, content type, headers.
        assert_eq!(&d.data[..], *body, "{id}");
        assert_eq!(
            d.properties.content_type().as_ref().unwrap().as_str(),
            *content_type
        );
        let kept = d.properties.headers().as_ref().unwrap().inner();
        for (name, value) in sent.inner() {
            assert_eq!(kept.get(name), Some(value), "{id}: header {name}");
        }
    }
    let fine = broker
        .take(&broker.edge_queue, 1, Duration::from_secs(10))
        .await;
    assert_eq!(
        fine[0].properties.message_id().as_ref().unwrap().as_str(),
        "fine"
    );

    // The counters move once the broker confirms the dead letter, which
    // can be after a test sees it in the queue.
    router
        .metrics_showing(&[
            "herald_notifications_rejected_total{source=\"amqp\",reason=\"invalid_field\"} 10",
            "herald_notifications_rejected_total{source=\"amqp\",reason=\"too_large\"} 1",
            "herald_notifications_rejected_total{source=\"amqp\",reason=\"unsupported\"} 4",
            "herald_notifications_accepted_total{source=\"amqp\"} 1",
        ])
        .await;
    router.stop().await;
    assert_eq!(
        broker.ready(&topology.queue).await,
        0,
        "every delivery acked"
    );
    assert_eq!(broker.ready(&topology.dead_queue).await, 0);
    broker.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_api_publishes_to_the_edges() {
    let topology = Topology::with_suffix(&suffix());
    let broker = Broker::connect(topology.clone()).await;
    let router = Router::start(&topology, |_| {}).await;
    router.wait_ready().await;

    let response = router
        .http
        .post(router.url("/v1/notifications"))
        .bearer_auth(API_KEY)
        .json(&serde_json::json!([
            {"id": "h-1", "users": ["alice", "bob"], "event": "chat.message", "payload": {"text": "hi"}, "ttl_ms": 30000},
            {"id": "h-2", "scope": "global", "sites": ["eu"], "event": "deploy.reload", "topic": "ops"}
        ]))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let ids: serde_json::Value = response.json().await.unwrap();
    assert_eq!(ids, serde_json::json!({"ids": ["h-1", "h-2"]}));

    let raw = router
        .http
        .post(router.url("/v1/notifications?id=h-3&users=carol&event=file.ready"))
        .header("authorization", format!("Bearer {API_KEY}"))
        .header("content-type", "image/png")
        .body(vec![0x89, b'P', b'N', b'G', 0xff])
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 202);

    let got = broker
        .take_notifications(&broker.edge_queue, 3, Duration::from_secs(10))
        .await;
    let ids: Vec<&str> = got.iter().map(|(n, _)| n.id.as_str()).collect();
    assert_eq!(ids, ["h-1", "h-2", "h-3"], "in the order accepted");
    // The batch went as one bundle, the single request as a plain message.
    let kinds: Vec<Option<&str>> = got
        .iter()
        .map(|(_, p)| p.kind().as_ref().map(|k| k.as_str()))
        .collect();
    assert_eq!(kinds, [Some("herald.bundle"), Some("herald.bundle"), None]);
    assert_eq!(router.metric("herald_amqp_bundles_total").await, 1.0);
    assert_eq!(router.metric("herald_amqp_bundled_total").await, 2.0);
    let parsed: BTreeMap<String, _> = got.into_iter().map(|(n, _)| (n.id.clone(), n)).collect();
    let h1 = &parsed["h-1"];
    assert_eq!(h1.users, ["alice", "bob"]);
    assert_eq!(&h1.payload[..], br#"{"text":"hi"}"#);
    assert_eq!(h1.ttl, Some(Duration::from_secs(30)));
    assert_eq!(h1.content_type, "application/json");
    let h2 = &parsed["h-2"];
    assert_eq!(h2.scope, herald_protocol::envelope::Scope::Global);
    assert_eq!(h2.sites, ["eu"]);
    assert_eq!(h2.topic.as_deref(), Some("ops"));
    assert_eq!(&h2.payload[..], b"null");
    let h3 = &parsed["h-3"];
    assert_eq!(&h3.payload[..], &[0x89, b'P', b'N', b'G', 0xff]);
    assert_eq!(h3.content_type, "image/png");

    let m = router.metrics().await;
    assert!(
        m.contains("herald_notifications_accepted_total{source=\"http\"} 3"),
        "{m}"
    );
    router.stop().await;
    broker.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_broker_readiness_and_publish_answer_503() {
    let topology = Topology::with_suffix(&suffix());
    // Nothing listens on port 1.
    let router = Router::start(&topology, |c| {
        c.amqp.url = "amqp://guest:guest@127.0.0.1:1/%2f".into();
    })
    .await;
    // Never connected: alive, but not ready from the start, and it says why.
    let (status, body) = router.get_json("/healthz").await;
    assert_eq!((status, body["status"].as_str()), (200, Some("ok")));
    let (status, body) = router.get_json("/readyz").await;
    assert_eq!(status, 503);
    assert_eq!(
        body,
        serde_json::json!({"status": "unavailable", "reasons": ["broker disconnected"]})
    );
    let response = router
        .http
        .post(router.url("/v1/notifications"))
        .bearer_auth(API_KEY)
        .json(&serde_json::json!({"users": ["a"], "event": "e"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unavailable", "{body}");
    // lapin retries the TCP connect with its own backoff before it reports
    // a failure: wait for the first one to be counted.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while router.metric("herald_amqp_connect_failures_total").await < 1.0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no connect failure counted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(router.metric("herald_amqp_connected").await, 0.0);
    router.stop().await;
}

/// A broker that comes up after the router: not ready until connected,
/// ready once it is, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_router_becomes_ready_once_its_broker_is_up() {
    let topology = Topology::with_suffix(&suffix());
    let gate = Gate::start("127.0.0.1:5672", false).await;
    let url = amqp_url().replace("127.0.0.1:5672", &gate.addr.to_string());
    let router = Router::start(&topology, |c| c.amqp.url = url).await;
    let (status, body) = router.get_json("/readyz").await;
    assert_eq!(status, 503);
    assert_eq!(body["reasons"], serde_json::json!(["broker disconnected"]));
    gate.set(true);
    let body = router.until_status("/readyz", 200).await;
    assert_eq!(body["status"], "ready");
    // The broker goes away again: so does readiness; liveness stays.
    gate.set(false);
    let body = router.until_status("/readyz", 503).await;
    assert_eq!(body["reasons"], serde_json::json!(["broker disconnected"]));
    assert_eq!(router.get_json("/healthz").await.0, 200);
    router.stop().await;
    let broker = Broker::connect(topology).await;
    broker.cleanup().await;
}

/// Someone deletes the publications queue, the edges exchange, the dead
/// queue: the router notices (the broker cancels its consumer; a publish
/// fails; a dead letter is unroutable), and declares everything again on its
/// next connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_names_are_declared_again() {
    let topology = Topology::with_suffix(&suffix());
    let broker = Broker::connect(topology.clone()).await;
    let router = Router::start(&topology, |_| {}).await;
    router.wait_ready().await;
    let mut h = FieldTable::default();
    h.insert("users".into(), strings(&["alice"]));
    h.insert("event".into(), text("chat.message"));

    broker
        .channel
        .queue_delete(
            topology.queue.as_str().into(),
            QueueDeleteOptions::default(),
        )
        .await
        .unwrap();
    // Back within the reconnect delay: the queue exists and is consumed.
    let deadline = Instant::now() + Duration::from_secs(10);
    while router.metric("herald_amqp_reconnects_total").await < 1.0 {
        assert!(
            Instant::now() < deadline,
            "no reconnect after the queue went"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    router.wait_ready().await;
    assert!(
        broker
            .publish("", publication("after-queue", h.clone()), b"1")
            .await
    );
    let got = broker
        .take(&broker.edge_queue, 1, Duration::from_secs(10))
        .await;
    assert_eq!(
        got[0].properties.message_id().as_ref().unwrap().as_str(),
        "after-queue"
    );

    broker
        .channel
        .exchange_delete(
            topology.edges_exchange.as_str().into(),
            lapin::options::ExchangeDeleteOptions::default(),
        )
        .await
        .unwrap();
    // The first publish to the missing exchange fails (the broker closes
    // the channel: 404); the delivery is not acked, so it is forwarded again
    // once the router has reconnected and declared the exchange.
    assert!(
        broker
            .publish("", publication("after-exchange", h.clone()), b"2")
            .await
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while router.metric("herald_amqp_reconnects_total").await < 2.0 {
        assert!(
            Instant::now() < deadline,
            "no reconnect after the exchange went"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    router.wait_ready().await;
    // Deleting the exchange removed the edge's binding: bind again.
    broker
        .channel
        .queue_bind(
            broker.edge_queue.as_str().into(),
            topology.edges_exchange.as_str().into(),
            "".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    assert!(
        broker
            .publish("", publication("bound-again", h), b"3")
            .await
    );
    let got = broker
        .take(&broker.edge_queue, 1, Duration::from_secs(10))
        .await;
    let id = got[0].properties.message_id().as_ref().unwrap().to_string();
    // "after-exchange" may have been forwarded while no queue was bound.
    assert!(id == "bound-again" || id == "after-exchange", "{id}");

    // The dead queue goes: a refused publication is not acked into the void
    // but comes back once the queue is declared again.
    broker
        .channel
        .queue_delete(
            topology.dead_queue.as_str().into(),
            QueueDeleteOptions::default(),
        )
        .await
        .unwrap();
    let mut bad = FieldTable::default();
    bad.insert("users".into(), text("alice"));
    bad.insert("event".into(), text("chat.message"));
    assert!(broker.publish("", publication("refused", bad), b"4").await);
    let deadline = Instant::now() + Duration::from_secs(10);
    while router.metric("herald_amqp_reconnects_total").await < 3.0 {
        assert!(
            Instant::now() < deadline,
            "no reconnect after the dead queue went"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    router.wait_ready().await;
    let got = broker
        .take(&topology.dead_queue, 1, Duration::from_secs(10))
        .await;
    assert_eq!(
        got[0].properties.message_id().as_ref().unwrap().as_str(),
        "refused"
    );
    router.stop().await;
    assert_eq!(
        broker.ready(&topology.queue).await,
        0,
        "every delivery acked"
    );
    broker.cleanup().await;
}

/// While publications stream in, the broker closes the router's connection
/// (twice). Every publication the broker confirmed to the backend reaches the
/// edges at least once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publications_survive_the_router_losing_its_connection() {
    const WINDOW: usize = 20;
    let topology = Topology::with_suffix(&suffix());
    let broker = Broker::connect(topology.clone()).await;
    let router = Router::start(&topology, |c| c.amqp.prefetch = 64).await;
    router.wait_ready().await;

    // The edge: report what arrives, by id.
    let edge_channel = broker.connection.create_channel().await.unwrap();
    let mut consumer = edge_channel
        .basic_consume(
            broker.edge_queue.as_str().into(),
            "edge".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let edge = tokio::spawn(async move {
        while let Some(Ok(d)) = consumer.next().await {
            let id = d.properties.message_id().as_ref().unwrap().to_string();
            d.ack(BasicAckOptions::default()).await.unwrap();
            if seen_tx.send(id).is_err() {
                break;
            }
        }
    });

    // The backend: a steady stream on its own channel, in windows of
    // confirms, until told to stop; it returns the ids the broker confirmed.
    let backend_channel = broker.connection.create_channel().await.unwrap();
    backend_channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let stop = CancellationToken::new();
    let backend = tokio::spawn({
        let stop = stop.clone();
        let exchange = topology.exchange.clone();
        async move {
            let mut confirmed = HashSet::new();
            let mut sent = 0usize;
            while !stop.is_cancelled() {
                let mut confirms = Vec::new();
                for _ in 0..WINDOW {
                    let id = format!("s-{sent}");
                    let mut h = FieldTable::default();
                    h.insert("users".into(), strings(&[&format!("u{}", sent % 7)]));
                    h.insert("event".into(), text("stream.tick"));
                    let confirm = backend_channel
                        .basic_publish(
                            exchange.as_str().into(),
                            "stream".into(),
                            BasicPublishOptions::default(),
                            format!("{{\"n\":{sent}}}").as_bytes(),
                            publication(&id, h),
                        )
                        .await
                        .unwrap();
                    confirms.push((id, confirm));
                    sent += 1;
                }
                for (id, confirm) in confirms {
                    if confirm.await.is_ok_and(|c| c.is_ack()) {
                        confirmed.insert(id);
                    }
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            (sent, confirmed)
        }
    });

    // Cut the router's connection twice while the stream flows; the second
    // cut only once the router is back. The sleeps pace the stream (how much
    // flows between cuts); every wait for a state is on the state itself.
    tokio::time::sleep(Duration::from_millis(300)).await;
    close_connection_from_broker(&router.connection_name).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    router.wait_ready().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    close_connection_from_broker(&router.connection_name).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.cancel();
    let (sent, confirmed) = backend.await.unwrap();
    assert_eq!(
        confirmed.len(),
        sent,
        "the backend's own connection was not cut"
    );
    assert!(
        sent > 500,
        "the stream was too thin to test anything: {sent}"
    );

    let mut received: HashMap<String, usize> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !confirmed.iter().all(|id| received.contains_key(id)) {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, seen_rx.recv()).await {
            Ok(Some(id)) => *received.entry(id).or_default() += 1,
            _ => {
                let missing = confirmed
                    .iter()
                    .filter(|id| !received.contains_key(*id))
                    .count();
                panic!("{missing} of {sent} confirmed publications never reached the edge");
            }
        }
    }
    let duplicates: usize = received.values().map(|n| n - 1).sum();
    eprintln!("{sent} publications, {duplicates} delivered twice (at-least-once)");
    assert!(router.metric("herald_amqp_reconnects_total").await >= 2.0);
    assert!(router.metric("herald_amqp_disconnects_total").await >= 2.0);
    router.wait_ready().await;
    router.stop().await;
    edge.abort();
    assert_eq!(
        broker.ready(&topology.queue).await,
        0,
        "every delivery acked"
    );
    // The edge's channel closes with the connection in cleanup. Closing it
    // here raced an ack the aborted edge task had queued: the broker got a
    // frame on a channel it had closed and closed the whole connection
    // (CHANNEL_ERROR), failing the cleanup once in CI.
    broker.cleanup().await;
}

/// The wall clock as the router stamps acceptance.
fn accepted_now() -> u64 {
    herald_protocol::envelope::Accepted::at(std::time::SystemTime::now())
        .unix_micros()
        .unwrap()
}
