//! Delayed notifications in standalone Herald, end to end: the HTTP API
//! (timing fields, status, cancel, list, user online) over the embedded
//! store, delivered to real STOMP sessions.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use herald_protocol::stomp::Command;
use serde_json::{Value, json};

async fn api(
    gw: &TestGateway,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .request(method, format!("http://{}{path}", gw.addr))
        .bearer_auth(API_KEY);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn status_of(gw: &TestGateway, id: &str) -> Value {
    let (code, body) = api(
        gw,
        reqwest::Method::GET,
        &format!("/v1/notifications/{id}"),
        None,
    )
    .await;
    assert_eq!(code, 200, "{body}");
    body
}

/// Poll the status of `id` until it is `state` (or fail after [`WAIT`]).
async fn wait_for_state(gw: &TestGateway, id: &str, state: &str) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let s = status_of(gw, id).await;
        if s["state"] == state {
            return s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{id} never became {state}: {s}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_delayed_notification_arrives_at_its_due_time_never_before() {
    let gw = start(|_| {}).await;
    let mut alice = gw.session(&token("alice", None, None)).await;
    let (code, body) = gw
        .publish(json!({"id": "d-1", "users": ["alice"], "event": "reminder", "payload": {"n": 1}, "delay_ms": 2000}))
        .await;
    assert_eq!(code, 202, "{body}");
    assert_eq!(body["ids"], json!(["d-1"]));
    let due = body["scheduled"][0]["due_at_ms"].as_u64().unwrap();
    assert_eq!(body["scheduled"][0]["duplicate"], false);
    assert!(
        body["scheduled"][0]["due_at"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );
    // Claimed `claim_ahead_ms` (500) before it is due, so it is still
    // scheduled for the first 1.5 s.
    let s = status_of(&gw, "d-1").await;
    assert_eq!(s["state"], "scheduled");
    assert_eq!(s["due_at_ms"].as_u64(), Some(due));
    let m = alice.message().await;
    let received = now_ms();
    assert_eq!(m.header("message-id"), Some("d-1"));
    assert_eq!(&m.body[..], br#"{"n":1}"#);
    assert!(received >= due, "received at {received}, due at {due}");
    let s = wait_for_state(&gw, "d-1", "delivered").await;
    assert_eq!(s["attempts"], 1);
    let metrics = gw.metrics().await;
    assert_eq!(sample(&metrics, "herald_delayed_fired_total"), Some(1.0));
    assert!(metrics.contains("herald_delayed_lateness_seconds_bucket"));
}

#[tokio::test]
async fn a_past_deliver_at_is_due_now_and_a_far_one_waits_until_cancelled() {
    let gw = start(|_| {}).await;
    let mut bob = gw.session(&token("bob", None, None)).await;
    // A minute late (a backend's clock, a queue): due now.
    let (code, body) = gw
        .publish(
            json!({"id": "past", "users": ["bob"], "event": "e", "deliver_at": now_ms() - 60_000}),
        )
        .await;
    assert_eq!(code, 202, "{body}");
    assert_eq!(bob.message().await.header("message-id"), Some("past"));
    // Years late: a mistake, refused naming the field (schedule.max_past_ms).
    let (code, body) = gw
        .publish(json!({"id": "years", "users": ["bob"], "event": "e", "deliver_at": "2001-01-01T00:00:00Z"}))
        .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["error"]["field"], "deliver_at");
    // Epoch seconds, as the Go delay service writes them: an hour from now.
    let in_an_hour = now_ms() / 1000 + 3600;
    let (code, body) = gw
        .publish(json!({"id": "secs", "users": ["bob"], "event": "e", "deliver_at": in_an_hour}))
        .await;
    assert_eq!(code, 202, "{body}");
    assert_eq!(
        body["scheduled"][0]["due_at_ms"].as_u64(),
        Some(in_an_hour * 1000)
    );

    let far = now_ms() + 30 * 24 * 3600 * 1000;
    let (code, body) = gw
        .publish(json!({"id": "far", "users": ["bob"], "event": "e", "topic": "renewal", "deliver_at": far}))
        .await;
    assert_eq!(code, 202, "{body}");
    assert_eq!(body["scheduled"][0]["due_at_ms"].as_u64(), Some(far));
    let s = status_of(&gw, "far").await;
    assert_eq!(
        (s["state"].as_str(), s["topic"].as_str()),
        (Some("scheduled"), Some("renewal"))
    );
    let (code, body) = api(&gw, reqwest::Method::DELETE, "/v1/notifications/far", None).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["state"], "cancelled");
    let (code, again) = api(&gw, reqwest::Method::DELETE, "/v1/notifications/far", None).await;
    assert_eq!(
        (code, &again["state"]),
        (200, &json!("cancelled")),
        "idempotent"
    );
    // Delivered is too late to cancel.
    wait_for_state(&gw, "past", "delivered").await;
    let (code, body) = api(&gw, reqwest::Method::DELETE, "/v1/notifications/past", None).await;
    assert_eq!(code, 409, "{body}");
    assert_eq!(body["error"]["code"], "too_late");
    assert_eq!(body["notification"]["state"], "delivered");
}

#[tokio::test]
async fn bad_timing_input_gets_a_clear_error_naming_the_field() {
    let gw = start(|c| c.schedule.max_delay_ms = 60_000).await;
    let cases = [
        (
            json!({"users": ["u"], "event": "e", "delay_ms": -5}),
            "delay_ms",
            "negative",
        ),
        (
            json!({"users": ["u"], "event": "e", "delay_ms": 60_001}),
            "delay_ms",
            "limit",
        ),
        (
            json!({"users": ["u"], "event": "e", "delay_ms": "soon"}),
            "delay_ms",
            "invalid type",
        ),
        (
            json!({"users": ["u"], "event": "e", "deliver_at": "next tuesday"}),
            "deliver_at",
            "RFC 3339",
        ),
        (
            json!({"users": ["u"], "event": "e", "deliver_at": now_ms() + 3_600_000}),
            "deliver_at",
            "limit",
        ),
        (
            json!({"users": ["u"], "event": "e", "delay_ms": 1, "deliver_at": 1}),
            "deliver_at",
            "not both",
        ),
        (
            json!({"users": ["u", "v"], "event": "e", "when_online": true}),
            "when_online",
            "exactly one user",
        ),
        (
            json!({"scope": "global", "event": "e", "when_online": true}),
            "when_online",
            "exactly one user",
        ),
    ];
    for (body, field, words) in cases {
        let (code, answer) = gw.publish(body.clone()).await;
        assert_eq!(code, 422, "{body} -> {answer}");
        assert_eq!(answer["error"]["field"], field, "{body} -> {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(words), "{body} -> {message}");
    }
    let (code, answer) = gw
        .publish(
            json!([{"users": ["u"], "event": "e"}, {"users": ["u"], "event": "e", "delay_ms": -1}]),
        )
        .await;
    assert_eq!(
        (code, &answer["error"]["field"]),
        (422, &json!("[1].delay_ms"))
    );
    for (method, path, code, field) in [
        (reqwest::Method::GET, "/v1/notifications/unknown", 404, None),
        (
            reqwest::Method::DELETE,
            "/v1/notifications/unknown",
            404,
            None,
        ),
        (
            reqwest::Method::GET,
            "/v1/notifications/bad%20id",
            422,
            Some("id"),
        ),
        (
            reqwest::Method::GET,
            "/v1/notifications?state=sleeping",
            422,
            Some("state"),
        ),
        (
            reqwest::Method::GET,
            "/v1/notifications?limit=0",
            422,
            Some("limit"),
        ),
        (
            reqwest::Method::GET,
            "/v1/notifications?cursor=zzz",
            422,
            Some("cursor"),
        ),
        (
            reqwest::Method::GET,
            "/v1/notifications?colour=red",
            422,
            Some("colour"),
        ),
    ] {
        let (got, body) = api(&gw, method.clone(), path, None).await;
        assert_eq!(got, code, "{method} {path}: {body}");
        assert_eq!(
            body["error"]["field"].as_str(),
            field,
            "{method} {path}: {body}"
        );
    }
    let r = reqwest::Client::new()
        .get(format!("http://{}/v1/notifications/x", gw.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401, "the API key is required");
}

#[tokio::test]
async fn submitting_the_same_id_again_is_idempotent() {
    let gw = start(|_| {}).await;
    let mut carol = gw.session(&token("carol", None, None)).await;
    let publication = json!({"id": "once", "users": ["carol"], "event": "e", "delay_ms": 100});
    let (code, first) = gw.publish(publication.clone()).await;
    assert_eq!(code, 202, "{first}");
    let (code, second) = gw.publish(publication).await;
    assert_eq!(code, 202, "{second}");
    assert_eq!(second["scheduled"][0]["duplicate"], true);
    assert_eq!(second["duplicates"], json!(["once"]), "{second}");
    assert_eq!(
        second["scheduled"][0]["due_at_ms"],
        first["scheduled"][0]["due_at_ms"]
    );
    assert_eq!(carol.message().await.header("message-id"), Some("once"));
    wait_for_state(&gw, "once", "delivered").await;
    // Had the duplicate been stored too, it would have fired with the
    // first, ahead of this marker.
    let marker = notify(&gw, "carol", "marker").await;
    assert_eq!(
        carol.message().await.header("message-id"),
        Some(marker.as_str())
    );
    // The publish API's ledger answered it before the store saw it.
    let metrics = gw.metrics().await;
    assert_eq!(
        sample(&metrics, "herald_publish_duplicates_total{source=\"http\"}"),
        Some(1.0),
        "{metrics}"
    );
}

/// With the ledger off, the store alone still refuses an id it holds, and
/// the answer lists it as a duplicate all the same.
#[tokio::test]
async fn the_store_refuses_an_id_it_holds_with_the_ledger_off() {
    let gw = start(|c| c.publish.dedup_window_secs = 0).await;
    let publication = json!({"id": "kept", "users": ["dan"], "event": "e", "delay_ms": 60_000});
    let (code, first) = gw.publish(publication.clone()).await;
    assert_eq!(code, 202, "{first}");
    let (code, second) = gw.publish(publication).await;
    assert_eq!(code, 202, "{second}");
    assert_eq!(second["scheduled"][0]["duplicate"], true, "{second}");
    assert_eq!(second["duplicates"], json!(["kept"]), "{second}");
    let metrics = gw.metrics().await;
    assert_eq!(
        sample(&metrics, "herald_delayed_duplicates_total"),
        Some(1.0)
    );
    assert_eq!(
        sample(&metrics, "herald_publish_duplicates_total{source=\"http\"}"),
        Some(1.0),
        "{metrics}"
    );
}

/// Cancels race the firing of the same notifications: each is either
/// cancelled (and never delivered) or too late (and delivered once).
#[tokio::test]
async fn cancel_racing_fire_has_one_winner_per_notification() {
    let gw = start(|_| {}).await;
    let mut dave = gw.session(&token("dave", None, None)).await;
    let batch: Vec<Value> = (0..200)
        .map(|i| json!({"id": format!("race-{i}"), "users": ["dave"], "event": "e", "delay_ms": 150}))
        .collect();
    let (code, body) = gw.publish(Value::Array(batch)).await;
    assert_eq!(code, 202, "{body}");
    let mut cancels = Vec::new();
    for i in 0..200 {
        let gw_addr = gw.addr;
        cancels.push(tokio::spawn(async move {
            let r = reqwest::Client::new()
                .delete(format!("http://{gw_addr}/v1/notifications/race-{i}"))
                .bearer_auth(API_KEY)
                .send()
                .await
                .unwrap();
            (format!("race-{i}"), r.status().as_u16())
        }));
    }
    let mut too_late = HashSet::new();
    let mut cancelled = HashSet::new();
    for c in cancels {
        let (id, code) = c.await.unwrap();
        match code {
            200 => cancelled.insert(id),
            409 => too_late.insert(id),
            other => panic!("{id}: {other}"),
        };
    }
    assert_eq!(cancelled.len() + too_late.len(), 200);
    let mut received = HashSet::new();
    for _ in 0..too_late.len() {
        let m = dave.message().await;
        let id = m.header("message-id").unwrap().to_owned();
        assert!(too_late.contains(&id), "{id} was cancelled yet delivered");
        assert!(received.insert(id), "delivered twice");
    }
    for id in &cancelled {
        assert_eq!(status_of(&gw, id).await["state"], "cancelled");
    }
    let marker = notify(&gw, "dave", "marker").await;
    assert_eq!(
        dave.message().await.header("message-id"),
        Some(marker.as_str()),
        "nothing else came"
    );
}

#[tokio::test]
async fn when_online_waits_for_the_user_to_connect() {
    let gw = start(|_| {}).await;
    let (code, body) = gw
        .publish(json!({"id": "w-1", "users": ["erin"], "event": "digest", "when_online": true, "payload": 7}))
        .await;
    assert_eq!(code, 202, "{body}");
    wait_for_state(&gw, "w-1", "held").await;
    // The status reads held once the store committed; the counter follows.
    gw.until_metric("herald_delayed_held_total", 1.0).await;
    let mut erin = gw.session(&token("erin", None, None)).await;
    let m = erin.message().await;
    assert_eq!(m.header("message-id"), Some("w-1"));
    assert_eq!(&m.body[..], b"7");
    let s = wait_for_state(&gw, "w-1", "delivered").await;
    assert_eq!(
        s["attempts"], 2,
        "claimed when due, then again when erin came"
    );
    // Online already: delivered at once.
    gw.publish(json!({"id": "w-2", "users": ["erin"], "event": "digest", "when_online": true}))
        .await;
    assert_eq!(erin.message().await.header("message-id"), Some("w-2"));
}

#[tokio::test]
async fn the_backend_saying_a_user_is_online_never_loses_what_is_held() {
    let gw = start(|_| {}).await;
    gw.publish(json!({"id": "b-1", "users": ["frank"], "event": "e", "when_online": true}))
        .await;
    wait_for_state(&gw, "b-1", "held").await;
    // Frank has no session and no mailbox: the event releases the hold,
    // the firer finds nobody to hand it to and holds it again.
    let (code, body) = api(&gw, reqwest::Method::POST, "/v1/users/frank/online", None).await;
    assert_eq!((code, &body["user"]), (202, &json!("frank")));
    gw.until_metric("herald_delayed_rehold_total", 1.0).await;
    let held = status_of(&gw, "b-1").await;
    assert_eq!(held["state"], "held", "{held}");
    let mut frank = gw.session(&token("frank", None, None)).await;
    assert_eq!(frank.message().await.header("message-id"), Some("b-1"));
    wait_for_state(&gw, "b-1", "delivered").await;
}

#[tokio::test]
async fn held_notifications_of_a_merging_topic_arrive_as_one() {
    let gw = start(|c| {
        c.schedule.topics.insert(
            "likes".into(),
            herald_engine::schedule::config::TopicPolicy {
                merge: Some(true),
                ..Default::default()
            },
        );
    })
    .await;
    for (i, who) in ["ann", "ben", "cat"].iter().enumerate() {
        gw.publish(json!({"id": format!("like-{i}"), "users": ["gina"], "event": "like", "topic": "likes", "when_online": true, "payload": {"from": who}}))
            .await;
        wait_for_state(&gw, &format!("like-{i}"), "held").await;
    }
    let mut gina = gw.session(&token("gina", None, None)).await;
    let m = gina.message().await;
    assert_eq!(m.header("message-id"), Some("like-0"));
    let payload: Value = serde_json::from_slice(&m.body).unwrap();
    assert_eq!(
        payload,
        json!([{"from": "ann"}, {"from": "ben"}, {"from": "cat"}])
    );
    for i in 0..3 {
        wait_for_state(&gw, &format!("like-{i}"), "delivered").await;
    }
    assert_eq!(
        sample(&gw.metrics().await, "herald_delayed_merged_total"),
        Some(2.0)
    );
}

#[tokio::test]
async fn the_minimum_interval_spaces_sends_to_one_user() {
    let gw = start(|c| c.schedule.min_interval_ms = 400).await;
    let mut hal = gw.session(&token("hal", None, None)).await;
    gw.publish(json!([
        {"id": "s-1", "users": ["hal"], "event": "e", "when_online": true},
        {"id": "s-2", "users": ["hal"], "event": "e", "when_online": true}
    ]))
    .await;
    let first = hal.message().await;
    let t1 = now_ms();
    let second = hal.message().await;
    let t2 = now_ms();
    assert_eq!(first.header("message-id"), Some("s-1"));
    assert_eq!(second.header("message-id"), Some("s-2"));
    assert!(
        t2 >= t1 + 300,
        "the second came {} ms after the first",
        t2 - t1
    );
    assert_eq!(
        sample(&gw.metrics().await, "herald_delayed_postponed_total"),
        Some(1.0)
    );
}

#[tokio::test]
async fn the_list_pages_through_a_topic() {
    let gw = start(|_| {}).await;
    let batch: Vec<Value> = (0..5)
        .map(|i| json!({"id": format!("l-{i}"), "users": ["ivy"], "event": "e", "topic": "t1", "delay_ms": 3_600_000 + i}))
        .collect();
    assert_eq!(gw.publish(Value::Array(batch)).await.0, 202);
    let mut ids = Vec::new();
    let mut path = "/v1/notifications?topic=t1&state=scheduled&limit=2".to_owned();
    loop {
        let (code, page) = api(&gw, reqwest::Method::GET, &path, None).await;
        assert_eq!(code, 200, "{page}");
        for item in page["items"].as_array().unwrap() {
            ids.push(item["id"].as_str().unwrap().to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(c) => {
                path = format!("/v1/notifications?topic=t1&state=scheduled&limit=2&cursor={c}")
            }
            None => break,
        }
    }
    assert_eq!(ids, vec!["l-0", "l-1", "l-2", "l-3", "l-4"]);
    let (_, other) = api(
        &gw,
        reqwest::Method::GET,
        "/v1/notifications?topic=t2",
        None,
    )
    .await;
    assert_eq!(other["items"], json!([]));
    assert!(gw.metrics().await.contains("herald_delayed_pending"));
}

#[tokio::test]
async fn an_immediate_notification_is_not_in_the_delayed_store() {
    let gw = start(|_| {}).await;
    let mut jo = gw.session(&token("jo", None, None)).await;
    let id = notify(&gw, "jo", "now").await;
    assert_eq!(jo.message().await.command, Command::Message);
    let (code, _) = api(
        &gw,
        reqwest::Method::GET,
        &format!("/v1/notifications/{id}"),
        None,
    )
    .await;
    assert_eq!(code, 404);
}

/// The store of this in-process gateway, to drive a callback through its
/// states the way the sender will (the sender itself is not wired yet).
fn store_of(gw: &TestGateway) -> std::sync::Arc<dyn herald_engine::schedule::store::Store> {
    let (shared, _) = gw.local.as_ref().expect("an in-process gateway");
    match &shared.mode {
        herald_gateway::app::Mode::Standalone { engine } => {
            let delayed = engine
                .delayed
                .as_ref()
                .expect("a standalone engine has its store");
            std::sync::Arc::clone(delayed.store())
        }
        other => panic!("not standalone: {}", other.name()),
    }
}

/// A callback's states through the API: the step of a firing callback,
/// retry_wait with its next attempt, a dead letter with every attempt in
/// its log, listed by topic, sent again with `POST .../retry` (202; 409
/// once it is not dead; 404 unknown).
#[tokio::test]
async fn callback_states_show_in_the_status_and_a_dead_letter_can_be_sent_again() {
    use herald_engine::callback::attempt::{Attempt, Kind, Verdict};
    use herald_engine::schedule::entry::Step;
    use herald_engine::schedule::store::{Ending, Finish, RetryWait};
    let gw = start(|_| {}).await;
    let store = store_of(&gw);
    // Due in an hour: the gateway's firer leaves it alone; the test plays
    // the sender with a clock an hour ahead.
    let (code, body) = gw
        .publish(json!({"id": "cb-1", "users": ["kim"], "event": "e", "topic": "billing", "delay_ms": 3_600_000}))
        .await;
    assert_eq!(code, 202, "{body}");
    let due = body["scheduled"][0]["due_at_ms"].as_u64().unwrap();
    let s = status_of(&gw, "cb-1").await;
    assert_eq!(
        (&s["state"], &s["attempt_log"]),
        (&json!("scheduled"), &json!([]))
    );
    let claimed = store.claim_due(due, 10, 60_000).await.unwrap();
    assert_eq!(claimed.len(), 1);
    store
        .mark_step(vec!["cb-1".into()], Step::Calling, due + 1)
        .await
        .unwrap();
    let s = status_of(&gw, "cb-1").await;
    assert_eq!(
        (&s["state"], &s["step"]),
        (&json!("firing"), &json!("calling"))
    );
    let failed = |n: u32, at_ms: u64| Attempt {
        at_ms,
        duration_ms: 30,
        attempt: n,
        kind: Kind::Call,
        status: Some(503),
        verdict: Verdict::Failed,
        error: Some("HTTP 503".into()),
        excerpt: "try later".into(),
    };
    store
        .retry_wait(
            vec![RetryWait {
                id: "cb-1".into(),
                at_ms: due + 60_000,
                recheck: None,
                attempt: Some(failed(1, due + 1)),
                counted: true,
            }],
            due + 31,
        )
        .await
        .unwrap();
    let s = status_of(&gw, "cb-1").await;
    assert_eq!(s["state"], "retry_wait");
    assert_eq!(s["next_attempt_at_ms"].as_u64(), Some(due + 60_000));
    assert!(s.get("step").is_none(), "{s}");
    assert_eq!(s["attempt_log"].as_array().unwrap().len(), 1);
    store.claim_due(due + 60_000, 10, 60_000).await.unwrap();
    store
        .finish(
            vec![Finish {
                id: "cb-1".into(),
                ending: Ending::Dead,
                recheck: None,
                attempt: Some(failed(2, due + 60_001)),
            }],
            due + 60_031,
        )
        .await
        .unwrap();
    let s = status_of(&gw, "cb-1").await;
    assert_eq!((&s["state"], &s["attempts"]), (&json!("dead"), &json!(2)));
    let log = s["attempt_log"].as_array().unwrap();
    assert_eq!(log.len(), 2);
    assert_eq!(
        (
            &log[0]["attempt"],
            &log[1]["attempt"],
            &log[1]["status"],
            &log[1]["verdict"]
        ),
        (&json!(1), &json!(2), &json!(503), &json!("failed"))
    );
    assert_eq!(log[1]["kind"], "call");
    assert_eq!(log[1]["excerpt"], "try later");
    assert!(log[1]["at"].as_str().unwrap().ends_with('Z'));
    // Dead letters by topic.
    let (code, page) = api(
        &gw,
        reqwest::Method::GET,
        "/v1/notifications?state=dead&topic=billing",
        None,
    )
    .await;
    assert_eq!(code, 200, "{page}");
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    assert_eq!(page["items"][0]["id"], "cb-1");
    // A dead letter can be sent again.
    let before = now_ms();
    let (code, body) = api(
        &gw,
        reqwest::Method::POST,
        "/v1/notifications/cb-1/retry",
        None,
    )
    .await;
    assert_eq!(code, 202, "{body}");
    assert_eq!(
        (&body["state"], &body["attempts"]),
        (&json!("retry_wait"), &json!(0))
    );
    assert!(body["next_attempt_at_ms"].as_u64().unwrap() >= before);
    let (code, body) = api(
        &gw,
        reqwest::Method::POST,
        "/v1/notifications/cb-1/retry",
        None,
    )
    .await;
    assert_eq!(
        (code, &body["error"]["code"]),
        (409, &json!("not_dead")),
        "{body}"
    );
    assert_ne!(body["notification"]["state"], "dead");
    let (code, body) = api(
        &gw,
        reqwest::Method::POST,
        "/v1/notifications/nope/retry",
        None,
    )
    .await;
    assert_eq!(
        (code, &body["error"]["code"]),
        (404, &json!("not_found")),
        "{body}"
    );
    let (code, body) = api(
        &gw,
        reqwest::Method::POST,
        "/v1/notifications/a%20b/retry",
        None,
    )
    .await;
    assert_eq!(
        (code, &body["error"]["field"]),
        (422, &json!("id")),
        "{body}"
    );
    let metrics = gw.metrics().await;
    assert_eq!(sample(&metrics, "herald_delayed_replayed_total"), Some(1.0));
    assert_eq!(
        sample(&metrics, "herald_delayed_replay_not_dead_total"),
        Some(1.0)
    );
}

/// Dead letters in bulk: `POST /v1/dead-letters/retry` and `/cancel`, by
/// topic or all, `limit` at a time, going on where the last call stopped
/// (`more`); and one cancelled alone with `DELETE` (nobody sends it again).
#[tokio::test]
async fn dead_letters_are_retried_and_cancelled_in_bulk() {
    use herald_engine::schedule::store::{Ending, Finish};
    let gw = start(|_| {}).await;
    let store = store_of(&gw);
    let ids = ["b-1", "b-2", "b-3", "m-1", "m-2"];
    let mut due = 0;
    for id in ids {
        let topic = if id.starts_with('b') {
            "billing"
        } else {
            "mail"
        };
        let (code, body) = gw
            .publish(json!({"id": id, "users": ["kim"], "event": "e", "topic": topic, "delay_ms": 3_600_000}))
            .await;
        assert_eq!(code, 202, "{body}");
        due = due.max(body["scheduled"][0]["due_at_ms"].as_u64().unwrap());
    }
    // The test plays the sender an hour ahead: every callback failed.
    assert_eq!(store.claim_due(due, 10, 60_000).await.unwrap().len(), 5);
    let dead: Vec<Finish> = ids
        .iter()
        .map(|id| Finish {
            id: (*id).into(),
            ending: Ending::Dead,
            recheck: None,
            attempt: None,
        })
        .collect();
    store.finish(dead, due + 1).await.unwrap();
    let post = |path: &'static str| api(&gw, reqwest::Method::POST, path, None);
    let (code, body) = post("/v1/dead-letters/retry?topic=billing&limit=2").await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        body,
        json!({"action": "retry", "topic": "billing", "done": 2, "skipped": 0, "more": true})
    );
    let (code, body) = post("/v1/dead-letters/retry?topic=billing").await;
    assert_eq!(
        (code, &body["done"], &body["more"]),
        (200, &json!(1), &json!(false)),
        "{body}"
    );
    // Each sent again (due now: the gateway's firer takes them from there).
    assert_eq!(
        sample(&gw.metrics().await, "herald_delayed_replayed_total"),
        Some(3.0)
    );
    // The rest, of every topic: one cancelled alone, then all.
    let (code, body) = api(&gw, reqwest::Method::DELETE, "/v1/notifications/m-1", None).await;
    assert_eq!((code, &body["state"]), (200, &json!("cancelled")), "{body}");
    let (code, body) = post("/v1/dead-letters/cancel").await;
    assert_eq!(
        (code, body),
        (
            200,
            json!({"action": "cancel", "topic": null, "done": 1, "skipped": 0, "more": false})
        )
    );
    let s = status_of(&gw, "m-2").await;
    assert_eq!(s["state"], "cancelled");
    let (code, page) = api(
        &gw,
        reqwest::Method::GET,
        "/v1/notifications?state=dead",
        None,
    )
    .await;
    assert_eq!(
        (code, page["items"].as_array().unwrap().len()),
        (200, 0),
        "{page}"
    );
    // Nothing left: nothing done.
    let (code, body) = post("/v1/dead-letters/retry").await;
    assert_eq!(
        (code, &body["done"], &body["more"]),
        (200, &json!(0), &json!(false))
    );
    // Bad input: a JSON error naming the field.
    for (path, field) in [
        ("/v1/dead-letters/retry?limit=0", "limit"),
        ("/v1/dead-letters/cancel?limit=10001", "limit"),
        ("/v1/dead-letters/retry?topic=a%20b", "topic"),
    ] {
        let (code, body) = post(path).await;
        assert_eq!(
            (code, &body["error"]["field"]),
            (422, &json!(field)),
            "{path}: {body}"
        );
    }
    let r = reqwest::Client::new()
        .post(format!("http://{}/v1/dead-letters/retry", gw.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401, "the API key is required");
}
