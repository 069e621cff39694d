//! The topics API in standalone Herald, over the embedded store: register,
//! read, list, replace and delete; every bad input answered with the field
//! to blame; a registered topic in force at once and after a restart.

mod common;

use common::*;
use serde_json::{Value, json};

const SECRET_A: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

async fn call(
    gw: &TestGateway,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut req = reqwest::Client::new()
        .request(method, format!("http://{}{path}", gw.addr))
        .bearer_auth(API_KEY);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    (status, headers, r.json().await.unwrap_or(Value::Null))
}

async fn get(gw: &TestGateway, path: &str) -> (u16, Value) {
    let (code, _, body) = call(gw, reqwest::Method::GET, path, None).await;
    (code, body)
}

async fn put(gw: &TestGateway, name: &str, body: Value) -> (u16, Value) {
    let (code, _, body) = call(
        gw,
        reqwest::Method::PUT,
        &format!("/v1/topics/{name}"),
        Some(body),
    )
    .await;
    (code, body)
}

#[tokio::test]
async fn a_topic_is_registered_read_listed_replaced_and_deleted() {
    let gw = start(|_| {}).await;
    let body = json!({
        "callback_url": "https://push.example.com/send",
        "recheck_url": "https://billing.example.com/check",
        "retry": {"delays_ms": [60000, 180000]},
        "retry_if": "{res.code}!=200 && {res.data.status}!=2 || {res.data.msg}=='failed'",
        "timeout_ms": 2500,
        "signing_secrets": [SECRET_A],
    });
    let (code, headers, created) = call(
        &gw,
        reqwest::Method::PUT,
        "/v1/topics/billing.reminder",
        Some(body.clone()),
    )
    .await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(headers["location"], "/v1/topics/billing.reminder");
    assert_eq!(created["name"], "billing.reminder");
    assert_eq!(created["source"], "registered");
    assert_eq!(created["retry"], json!({"delays_ms": [60000, 180000]}));
    assert_eq!(created["signing_secrets"], 1, "a count, never the secret");
    assert!(!created.to_string().contains("whsec_"));

    let (code, read) = get(&gw, "/v1/topics/billing.reminder").await;
    assert_eq!(code, 200);
    assert_eq!(read, created);

    let (code, replaced) = put(
        &gw,
        "billing.reminder",
        json!({"callback_url": "https://other.example/x"}),
    )
    .await;
    assert_eq!(code, 200, "{replaced}");
    assert_eq!(replaced["retry"], "2n+1", "a replace takes the whole body");
    assert_eq!(replaced["recheck_url"], Value::Null);

    assert_eq!(put(&gw, "alerts", json!({})).await.0, 201);
    let (code, list) = get(&gw, "/v1/topics?limit=1").await;
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    assert_eq!(list["items"][0]["name"], "alerts");
    let cursor = list["next_cursor"].as_str().unwrap().to_owned();
    let (_, next) = get(&gw, &format!("/v1/topics?limit=1&cursor={cursor}")).await;
    assert_eq!(next["items"][0]["name"], "billing.reminder", "{next}");
    assert_eq!(next.get("next_cursor"), None);

    let (code, _, _) = call(&gw, reqwest::Method::DELETE, "/v1/topics/alerts", None).await;
    assert_eq!(code, 204);
    let (code, _, again) = call(&gw, reqwest::Method::DELETE, "/v1/topics/alerts", None).await;
    assert_eq!(
        (code, again["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
    assert_eq!(get(&gw, "/v1/topics/alerts").await.0, 404);
}

#[tokio::test]
async fn bad_settings_get_a_422_naming_the_field() {
    let gw = start(|_| {}).await;
    for (body, field) in [
        (json!({"retry_if": "{res.code} != 200 &&"}), "retry_if"),
        (
            json!({"callback_url": "ftp://example.com/"}),
            "callback_url",
        ),
        (
            json!({"callback_url": "http://127.0.0.1:9/cb"}),
            "callback_url",
        ),
        (
            json!({"callback_url": format!("https://example.com/{}", "a".repeat(3000))}),
            "callback_url",
        ),
        (
            json!({"retry": {"delays_ms": [1000, -1]}}),
            "retry.delays_ms[1]",
        ),
        (
            json!({"retry": {"delays_ms": vec![1000; 150]}}),
            "retry.delays_ms",
        ),
        (
            json!({"retry": {"initial_ms": 10, "max_ms": 100, "attempts": 1000}}),
            "retry.attempts",
        ),
        (json!({"timeout_ms": 0}), "timeout_ms"),
        // A recheck and a call must fit in a claim's lease (30 s here).
        (json!({"timeout_ms": 20_000}), "timeout_ms"),
        (
            json!({"callback_url": "https://a.example/", "signing_secrets": ["secret"]}),
            "signing_secrets[0]",
        ),
        (json!({"callbak_url": "https://a.example/"}), "callbak_url"),
    ] {
        let (code, answer) = put(&gw, "t", body.clone()).await;
        assert_eq!(code, 422, "{body} -> {answer}");
        assert_eq!(answer["error"]["field"], field, "{body} -> {answer}");
        assert_eq!(answer["error"]["code"], "invalid_field");
    }
    let (_, answer) = put(&gw, "t", json!({"retry_if": "{res.code} != 200 &&"})).await;
    assert_eq!(answer["error"]["position"], 20, "{answer}");

    let (code, answer) = put(&gw, "a:b", json!({})).await;
    assert_eq!(
        (code, answer["error"]["field"].as_str()),
        (422, Some("name"))
    );
    let r = reqwest::Client::new()
        .put(format!("http://{}/v1/topics/t", gw.addr))
        .bearer_auth(API_KEY)
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let r = reqwest::Client::new()
        .put(format!("http://{}/v1/topics/t", gw.addr))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "the API key is required");
    assert_eq!(
        get(&gw, "/v1/topics/t").await.0,
        404,
        "nothing was registered"
    );
}

#[tokio::test]
async fn private_destinations_need_the_deployment_s_consent() {
    let gw = start(|c| c.callbacks.allow_private_networks = true).await;
    let (code, answer) = put(
        &gw,
        "local",
        json!({"callback_url": "http://127.0.0.1:9/cb"}),
    )
    .await;
    assert_eq!(code, 201, "{answer}");
    let (code, answer) = put(
        &gw,
        "meta",
        json!({"callback_url": "http://169.254.169.254/latest"}),
    )
    .await;
    assert_eq!(
        (code, answer["error"]["field"].as_str()),
        (422, Some("callback_url")),
        "metadata stays refused"
    );
}

#[tokio::test]
async fn the_number_of_topics_is_bounded() {
    let gw = start(|c| c.schedule.max_topics = 2).await;
    assert_eq!(put(&gw, "a", json!({})).await.0, 201);
    assert_eq!(put(&gw, "b", json!({})).await.0, 201);
    let (code, answer) = put(&gw, "c", json!({})).await;
    assert_eq!(
        (code, answer["error"]["code"].as_str()),
        (409, Some("too_many_topics")),
        "{answer}"
    );
    assert_eq!(
        put(&gw, "a", json!({"jitter_ms": 5})).await.0,
        200,
        "a replace still works"
    );
}

#[tokio::test]
async fn configured_topics_are_shown_and_stay_in_the_file() {
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
    let (code, t) = get(&gw, "/v1/topics/likes").await;
    assert_eq!(code, 200);
    assert_eq!(
        (t["source"].as_str(), t["merge"].as_bool()),
        (Some("configured"), Some(true))
    );
    let (_, list) = get(&gw, "/v1/topics").await;
    assert_eq!(list["configured"][0]["name"], "likes");
    let (code, _, answer) = call(&gw, reqwest::Method::DELETE, "/v1/topics/likes", None).await;
    assert_eq!(
        (code, answer["error"]["code"].as_str()),
        (409, Some("configured"))
    );
}

/// Register `likes` with `merge: true`: held notifications of that topic
/// then arrive as one, with no restart.
async fn held_likes_arrive_merged(gw: &TestGateway, user: &str, prefix: &str) {
    for (i, who) in ["ann", "ben"].iter().enumerate() {
        let (code, body) = gw
            .publish(json!({"id": format!("{prefix}-{i}"), "users": [user], "event": "like", "topic": "likes", "when_online": true, "payload": {"from": who}}))
            .await;
        assert_eq!(code, 202, "{body}");
    }
    for i in 0..2 {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let (_, s) = get(gw, &format!("/v1/notifications/{prefix}-{i}")).await;
            if s["state"] == "held" {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "never held: {s}");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
    let mut session = gw.session(&token(user, None, None)).await;
    let m = session.message().await;
    let payload: Value = serde_json::from_slice(&m.body).unwrap();
    assert_eq!(payload, json!([{"from": "ann"}, {"from": "ben"}]));
}

#[tokio::test]
async fn a_registered_topic_is_in_force_at_once_and_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_owned();
    let gw = start(|c| c.data_dir = data.clone()).await;
    assert_eq!(put(&gw, "likes", json!({"merge": true})).await.0, 201);
    held_likes_arrive_merged(&gw, "gina", "first").await;
    gw.shutdown.cancel();
    let mut gw = gw;
    let (_, task) = gw.local.take().unwrap();
    task.await.unwrap();

    let gw = start(|c| c.data_dir = data.clone()).await;
    let (code, t) = get(&gw, "/v1/topics/likes").await;
    assert_eq!((code, t["merge"].as_bool()), (200, Some(true)));
    held_likes_arrive_merged(&gw, "hugo", "second").await;
}
