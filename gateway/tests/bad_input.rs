//! Bad input gets a clear error and disturbs nobody else.

mod common;

use bytes::Bytes;
use common::*;
use futures_util::SinkExt;
use herald_protocol::stomp::Command;
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::Frame as WsFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};

async fn expect_error(c: &mut StompClient, says: &str) -> Option<u16> {
    let f = c.next_frame().await.expect("an ERROR frame");
    assert_eq!(f.command, Command::Error, "{f:?}");
    let message = f.header("message").unwrap_or_default().to_owned();
    assert!(
        message.to_lowercase().contains(says),
        "{message:?} should mention {says:?}"
    );
    c.closed().await
}

#[tokio::test]
async fn malformed_oversized_and_invalid_utf8_frames_get_errors_while_others_carry_on() {
    let gw = start(|_| {}).await;
    let mut bystander = gw.session(&token("carol", None, None)).await;

    // A header line without a colon.
    let mut c = gw.session(&token("m1", None, None)).await;
    c.send_raw_text("SUBSCRIBE\nid 0\n\n\0").await;
    assert_eq!(expect_error(&mut c, "header").await, Some(1002));

    // An unknown command.
    let mut c = gw.session(&token("m2", None, None)).await;
    c.send_raw_text("FROB\n\n\0").await;
    expect_error(&mut c, "command").await;

    // A frame over the 64 KiB limit.
    let mut c = gw.session(&token("m3", None, None)).await;
    let big = format!("SEND\ndestination:/x\n\n{}\0", "x".repeat(70 * 1024));
    c.send_raw_text(&big).await;
    assert_eq!(expect_error(&mut c, "exceed").await, Some(1009));

    // Invalid UTF-8 inside a WebSocket text message.
    let mut c = gw.session(&token("m4", None, None)).await;
    let frame = WsFrame::message(
        Bytes::from_static(b"SUBSCRIBE\n\xff\xfe\n\n\0"),
        OpCode::Data(Data::Text),
        true,
    );
    c.ws.send(Message::Frame(frame)).await.unwrap();
    assert_eq!(expect_error(&mut c, "utf-8").await, Some(1007));

    // Invalid UTF-8 in a STOMP header sent as a binary message.
    let mut c = gw.session(&token("m5", None, None)).await;
    c.ws.send(Message::binary(Bytes::from_static(
        b"UNSUBSCRIBE\nid:\xff\n\n\0",
    )))
    .await
    .unwrap();
    expect_error(&mut c, "utf-8").await;

    // SEND is refused with a reason.
    let mut c = gw.session(&token("m6", None, None)).await;
    c.send(Command::Send, &[("destination", "/x")]).await;
    expect_error(&mut c, "http or amqp").await;

    // A bad heart-beat header in CONNECT.
    let (mut c, answer) = gw
        .connect_with(&[
            ("passcode", &token("m7", None, None)),
            ("heart-beat", "soon"),
        ])
        .await;
    assert_eq!(answer.command, Command::Error);
    assert!(answer.header("message").unwrap().contains("heart-beat"));
    c.closed().await;

    // The bystander never noticed.
    notify(&gw, "carol", "still.here").await;
    assert_eq!(
        bystander.message().await.header("event"),
        Some("still.here")
    );
    let m = gw.metrics().await;
    for (series, at_least) in [
        (
            r#"herald_protocol_errors_total{kind="malformed_frame"}"#,
            2.0,
        ),
        (r#"herald_protocol_errors_total{kind="oversized"}"#, 1.0),
        (r#"herald_protocol_errors_total{kind="invalid_utf8"}"#, 2.0),
        (r#"herald_protocol_errors_total{kind="refused"}"#, 2.0),
    ] {
        let v = sample(&m, series).unwrap_or(0.0);
        assert!(v >= at_least, "{series} = {v}\n{m}");
    }
}

/// A STOMP header that is not UTF-8 is invalid payload data (1007), on
/// `/ws` and on SockJS's raw websocket transport alike.
#[tokio::test]
async fn a_header_that_is_not_utf8_closes_with_1007_on_every_websocket_path() {
    let gw = start(|_| {}).await;
    let sockjs = format!("ws://{}/sockjs/websocket", gw.addr);
    for url in [gw.ws_url(), sockjs] {
        let mut c = StompClient::open(&url).await;
        c.send(
            Command::Connect,
            &[
                ("accept-version", "1.2"),
                ("passcode", &token("u8", None, None)),
            ],
        )
        .await;
        let answer = c.next_frame().await.expect("CONNECTED");
        assert_eq!(answer.command, Command::Connected, "{url}: {answer:?}");
        c.ws.send(Message::binary(Bytes::from_static(
            b"SUBSCRIBE\nid:\xff\ndestination:/user/notifications\n\n\0",
        )))
        .await
        .unwrap();
        let code = expect_error(&mut c, "header on line 2 is not valid utf-8").await;
        assert_eq!(code, Some(1007), "{url}");
    }
}

/// Only SEND, MESSAGE and ERROR frames have bodies (STOMP 1.2): a SUBSCRIBE
/// with one is refused, naming the command, and the session closes.
#[tokio::test]
async fn a_subscribe_with_a_body_is_refused() {
    let gw = start(|_| {}).await;
    let (mut c, answer) = gw
        .connect_with(&[("passcode", &token("b1", None, None))])
        .await;
    assert_eq!(answer.command, Command::Connected);
    c.send_raw_text("SUBSCRIBE\nid:s\ndestination:/user/notifications\nreceipt:r\n\nhello\0")
        .await;
    let code = expect_error(&mut c, "subscribe frames must not have a body").await;
    assert_eq!(code, Some(1002));
}

#[tokio::test]
async fn frames_before_connect_are_refused() {
    let gw = start(|_| {}).await;
    let mut c = StompClient::open(&gw.ws_url()).await;
    c.send(
        Command::Subscribe,
        &[("id", "0"), ("destination", "/user/notifications")],
    )
    .await;
    expect_error(&mut c, "expected connect").await;
}

#[tokio::test]
async fn unsupported_versions_are_refused() {
    let gw = start(|_| {}).await;
    let mut c = StompClient::open(&gw.ws_url()).await;
    c.send(
        Command::Connect,
        &[
            ("accept-version", "2.0"),
            ("passcode", &token("a", None, None)),
        ],
    )
    .await;
    expect_error(&mut c, "1.0,1.1,1.2").await;
}

#[tokio::test]
async fn plain_http_on_the_websocket_path_gets_426() {
    let gw = start(|_| {}).await;
    let r = reqwest::get(gw.ws_url().replace("ws://", "http://"))
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 426);
    assert_eq!(r.headers().get("sec-websocket-version").unwrap(), "13");
}

async fn post(
    gw: &TestGateway,
    key: Option<&str>,
    ctype: Option<&str>,
    body: Vec<u8>,
) -> (u16, serde_json::Value) {
    let mut req = reqwest::Client::new().post(format!("http://{}/v1/notifications", gw.addr));
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    if let Some(c) = ctype {
        req = req.header("content-type", c);
    }
    let r = req.body(body).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

#[tokio::test]
async fn publish_api_errors_are_json_with_a_field() {
    let gw = start(|c| c.publish.max_payload_bytes = 1000).await;
    let json_ct = Some("application/json");
    let ok = br#"{"users":["a"],"event":"e"}"#.to_vec();

    let (s, b) = post(&gw, None, json_ct, ok.clone()).await;
    assert_eq!(
        (s, b["error"]["code"].as_str()),
        (401, Some("unauthorized"))
    );
    let (s, _) = post(&gw, Some("wrong"), json_ct, ok.clone()).await;
    assert_eq!(s, 401);

    let (s, b) = post(&gw, Some(API_KEY), json_ct, b"{\"users\":".to_vec()).await;
    assert_eq!(
        (s, b["error"]["code"].as_str()),
        (400, Some("malformed_json"))
    );

    let (s, b) = post(&gw, Some(API_KEY), None, ok.clone()).await;
    assert_eq!(s, 415, "{b}");

    let cases = [
        (json!({"users": ["a"]}), "event"),
        (json!({"users": ["a"], "event": "bad event"}), "event"),
        (json!({"event": "e"}), "users"),
        (json!({"scope": "client", "event": "e"}), "clients"),
        (
            json!({"scope": "everyone", "users": ["a"], "event": "e"}),
            "scope",
        ),
        (json!({"users": "a", "event": "e"}), "users"),
        (
            json!({"users": ["a"], "event": "e", "ttl_ms": -1}),
            "ttl_ms",
        ),
        (
            json!({"users": ["a"], "event": "e", "colour": "red"}),
            "colour",
        ),
        (
            json!({"users": (0..51).map(|i| format!("u{i}")).collect::<Vec<_>>(), "event": "e"}),
            "users",
        ),
    ];
    for (body, field) in cases {
        let (s, b) = post(&gw, Some(API_KEY), json_ct, body.to_string().into_bytes()).await;
        assert_eq!(s, 422, "{body} -> {b}");
        assert_eq!(b["error"]["code"], "invalid_field", "{b}");
        assert_eq!(
            b["error"]["field"].as_str().unwrap_or(""),
            field,
            "{body} -> {b}"
        );
        assert!(!b["error"]["message"].as_str().unwrap().is_empty());
    }
    // Batch errors name the index.
    let (s, b) = post(
        &gw,
        Some(API_KEY),
        json_ct,
        json!([{"users": ["a"], "event": "e"}, {"users": ["a"], "event": "e:x"}])
            .to_string()
            .into_bytes(),
    )
    .await;
    assert_eq!((s, b["error"]["field"].as_str()), (422, Some("[1].event")));

    let big = json!({"users": ["a"], "event": "e", "payload": "x".repeat(2000)});
    let (s, b) = post(&gw, Some(API_KEY), json_ct, big.to_string().into_bytes()).await;
    assert_eq!(
        (s, b["error"]["field"].as_str()),
        (413, Some("payload")),
        "{b}"
    );

    // Raw payloads: text content must be UTF-8.
    let r = reqwest::Client::new()
        .post(format!(
            "http://{}/v1/notifications?users=a&event=e",
            gw.addr
        ))
        .bearer_auth(API_KEY)
        .header("content-type", "text/plain")
        .body(vec![0xff, 0xfe])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 422);
    let b: serde_json::Value = r.json().await.unwrap();
    assert_eq!(b["error"]["field"], "payload");

    let m = gw.metrics().await;
    assert!(
        sample(
            &m,
            r#"herald_notifications_rejected_total{source="http",reason="invalid_field"}"#
        )
        .unwrap()
            >= 10.0
    );
    assert_eq!(
        sample(
            &m,
            r#"herald_notifications_rejected_total{source="http",reason="unauthorized"}"#
        ),
        Some(2.0)
    );
}

#[tokio::test]
async fn raw_binary_payload_arrives_in_a_binary_frame_intact() {
    let gw = start(|_| {}).await;
    let mut c = gw.session(&token("alice", None, None)).await;
    let payload: Vec<u8> = (0..=255u8).collect();
    let r = reqwest::Client::new()
        .post(format!(
            "http://{}/v1/notifications?users=alice&event=blob",
            gw.addr
        ))
        .bearer_auth(API_KEY)
        .header("content-type", "application/octet-stream")
        .body(payload.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 202);
    let m = c.message().await;
    assert_eq!(m.header("content-type"), Some("application/octet-stream"));
    assert_eq!(&m.body[..], &payload[..]);
}

#[tokio::test]
async fn unknown_paths_and_methods_get_json_errors() {
    let gw = start(|_| {}).await;
    let r = reqwest::Client::new()
        .put(format!("http://{}/v1/notifications", gw.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 405);
    let b: serde_json::Value = r.json().await.unwrap();
    assert_eq!(b["error"]["code"], "method_not_allowed");
    let r = reqwest::get(format!("http://{}/nope", gw.addr))
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    let b: serde_json::Value = r.json().await.unwrap();
    assert_eq!(b["error"]["code"], "not_found");
}
