//! The cluster-wide `GET /v1/stats` of two routers sharing a root and a
//! Redis, against the real RabbitMQ and Redis: edges' stats reports taken
//! from the root's queue (a bad one dead-lettered), each router's summary
//! in Redis, the whole added up with every part listed and aged, a part
//! past the stale limit listed stale and still counted, the cache
//! validators, and bad paging refused naming the field.

mod harness;

use std::time::{Duration, Instant};

use harness::*;
use herald_amqp::Topology;
use herald_amqp::envelope::headers;
use herald_engine::schedule::config::TopicPolicy;
use herald_engine::stats::part::Part;
use herald_engine::stats::window::{Event, Rolling};
use lapin::BasicProperties;
use lapin::options::BasicPublishOptions;
use serde_json::Value;

/// An edge's report measured `age_ms` ago: `delivered` per topic, two
/// WebSocket sessions.
fn edge_part(id: &str, age_ms: u64, delivered: &[(&str, u64)]) -> Part {
    let at_ms = now_ms() - age_ms;
    let mut topics = std::collections::BTreeMap::new();
    for (topic, n) in delivered {
        let mut r = Rolling::new();
        r.record(Event::Delivered, *n, at_ms);
        topics.insert((*topic).to_owned(), r.windows(at_ms));
    }
    Part {
        kind: "edge".into(),
        id: id.into(),
        at_ms,
        sessions: [("websocket".to_owned(), 2)].into(),
        mailboxes: 2,
        deliveries: delivered.iter().map(|(_, n)| n).sum(),
        topics,
        ..Part::default()
    }
}

async fn send_report(broker: &Broker, props: BasicProperties, body: &[u8]) {
    let confirm = broker
        .channel
        .basic_publish(
            broker.topology.stats_exchange().as_str().into(),
            "".into(),
            BasicPublishOptions::default(),
            body,
            props,
        )
        .await
        .unwrap()
        .await
        .unwrap();
    assert!(confirm.is_ack());
}

fn topic<'a>(stats: &'a Value, name: &str) -> Option<&'a Value> {
    stats["topics"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
}

fn hour(stats: &Value, name: &str, field: &str) -> u64 {
    topic(stats, name).map_or(0, |t| t["last_hour"][field].as_u64().unwrap())
}

impl Router {
    /// Poll `/v1/stats` until `done` holds, failing after 20 s.
    async fn stats_until(&self, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let (status, body) = self.get_json("/v1/stats").await;
            if status == 200 && done(&body) {
                return body;
            }
            assert!(Instant::now() < deadline, "never {what}: {status} {body}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_routers_answer_the_sum_of_every_part() {
    let topology = Topology::with_suffix(&suffix());
    let broker = Broker::connect(topology.clone()).await;
    let prefix = format!(
        "herald-test{}",
        topology.exchange.trim_start_matches("herald")
    );
    let _redis = RedisPrefix(prefix.clone());
    let tune = |c: &mut herald_router::config::Config| {
        c.redis.url = Some(redis_url());
        c.redis.prefix = prefix.clone();
        // The stale limit.
        c.redis.presence_edge_ttl_ms = 30_000;
        c.schedule
            .topics
            .insert("billing".into(), TopicPolicy::default());
    };
    let r1 = Router::start(&topology, tune).await;
    let r2 = Router::start(&topology, tune).await;
    r1.wait_ready().await;
    r2.wait_ready().await;

    // Two edges report: one fresh, one whose last report is past the
    // stale limit. A topic no router knows folds into `other`.
    let fresh = edge_part("edge-1", 0, &[("billing", 3), ("unregistered", 2)]);
    let old = edge_part("edge-2", 60_000, &[("billing", 4)]);
    for p in [&fresh, &old] {
        let (props, body) = herald_amqp::stats::encode(p);
        send_report(&broker, props, &body).await;
    }
    // A report that is not one: dead-lettered, naming the field.
    let (props, _) = herald_amqp::stats::encode(&fresh);
    send_report(&broker, props, b"{not json").await;
    let dead = broker
        .take(&topology.dead_queue, 1, Duration::from_secs(10))
        .await;
    assert_eq!(
        header_text(&dead[0].properties, headers::FIELD).as_deref(),
        Some("body")
    );
    assert!(header_text(&dead[0].properties, headers::ERROR).is_some());

    // One publication accepted by router 1 under `billing`.
    let r = r1
        .http
        .post(r1.url("/v1/notifications"))
        .bearer_auth(API_KEY)
        .json(&serde_json::json!({"users": ["alice"], "event": "invoice", "topic": "billing"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);

    // Router 2 answers for the whole: both routers (router 1's summary
    // from Redis, with its accepted publication), both edges.
    let stats = r2
        .stats_until("every part, router 1's publication counted", |s| {
            s["parts"].as_array().is_some_and(|p| p.len() == 4)
                && hour(s, "billing", "accepted") == 1
        })
        .await;
    assert_eq!(stats["mode"], "cluster");
    let parts = stats["parts"].as_array().unwrap();
    let kinds: Vec<(&str, &str, bool)> = parts
        .iter()
        .map(|p| {
            (
                p["kind"].as_str().unwrap(),
                p["id"].as_str().unwrap(),
                p["stale"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(kinds[0], ("edge", "edge-1", false));
    assert_eq!(kinds[1], ("edge", "edge-2", true));
    assert_eq!(
        kinds[2..]
            .iter()
            .filter(|k| k.0 == "router" && !k.2)
            .count(),
        2,
        "{kinds:?}"
    );
    assert!(parts[1]["age_ms"].as_u64().unwrap() >= 60_000);
    // The sum equals the parts: the stale edge still counts.
    assert_eq!(stats["sessions"]["total"], 4);
    assert_eq!(stats["sessions"]["by_transport"]["websocket"], 4);
    assert_eq!(stats["mailboxes"], 4);
    assert_eq!(stats["deliveries"]["total"], 9);
    assert_eq!(hour(&stats, "billing", "delivered"), 7);
    assert_eq!(hour(&stats, "other", "delivered"), 2);
    assert!(topic(&stats, "unregistered").is_none());
    // Router 1 answers the same figures.
    let one = r1
        .stats_until("router 1 sees the same", |s| {
            s["parts"].as_array().is_some_and(|p| p.len() == 4)
        })
        .await;
    assert_eq!(one["sessions"]["total"], 4);
    assert_eq!(hour(&one, "billing", "delivered"), 7);
    assert_eq!(hour(&one, "billing", "accepted"), 1);

    // Cacheable: headers, and a matching ETag gets 304.
    let r = r2.http.get(r2.url("/v1/stats")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["cache-control"],
        herald_engine::stats::answer::CACHE_CONTROL
    );
    assert!(r.headers().contains_key("last-modified"));
    let etag = r.headers()["etag"].clone();
    let r = r2
        .http
        .get(r2.url("/v1/stats"))
        .header("if-none-match", etag.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 304, "figures unchanged, same ETag");
    assert_eq!(r.headers()["etag"], etag);

    // Topics are paged.
    let (status, page) = r2.get_json("/v1/stats?topics_limit=1").await;
    assert_eq!(status, 200);
    assert_eq!(page["topics"]["items"][0]["name"], "billing");
    assert_eq!(page["topics"]["next"], "billing");

    // Bad paging: a JSON 422 naming the field, counted.
    for (query, field) in [
        ("topics_limit=0", "topics_limit"),
        ("topics_limit=many", "topics_limit"),
        ("topics_after=", "topics_after"),
    ] {
        let (status, body) = r2.get_json(&format!("/v1/stats?{query}")).await;
        assert_eq!(status, 422, "{query}: {body}");
        assert_eq!(body["error"]["field"], field, "{query}: {body}");
    }
    assert_eq!(r2.metric("herald_stats_refused_total").await, 3.0);

    // Each report was taken by one router or the other.
    let taken = |result: &'static str| {
        let (r1, r2) = (&r1, &r2);
        async move {
            let series = format!("herald_stats_intake_reports_total{{result=\"{result}\"}}");
            r1.metric(&series).await + r2.metric(&series).await
        }
    };
    assert_eq!(taken("recorded").await, 2.0);
    assert_eq!(taken("rejected").await, 1.0);

    r1.stop().await;
    r2.stop().await;
    broker.cleanup().await;
}
