//! The `/ws` handshake as the accept loop serves it straight on the socket
//! (`ws::native`), and what it leaves to hyper to answer. The server's
//! frames are read by tungstenite (an independent implementation).

mod common;

use bytes::BytesMut;
use common::*;
use herald_protocol::stomp::{self, Version};
use herald_protocol::websocket::{OpCode, encode_masked_frame};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// RFC 6455's own example key, and its accept value (section 1.3).
const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
const ACCEPT: &str = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";

fn upgrade(path: &str, headers: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: herald\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\n{headers}\r\n"
    )
}

/// A STOMP frame as a client sends it: text, masked.
fn stomp_frame(command: stomp::Command, headers: &[(&str, &str)]) -> BytesMut {
    let mut text = BytesMut::new();
    stomp::encode_frame(command, headers, b"", Version::V1_2, &mut text);
    let mut out = BytesMut::new();
    encode_masked_frame(true, OpCode::Text, &text, [7, 1, 3, 9], &mut out);
    out
}

/// The answer's head, read a byte at a time so nothing after it is taken.
async fn answer_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        if stream.read(&mut b).await.unwrap() == 0 {
            break;
        }
        head.push(b[0]);
    }
    String::from_utf8(head).unwrap()
}

/// The whole answer of a connection the server closes.
async fn answer(gw: &TestGateway, request: &str) -> String {
    let mut stream = TcpStream::connect(gw.addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = answer_head(&mut stream).await;
    let mut body = [0u8; 512];
    let n = tokio::time::timeout(WAIT, stream.read(&mut body))
        .await
        .unwrap()
        .unwrap_or(0);
    head.push_str(&String::from_utf8_lossy(&body[..n]));
    head
}

/// A client that sends its upgrade, CONNECT and SUBSCRIBE in one write
/// (no round trip before the first frame) gets its 101, its CONNECTED and
/// its receipt, then its notifications: the bytes after the head stay on
/// the socket for the session.
#[tokio::test]
async fn frames_sent_with_the_upgrade_request_reach_the_session() {
    let gw = start(|_| {}).await;
    let jwt = token("pipelined", None, None);
    let mut bytes = BytesMut::from(
        upgrade(
            "/ws",
            &format!(
                "Sec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Protocol: v10.stomp, v12.stomp\r\n"
            ),
        )
        .as_bytes(),
    );
    bytes.extend_from_slice(&stomp_frame(
        stomp::Command::Connect,
        &[
            ("accept-version", "1.2"),
            ("host", "herald"),
            ("passcode", &jwt),
        ],
    ));
    bytes.extend_from_slice(&stomp_frame(
        stomp::Command::Subscribe,
        &[
            ("id", "s"),
            ("destination", "/user/notifications"),
            ("receipt", "r-s"),
        ],
    ));
    let mut stream = TcpStream::connect(gw.addr).await.unwrap();
    stream.write_all(&bytes).await.unwrap();
    let head = answer_head(&mut stream).await;
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    let lower = head.to_ascii_lowercase();
    assert!(
        lower.contains(&format!(
            "sec-websocket-accept: {}",
            ACCEPT.to_ascii_lowercase()
        )),
        "{head}"
    );
    assert!(
        lower.contains("sec-websocket-protocol: v12.stomp\r\n"),
        "{head}"
    );
    let ws =
        WebSocketStream::from_raw_socket(MaybeTlsStream::Plain(stream), Role::Client, None).await;
    let mut client = StompClient::from_ws(ws);
    let connected = client.next_frame().await.unwrap();
    assert_eq!(
        connected.command,
        stomp::Command::Connected,
        "{connected:?}"
    );
    let receipt = client.next_frame().await.unwrap();
    assert_eq!(receipt.header("receipt-id"), Some("r-s"), "{receipt:?}");
    notify(&gw, "pipelined", "after-pipelining").await;
    assert_eq!(
        client.message().await.header("event"),
        Some("after-pipelining")
    );
}

/// The token may come with the upgrade (`?token=`) instead of CONNECT.
#[tokio::test]
async fn a_token_in_the_upgrade_query_authenticates_the_session() {
    let gw = start(|_| {}).await;
    let jwt = token("by-query", None, None);
    let mut stream = TcpStream::connect(gw.addr).await.unwrap();
    let request = upgrade(
        &format!("/ws?token={jwt}"),
        &format!("Sec-WebSocket-Key: {KEY}\r\n"),
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let head = answer_head(&mut stream).await;
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    // No subprotocol offered: none chosen.
    assert!(
        !head.to_ascii_lowercase().contains("sec-websocket-protocol"),
        "{head}"
    );
    let ws =
        WebSocketStream::from_raw_socket(MaybeTlsStream::Plain(stream), Role::Client, None).await;
    let mut client = StompClient::from_ws(ws);
    client
        .send(
            stomp::Command::Connect,
            &[("accept-version", "1.2"), ("host", "herald")],
        )
        .await;
    let connected = client.next_frame().await.unwrap();
    assert_eq!(
        connected.command,
        stomp::Command::Connected,
        "{connected:?}"
    );
}

/// What the native path does not serve reaches hyper untouched, and is
/// answered there as before: a bad key, a bad version, HTTP/1.0, and a
/// gateway at its session limit.
#[tokio::test]
async fn upgrades_it_refuses_are_answered_by_hyper_as_before() {
    let gw = start(|c| c.session.max_sessions = 1).await;
    let no_key = answer(&gw, &upgrade("/ws", "Connection: close\r\n")).await;
    assert!(no_key.starts_with("HTTP/1.1 400 "), "{no_key}");
    assert!(no_key.contains("Sec-WebSocket-Key is missing"), "{no_key}");
    let old_version = answer(
        &gw,
        &upgrade("/ws", &format!("Sec-WebSocket-Key: {KEY}\r\n"))
            .replace("Version: 13", "Version: 6"),
    )
    .await;
    assert!(old_version.starts_with("HTTP/1.1 426 "), "{old_version}");
    assert!(
        old_version
            .to_ascii_lowercase()
            .contains("sec-websocket-version: 13"),
        "{old_version}"
    );
    let http10 = answer(
        &gw,
        &upgrade("/ws", &format!("Sec-WebSocket-Key: {KEY}\r\n")).replace("HTTP/1.1", "HTTP/1.0"),
    )
    .await;
    assert!(!http10.contains(" 101 "), "{http10}");
    // The one session slot taken, the next upgrade is refused with 503.
    let _first = gw.session(&token("first", None, None)).await;
    let full = answer(
        &gw,
        &upgrade("/ws", &format!("Sec-WebSocket-Key: {KEY}\r\n")),
    )
    .await;
    assert!(full.starts_with("HTTP/1.1 503 "), "{full}");
    assert!(full.contains("too many sessions"), "{full}");
}
