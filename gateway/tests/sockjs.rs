//! SockJS 0.3: one regression test per behaviour the SockJS protocol test
//! suite checks (see docs/sockjs-conformance.md), plus STOMP over every
//! transport.

mod common;

use bytes::BytesMut;
use common::*;
use futures_util::{SinkExt, StreamExt};
use herald_protocol::stomp::{self, Command, Decoded, Limits, Version};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

async fn test_gateway() -> TestGateway {
    start(|c| {
        c.sockjs.test_endpoints = true;
        // Long enough that a loaded machine never expires a session between
        // two requests of one test; the expiry test sets its own.
        c.sockjs.session_timeout_ms = 5_000;
    })
    .await
}

fn base(gw: &TestGateway, prefix: &str) -> String {
    format!("http://{}{prefix}", gw.addr)
}

async fn post(url: &str, body: &str) -> (u16, reqwest::header::HeaderMap, String) {
    let r = client()
        .post(url)
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    (status, headers, r.text().await.unwrap())
}

#[tokio::test]
async fn greeting_and_info() {
    let gw = test_gateway().await;
    for path in ["/echo", "/echo/"] {
        let r = reqwest::get(base(&gw, path)).await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-type"], "text/plain; charset=UTF-8");
        assert_eq!(r.text().await.unwrap(), "Welcome to SockJS!\n");
    }
    let r = client()
        .get(base(&gw, "/echo/info"))
        .header("Origin", "http://example.test")
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.headers()["content-type"],
        "application/json; charset=UTF-8"
    );
    assert!(
        r.headers()["cache-control"]
            .to_str()
            .unwrap()
            .contains("no-store")
    );
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "http://example.test"
    );
    assert_eq!(r.headers()["access-control-allow-credentials"], "true");
    let info: serde_json::Value = r.json().await.unwrap();
    assert_eq!(info["websocket"], true);
    assert_eq!(info["cookie_needed"], false);
    assert_eq!(info["origins"], json!(["*:*"]));
    assert!(info["entropy"].is_u64());
    let off: serde_json::Value = reqwest::get(base(&gw, "/disabled_websocket_echo/info"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(off["websocket"], false);
    let cookie: serde_json::Value = reqwest::get(base(&gw, "/cookie_needed_echo/info"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(cookie["cookie_needed"], true);
}

#[tokio::test]
async fn preflight_is_cacheable_with_cors() {
    let gw = test_gateway().await;
    for (path, methods) in [
        ("/echo/info", "OPTIONS, GET"),
        ("/echo/000/pre/xhr", "OPTIONS, POST"),
        ("/echo/000/pre/xhr_send", "OPTIONS, POST"),
        ("/echo/000/pre/xhr_streaming", "OPTIONS, POST"),
    ] {
        let r = client()
            .request(reqwest::Method::OPTIONS, base(&gw, path))
            .header("Origin", "http://a.test")
            .header("Access-Control-Request-Headers", "a, b")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 204, "{path}");
        let h = r.headers();
        assert_eq!(h["access-control-allow-methods"], methods);
        assert_eq!(h["access-control-max-age"], "31536000");
        assert_eq!(h["access-control-allow-headers"], "a, b");
        assert!(
            h["cache-control"]
                .to_str()
                .unwrap()
                .contains("max-age=31536000")
        );
        assert!(h.contains_key("expires"));
    }
}

#[tokio::test]
async fn xhr_polling_opens_echoes_and_validates_sends() {
    let gw = test_gateway().await;
    let url = base(&gw, "/echo/000/poll1");
    let (s, h, body) = post(&format!("{url}/xhr"), "").await;
    assert_eq!((s, body.as_str()), (200, "o\n"));
    assert_eq!(h["content-type"], "application/javascript; charset=UTF-8");
    let (s, h, body) = post(&format!("{url}/xhr_send"), r#"["a","b \u2028 \"q\""]"#).await;
    assert_eq!((s, body.as_str()), (204, ""));
    assert_eq!(h["content-type"], "text/plain; charset=UTF-8");
    let (_, _, body) = post(&format!("{url}/xhr"), "").await;
    assert_eq!(body, "a[\"a\",\"b \\u2028 \\\"q\\\"\"]\n");
    // Bad sends: the protocol's exact answers; the session lives on.
    assert_eq!(
        post(&format!("{url}/xhr_send"), "").await.2,
        "Payload expected."
    );
    let (s, _, body) = post(&format!("{url}/xhr_send"), "[\"x\"").await;
    assert_eq!((s, body.as_str()), (500, "Broken JSON encoding."));
    let (s, _, body) = post(&format!("{url}/xhr_send"), "{}").await;
    assert_eq!((s, body.as_str()), (500, "Broken JSON encoding."));
    assert_eq!(
        post(&format!("{url}/xhr_send"), r#"["still"]"#).await.0,
        204
    );
    assert_eq!(post(&format!("{url}/xhr"), "").await.2, "a[\"still\"]\n");
    let m = gw.metrics().await;
    assert_eq!(
        sample(
            &m,
            r#"herald_protocol_errors_total{kind="malformed_frame"}"#
        ),
        Some(3.0),
        "every refused send is counted\n{m}"
    );
    // Unknown session, bad ids, wrong method.
    assert_eq!(
        post(&base(&gw, "/echo/000/nope/xhr_send"), r#"["x"]"#)
            .await
            .0,
        404
    );
    assert_eq!(post(&base(&gw, "/echo/000/a.b/xhr"), "").await.0, 404);
    assert_eq!(post(&base(&gw, "/echo/0.0/ab/xhr"), "").await.0, 404);
    let r = reqwest::get(format!("{url}/xhr")).await.unwrap();
    assert_eq!(r.status(), 405);
}

#[tokio::test]
async fn oversized_sends_get_413() {
    let gw = start(|c| {
        c.sockjs.test_endpoints = true;
        c.sockjs.max_send_bytes = 100;
    })
    .await;
    let url = base(&gw, "/echo/000/big");
    post(&format!("{url}/xhr"), "").await;
    let big = format!("[\"{}\"]", "x".repeat(200));
    assert_eq!(post(&format!("{url}/xhr_send"), &big).await.0, 413);
}

#[tokio::test]
async fn a_second_receiver_gets_2010_and_close_sessions_stay_closed() {
    let gw = test_gateway().await;
    let url = base(&gw, "/echo/000/two");
    post(&format!("{url}/xhr"), "").await;
    // A poll that waits (nothing to send) holds the receiver slot.
    let waiting = tokio::spawn({
        let url = url.clone();
        async move { post(&format!("{url}/xhr"), "").await }
    });
    // The second poll races the first for the slot; retry until the first holds it.
    let mut got = String::new();
    for _ in 0..100 {
        got = post(&format!("{url}/xhr"), "").await.2;
        if got.starts_with("c[2010") {
            break;
        }
        // The second poll took the slot itself: give it something to end on.
        post(&format!("{url}/xhr_send"), r#"["x"]"#).await;
    }
    assert_eq!(got, "c[2010,\"Another connection still open\"]\n");
    post(&format!("{url}/xhr_send"), r#"["done"]"#).await;
    assert!(waiting.await.unwrap().2.starts_with("a["));

    let url = base(&gw, "/close/000/c1");
    assert_eq!(post(&format!("{url}/xhr"), "").await.2, "o\n");
    assert_eq!(
        post(&format!("{url}/xhr"), "").await.2,
        "c[3000,\"Go away!\"]\n"
    );
    assert_eq!(
        post(&format!("{url}/xhr"), "").await.2,
        "c[3000,\"Go away!\"]\n"
    );
}

/// Read a streaming response until `want` complete lines (or events) arrived.
async fn read_stream(resp: reqwest::Response, until: impl Fn(&str) -> bool) -> String {
    let mut stream = resp.bytes_stream();
    let mut text = String::new();
    while !until(&text) {
        let chunk = tokio::time::timeout(WAIT, stream.next())
            .await
            .expect("stream stalled")
            .expect("stream ended early")
            .unwrap();
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    text
}

#[tokio::test]
async fn xhr_streaming_has_a_prelude_and_ends_after_the_limit() {
    let gw = start(|c| {
        c.sockjs.test_endpoints = true;
        c.sockjs.streaming_limit_bytes = 4096;
    })
    .await;
    let url = base(&gw, "/echo/000/stream1");
    let r = client()
        .post(format!("{url}/xhr_streaming"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.headers()["content-type"],
        "application/javascript; charset=UTF-8"
    );
    let sender = tokio::spawn(async move {
        for i in 0..10 {
            let body = format!("[\"{}{i}\"]", "x".repeat(1000));
            assert_eq!(post(&format!("{url}/xhr_send"), &body).await.0, 204);
        }
    });
    // The whole response: the server ends it once 4096 bytes went out.
    let body = r.text().await.unwrap();
    sender.await.unwrap();
    assert!(body.starts_with(&format!("{}\no\n", "h".repeat(2048))));
    let frames: Vec<&str> = body[2049..].lines().collect();
    assert_eq!(frames[0], "o");
    assert!(frames[1..].iter().all(|f| f.starts_with("a[\"x")));
    assert!(
        body.len() >= 4096 && body.len() < 4096 + 2049 + 2200,
        "{}",
        body.len()
    );
}

#[tokio::test]
async fn eventsource_frames_are_events() {
    let gw = test_gateway().await;
    let url = base(&gw, "/echo/000/es1");
    let r = client()
        .get(format!("{url}/eventsource"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let send = tokio::spawn({
        let url = url.clone();
        async move { post(&format!("{url}/xhr_send"), r#"["hi"]"#).await }
    });
    let text = read_stream(r, |t| t.contains("a[") && t.ends_with("\r\n\r\n")).await;
    send.await.unwrap();
    assert!(text.starts_with("\r\ndata: o\r\n\r\n"), "{text:?}");
    assert!(text.contains("data: a[\"hi\"]\r\n\r\n"));
}

/// The answers of the suite's later revisions (sockjs-protocol.py after
/// v0.3.3), on hyper's path and on the native streaming path alike:
/// `no-transform`, the `null` origin echoed, `*` without credentials when
/// there is no `Origin`, and `text/event-stream` without a charset.
#[tokio::test]
async fn answers_follow_the_later_protocol() {
    const NO_CACHE: &str = "no-store, no-cache, no-transform, must-revalidate, max-age=0";
    let gw = test_gateway().await;

    let r = reqwest::get(base(&gw, "/echo/info")).await.unwrap();
    assert_eq!(r.headers()["cache-control"], NO_CACHE);
    assert_eq!(r.headers()["access-control-allow-origin"], "*");
    assert!(!r.headers().contains_key("access-control-allow-credentials"));

    let r = client()
        .request(reqwest::Method::OPTIONS, base(&gw, "/echo/info"))
        .header("Origin", "null")
        .header("Access-Control-Request-Method", "GET")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["access-control-allow-origin"], "null");
    assert_eq!(r.headers()["access-control-allow-credentials"], "true");

    let (status, h, _) = post(&base(&gw, "/echo/000/later1/xhr"), "").await;
    assert_eq!(status, 200);
    assert_eq!(h["cache-control"], NO_CACHE);
    assert_eq!(h["access-control-allow-origin"], "*");
    assert!(!h.contains_key("access-control-allow-credentials"));

    // On `/sockjs`, a new connection's stream is answered on the raw socket
    // (it says `Connection: close`); one on a kept-alive connection by hyper.
    for name in ["native", "hyper"] {
        for (kind, origin) in [
            ("eventsource", None),
            ("xhr_streaming", Some("null")),
            ("xhr_streaming", None),
        ] {
            let http = client();
            if name == "hyper" {
                let info = http.get(base(&gw, "/sockjs/info")).send().await.unwrap();
                info.bytes().await.unwrap();
            }
            let session = format!("later-{name}-{kind}-{}", origin.unwrap_or("none"));
            let url = base(&gw, &format!("/sockjs/000/{session}/{kind}"));
            let mut request = if kind == "eventsource" {
                http.get(url)
            } else {
                http.post(url)
            };
            if let Some(o) = origin {
                request = request.header("Origin", o);
            }
            let r = request.send().await.unwrap();
            let h = r.headers();
            let what = format!("{name} {kind} origin {origin:?}");
            assert_eq!(h.contains_key("connection"), name == "native", "{what}");
            assert_eq!(h["cache-control"], NO_CACHE, "{what}");
            if kind == "eventsource" {
                assert_eq!(h["content-type"], "text/event-stream", "{what}");
            }
            assert_eq!(
                h["access-control-allow-origin"],
                origin.unwrap_or("*"),
                "{what}"
            );
            assert_eq!(
                h.get("access-control-allow-credentials")
                    .map(|v| v.to_str().unwrap()),
                origin.map(|_| "true"),
                "{what}"
            );
        }
    }
}

#[tokio::test]
async fn jsessionid_cookie_when_needed() {
    let gw = test_gateway().await;
    let r = client()
        .post(base(&gw, "/cookie_needed_echo/000/ck/xhr"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["set-cookie"], "JSESSIONID=dummy; path=/");
    let r = client()
        .post(base(&gw, "/cookie_needed_echo/000/ck2/xhr"))
        .header("Cookie", "JSESSIONID=abc")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["set-cookie"], "JSESSIONID=abc; path=/");
    let r = client()
        .post(base(&gw, "/echo/000/ck3/xhr"))
        .send()
        .await
        .unwrap();
    assert!(!r.headers().contains_key("set-cookie"));
}

#[tokio::test]
async fn websocket_transports_and_handshake_errors() {
    let gw = test_gateway().await;
    let ws_url = format!("ws://{}/echo/000/ws1/websocket", gw.addr);
    let (mut ws, _) = tokio_tungstenite::connect_async(&ws_url).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("o"));
    ws.send(Message::text(r#"["a","b"]"#)).await.unwrap();
    assert_eq!(
        ws.next().await.unwrap().unwrap(),
        Message::text(r#"a["a","b"]"#)
    );
    // An empty message and `[]` carry nothing, and get nothing back.
    ws.send(Message::text("")).await.unwrap();
    ws.send(Message::text("[]")).await.unwrap();
    ws.send(Message::text(r#"["c"]"#)).await.unwrap();
    assert_eq!(
        ws.next().await.unwrap().unwrap(),
        Message::text(r#"a["c"]"#)
    );
    ws.send(Message::text(r#""single""#)).await.unwrap();
    assert_eq!(
        ws.next().await.unwrap().unwrap(),
        Message::text(r#"a["single"]"#)
    );
    ws.send(Message::text("[broken")).await.unwrap();
    assert!(matches!(
        ws.next().await,
        Some(Ok(Message::Close(_))) | None | Some(Err(_))
    ));

    let (mut raw, _) = tokio_tungstenite::connect_async(format!("ws://{}/echo/websocket", gw.addr))
        .await
        .unwrap();
    raw.send(Message::text("plain")).await.unwrap();
    assert_eq!(raw.next().await.unwrap().unwrap(), Message::text("plain"));

    let (mut close, _) =
        tokio_tungstenite::connect_async(format!("ws://{}/close/000/ws2/websocket", gw.addr))
            .await
            .unwrap();
    assert_eq!(close.next().await.unwrap().unwrap(), Message::text("o"));
    assert_eq!(
        close.next().await.unwrap().unwrap(),
        Message::text(r#"c[3000,"Go away!"]"#)
    );

    let r = reqwest::get(base(&gw, "/echo/000/ws3/websocket"))
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(
        r.text().await.unwrap(),
        "Can \"Upgrade\" only to \"WebSocket\"."
    );
    let r = client()
        .get(base(&gw, "/echo/000/ws3/websocket"))
        .header("Upgrade", "websocket")
        .header("Connection", "keep-alive")
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.text().await.unwrap(),
        "\"Connection\" must be \"Upgrade\"."
    );
    let r = client()
        .post(base(&gw, "/echo/000/ws3/websocket"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    let r = reqwest::get(base(&gw, "/disabled_websocket_echo/000/ws4/websocket"))
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn test_endpoints_are_off_by_default() {
    let gw = start(|_| {}).await;
    assert_eq!(
        reqwest::get(base(&gw, "/echo/info"))
            .await
            .unwrap()
            .status(),
        404
    );
    assert_eq!(
        reqwest::get(base(&gw, "/sockjs/info"))
            .await
            .unwrap()
            .status(),
        200
    );
}

fn stomp_frame(command: Command, headers: &[(&str, &str)]) -> String {
    let mut out = BytesMut::new();
    stomp::encode_frame(command, headers, b"", Version::V1_2, &mut out);
    String::from_utf8(out.to_vec()).unwrap()
}

fn decode_all(strings: &[String]) -> Vec<stomp::Frame> {
    let mut buf = BytesMut::new();
    for s in strings {
        buf.extend_from_slice(s.as_bytes());
    }
    let limits = Limits {
        max_frame_bytes: 1 << 20,
        ..Limits::default()
    };
    let mut frames = Vec::new();
    while let Some(d) = stomp::decode(&mut buf, Version::V1_2, &limits).unwrap() {
        if let Decoded::Frame(f) = d {
            frames.push(f);
        }
    }
    frames
}

/// STOMP over xhr-polling, xhr-streaming and EventSource: CONNECT and
/// SUBSCRIBE through xhr_send, a published notification through the
/// receiving transport.
#[tokio::test]
async fn stomp_over_each_http_transport() {
    let gw = start(|_| {}).await;
    for (i, transport) in ["xhr", "xhr_streaming", "eventsource"]
        .into_iter()
        .enumerate()
    {
        let user = format!("sockjs-{i}");
        let url = format!("{}/000/s{i}", base(&gw, "/sockjs"));
        let t = token(&user, None, None);
        let connect = stomp_frame(
            Command::Connect,
            &[("accept-version", "1.2"), ("passcode", &t)],
        );
        let subscribe = stomp_frame(
            Command::Subscribe,
            &[
                ("id", "0"),
                ("destination", "/user/notifications"),
                ("receipt", "r"),
            ],
        );
        let mut received: Vec<String> = Vec::new();
        let opened = if transport == "eventsource" {
            client()
                .get(format!("{url}/{transport}"))
                .send()
                .await
                .unwrap()
        } else {
            client()
                .post(format!("{url}/{transport}"))
                .send()
                .await
                .unwrap()
        };
        let sent = serde_json::to_string(&[connect, subscribe]).unwrap();
        assert_eq!(post(&format!("{url}/xhr_send"), &sent).await.0, 204);
        let collect = |text: &str, received: &mut Vec<String>| {
            for line in text.split(['\n', '\r']) {
                let line = line.strip_prefix("data: ").unwrap_or(line);
                if let Some(arr) = line.strip_prefix('a') {
                    let v: Vec<String> = serde_json::from_str(arr).unwrap();
                    received.extend(v);
                }
            }
        };
        if transport == "xhr" {
            assert_eq!(opened.text().await.unwrap(), "o\n");
            // Poll until CONNECTED and RECEIPT came back.
            while decode_all(&received).len() < 2 {
                collect(&post(&format!("{url}/xhr"), "").await.2, &mut received);
            }
            notify(&gw, &user, "over.sockjs").await;
            while decode_all(&received).len() < 3 {
                collect(&post(&format!("{url}/xhr"), "").await.2, &mut received);
            }
        } else {
            // A fresh connection: served natively, outside hyper.
            assert_eq!(opened.headers()["connection"], "close", "{transport}");
            let mut stream = opened.bytes_stream();
            let mut published = false;
            let mut partial = String::new();
            while decode_all(&received).len() < 3 {
                let chunk = tokio::time::timeout(WAIT, stream.next())
                    .await
                    .expect("stalled")
                    .unwrap()
                    .unwrap();
                partial.push_str(std::str::from_utf8(&chunk).unwrap());
                // Only whole lines: a chunk may end inside a frame.
                if let Some(end) = partial.rfind('\n') {
                    let whole: String = partial.drain(..=end).collect();
                    collect(&whole, &mut received);
                }
                if !published && decode_all(&received).len() >= 2 {
                    notify(&gw, &user, "over.sockjs").await;
                    published = true;
                }
            }
        }
        let frames = decode_all(&received);
        assert_eq!(frames[0].command, Command::Connected, "{transport}");
        assert_eq!(frames[1].command, Command::Receipt, "{transport}");
        assert_eq!(frames[2].command, Command::Message, "{transport}");
        assert_eq!(frames[2].header("event"), Some("over.sockjs"));
        assert_eq!(&frames[2].body[..], br#"{"n":1}"#);
    }
    // One MESSAGE each: one latency observation each, and the bytes each
    // way at least what the test saw go by.
    for t in ["xhr_polling", "xhr_streaming", "eventsource"] {
        gw.until_metric(
            &format!("herald_delivery_latency_seconds_count{{transport=\"{t}\"}}"),
            1.0,
        )
        .await;
    }
    let m = gw.metrics().await;
    for t in ["xhr_polling", "xhr_streaming", "eventsource"] {
        let series = |name: &str| sample(&m, &format!("{name}{{transport=\"{t}\"}}"));
        assert_eq!(
            series("herald_sessions_opened_total"),
            Some(1.0),
            "{t}\n{m}"
        );
        assert!(
            series("herald_bytes_sent_total").unwrap() >= 100.0,
            "CONNECTED, RECEIPT and a MESSAGE: {t}\n{m}"
        );
        assert!(
            series("herald_bytes_received_total").unwrap() >= 100.0,
            "CONNECT with a token and SUBSCRIBE: {t}\n{m}"
        );
    }
}

#[tokio::test]
async fn stomp_over_sockjs_websocket() {
    let gw = start(|_| {}).await;
    let (mut ws, _) =
        tokio_tungstenite::connect_async(format!("ws://{}/sockjs/000/w1/websocket", gw.addr))
            .await
            .unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("o"));
    let t = token("wsuser", None, None);
    let frames = [
        stomp_frame(
            Command::Connect,
            &[("accept-version", "1.2"), ("passcode", &t)],
        ),
        stomp_frame(
            Command::Subscribe,
            &[
                ("id", "0"),
                ("destination", "/user/notifications"),
                ("receipt", "r"),
            ],
        ),
    ];
    ws.send(Message::text(serde_json::to_string(&frames).unwrap()))
        .await
        .unwrap();
    let mut received = Vec::new();
    let mut published = false;
    while decode_all(&received).len() < 3 {
        let Message::Text(t) = ws.next().await.unwrap().unwrap() else {
            continue;
        };
        if let Some(arr) = t.as_str().strip_prefix('a') {
            received.extend(serde_json::from_str::<Vec<String>>(arr).unwrap());
        }
        if !published && decode_all(&received).len() >= 2 {
            notify(&gw, "wsuser", "over.ws").await;
            published = true;
        }
    }
    let frames = decode_all(&received);
    assert_eq!(frames[2].header("event"), Some("over.ws"));
    gw.until_metric(
        "herald_delivery_latency_seconds_count{transport=\"sockjs_websocket\"}",
        1.0,
    )
    .await;
    let m = gw.metrics().await;
    let wire = received.iter().map(String::len).sum::<usize>() as f64;
    let sent = sample(
        &m,
        "herald_bytes_sent_total{transport=\"sockjs_websocket\"}",
    )
    .unwrap();
    assert!(sent >= wire, "{sent} < {wire}: every frame is counted");
    // A STOMP error inside SockJS: ERROR in a[...], then c[...] and close.
    ws.send(Message::text(r#"["SEND\ndestination:/x\n\n\u0000"]"#))
        .await
        .unwrap();
    let mut saw_error = false;
    let mut saw_close = false;
    while let Some(Ok(m)) = ws.next().await {
        if let Message::Text(t) = m {
            if t.contains("ERROR") {
                saw_error = true;
            }
            if t.as_str().starts_with("c[") {
                saw_close = true;
            }
        }
    }
    assert!(saw_error && saw_close);
}

/// A streaming request on a reused keep-alive connection goes through
/// hyper (the native path only sees a connection's first request) and
/// works the same.
#[tokio::test]
async fn streaming_on_a_reused_connection_is_served_by_hyper() {
    let gw = start(|_| {}).await;
    let http = client();
    let info = http.get(base(&gw, "/sockjs/info")).send().await.unwrap();
    assert_eq!(info.status(), 200);
    info.bytes().await.unwrap();
    let url = format!("{}/000/reuse", base(&gw, "/sockjs"));
    let r = http
        .post(format!("{url}/xhr_streaming"))
        .send()
        .await
        .unwrap();
    assert!(!r.headers().contains_key("connection"));
    let t = token("reuser", None, None);
    let frames = [stomp_frame(
        Command::Connect,
        &[("accept-version", "1.2"), ("passcode", &t)],
    )];
    let send = tokio::spawn(async move {
        post(
            &format!("{url}/xhr_send"),
            &serde_json::to_string(&frames).unwrap(),
        )
        .await
    });
    let text = read_stream(r, |t| t.contains("CONNECTED")).await;
    assert_eq!(send.await.unwrap().0, 204);
    assert!(text.contains("\no\n"));
}

#[tokio::test]
async fn stats_count_sessions_per_transport() {
    let gw = start(|_| {}).await;
    let _raw = gw.session(&token("raw", None, None)).await;
    let (mut ws, _) =
        tokio_tungstenite::connect_async(format!("ws://{}/sockjs/000/st/websocket", gw.addr))
            .await
            .unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("o"));
    let t = token("sj", None, None);
    let connect = [stomp_frame(
        Command::Connect,
        &[("accept-version", "1.2"), ("passcode", &t)],
    )];
    ws.send(Message::text(serde_json::to_string(&connect).unwrap()))
        .await
        .unwrap();
    let Message::Text(reply) = ws.next().await.unwrap().unwrap() else {
        panic!()
    };
    assert!(reply.contains("CONNECTED"));
    let r = reqwest::get(base(&gw, "/v1/stats")).await.unwrap();
    assert_eq!(
        r.headers()["cache-control"],
        herald_engine::stats::answer::CACHE_CONTROL
    );
    assert!(r.headers().contains_key("etag"));
    let stats: serde_json::Value = r.json().await.unwrap();
    assert_eq!(stats["sessions"]["total"], 2, "{stats}");
    assert_eq!(stats["sessions"]["by_transport"]["websocket"], 1);
    assert_eq!(stats["sessions"]["by_transport"]["sockjs_websocket"], 1);
    assert_eq!(stats["mailboxes"], 2);
}

/// A session with no receiving request for `sockjs.session_timeout_ms`
/// is gone: its sends get 404. (Sends do not keep a session alive.)
#[tokio::test]
async fn sessions_time_out_without_a_receiver() {
    let gw = start(|c| {
        c.sockjs.test_endpoints = true;
        c.sockjs.session_timeout_ms = 200;
    })
    .await;
    let url = base(&gw, "/echo/000/timeout");
    assert_eq!(post(&format!("{url}/xhr"), "").await.2, "o\n");
    let started = std::time::Instant::now();
    loop {
        let status = post(&format!("{url}/xhr_send"), r#"["x"]"#).await.0;
        if status == 404 {
            break;
        }
        assert_eq!(status, 204);
        assert!(started.elapsed() < WAIT, "the session never timed out");
        tokio::task::yield_now().await;
    }
    assert!(started.elapsed() >= std::time::Duration::from_millis(150));
}

#[tokio::test]
async fn invalid_paths_are_404_and_wrong_methods_bare_405() {
    let gw = test_gateway().await;
    for path in [
        "/echo///xhr",
        "/echo/a./a/xhr",
        "/echo/a/a./xhr",
        "/echo/././xhr",
    ] {
        for method in [reqwest::Method::GET, reqwest::Method::POST] {
            let r = client()
                .request(method.clone(), base(&gw, path))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 404, "{method} {path}");
        }
    }
    for (method, path, allow) in [
        (reqwest::Method::POST, "/echo/0/0/websocket", "GET"),
        (reqwest::Method::GET, "/echo/0/0/xhr_send", "OPTIONS, POST"),
        (reqwest::Method::PUT, "/echo/0/0/xhr", "OPTIONS, POST"),
    ] {
        let r = client()
            .request(method, base(&gw, path))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 405, "{path}");
        assert_eq!(r.headers()["allow"], allow);
        assert!(!r.headers().contains_key("content-type"));
        assert!(r.bytes().await.unwrap().is_empty());
    }
}

/// A receiver that goes away before the frame that ends it closes the
/// session: every later request gets c[1002] at once.
#[tokio::test]
async fn an_aborted_receiver_interrupts_the_session() {
    let gw = test_gateway().await;
    let url = base(&gw, "/echo/000/abort");
    assert_eq!(post(&format!("{url}/xhr"), "").await.2, "o\n");
    // A poll with nothing to answer waits (its head arrives, its body
    // does not); the client gives up on it and drops the connection.
    let waiting = client().post(format!("{url}/xhr")).send().await.unwrap();
    drop(waiting);
    let mut answer = String::new();
    for _ in 0..100 {
        answer = post(&format!("{url}/xhr"), "").await.2;
        if answer.starts_with("c[1002") {
            break;
        }
        // The server had not seen the abort yet and gave this poll the slot:
        // it is answered by the echo of this send.
        post(&format!("{url}/xhr_send"), r#"["x"]"#).await;
    }
    assert_eq!(answer, "c[1002,\"Connection interrupted\"]\n");
}

#[tokio::test]
async fn hybi_draft_websocket_versions_are_accepted() {
    let gw = test_gateway().await;
    for version in ["7", "8", "13"] {
        let mut req =
            tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(
                format!("ws://{}/echo/000/v{version}/websocket", gw.addr),
            )
            .unwrap();
        req.headers_mut()
            .insert("Sec-WebSocket-Version", version.parse().unwrap());
        let (mut ws, resp) = tokio_tungstenite::connect_async(req).await.unwrap();
        assert_eq!(resp.status(), 101);
        assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("o"));
    }
}

/// A polling client between two polls when the gateway shuts down: its next
/// poll, on the keep-alive connection the last one came on, still gets the
/// STOMP notice, and the poll after that the close frame.
#[tokio::test]
async fn shutdown_tells_a_polling_session_between_two_polls() {
    let gw = start(|c| {
        c.sockjs.session_timeout_ms = 60_000;
        c.shutdown_grace_ms = 60_000;
    })
    .await;
    let url = format!("{}/000/between", base(&gw, "/sockjs"));
    // One connection for every poll, as a browser keeps it alive.
    let polls = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .build()
        .unwrap();
    let poll = || async {
        let r = polls.post(format!("{url}/xhr")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        r.text().await.unwrap()
    };
    assert_eq!(poll().await, "o\n");
    let t = token("between", None, None);
    let connect = [stomp_frame(
        Command::Connect,
        &[("accept-version", "1.2"), ("passcode", &t)],
    )];
    let sent = serde_json::to_string(&connect).unwrap();
    assert_eq!(post(&format!("{url}/xhr_send"), &sent).await.0, 204);
    let connected = poll().await;
    assert!(connected.contains("CONNECTED"), "{connected}");
    // No poll is open now: the session has no receiver.
    gw.shutdown.cancel();
    let told = poll().await;
    assert!(told.contains("server shutting down"), "{told}");
    assert_eq!(poll().await, "c[1001,\"Going away\"]\n");
    let (_, task) = gw.local.expect("in-process gateway");
    tokio::time::timeout(WAIT, task)
        .await
        .expect("shutdown waited out the grace")
        .unwrap();
}

/// Shutdown does not wait out `sockjs.session_timeout_ms` for HTTP-transport
/// sessions that were told.
#[tokio::test]
async fn shutdown_ends_http_transport_sessions_promptly() {
    let gw = start(|c| {
        c.sockjs.session_timeout_ms = 60_000;
        c.shutdown_grace_ms = 60_000;
    })
    .await;
    let url = format!("{}/000/down", base(&gw, "/sockjs"));
    let stream = client()
        .post(format!("{url}/xhr_streaming"))
        .send()
        .await
        .unwrap();
    let t = token("down", None, None);
    let connect = [stomp_frame(
        Command::Connect,
        &[("accept-version", "1.2"), ("passcode", &t)],
    )];
    let sent = serde_json::to_string(&connect).unwrap();
    assert_eq!(post(&format!("{url}/xhr_send"), &sent).await.0, 204);
    gw.shutdown.cancel();
    let body = stream.text().await.unwrap();
    assert!(body.contains("server shutting down"), "{body}");
    assert!(
        body.trim_end().ends_with("c[1001,\"Going away\"]"),
        "{body}"
    );
    let (_, task) = gw.local.expect("in-process gateway");
    tokio::time::timeout(WAIT, task)
        .await
        .expect("shutdown waited for the SockJS session timeout")
        .unwrap();
}
