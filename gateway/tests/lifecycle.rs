//! Session lifecycle: heart-beats, timeouts, limits, slow consumers,
//! graceful shutdown.

mod common;

use std::time::Duration;

use common::*;
use herald_protocol::stomp::Command;
use serde_json::json;

#[tokio::test]
async fn server_heartbeats_are_negotiated_and_sent() {
    let gw = start(|c| c.session.heartbeat_send_ms = 50).await;
    let mut c = StompClient::open(&gw.ws_url()).await;
    c.send(
        Command::Connect,
        &[
            ("accept-version", "1.2"),
            ("passcode", &token("a", None, None)),
            ("heart-beat", "0,100"),
        ],
    )
    .await;
    let connected = c.next_frame().await.unwrap();
    // Server sends every max(50, 100) ms; expects nothing from a client that offers 0.
    assert_eq!(connected.header("heart-beat"), Some("100,0"));
    // A bare EOL arrives as its own WebSocket text message.
    let beat = tokio::time::timeout(WAIT, async {
        use futures_util::StreamExt;
        loop {
            match c.ws.next().await {
                Some(Ok(tokio_tungstenite::tungstenite::Message::Text(t)))
                    if t.as_str() == "\n" =>
                {
                    return true;
                }
                Some(Ok(_)) => continue,
                _ => return false,
            }
        }
    })
    .await
    .unwrap();
    assert!(beat);
}

#[tokio::test]
async fn a_silent_client_is_cut_after_missing_its_heartbeats() {
    let gw = start(|c| c.session.heartbeat_receive_ms = 50).await;
    let (mut c, answer) = gw
        .connect_with(&[
            ("passcode", &token("a", None, None)),
            ("heart-beat", "50,0"),
        ])
        .await;
    assert_eq!(answer.header("heart-beat"), Some("0,50"));
    let e = c.next_frame().await.unwrap();
    assert_eq!(e.command, Command::Error);
    assert!(e.header("message").unwrap().contains("heart-beat"));
}

#[tokio::test]
async fn no_connect_in_time_closes_the_socket() {
    let gw = start(|c| c.session.connect_timeout_ms = 100).await;
    let mut c = StompClient::open(&gw.ws_url()).await;
    let e = c.next_frame().await.unwrap();
    assert_eq!(e.command, Command::Error);
    assert!(e.header("message").unwrap().contains("CONNECT"));
    let m = gw.metrics().await;
    assert_eq!(
        sample(
            &m,
            r#"herald_connections_refused_total{reason="connect_timeout"}"#
        ),
        Some(1.0)
    );
}

#[tokio::test]
async fn the_session_limit_answers_503() {
    let gw = start(|c| c.session.max_sessions = 1).await;
    let _first = gw.session(&token("a", None, None)).await;
    let mut req =
        tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(gw.ws_url())
            .unwrap();
    req.headers_mut()
        .insert("Sec-WebSocket-Protocol", "v12.stomp".parse().unwrap());
    let err = tokio_tungstenite::connect_async(req).await.unwrap_err();
    match err {
        tokio_tungstenite::tungstenite::Error::Http(r) => assert_eq!(r.status().as_u16(), 503),
        other => panic!("expected HTTP 503, got {other}"),
    }
}

/// A client that never reads fills its queue; policy `disconnect` cuts it
/// and counts it, and a reading client is not affected.
#[tokio::test]
async fn slow_consumer_is_cut_and_counted() {
    let gw = start(|c| {
        c.session.queue_messages = 4;
        c.mailbox.buffer_messages = 4;
        // No room for unsent messages past the replay bound (1 byte): the policy
        // applies as soon as the buffer evicts what the client was not sent.
        c.mailbox.unsent_bytes = 1;
        c.publish.max_payload_bytes = 512 * 1024;
    })
    .await;
    // The slow client: a small receive buffer, and it does not read.
    let mut slow = gw.slow_session(&token("slow", None, None)).await;
    let mut fast = gw.session(&token("fast", None, None)).await;

    let payload = "x".repeat(256 * 1024);
    let mut cut = false;
    for _ in 0..200 {
        let (s, _) = gw
            .publish(json!({"users": ["slow", "fast"], "event": "big", "payload": payload}))
            .await;
        assert_eq!(s, 202);
        let m = fast.message().await;
        assert_eq!(m.body.len(), payload.len() + 2);
        let metrics = gw.metrics().await;
        if sample(&metrics, r#"herald_dropped_total{reason="slow_consumer"}"#) == Some(1.0) {
            cut = true;
            break;
        }
    }
    assert!(cut, "the slow consumer was never cut");
    // The cut session's end: ERROR "slow consumer" (if it ever reads it) and a close.
    let mut saw_error = false;
    while let Some(f) = slow.next_frame().await {
        if f.command == Command::Error {
            assert!(f.header("message").unwrap().contains("slow consumer"));
            saw_error = true;
        }
    }
    assert!(saw_error);
    notify(&gw, "fast", "after").await;
    assert_eq!(fast.message().await.header("event"), Some("after"));
}

#[tokio::test]
async fn drop_oldest_policy_sends_a_gap_marker() {
    let gw = start(|c| {
        c.session.queue_messages = 4;
        c.mailbox.buffer_messages = 4;
        // No room for unsent messages past the replay bound (1 byte): the policy
        // applies as soon as the buffer evicts what the client was not sent.
        c.mailbox.unsent_bytes = 1;
        c.session.when_full = herald_gateway::config::WhenFull::DropOldest;
        c.publish.max_payload_bytes = 512 * 1024;
    })
    .await;
    let mut slow = gw.slow_session(&token("slow", None, None)).await;
    let payload = "y".repeat(256 * 1024);
    let mut dropped = false;
    for _ in 0..200 {
        let (s, _) = gw
            .publish(json!({"users": ["slow"], "event": "big", "payload": payload}))
            .await;
        assert_eq!(s, 202);
        let m = gw.metrics().await;
        if sample(
            &m,
            r#"herald_dropped_total{reason="queue_full_drop_oldest"}"#,
        )
        .unwrap_or(0.0)
            >= 1.0
        {
            dropped = true;
            break;
        }
    }
    assert!(dropped);
    // Reading now: somewhere in the stream is a gap marker with reason queue-overflow.
    let mut saw_gap = false;
    for _ in 0..400 {
        let m = slow.message().await;
        if m.header("event") == Some("herald.gap") {
            assert_eq!(m.header("reason"), Some("queue-overflow"));
            saw_gap = true;
            break;
        }
    }
    assert!(saw_gap);
}

#[tokio::test]
async fn shutdown_sends_error_to_every_session_and_drains() {
    let gw = start(|_| {}).await;
    let mut a = gw.session(&token("a", None, None)).await;
    let mut b = gw.session(&token("b", None, None)).await;
    gw.shutdown.cancel();
    for c in [&mut a, &mut b] {
        let e = c.next_frame().await.unwrap();
        assert_eq!(e.command, Command::Error);
        assert_eq!(e.header("message"), Some("server shutting down"));
        assert_eq!(c.closed().await, Some(1001));
    }
    let (_, task) = gw.local.expect("an in-process gateway");
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("serve returns after the drain")
        .unwrap();
}

#[tokio::test]
async fn standalone_is_live_and_ready_then_not_ready_while_draining() {
    use tower::ServiceExt;
    let gw = start(|_| {}).await;
    let (status, body) = gw.get_json("/healthz").await;
    assert_eq!((status, body["status"].as_str()), (200, Some("ok")));
    let (status, body) = gw.get_json("/readyz").await;
    assert_eq!((status, body["status"].as_str()), (200, Some("ready")));
    let (shared, task) = gw.local.expect("an in-process gateway");
    let (routes, _) = herald_gateway::http::routes(shared, axum::Router::new());
    gw.shutdown.cancel();
    let r = routes
        .oneshot(
            axum::http::Request::get("/readyz")
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 503);
    let body = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        body,
        json!({"status": "unavailable", "reasons": ["draining"]})
    );
    // As documented: once the drain is under way the listener is closed.
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
    assert!(tokio::net::TcpStream::connect(gw.addr).await.is_err());
}

#[tokio::test]
async fn a_session_ends_when_its_token_expires_with_error_and_1008() {
    let gw = start(|_| {}).await; // leeway 0
    let short = herald_gateway::auth::sign_hs256(
        SECRET.as_bytes(),
        &herald_gateway::auth::Claims {
            sub: "expiring".into(),
            client: None,
            site: None,
            exp: now_secs() + 2,
        },
    );
    let mut c = gw.session(&short).await;
    // Within 2 s (WAIT bounds it): ERROR, then the close.
    let f = c.next_frame().await.expect("an ERROR before the close");
    assert_eq!(f.command, Command::Error, "{f:?}");
    assert_eq!(f.header("message"), Some("token expired"));
    assert!(c.next_frame().await.is_none());
    assert_eq!(c.close_code, Some(1008));
    let metrics = gw.metrics().await;
    assert_eq!(
        sample(&metrics, "herald_sessions_token_expired_total"),
        Some(1.0),
        "{metrics}"
    );
}

#[tokio::test]
async fn the_metrics_name_the_build() {
    let gw = start(|_| {}).await;
    let metrics = gw.metrics().await;
    let line = format!(
        r#"herald_build_info{{version="{}",commit="{}"}} 1"#,
        env!("CARGO_PKG_VERSION"),
        env!("HERALD_COMMIT")
    );
    assert!(metrics.contains(&line), "{line} not in {metrics}");
}

/// A connection that sent nothing yet (a browser's preconnected socket)
/// does not hold the drain: with the header timeout and the grace both
/// longer than the wait here, the gateway closes it and stops as soon as
/// shutdown starts. With and without the PROXY protocol in front.
#[tokio::test]
async fn connections_that_sent_nothing_do_not_hold_the_drain() {
    use tokio::io::AsyncReadExt;
    for proxy_protocol in [false, true] {
        let gw = start(|c| {
            c.session.header_timeout_ms = 60_000;
            c.shutdown_grace_ms = 60_000;
            if proxy_protocol {
                c.proxy.protocol = true;
                c.proxy.trusted = vec!["127.0.0.1/32".parse().unwrap()];
            }
        })
        .await;
        let mut silent = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
        // The connection is accepted and waiting for its first bytes once a
        // request on another connection was served after it.
        let mut probe = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
        let proxy = if proxy_protocol {
            "PROXY TCP4 10.0.0.1 127.0.0.1 1111 80\r\n"
        } else {
            ""
        };
        let request =
            format!("{proxy}GET /healthz HTTP/1.1\r\nHost: herald\r\nConnection: close\r\n\r\n");
        tokio::io::AsyncWriteExt::write_all(&mut probe, request.as_bytes())
            .await
            .unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(WAIT, probe.read_to_end(&mut answer))
            .await
            .expect("the probe answered")
            .unwrap();
        assert!(
            answer.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&answer)
        );
        gw.shutdown.cancel();
        let mut rest = Vec::new();
        let read = tokio::time::timeout(WAIT, silent.read_to_end(&mut rest))
            .await
            .expect("closed at shutdown");
        assert!(
            read.map_or(true, |n| n == 0),
            "proxy {proxy_protocol}: {rest:?}"
        );
        let (_, task) = gw.local.expect("an in-process gateway");
        tokio::time::timeout(WAIT, task)
            .await
            .expect("serve returns without waiting out the grace")
            .unwrap();
    }
}
