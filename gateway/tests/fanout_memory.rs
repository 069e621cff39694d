//! A 400 KB message to 200 sessions: every copy arrives intact, and the
//! gateway's resident memory grows by about one copy of the message, not
//! 200. The gateway runs as its own process so its RSS is its own.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use common::*;
use herald_protocol::stomp::Command as Stomp;
use serde_json::json;

const SESSIONS: usize = 200;
const PAYLOAD: usize = 400 * 1024;

struct Process(Child);

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
    let mut child = Command::new(env!("CARGO_BIN_EXE_herald-gateway"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--jwt-secret",
            SECRET,
            "--api-key",
            API_KEY,
            "--log-format",
            "json",
        ])
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("gateway exited before listening")
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        if let Some(a) = v["fields"]["addr"].as_str() {
            break a.parse().unwrap();
        }
    };
    // Keep draining its log so it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (Process(child), addr)
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
