//! One attempt against a receiver on loopback that answers as each test
//! asks.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use parking_lot::Mutex;
use serde_json::json;

use super::*;
use crate::callback::breaker::BreakerConfig;
use crate::callback::client::{ClientConfig, NoEvents};
use crate::callback::destination::Class;
use crate::callback::signature::{Secret, verify};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const NOW: u64 = 1_800_000_000_000;

/// What the receiver answers, and what it saw.
#[derive(Default)]
struct Receiver {
    recheck: Mutex<(u16, String)>,
    call: Mutex<(u16, String, Option<String>)>,
    rechecks: Mutex<Vec<String>>,
    calls: Mutex<Vec<(HeaderMap, Bytes)>>,
}

async fn recheck(State(r): State<Arc<Receiver>>, RawQuery(q): RawQuery) -> Response {
    r.rechecks.lock().push(q.unwrap_or_default());
    let (status, body) = r.recheck.lock().clone();
    (StatusCode::from_u16(status).unwrap(), body).into_response()
}

async fn call(State(r): State<Arc<Receiver>>, headers: HeaderMap, body: Bytes) -> Response {
    r.calls.lock().push((headers, body));
    let (status, body, retry_after) = r.call.lock().clone();
    let mut response = (StatusCode::from_u16(status).unwrap(), body).into_response();
    if let Some(ra) = retry_after {
        response
            .headers_mut()
            .insert("retry-after", ra.parse().unwrap());
    }
    response
}

async fn receiver() -> (SocketAddr, Arc<Receiver>) {
    let r = Arc::new(Receiver::default());
    *r.recheck.lock() = (200, "OK".into());
    *r.call.lock() = (200, String::new(), None);
    let app = Router::new()
        .route("/recheck", get(recheck))
        .route("/call", post(call))
        .with_state(Arc::clone(&r));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, r)
}

fn topic(addr: SocketAddr, extra: serde_json::Value) -> Topic {
    let mut body = json!({
        "callback_url": format!("http://{addr}/call"),
        "recheck_url": format!("http://{addr}/recheck?from=herald"),
        "signing_secrets": [SECRET],
        "retry": {"delays_ms": [1000, 2000]},
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    Topic::from_json(&body, &[Class::Loopback]).unwrap()
}

fn client() -> Client {
    Client::new(
        ClientConfig {
            allowed: vec![Class::Loopback],
            breaker: BreakerConfig {
                threshold: 1,
                ..BreakerConfig::default()
            },
            ..ClientConfig::default()
        },
        Arc::new(NoEvents),
    )
    .unwrap()
}

async fn attempt(topic: &Topic, attempt: u32) -> Outcome {
    attempt_with(&client(), topic, attempt).await
}

async fn attempt_with(client: &Client, topic: &Topic, attempt: u32) -> Outcome {
    let payload = Bytes::from_static(b"{\"order\":42}");
    let job = Job {
        id: "pay.check-42",
        topic_name: Some("billing"),
        topic,
        callback_url: topic.callback_url.as_ref().expect("a callback_url"),
        recheck_url: topic.recheck_url.as_ref(),
        user: Some("u7"),
        content_type: "application/json",
        payload: &payload,
        attempt,
    };
    run(client, &job, NOW, 0.5).await
}

#[tokio::test]
async fn a_recheck_that_says_ok_lets_a_signed_call_go() {
    let (addr, r) = receiver().await;
    let out = attempt(&topic(addr, json!({})), 1).await;
    assert_eq!(out.next, Next::Delivered);
    assert!(out.counted);
    let kinds: Vec<_> = out
        .attempts
        .iter()
        .map(|a| (a.kind, a.verdict, a.status))
        .collect();
    assert_eq!(
        kinds,
        [
            (Kind::Recheck, Verdict::Proceed, Some(200)),
            (Kind::Call, Verdict::Delivered, Some(200))
        ]
    );
    assert_eq!(
        r.rechecks.lock().as_slice(),
        ["from=herald&id=pay.check-42&topic=billing&user=u7"]
    );
    let calls = r.calls.lock();
    let (headers, body) = &calls[0];
    assert_eq!(&body[..], b"{\"order\":42}");
    let h = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(h("content-type"), "application/json");
    assert_eq!(h("herald-topic"), "billing");
    assert_eq!(h("herald-attempt"), "1");
    assert_eq!(h("herald-user"), "u7");
    assert_eq!(h("herald-notification-id"), "pay.check-42");
    assert_eq!(h("webhook-id"), webhook_id("pay.check-42"));
    assert!(!h("webhook-id").contains('.'));
    assert_eq!(h("webhook-timestamp"), (NOW / 1000).to_string());
    verify(
        &crate::callback::signature::SignatureHeaders {
            id: h("webhook-id"),
            timestamp: h("webhook-timestamp"),
            signature: h("webhook-signature"),
        },
        body,
        &[Secret::parse(SECRET).unwrap()],
        NOW / 1000,
        300,
    )
    .expect("the signature verifies");
}

#[tokio::test]
async fn a_recheck_that_says_no_declines_without_calling() {
    let (addr, r) = receiver().await;
    *r.recheck.lock() = (200, "ERROR: refunded".into());
    let out = attempt(&topic(addr, json!({})), 1).await;
    assert!(
        // From loopback: the status and length, not the body.
        matches!(&out.next, Next::Declined { reason } if reason == "HTTP 200 (15 bytes, not quoted: the destination is not public)"),
        "{out:?}"
    );
    assert_eq!(out.attempts.len(), 1);
    assert!(r.calls.lock().is_empty());
}

#[tokio::test]
async fn a_failing_recheck_is_retried_like_a_failed_call() {
    let (addr, r) = receiver().await;
    *r.recheck.lock() = (500, "down".into());
    let out = attempt(&topic(addr, json!({})), 1).await;
    assert!(
        matches!(out.next, Next::RetryAt { at_ms, .. } if at_ms == NOW + 1000),
        "{out:?}"
    );
    assert!(r.calls.lock().is_empty());
}

#[tokio::test]
async fn failed_calls_follow_the_schedule_then_die() {
    let (addr, r) = receiver().await;
    *r.call.lock() = (503, "busy".into(), None);
    let t = topic(addr, json!({"recheck_url": null}));
    let first = attempt(&t, 1).await;
    assert!(
        matches!(first.next, Next::RetryAt { at_ms, .. } if at_ms == NOW + 1000),
        "{first:?}"
    );
    let second = attempt(&t, 2).await;
    assert!(
        matches!(second.next, Next::RetryAt { at_ms, .. } if at_ms == NOW + 2000),
        "{second:?}"
    );
    let last = attempt(&t, 3).await;
    assert!(
        matches!(&last.next, Next::Dead { reason } if reason.contains("503")),
        "{last:?}"
    );
    // The receiver is on loopback: allowed here, but not public, so its
    // body is neither kept nor quoted (client::Answer::public).
    assert_eq!(last.attempts[0].excerpt, "");
    assert!(
        matches!(&last.next, Next::Dead { reason } if reason.contains("not quoted") && !reason.contains("busy")),
        "{last:?}"
    );
    assert_eq!(r.calls.lock().len(), 3);
    assert_eq!(r.calls.lock()[2].0["herald-attempt"], "3");
}

#[tokio::test]
async fn retry_after_on_a_429_is_honoured() {
    let (addr, r) = receiver().await;
    *r.call.lock() = (429, String::new(), Some("30".into()));
    let out = attempt(&topic(addr, json!({"recheck_url": null})), 1).await;
    assert!(
        matches!(out.next, Next::RetryAt { at_ms, .. } if at_ms == NOW + 30_000),
        "{out:?}"
    );
}

#[tokio::test]
async fn the_retry_condition_reads_the_answer() {
    let (addr, r) = receiver().await;
    let t = topic(
        addr,
        json!({"recheck_url": null, "retry_if": "{res.code}!=200 && {res.data.status}!=2 || {res.data.msg}=='failed'"}),
    );
    // `{res.code}` is the HTTP status; `{res.data...}` reads the body.
    for (status, body, delivered) in [
        (200, r#"{"data":{"status":1}}"#, true),
        (202, r#"{"data":{"status":2}}"#, true),
        (202, r#"{"data":{"status":1}}"#, false),
        (200, r#"{"data":{"status":2,"msg":"failed"}}"#, false),
        (200, "", false),
        (500, r#"{"data":{"status":2}}"#, false),
    ] {
        *r.call.lock() = (status, body.into(), None);
        let out = attempt(&t, 1).await;
        assert_eq!(
            out.next == Next::Delivered,
            delivered,
            "{status} {body}: {out:?}"
        );
    }
}

#[tokio::test]
async fn a_paused_host_uses_no_attempt() {
    let (addr, r) = receiver().await;
    *r.call.lock() = (500, String::new(), None);
    let c = client();
    let t = topic(addr, json!({"recheck_url": null}));
    let failed = attempt_with(&c, &t, 1).await;
    assert!(failed.counted);
    let paused = attempt_with(&c, &t, 2).await;
    assert!(!paused.counted, "{paused:?}");
    assert!(paused.attempts.is_empty());
    assert!(matches!(paused.next, Next::RetryAt { .. }));
    assert_eq!(r.calls.lock().len(), 1);
}

#[tokio::test]
async fn a_refused_destination_is_dead_at_once() {
    let (addr, r) = receiver().await;
    let closed = Client::new(ClientConfig::default(), Arc::new(NoEvents)).unwrap();
    let out = attempt_with(&closed, &topic(addr, json!({"recheck_url": null})), 1).await;
    assert!(
        matches!(&out.next, Next::Dead { reason } if reason.contains("loopback")),
        "{out:?}"
    );
    assert_eq!(out.attempts.len(), 1);
    assert!(r.calls.lock().is_empty());
}

#[test]
fn only_a_public_answer_leaves_an_excerpt_and_a_quote() {
    let answer = |public| Answer {
        status: 500,
        body: Bytes::from_static(b"internal secrets"),
        truncated: false,
        retry_after: None,
        public,
    };
    assert_eq!(kept_excerpt(&answer(true)), "internal secrets");
    assert_eq!(kept_excerpt(&answer(false)), "");
    let quoted = |public| match answer::callback(&meaning_of(&Ok(answer(public))), None) {
        answer::Outcome::Failed { reason } => reason,
        answer::Outcome::Delivered => panic!("a 500 is no delivery"),
    };
    assert_eq!(quoted(true), "HTTP 500: internal secrets");
    assert_eq!(
        quoted(false),
        "HTTP 500 (16 bytes, not quoted: the destination is not public)"
    );
}
