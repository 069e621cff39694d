//! Delayed notifications through the distributed router, against the real
//! RabbitMQ and Redis (127.0.0.1:6379, or `HERALD_TEST_REDIS_URL`):
//! timing headers over AMQP, cancel messages, bad timing headers, and
//! when-online released by an edge's presence report.

mod harness;

use std::time::{Duration, Instant};

use harness::*;
use herald_amqp::Topology;
use herald_amqp::envelope::{CANCEL_TYPE, headers};
use herald_amqp::presence::{PresenceAmqp, PresenceReport};
use lapin::BasicProperties;
use lapin::options::BasicPublishOptions;
use lapin::types::{AMQPValue, FieldTable};

/// A router with a delayed store under a prefix of its own.
async fn router_with_redis(topology: &Topology) -> (Router, RedisPrefix) {
    let prefix = format!(
        "herald-test{}",
        topology.exchange.trim_start_matches("herald")
    );
    let router = Router::start(topology, |c| {
        c.redis.url = Some(redis_url());
        c.redis.prefix = prefix.clone();
        c.schedule.lease_ms = 1000;
    })
    .await;
    router.wait_ready().await;
    (router, RedisPrefix(prefix))
}

fn timed(id: &str, users: &[&str], extra: &[(&str, AMQPValue)]) -> BasicProperties {
    let mut h = FieldTable::default();
    h.insert(headers_name("users"), strings(users));
    h.insert(headers_name("event"), text("reminder.due"));
    for (k, v) in extra {
        h.insert(headers_name(k), v.clone());
    }
    publication(id, h)
}

fn headers_name(s: &str) -> lapin::types::ShortString {
    s.into()
}

impl Router {
    async fn status(&self, id: &str) -> (u16, serde_json::Value) {
        let r = self
            .http
            .get(self.url(&format!("/v1/notifications/{id}")))
            .bearer_auth(API_KEY)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or_default())
    }

    /// Poll until `id` is in `state`.
    async fn wait_state(&self, id: &str, state: &str) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let (code, body) = self.status(id).await;
            if code == 200 && body["state"] == state {
                return body;
            }
            assert!(
                Instant::now() < deadline,
                "{id} never became {state}: {code} {body}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timing_headers_delay_a_publication_and_it_fires_to_the_edges() {
    let topology = Topology::with_suffix(&suffix());
    let broker = Broker::connect(topology.clone()).await;
    let (router, _redis) = router_with_redis(&topology).await;
    let sent_at = now_ms();
    assert!(
        broker
            .publish(
                "reminder",
                timed(
                    "d-300",
                    &["alice"],
                    &[(headers::DELAY_MS, AMQPValue::LongInt(300))]
                ),
                b"{\"n\":1}",
            )
            .await
    );
    assert!(
        broker
            .publish(
                "reminder",
                timed(
                    "d-past",
                    &["alice"],
                    // A minute ago, in epoch seconds: due at once.
                    &[(
                        headers::DELIVER_AT,
                        AMQPValue::LongLongInt((sent_at / 1000) as i64 - 60)
                    )]
                ),
                b"{}",
            )
            .await
    );
    let status = router.wait_state("d-300", "delivered").await;
    let due = status["due_at_ms"].as_u64().unwrap();
    assert!(due >= sent_at + 300, "due {due} fixed at acceptance");
    router.wait_state("d-past", "delivered").await;
    let got = broker
        .take_notifications(&broker.edge_queue, 2, Duration::from_secs(10))
        .await;
    let ids: Vec<_> = got.iter().map(|(n, _)| n.id.as_str()).collect();
    assert!(ids.contains(&"d-300") && ids.contains(&"d-past"), "{ids:?}");
    // The forward is an ordinary notification (or a bundle of them): no
    // timing headers left.
    for (_, p) in &got {
        assert!(p.headers().as_ref().is_none_or(|h| {
            !h.contains_key(headers::DELAY_MS) && !h.contains_key(headers::DELIVER_AT)
        }));
    }
    assert_eq!(router.metric("herald_delayed_fired_total").await, 2.0);
    assert_eq!(
        broker.ready(&topology.queue).await,
        0,
        "every publication acked"
    );
    router.stop().await;
    broker.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_message_cancels_and_an_unknown_id_is_dead_lettered() {
    let topology = Topology::with_suffix(&suffix());
    let broker = Broker::connect(topology.clone()).await;
    let (router, _redis) = router_with_redis(&topology).await;
    let later = timed(
        "c-1",
        &["bob"],
        &[(headers::DELAY_MS, AMQPValue::LongInt(600_000))],
    );
    assert!(broker.publish("reminder", later, b"{}").await);
    router.wait_state("c-1", "scheduled").await;
    let cancel = BasicProperties::default()
        .with_message_id("c-1".into())
        .with_type(CANCEL_TYPE.into());
    assert!(broker.publish("cancel", cancel, b"").await);
    router.wait_state("c-1", "cancelled").await;
    let unknown = BasicProperties::default()
        .with_message_id("c-nope".into())
        .with_type(CANCEL_TYPE.into());
    assert!(broker.publish("cancel", unknown, b"").await);
    let dead = broker
        .take(&topology.dead_queue, 1, Duration::from_secs(10))
        .await;
    assert_eq!(
        header_text(&dead[0].properties, headers::FIELD).as_deref(),
        Some("message_id")
    );
    let reason = header_text(&dead[0].properties, headers::ERROR).unwrap();
    assert!(reason.contains("no delayed notification"), "{reason}");
    router.stop().await;
    broker.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_timing_headers_are_dead_lettered_naming_the_header() {
    let topology = Topology::with_suffix(&suffix());
    let broker = Broker::connect(topology.clone()).await;
    let (router, _redis) = router_with_redis(&topology).await;
    let cases = [
        (
            "neg",
            vec!["u"],
            headers::DELAY_MS,
            AMQPValue::LongInt(-5),
            "negative",
        ),
        (
            "far",
            vec!["u"],
            headers::DELAY_MS,
            AMQPValue::LongLongInt(i64::MAX),
            "limit",
        ),
        (
            "text",
            vec!["u"],
            headers::DELAY_MS,
            text("soon"),
            "integer",
        ),
        (
            "when",
            vec!["u"],
            headers::DELIVER_AT,
            text("next tuesday"),
            "RFC 3339",
        ),
        (
            "two",
            vec!["u", "v"],
            headers::WHEN_ONLINE,
            AMQPValue::Boolean(true),
            "exactly one user",
        ),
    ];
    for (id, users, header, value, _) in &cases {
        let p = timed(id, users, &[(header, value.clone())]);
        assert!(broker.publish("reminder", p, b"{}").await);
    }
    let dead = broker
        .take(&topology.dead_queue, cases.len(), Duration::from_secs(10))
        .await;
    for (id, _, header, _, words) in &cases {
        let d = dead
            .iter()
            .find(|d| d.properties.message_id().as_ref().map(|m| m.as_str()) == Some(id))
            .unwrap_or_else(|| panic!("{id} not dead-lettered"));
        assert_eq!(
            header_text(&d.properties, headers::FIELD).as_deref(),
            Some(*header),
            "{id}"
        );
        let reason = header_text(&d.properties, headers::ERROR).unwrap();
        assert!(reason.contains(words), "{id}: {reason}");
    }
    router.stop().await;
    broker.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_online_waits_for_an_edge_to_report_the_user() {
    let topology = Topology::with_suffix(&suffix());
    let broker = Broker::connect(topology.clone()).await;
    let (router, _redis) = router_with_redis(&topology).await;
    let p = timed(
        "w-1",
        &["carol"],
        &[(headers::WHEN_ONLINE, AMQPValue::Boolean(true))],
    );
    assert!(broker.publish("digest", p, b"{}").await);
    router.wait_state("w-1", "held").await;
    // An edge says carol's first session started.
    let report = PresenceReport {
        edge: "edge-t".into(),
        boot: "b1".into(),
        seq: 0,
        online: vec!["carol".into()],
        offline: vec![],
        // Without detail, as an edge of the previous version sends it.
        detail: vec![],
        ..PresenceReport::default()
    };
    let confirm = broker
        .channel
        .basic_publish(
            topology.presence_exchange.as_str().into(),
            "".into(),
            BasicPublishOptions::default(),
            b"",
            report.to_amqp(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    assert!(confirm.is_ack());
    let s = router.wait_state("w-1", "delivered").await;
    assert_eq!(s["attempts"], 2);
    let got = broker
        .take_notifications(&broker.edge_queue, 1, Duration::from_secs(10))
        .await;
    assert_eq!(got[0].0.id, "w-1");
    // Online now (the edge is alive with that boot): the next one goes at once.
    let p = timed(
        "w-2",
        &["carol"],
        &[(headers::WHEN_ONLINE, AMQPValue::Boolean(true))],
    );
    assert!(broker.publish("digest", p, b"{}").await);
    router.wait_state("w-2", "delivered").await;
    assert_eq!(
        router.metric("herald_delayed_presence_reports_total").await,
        1.0
    );
    router.stop().await;
    broker.cleanup().await;
}

/// With `[redis]`, a router is ready only while Redis answers: a Redis that
/// goes away is named in the 503, and readiness comes back with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_the_delayed_store() {
    let topology = Topology::with_suffix(&suffix());
    let broker = Broker::connect(topology.clone()).await;
    let url = redis_url();
    let authority = url
        .strip_prefix("redis://")
        .and_then(|rest| rest.split('/').next())
        .and_then(|a| a.rsplit('@').next())
        .expect("a redis:// URL")
        .to_owned();
    let gate = Gate::start(&authority, true).await;
    let via_gate = url.replace(&authority, &gate.addr.to_string());
    let prefix = format!(
        "herald-test{}",
        topology.exchange.trim_start_matches("herald")
    );
    let _keys = RedisPrefix(prefix.clone());
    let router = Router::start(&topology, |c| {
        c.redis.url = Some(via_gate);
        c.redis.prefix = prefix;
    })
    .await;
    let body = router.until_status("/readyz", 200).await;
    assert_eq!(body["status"], "ready");
    gate.set(false);
    let body = router.until_status("/readyz", 503).await;
    assert_eq!(body["reasons"], serde_json::json!(["store unreachable"]));
    assert_eq!(router.get_json("/healthz").await.0, 200);
    gate.set(true);
    router.until_status("/readyz", 200).await;
    router.stop().await;
    broker.cleanup().await;
}

/// A router with a delayed store whose callbacks may reach loopback
/// (`[callbacks] allow_private_networks`).
async fn router_with_callbacks(topology: &Topology) -> (Router, RedisPrefix) {
    let prefix = format!(
        "herald-test{}",
        topology.exchange.trim_start_matches("herald")
    );
    let router = Router::start(topology, |c| {
        c.redis.url = Some(redis_url());
        c.redis.prefix = prefix.clone();
        c.schedule.lease_ms = 1000;
        c.callbacks.allow_private_networks = true;
    })
    .await;
    router.wait_ready().await;
    (router, RedisPrefix(prefix))
}

impl Router {
    /// Poll until `id` has a status (it went through the delayed store).
    async fn wait_stored(&self, id: &str) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let (code, body) = self.status(id).await;
            if code == 200 {
                return body;
            }
            assert!(
                Instant::now() < deadline,
                "{id} was never stored: {code} {body}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// An immediate publication with a `callback-url` of its own, or under a
/// topic that has one, goes through the delayed store (due now, so its
/// callback is durable); its browser part still reaches the edges. One
/// without goes straight to the edges and has no status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callback_makes_an_immediate_publication_go_through_the_store() {
    let topology = Topology::with_suffix(&suffix());
    let broker = Broker::connect(topology.clone()).await;
    let (router, _redis) = router_with_callbacks(&topology).await;
    let put = router
        .http
        .put(router.url("/v1/topics/billing"))
        .bearer_auth(API_KEY)
        // A recheck and a call must fit in the 1 s lease of these tests.
        .json(&serde_json::json!({"callback_url": "http://127.0.0.1:9/topic", "timeout_ms": 150}))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status().as_u16(), 201);

    let sent_at = now_ms();
    let own = timed(
        "cb-own",
        &["alice"],
        &[
            (headers::CALLBACK_URL, text("http://127.0.0.1:9/cb")),
            (headers::RECHECK_URL, text("http://127.0.0.1:9/check")),
        ],
    );
    assert!(broker.publish("reminder", own, b"{}").await);
    let status = router.wait_stored("cb-own").await;
    let due = status["due_at_ms"].as_u64().unwrap();
    assert!(
        (sent_at..=now_ms()).contains(&due),
        "due at acceptance: {status}"
    );
    let got = broker
        .take_notifications(&broker.edge_queue, 1, Duration::from_secs(10))
        .await;
    assert_eq!(got[0].0.id, "cb-own", "its browser part is delivered");

    let under_topic = timed("cb-topic", &["alice"], &[("topic", text("billing"))]);
    assert!(broker.publish("reminder", under_topic, b"{}").await);
    router.wait_stored("cb-topic").await;
    let callback_only = timed(
        "cb-only",
        &["alice"],
        &[
            ("topic", text("billing")),
            (headers::BROWSERS, AMQPValue::Boolean(false)),
        ],
    );
    assert!(broker.publish("reminder", callback_only, b"{}").await);
    router.wait_stored("cb-only").await;

    let plain = timed("plain", &["alice"], &[("topic", text("chat"))]);
    assert!(broker.publish("reminder", plain, b"{}").await);
    // The stored ones fire to the edges too, in no set order with it.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    while !seen.iter().any(|id| id == "plain") {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "plain never reached the edges: {seen:?}");
        let got = broker.take_notifications(&broker.edge_queue, 1, left).await;
        seen.extend(got.into_iter().map(|(n, _)| n.id));
    }
    assert_eq!(router.status("plain").await.0, 404, "never stored");
    router
        .metrics_showing(&["herald_notifications_accepted_total{source=\"amqp\"} 4"])
        .await;
    assert_eq!(
        broker.ready(&topology.queue).await,
        0,
        "every publication acked"
    );
    router.stop().await;
    broker.cleanup().await;
}

/// Extra headers of a publication.
type Headers = Vec<(&'static str, AMQPValue)>;

/// Bad callback headers are dead-lettered naming the header, and counted
/// with the other refusals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_callback_headers_are_dead_lettered_naming_the_header() {
    let topology = Topology::with_suffix(&suffix());
    let broker = Broker::connect(topology.clone()).await;
    // Callbacks may reach public addresses only (the default).
    let (router, _redis) = router_with_redis(&topology).await;
    let long = format!("https://push.example.com/{}", "a".repeat(2048));
    // (id, headers, the header to blame, words of the reason)
    let cases: Vec<(&str, Headers, &str, &str)> = vec![
        (
            "scheme",
            vec![(headers::CALLBACK_URL, text("ftp://push.example.com/x"))],
            headers::CALLBACK_URL,
            "scheme",
        ),
        (
            "long",
            vec![(headers::CALLBACK_URL, text(&long))],
            headers::CALLBACK_URL,
            "the limit is 2048",
        ),
        (
            "private",
            vec![(headers::CALLBACK_URL, text("http://192.168.1.10/cb"))],
            headers::CALLBACK_URL,
            "private",
        ),
        (
            "type",
            vec![(headers::CALLBACK_URL, AMQPValue::LongInt(7))],
            headers::CALLBACK_URL,
            "string",
        ),
        (
            "recheck-alone",
            vec![(headers::RECHECK_URL, text("https://billing.example.com/c"))],
            headers::RECHECK_URL,
            "guards a callback",
        ),
        (
            "recheck-loopback",
            vec![
                (headers::CALLBACK_URL, text("https://push.example.com/x")),
                (headers::RECHECK_URL, text("http://127.0.0.1/c")),
            ],
            headers::RECHECK_URL,
            "loopback",
        ),
        (
            "callback-only",
            vec![(headers::BROWSERS, text("false"))],
            headers::BROWSERS,
            "no callback",
        ),
        (
            "browsers-text",
            vec![(headers::BROWSERS, text("maybe"))],
            headers::BROWSERS,
            "true or false",
        ),
    ];
    for (id, extra, _, _) in &cases {
        let p = timed(id, &["u"], extra);
        assert!(broker.publish("reminder", p, b"{}").await);
    }
    let dead = broker
        .take(&topology.dead_queue, cases.len(), Duration::from_secs(10))
        .await;
    for (id, _, header, words) in &cases {
        let d = dead
            .iter()
            .find(|d| d.properties.message_id().as_ref().map(|m| m.as_str()) == Some(id))
            .unwrap_or_else(|| panic!("{id} not dead-lettered"));
        assert_eq!(
            header_text(&d.properties, headers::FIELD).as_deref(),
            Some(*header),
            "{id}"
        );
        let reason = header_text(&d.properties, headers::ERROR).unwrap();
        assert!(reason.starts_with(&format!("{header}: ")), "{id}: {reason}");
        assert!(reason.contains(words), "{id}: {reason}");
        assert_eq!(router.status(id).await.0, 404, "{id} was stored");
    }
    router
        .metrics_showing(&[&format!(
            "herald_notifications_rejected_total{{source=\"amqp\",reason=\"invalid_field\"}} {}",
            cases.len()
        )])
        .await;
    router.stop().await;
    broker.cleanup().await;
}

/// The delay-queue job over AMQP (issue 39, item 1): headers `topic` and
/// `delay-ms` and a body, nothing else. Under a topic with a callback it
/// is stored as a callback-only job (its event is its topic) and reaches
/// no edge; under one without, it still has no recipients and is
/// dead-lettered naming `users`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_a_body_and_a_delay_is_a_job_for_the_topic_s_callback() {
    let topology = Topology::with_suffix(&suffix());
    let broker = Broker::connect(topology.clone()).await;
    let (router, _redis) = router_with_callbacks(&topology).await;
    let put = router
        .http
        .put(router.url("/v1/topics/job"))
        .bearer_auth(API_KEY)
        .json(&serde_json::json!({"callback_url": "http://127.0.0.1:9/job", "timeout_ms": 150}))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status().as_u16(), 201);
    let job = |id: &str, topic: &str| {
        let mut h = FieldTable::default();
        h.insert("topic".into(), text(topic));
        h.insert(headers::DELAY_MS.into(), AMQPValue::LongInt(60_000));
        publication(id, h)
    };
    assert!(
        broker
            .publish("job", job("job-1", "job"), b"{\"order\":7}")
            .await
    );
    assert!(broker.publish("job", job("job-2", "plain"), b"{}").await);
    let status = router.wait_stored("job-1").await;
    assert_eq!(
        (&status["state"], &status["topic"]),
        (&serde_json::json!("scheduled"), &serde_json::json!("job")),
        "{status}"
    );
    let dead = broker
        .take(&topology.dead_queue, 1, Duration::from_secs(10))
        .await;
    assert_eq!(
        dead[0].properties.message_id().as_ref().map(|m| m.as_str()),
        Some("job-2")
    );
    assert_eq!(
        header_text(&dead[0].properties, headers::FIELD).as_deref(),
        Some("users")
    );
    assert_eq!(broker.ready(&topology.queue).await, 0, "both acked");
    router.stop().await;
    broker.cleanup().await;
}
