//! The gateway's limits, each refusal as a client sees it and as a metric:
//! new connections per source address (429 with `Retry-After`, WebSocket
//! upgrades included), sessions per user (STOMP ERROR, close 1008), and the
//! standalone publish API's named keys (403 naming the operation or
//! `sites`, 429 with `Retry-After`).

mod common;

use std::time::Duration;

use common::*;
use herald_gateway::config::Config;
use herald_gateway::metrics::{RefuseLabels, RefuseReason, Transport, TransportLabels};
use herald_protocol::stomp::Command;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn refused(gw: &TestGateway, reason: RefuseReason) -> u64 {
    let (shared, _) = gw.local.as_ref().unwrap();
    shared
        .metrics
        .refused
        .get_or_create(&RefuseLabels { reason })
        .get()
}

/// One HTTP/1.1 request on a new connection; the whole answer, read until
/// the gateway closes the connection.
async fn raw(gw: &TestGateway, head: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(WAIT, s.read_to_end(&mut out))
        .await
        .expect("the gateway answers and closes")
        .unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn an_address_over_its_connection_rate_gets_429_with_retry_after() {
    // A burst of 3, then one connection per 1000 s.
    let gw = start(|c| {
        c.connection_rate.per_sec = 0.001;
        c.connection_rate.burst = 3;
    })
    .await;
    // Three connections of any kind pass: a probe, a session, a probe.
    let probe = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    assert!(raw(&gw, probe).await.starts_with("HTTP/1.1 200"));
    let mut session = gw.session(&token("alice", None, None)).await;
    assert!(raw(&gw, probe).await.starts_with("HTTP/1.1 200"));

    // The fourth, a WebSocket upgrade: refused with 429 and Retry-After.
    match tokio_tungstenite::connect_async(gw.ws_url()).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 429);
            let retry: u64 = response.headers()["retry-after"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            assert!((990..=1000).contains(&retry), "Retry-After {retry}");
        }
        other => panic!("expected a 429 refusal, got {other:?}"),
    }
    // The fifth, plain HTTP: the same, in words, then closed.
    let answer = raw(&gw, probe).await;
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("retry-after: "),
        "{answer}"
    );
    assert!(
        answer.contains("too many new connections from this address: retry after"),
        "{answer}"
    );
    assert_eq!(refused(&gw, RefuseReason::RateLimited), 2);

    // The session that got in is not affected: it still answers.
    session.subscribe("sub-1", &[]).await;
}

#[tokio::test]
async fn without_a_connection_rate_an_address_is_not_limited() {
    let gw = start(|_| {}).await;
    let probe = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    for _ in 0..50 {
        assert!(raw(&gw, probe).await.starts_with("HTTP/1.1 200"));
    }
    assert_eq!(refused(&gw, RefuseReason::RateLimited), 0);
}

#[tokio::test]
async fn a_user_over_max_per_user_gets_error_and_close() {
    let gw = start(|c| c.session.max_per_user = 2).await;
    let alice = token("alice", None, Some("eu"));
    let first = gw.session(&alice).await;
    let _second = gw.session(&alice).await;

    let (mut third, answer) = gw.connect_with(&[("passcode", &alice)]).await;
    assert_eq!(answer.command, Command::Error, "{answer:?}");
    assert_eq!(
        answer.header("message"),
        Some(
            "too many sessions for this user: at most 2 at once on this server (session.max_per_user)"
        )
    );
    assert_eq!(third.closed().await, Some(1008));
    assert_eq!(refused(&gw, RefuseReason::UserSessionLimit), 1);

    // Another user, or the same user id on another site, is someone else.
    let _bob = gw.session(&token("bob", None, Some("eu"))).await;
    let _alice_us = gw.session(&token("alice", None, Some("us"))).await;

    // Once one of alice's sessions ends, she may open another.
    drop(first);
    let (shared, _) = gw.local.as_ref().unwrap();
    let live = shared.metrics.sessions.get_or_create(&TransportLabels {
        transport: Transport::Websocket,
    });
    let deadline = tokio::time::Instant::now() + WAIT;
    while live.get() != 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the dropped session never ended"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _again = gw.session(&alice).await;
}

fn keys(c: &mut Config) {
    c.api_key = Config::from_toml(
        r#"
[[api_key]]
name = "reader"
key = "reader-secret"
ops = ["status"]

[[api_key]]
name = "eu-app"
key = "eu-secret"
ops = ["publish"]
sites = ["eu"]
rate_per_sec = 0.001
burst = 1
"#,
        std::path::Path::new("keys.toml"),
    )
    .unwrap()
    .api_key;
}

/// Issue 37, hole 3: two tenants publishing the same id each reach their
/// own user; neither is the other's duplicate, and browsers read the id as
/// published.
#[tokio::test]
async fn two_tenants_publishing_one_id_both_deliver() {
    let gw = start(|c| {
        c.api_key = Config::from_toml(
            r#"
[[api_key]]
name = "a-app"
key = "a-secret"
sites = ["a"]

[[api_key]]
name = "b-app"
key = "b-secret"
sites = ["b"]
"#,
            std::path::Path::new("keys.toml"),
        )
        .unwrap()
        .api_key;
    })
    .await;
    let mut ann = gw.session(&token("ann", None, Some("a"))).await;
    let mut bob = gw.session(&token("bob", None, Some("b"))).await;
    for (key, user, site) in [("a-secret", "ann", "a"), ("b-secret", "bob", "b")] {
        let r = post(
            &gw,
            key,
            json!({"id": "invoice-77", "users": [user], "sites": [site], "event": "invoice"}),
        )
        .await;
        assert_eq!(r.status(), 202);
    }
    for session in [&mut ann, &mut bob] {
        let m = session.message().await;
        assert_eq!(m.header("message-id"), Some("invoice-77"));
    }
    let m = gw.metrics().await;
    assert_eq!(sample(&m, "herald_duplicates_total"), Some(0.0), "{m}");
}

async fn post(gw: &TestGateway, key: &str, body: serde_json::Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("http://{}/v1/notifications", gw.addr))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn the_standalone_api_refuses_by_operation_site_and_rate() {
    let gw = start(keys).await;
    let note = |sites: &[&str]| json!({"users": ["alice"], "event": "e", "sites": sites});

    let r = post(&gw, "reader-secret", note(&["eu"])).await;
    assert_eq!(r.status(), 403);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "forbidden");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("API key \"reader\" is not allowed the operation \"publish\""),
        "{body}"
    );

    let r = post(&gw, "eu-secret", note(&[])).await;
    assert_eq!(r.status(), 403);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["field"], "sites", "{body}");

    let mut session = gw.session(&token("alice", None, Some("eu"))).await;
    let r = post(&gw, "eu-secret", note(&["eu"])).await;
    assert_eq!(r.status(), 202);
    assert_eq!(session.message().await.header("event"), Some("e"));

    let r = post(&gw, "eu-secret", note(&["eu"])).await;
    assert_eq!(r.status(), 429);
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((990..=1000).contains(&retry), "Retry-After {retry}");
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limited", "{body}");

    // The test's plain key is key-1: everything, everywhere, no rate.
    for _ in 0..3 {
        assert_eq!(post(&gw, API_KEY, note(&[])).await.status(), 202);
    }
    let m = gw.metrics().await;
    for (series, value) in [
        (
            r#"herald_api_key_refused_total{api_key="reader",operation="publish",reason="forbidden"}"#,
            1.0,
        ),
        (
            r#"herald_api_key_refused_total{api_key="eu-app",operation="publish",reason="forbidden"}"#,
            1.0,
        ),
        (
            r#"herald_api_key_refused_total{api_key="eu-app",operation="publish",reason="rate_limited"}"#,
            1.0,
        ),
        (
            r#"herald_api_key_notifications_total{api_key="key-1"}"#,
            3.0,
        ),
        ("herald_api_keys", 3.0),
    ] {
        assert_eq!(sample(&m, series), Some(value), "{series}\n{m}");
    }
}
