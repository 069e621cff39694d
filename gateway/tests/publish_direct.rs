//! The direct publish path (`POST /v1/notifications` read on the socket):
//! keep-alive and pipelined requests, the hand-off to hyper of anything
//! else on the same connection, answers the same as hyper's, and the
//! limits (refusals before the body, idle connections, shutdown).

mod common;

use std::collections::BTreeMap;

use common::{API_KEY, WAIT, sample, start, token};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;
use tokio_tungstenite::MaybeTlsStream;

/// One answer read off a connection.
#[derive(Debug)]
struct Answer {
    status: u16,
    /// Lowercased names; the last value of each.
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// Read one HTTP/1.1 answer (with a `content-length`) from `stream`,
/// keeping any bytes after it in `buf`.
async fn answer(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Answer {
    timeout(WAIT, async {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut res = httparse::Response::new(&mut headers);
            if let httparse::Status::Complete(head_len) = res.parse(buf).unwrap() {
                let headers: BTreeMap<String, String> = res
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_ascii_lowercase(),
                            String::from_utf8(h.value.to_vec()).unwrap(),
                        )
                    })
                    .collect();
                let len: usize = headers["content-length"].parse().unwrap();
                if buf.len() >= head_len + len {
                    let body = buf[head_len..head_len + len].to_vec();
                    let status = res.code.unwrap();
                    buf.drain(..head_len + len);
                    return Answer {
                        status,
                        headers,
                        body,
                    };
                }
            }
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the connection closed before a whole answer");
            buf.extend_from_slice(&chunk[..n]);
        }
    })
    .await
    .expect("an answer in time")
}

/// Whether the server closes `stream` (EOF) without sending anything more.
async fn closes(stream: &mut TcpStream, buf: &[u8]) {
    assert!(buf.is_empty(), "unread bytes: {buf:?}");
    let mut rest = Vec::new();
    let n = timeout(WAIT, stream.read_to_end(&mut rest))
        .await
        .expect("closed in time")
        .unwrap_or(0);
    assert_eq!(n, 0, "{:?}", String::from_utf8_lossy(&rest));
}

/// A raw publish to `user` with `payload`.
fn publish(user: &str, payload: &str) -> String {
    format!(
        "POST /v1/notifications?users={user}&event=e HTTP/1.1\r\nHost: herald\r\nAuthorization: Bearer {API_KEY}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{payload}",
        payload.len()
    )
}

/// A connection on which one publish was answered 202 (so it is the direct
/// path's), and what was read past that answer.
async fn published_once(gw: &common::TestGateway) -> (TcpStream, Vec<u8>) {
    let mut stream = TcpStream::connect(gw.addr).await.unwrap();
    stream
        .write_all(publish("u", "x").as_bytes())
        .await
        .unwrap();
    let mut buf = Vec::new();
    assert_eq!(answer(&mut stream, &mut buf).await.status, 202);
    (stream, buf)
}

/// Write `first`, then `second` in a write of its own, so the server may
/// read the first before the second is sent.
async fn write_in_two(stream: &mut TcpStream, first: &str, second: &str) {
    stream.write_all(first.as_bytes()).await.unwrap();
    stream.flush().await.unwrap();
    tokio::task::yield_now().await;
    stream.write_all(second.as_bytes()).await.unwrap();
}

fn accepted(metrics: &str) -> f64 {
    sample(
        metrics,
        "herald_notifications_accepted_total{source=\"http\"}",
    )
    .unwrap_or(0.0)
}

#[tokio::test]
async fn pipelined_publishes_on_one_connection_are_answered_in_order_and_delivered() {
    let gw = start(|_| {}).await;
    let mut session = gw.session(&token("u", None, None)).await;
    let mut stream = TcpStream::connect(gw.addr).await.unwrap();
    // Three in one write, then a fourth after their answers.
    let three = [
        publish("u", "one"),
        publish("u", "two"),
        publish("u", "three"),
    ]
    .concat();
    stream.write_all(three.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let a = answer(&mut stream, &mut buf).await;
        assert_eq!(a.status, 202, "{a:?}");
        assert_eq!(a.headers["content-type"], "application/json");
        assert!(a.headers.contains_key("date"), "{a:?}");
        ids.push(a.json()["ids"][0].as_str().unwrap().to_owned());
    }
    stream
        .write_all(publish("u", "four").as_bytes())
        .await
        .unwrap();
    let a = answer(&mut stream, &mut buf).await;
    assert_eq!(a.status, 202, "{a:?}");
    ids.push(a.json()["ids"][0].as_str().unwrap().to_owned());
    for (id, payload) in ids.iter().zip(["one", "two", "three", "four"]) {
        let m = session.message().await;
        assert_eq!(m.header("message-id"), Some(id.as_str()));
        assert_eq!(m.body.as_ref(), payload.as_bytes());
    }
    assert_eq!(accepted(&gw.metrics().await), 4.0);
}

#[tokio::test]
async fn a_body_that_arrives_after_its_head_is_waited_for() {
    let gw = start(|_| {}).await;
    let mut session = gw.session(&token("u", None, None)).await;
    let mut stream = TcpStream::connect(gw.addr).await.unwrap();
    // Larger than one read of the head: the body is read after the key
    // passed, in several reads, the last part sent separately.
    let payload = "b".repeat(50_000);
    let request = publish("u", &payload);
    let (head, body) = request.split_at(request.len() - 10);
    write_in_two(&mut stream, head, body).await;
    let mut buf = Vec::new();
    let a = answer(&mut stream, &mut buf).await;
    assert_eq!(a.status, 202, "{a:?}");
    assert_eq!(session.message().await.body.as_ref(), payload.as_bytes());
}

#[tokio::test]
async fn a_request_written_with_the_end_of_a_body_is_served_next() {
    let gw = start(|_| {}).await;
    let mut session = gw.session(&token("u", None, None)).await;
    let mut stream = TcpStream::connect(gw.addr).await.unwrap();
    // The first body is read after its head, into a buffer of its own; the
    // bytes after it (the next request) must not be read into it.
    let payload = "c".repeat(100_000);
    let first = publish("u", &payload);
    let (head, rest) = first.split_at(first.len() - 70_000);
    write_in_two(&mut stream, head, &[rest, &publish("u", "next")].concat()).await;
    let mut buf = Vec::new();
    for _ in 0..2 {
        let a = answer(&mut stream, &mut buf).await;
        assert_eq!(a.status, 202, "{a:?}");
    }
    assert_eq!(session.message().await.body.as_ref(), payload.as_bytes());
    assert_eq!(session.message().await.body.as_ref(), b"next");
    assert_eq!(accepted(&gw.metrics().await), 2.0);
}

#[tokio::test]
async fn anything_else_on_the_connection_goes_to_hyper_with_its_bytes() {
    let gw = start(|_| {}).await;
    let mut session = gw.session(&token("u", None, None)).await;
    let mut stream = TcpStream::connect(gw.addr).await.unwrap();
    let mut buf = Vec::new();
    // Direct, then another route and a chunked publish pipelined behind
    // it: hyper answers both, in order, then serves the connection.
    let chunked = format!(
        "POST /v1/notifications?users=u&event=e HTTP/1.1\r\nHost: herald\r\nAuthorization: Bearer {API_KEY}\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n7\r\nchunked\r\n0\r\n\r\n"
    );
    let all = [
        publish("u", "direct"),
        "GET /healthz HTTP/1.1\r\nHost: herald\r\n\r\n".to_owned(),
        chunked,
    ]
    .concat();
    stream.write_all(all.as_bytes()).await.unwrap();
    let a = answer(&mut stream, &mut buf).await;
    assert_eq!(a.status, 202, "{a:?}");
    let health = answer(&mut stream, &mut buf).await;
    assert_eq!(health.status, 200, "{health:?}");
    assert_eq!(health.json()["status"], "ok", "{health:?}");
    let a = answer(&mut stream, &mut buf).await;
    assert_eq!(a.status, 202, "{a:?}");
    // Later publishes on it are hyper's, and still served.
    stream
        .write_all(publish("u", "after").as_bytes())
        .await
        .unwrap();
    let a = answer(&mut stream, &mut buf).await;
    assert_eq!(a.status, 202, "{a:?}");
    for payload in ["direct", "chunked", "after"] {
        assert_eq!(session.message().await.body.as_ref(), payload.as_bytes());
    }
}

#[tokio::test]
async fn a_websocket_upgrade_after_a_publish_is_served() {
    let gw = start(|_| {}).await;
    let (stream, buf) = published_once(&gw).await;
    assert!(buf.is_empty(), "{buf:?}");
    let (ws, _) = timeout(
        WAIT,
        tokio_tungstenite::client_async(gw.ws_url(), MaybeTlsStream::Plain(stream)),
    )
    .await
    .expect("upgraded in time")
    .expect("upgraded");
    let mut client = common::StompClient::from_ws(ws);
    let t = token("v", None, None);
    client
        .send(
            herald_protocol::stomp::Command::Connect,
            &[
                ("accept-version", "1.2"),
                ("host", "herald"),
                ("passcode", t.as_str()),
            ],
        )
        .await;
    let connected = client.next_frame().await.expect("an answer to CONNECT");
    assert_eq!(
        connected.command,
        herald_protocol::stomp::Command::Connected,
        "{connected:?}"
    );
}

/// The same request as a connection's first (direct) and after a request
/// hyper served on it (hyper's): the same status, headers and body.
#[tokio::test]
async fn refusals_are_answered_as_hyper_answers_them() {
    let gw = start(|c| {
        c.publish.max_body_bytes = 1000;
        c.publish.max_payload_bytes = 1000;
    })
    .await;
    let requests = [
        // No key: 401 with WWW-Authenticate.
        "POST /v1/notifications?users=u&event=e HTTP/1.1\r\nContent-Type: text/plain\r\nContent-Length: 1\r\n\r\nx".to_owned(),
        // A wrong key.
        "POST /v1/notifications?users=u&event=e HTTP/1.1\r\nX-Api-Key: nope\r\nContent-Type: text/plain\r\nContent-Length: 1\r\n\r\nx".to_owned(),
        // No content type: 415.
        format!("POST /v1/notifications?users=u&event=e HTTP/1.1\r\nX-Api-Key: {API_KEY}\r\nContent-Length: 1\r\n\r\nx"),
        // A bad field: 422 naming it.
        format!("POST /v1/notifications?users=u&event=e&ttl_ms=soon HTTP/1.1\r\nAuthorization: Bearer {API_KEY}\r\nContent-Type: text/plain\r\nContent-Length: 1\r\n\r\nx"),
        // Malformed JSON: 400.
        format!("POST /v1/notifications HTTP/1.1\r\nAuthorization: Bearer {API_KEY}\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{{]"),
        // A request target http's URI refuses (httparse takes it): hyper's 400.
        format!("POST /v1/notifications?users=\"a\"&event=e HTTP/1.1\r\nAuthorization: Bearer {API_KEY}\r\nContent-Type: text/plain\r\nContent-Length: 1\r\n\r\nx"),
        // Over the largest body: 413.
        format!("POST /v1/notifications?users=u&event=e HTTP/1.1\r\nAuthorization: Bearer {API_KEY}\r\nContent-Type: text/plain\r\nContent-Length: 1001\r\n\r\n{}", "x".repeat(1001)),
    ];
    for request in requests {
        let mut direct = TcpStream::connect(gw.addr).await.unwrap();
        direct.write_all(request.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        let mut a = answer(&mut direct, &mut buf).await;

        let mut hyper = TcpStream::connect(gw.addr).await.unwrap();
        hyper
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: herald\r\n\r\n")
            .await
            .unwrap();
        let mut hbuf = Vec::new();
        assert_eq!(answer(&mut hyper, &mut hbuf).await.status, 200);
        hyper.write_all(request.as_bytes()).await.unwrap();
        let mut b = answer(&mut hyper, &mut hbuf).await;

        assert!(a.status >= 400, "{a:?}");
        for x in [&mut a, &mut b] {
            x.headers.remove("date").expect("a date");
        }
        assert_eq!(
            (a.status, &a.headers, &a.body),
            (b.status, &b.headers, &b.body),
            "{request}"
        );
        if a.status == 401 {
            assert_eq!(a.headers["www-authenticate"], "Bearer");
        }
    }
}

#[tokio::test]
async fn a_refusal_before_its_body_arrived_closes_the_connection() {
    let gw = start(|_| {}).await;
    let mut stream = TcpStream::connect(gw.addr).await.unwrap();
    // A wrong key and a body that is not sent: the answer comes at once,
    // the body is never held, and the connection closes after it.
    stream
        .write_all(b"POST /v1/notifications?users=u&event=e HTTP/1.1\r\nX-Api-Key: nope\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n\r\npart")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let a = answer(&mut stream, &mut buf).await;
    assert_eq!(a.status, 401, "{a:?}");
    assert_eq!(a.headers["connection"], "close");
    closes(&mut stream, &buf).await;
    let metrics = gw.metrics().await;
    assert_eq!(
        sample(
            &metrics,
            "herald_notifications_rejected_total{source=\"http\",reason=\"unauthorized\"}"
        ),
        Some(1.0),
        "{metrics}"
    );
}

#[tokio::test]
async fn connection_close_is_honoured() {
    let gw = start(|_| {}).await;
    let mut stream = TcpStream::connect(gw.addr).await.unwrap();
    let request =
        publish("u", "x").replace("Host: herald\r\n", "Host: herald\r\nConnection: close\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let a = answer(&mut stream, &mut buf).await;
    assert_eq!(a.status, 202, "{a:?}");
    assert_eq!(a.headers["connection"], "close");
    closes(&mut stream, &buf).await;
}

#[tokio::test]
async fn an_idle_connection_closes_after_the_header_timeout() {
    let gw = start(|c| c.session.header_timeout_ms = 300).await;
    let (mut stream, buf) = published_once(&gw).await;
    // Half a head, never finished: closed without an answer.
    stream
        .write_all(b"POST /v1/notifications HTTP/1.1\r\n")
        .await
        .unwrap();
    closes(&mut stream, &buf).await;
}

#[tokio::test]
async fn shutdown_closes_an_idle_connection_and_one_mid_head() {
    let gw = start(|c| c.session.header_timeout_ms = 60_000).await;
    let mut idle = TcpStream::connect(gw.addr).await.unwrap();
    let mut mid_head = TcpStream::connect(gw.addr).await.unwrap();
    let mut bufs = [Vec::new(), Vec::new()];
    for (stream, buf) in [&mut idle, &mut mid_head].into_iter().zip(bufs.iter_mut()) {
        stream
            .write_all(publish("u", "x").as_bytes())
            .await
            .unwrap();
        assert_eq!(answer(stream, buf).await.status, 202);
    }
    // The next head begun, not finished: no request is taken yet.
    mid_head
        .write_all(b"POST /v1/notifications HTTP/1.1\r\nContent-")
        .await
        .unwrap();
    gw.shutdown.cancel();
    closes(&mut idle, &bufs[0]).await;
    closes(&mut mid_head, &bufs[1]).await;
}

#[tokio::test]
async fn the_fragment_of_a_target_is_not_part_of_its_query() {
    let gw = start(|_| {}).await;
    let mut session = gw.session(&token("a", None, None)).await;
    let mut stream = TcpStream::connect(gw.addr).await.unwrap();
    let request = publish("a", "x").replace("users=a&event=e", "users=a&event=e#frag");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let a = answer(&mut stream, &mut buf).await;
    assert_eq!(a.status, 202, "{a:?}");
    let m = session.message().await;
    assert_eq!(m.header("event"), Some("e"));
}
