//! One idempotency rule for every path (docs/publishing.md#idempotency),
//! across two routers sharing a Redis store, against the real RabbitMQ and
//! Redis: an id accepted over HTTP or AMQP, immediate or delayed, makes a
//! later publication with it a duplicate, whichever router and path takes
//! that one; the duplicate's answer says so and it reaches no edge.

mod harness;

use std::time::{Duration, Instant};

use harness::*;
use herald_amqp::Topology;
use lapin::types::FieldTable;
use serde_json::{Value, json};

/// Two routers on one topology and one Redis prefix.
async fn two_routers(topology: &Topology) -> (Router, Router, RedisPrefix) {
    let prefix = format!(
        "herald-test-ids{}",
        topology.exchange.trim_start_matches("herald")
    );
    let start = || {
        Router::start(topology, |c| {
            c.redis.url = Some(redis_url());
            c.redis.prefix = prefix.clone();
        })
    };
    let a = start().await;
    let b = start().await;
    a.wait_ready().await;
    b.wait_ready().await;
    (a, b, RedisPrefix(prefix))
}

async fn post(router: &Router, body: Value) -> Value {
    let r = router
        .http
        .post(router.url("/v1/notifications"))
        .bearer_auth(API_KEY)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 202);
    r.json().await.unwrap()
}

fn note(id: &str, extra: Value) -> Value {
    let mut n = json!({"id": id, "users": ["alice"], "event": "e", "payload": {}});
    for (k, v) in extra.as_object().unwrap() {
        n[k] = v.clone();
    }
    n
}

/// The duplicates answered over HTTP, counted on both routers.
async fn duplicates(a: &Router, b: &Router, source: &str) -> f64 {
    let series = format!("herald_publish_duplicates_total{{source=\"{source}\"}}");
    let mut sum = 0.0;
    for r in [a, b] {
        let text = r.metrics().await;
        sum += text
            .lines()
            .find_map(|l| l.strip_prefix(series.as_str()))
            .map_or(0.0, |v| v.trim().parse().unwrap());
    }
    sum
}

/// Whether the shared ledger holds `id` (its key, in whichever shard).
fn recorded(prefix: &str, id: &str) -> bool {
    let client = redis::Client::open(redis_url()).unwrap();
    let mut c = client.get_connection().unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}:*:id:{id}"))
        .query(&mut c)
        .unwrap();
    !keys.is_empty()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_is_taken_once_across_routers_and_paths() {
    let topology = Topology::with_suffix(&suffix());
    let broker = Broker::connect(topology.clone()).await;
    let (a, b, prefix) = two_routers(&topology).await;

    // Immediate on A, then delayed on B within the window: a duplicate,
    // answered with the first one's due time (its acceptance), not stored.
    let first = post(&a, note("x-1", json!({}))).await;
    assert!(first.get("duplicates").is_none(), "{first}");
    let second = post(&b, note("x-1", json!({"delay_ms": 60_000}))).await;
    assert_eq!(second["duplicates"], json!(["x-1"]), "{second}");
    assert_eq!(second["scheduled"][0]["duplicate"], true, "{second}");
    let due = second["scheduled"][0]["due_at_ms"].as_u64().unwrap();
    assert!(due <= now_ms(), "the holder's due time: its acceptance");
    let (status, _) = b.get_json("/v1/notifications/x-1").await;
    assert_eq!(status, 401, "the status API needs the key");
    let r = b
        .http
        .get(b.url("/v1/notifications/x-1"))
        .bearer_auth(API_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404, "nothing was stored");

    // Delayed on B, then immediate on A: a duplicate of the stored one.
    post(&b, note("x-2", json!({"delay_ms": 60_000}))).await;
    let again = post(&a, note("x-2", json!({}))).await;
    assert_eq!(again["duplicates"], json!(["x-2"]), "{again}");

    // The same id twice in one batch: the second is the duplicate.
    let batch = post(&a, json!([note("x-3", json!({})), note("x-3", json!({}))])).await;
    assert_eq!(batch["ids"], json!(["x-3", "x-3"]));
    assert_eq!(batch["duplicates"], json!(["x-3"]), "{batch}");
    assert_eq!(duplicates(&a, &b, "http").await, 3.0);

    // Over AMQP: an immediate publication repeating x-1 is acked and goes
    // nowhere; a fresh one goes to the edges and its id is recorded in the
    // shared ledger, so an HTTP publication with it on either router is a
    // duplicate.
    assert!(
        broker
            .publish("k", publication("x-1", users_header()), b"{}")
            .await
    );
    assert!(
        broker
            .publish("k", publication("x-4", users_header()), b"{}")
            .await
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    while duplicates(&a, &b, "amqp").await < 1.0 || !recorded(&prefix.0, "x-4") {
        assert!(
            Instant::now() < deadline,
            "the AMQP duplicate was never counted, or x-4 never recorded"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for r in [&a, &b] {
        let late = post(r, note("x-4", json!({"delay_ms": 1_000}))).await;
        assert_eq!(late["duplicates"], json!(["x-4"]), "{late}");
    }

    // The edges got each id once: x-1 and x-3 from HTTP, x-4 from AMQP;
    // no repeat of x-1, and nothing of x-2 yet (due in a minute).
    let got = broker
        .take_notifications(&broker.edge_queue, 3, Duration::from_secs(10))
        .await;
    let mut ids: Vec<&str> = got.iter().map(|(n, _)| n.id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["x-1", "x-3", "x-4"]);
    assert_eq!(
        broker.ready(&topology.queue).await,
        0,
        "every publication acked"
    );
    assert_eq!(
        broker.ready(&broker.edge_queue).await,
        0,
        "nothing more forwarded"
    );
    a.stop().await;
    b.stop().await;
    broker.cleanup().await;
}

fn users_header() -> FieldTable {
    let mut h = FieldTable::default();
    h.insert("users".into(), strings(&["alice"]));
    h.insert("event".into(), text("e"));
    h
}
