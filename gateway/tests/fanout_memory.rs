//! A 400 KB message to 200 sessions: every copy arrives intact, and the
//! gateway's resident memory grows by about one copy of the message, not
//! 200. The gateway runs as its own process so its RSS is its own.

mod common;

use std::process::Child;

use bytes::BytesMut;
use common::*;
use futures_util::{SinkExt, StreamExt};
use herald_protocol::stomp::{self, Command as Stomp, Decoded, Limits, Version};
use serde_json::json;
use tokio_tungstenite::MaybeTlsStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const SESSIONS: usize = 200;
const PAYLOAD: usize = 400 * 1024;

/// The gateway process and its data directory (removed after it exits).
struct Process(Child, #[allow(dead_code)] tempfile::TempDir);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb * 1024
}

/// Start the gateway binary on an ephemeral port; return it and its address.
fn spawn_gateway() -> (Process, std::net::SocketAddr) {
    let data = tempfile::tempdir().unwrap();
    let (child, addr) = spawn_gateway_binary(&["--data-dir".as_ref(), data.path().as_ref()]);
    (Process(child, data), addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_400kb_message_to_200_sessions_costs_about_one_copy() {
    let (gateway, addr) = spawn_gateway();
    let pid = gateway.0.id();
    // A handle that knows the address; its own gateway fields are unused.
    let gw = TestGateway::remote(addr);

    let mut sessions = Vec::with_capacity(SESSIONS);
    for i in 0..SESSIONS {
        sessions.push(
            gw.slow_session(&token(&format!("u{i}"), Some("big"), None))
                .await,
        );
    }
    let before = rss_bytes(pid);
    let payload = "z".repeat(PAYLOAD);
    let (status, body) = gw
        .publish(json!({"scope": "client", "clients": ["big"], "event": "big.message", "payload": payload}))
        .await;
    assert_eq!(status, 202, "{body}");
    // The publish returned: the message sits in all 200 session queues and
    // mailbox buffers now, while no client has read anything.
    let after = rss_bytes(pid);
    let growth = after.saturating_sub(before);
    eprintln!(
        "RSS before {before} B, after {after} B: growth {growth} B for {SESSIONS} recipients of {} B",
        PAYLOAD + 2
    );
    let per_recipient_copies = (SESSIONS * PAYLOAD) as u64;
    assert!(
        growth < per_recipient_copies / 10,
        "RSS grew {growth} B: that is per-recipient copying (200 copies = {per_recipient_copies} B)"
    );

    let expected = format!("\"{payload}\"");
    for s in &mut sessions {
        let m = s.message().await;
        assert_eq!(m.command, Stomp::Message);
        assert_eq!(
            m.header("content-length"),
            Some(expected.len().to_string().as_str())
        );
        assert!(m.body == expected.as_bytes(), "payload arrived altered");
    }
}

const SOCKJS_SESSIONS: usize = 1000;

type SockjsWs = tokio_tungstenite::WebSocketStream<MaybeTlsStream<tokio::net::TcpStream>>;

/// A SockJS-over-WebSocket STOMP session, subscribed, on a socket with a
/// small receive buffer.
async fn sockjs_session(addr: std::net::SocketAddr, i: usize) -> SockjsWs {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let stream = socket.connect(addr).await.unwrap();
    let req = format!("ws://{addr}/sockjs/000/m{i}/websocket")
        .into_client_request()
        .unwrap();
    let (mut ws, _) = tokio_tungstenite::client_async(req, MaybeTlsStream::Plain(stream))
        .await
        .unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("o"));
    let t = token(&format!("s{i}"), Some("big"), None);
    let frames = [
        format!("CONNECT\naccept-version:1.2\npasscode:{t}\n\n\0"),
        "SUBSCRIBE\nid:0\ndestination:/user/notifications\nreceipt:r\n\n\0".to_owned(),
    ];
    ws.send(Message::text(serde_json::to_string(&frames).unwrap()))
        .await
        .unwrap();
    let mut seen = String::new();
    while !seen.contains("RECEIPT") {
        if let Message::Text(t) = ws.next().await.unwrap().unwrap() {
            seen.push_str(t.as_str());
        }
    }
    ws
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_400kb_message_to_1000_sockjs_sessions_costs_about_one_encoded_copy() {
    let (gateway, addr) = spawn_gateway();
    let pid = gateway.0.id();
    let gw = TestGateway::remote(addr);
    let mut sessions = Vec::with_capacity(SOCKJS_SESSIONS);
    for i in 0..SOCKJS_SESSIONS {
        sessions.push(sockjs_session(addr, i).await);
    }
    let before = rss_bytes(pid);
    // Quotes and newlines make the SockJS encoding differ from the payload.
    let text: String = "line \"quoted\"\n".repeat(PAYLOAD / 14 + 1);
    let (status, body) = gw
        .publish(
            json!({"scope": "client", "clients": ["big"], "event": "big.sockjs", "payload": text}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let after = rss_bytes(pid);
    let growth = after.saturating_sub(before);
    eprintln!(
        "SockJS: RSS before {before} B, after {after} B: growth {growth} B for {SOCKJS_SESSIONS} recipients of a {} B payload",
        text.len() + 2
    );
    let per_recipient = (SOCKJS_SESSIONS * PAYLOAD) as u64;
    assert!(
        growth < per_recipient / 50,
        "RSS grew {growth} B: per-recipient copies ({per_recipient} B for all)"
    );

    let expected = serde_json::to_vec(&text).unwrap();
    let limits = Limits {
        max_frame_bytes: 4 << 20,
        ..Limits::default()
    };
    for ws in &mut sessions {
        let mut buf = BytesMut::new();
        let frame = loop {
            if let Some(Decoded::Frame(f)) =
                stomp::decode(&mut buf, Version::V1_2, &limits).unwrap()
            {
                break f;
            }
            let Message::Text(t) = ws.next().await.unwrap().unwrap() else {
                continue;
            };
            if let Some(arr) = t.as_str().strip_prefix('a') {
                for s in serde_json::from_str::<Vec<String>>(arr).unwrap() {
                    buf.extend_from_slice(s.as_bytes());
                }
            }
        };
        assert_eq!(frame.command, Stomp::Message);
        assert!(frame.body == expected, "payload arrived altered");
    }
}
