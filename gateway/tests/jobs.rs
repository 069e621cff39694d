//! The delay-queue job of the field reports' delay services (issue 39,
//! item 1): a topic, a body and a delay, nothing else. Published as they
//! write it, it is accepted (its event is its topic), stored, and at its
//! due time posted to its topic's callback, reaching no browser. Without a
//! callback anywhere the same body is still refused, naming the field.

mod common;

use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use bytes::Bytes;
use common::*;
use parking_lot::Mutex;
use serde_json::json;

/// A callback receiver on 127.0.0.1: each call's headers and body.
type Calls = Arc<Mutex<Vec<(HeaderMap, Bytes)>>>;

async fn receiver() -> (String, Calls) {
    let calls: Calls = Arc::default();
    let app = axum::Router::new()
        .route(
            "/job",
            post(
                |State(c): State<Calls>, h: HeaderMap, b: Bytes| async move {
                    c.lock().push((h, b));
                    "ok"
                },
            ),
        )
        .with_state(Arc::clone(&calls));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/job", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, calls)
}

async fn register(gw: &TestGateway, name: &str, url: &str) {
    let r = reqwest::Client::new()
        .put(format!("http://{}/v1/topics/{name}", gw.addr))
        .bearer_auth(API_KEY)
        .json(&json!({"callback_url": url}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_a_body_and_a_delay_is_a_job_for_the_topic_s_callback() {
    let gw = start(|c| c.callbacks.allow_private_networks = true).await;
    let (url, calls) = receiver().await;
    register(&gw, "job", &url).await;
    let mut watcher = gw.session(&token("anyone", None, None)).await;

    let (code, answer) = gw
        .publish(json!({"id": "j-1", "topic": "job", "payload": {"order": 7}, "delay_ms": 300}))
        .await;
    assert_eq!(code, 202, "{answer}");
    assert_eq!(answer["scheduled"][0]["id"], "j-1");
    // The raw form too: the query string's topic and delay, the body as it is.
    let r = reqwest::Client::new()
        .post(format!(
            "http://{}/v1/notifications?id=j-2&topic=job&delay_ms=300",
            gw.addr
        ))
        .bearer_auth(API_KEY)
        .header("content-type", "text/plain")
        .body("order 8")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 202, "{}", r.text().await.unwrap());

    let deadline = tokio::time::Instant::now() + WAIT;
    while calls.lock().len() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the jobs were never called"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let mut got: Vec<(String, String, Bytes)> = calls
        .lock()
        .iter()
        .map(|(h, b)| {
            let header = |n: &str| h.get(n).unwrap().to_str().unwrap().to_owned();
            (
                header("herald-notification-id"),
                header("herald-topic"),
                b.clone(),
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            (
                "j-1".into(),
                "job".into(),
                Bytes::from_static(br#"{"order":7}"#)
            ),
            ("j-2".into(), "job".into(), Bytes::from_static(b"order 8")),
        ]
    );
    for id in ["j-1", "j-2"] {
        let status = gw.status_of(id).await;
        assert_eq!(status["state"], "delivered", "{status}");
    }
    // No browser had it: the next thing the watcher reads is this.
    notify(&gw, "anyone", "after").await;
    assert_eq!(watcher.message().await.header("event"), Some("after"));
}

#[tokio::test]
async fn without_a_callback_the_same_body_names_what_is_missing() {
    let gw = start(|_| {}).await;
    // A topic without a callback: no job, and no recipients.
    let (code, answer) = gw
        .publish(json!({"topic": "plain", "payload": {}, "delay_ms": 300}))
        .await;
    assert_eq!(
        (code, answer["error"]["field"].as_str()),
        (422, Some("users")),
        "{answer}"
    );
    // Neither event nor topic.
    let (code, answer) = gw.publish(json!({"users": ["a"], "payload": {}})).await;
    assert_eq!(
        (code, answer["error"]["field"].as_str()),
        (422, Some("event")),
        "{answer}"
    );
    // A job asked to reach browsers too still needs recipients.
    let (code, answer) = gw
        .publish(json!({"topic": "t", "callback_url": "https://push.example.com/x", "browsers": true, "delay_ms": 300}))
        .await;
    assert_eq!(
        (code, answer["error"]["field"].as_str()),
        (422, Some("users")),
        "{answer}"
    );
}
