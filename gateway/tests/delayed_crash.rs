//! Crash tests: `kill -9` the standalone gateway binary while delayed
//! notifications are pending, and while they are firing; restart it on the
//! same data directory. Every notification answered 202 is delivered at
//! least once after the restart, none before its due time, none lost. And a
//! SIGTERM puts back what was claimed ahead of its due time.

mod common;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Child;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};

/// The gateway binary; killed (SIGKILL) when dropped.
struct Gateway {
    child: Child,
    addr: SocketAddr,
}

impl Gateway {
    /// Start on `data`, with a short lease so claimed entries of a killed
    /// process come back quickly, and a session queue that holds a whole
    /// run: every notification goes to one user, and these tests are about
    /// the store, not the slow-consumer policy.
    fn start(data: &Path) -> Gateway {
        Gateway::start_with(data, "lease_ms = 1000\nclaim_batch = 200\n")
    }

    /// Start on `data` with these `[schedule]` settings.
    fn start_with(data: &Path, schedule: &str) -> Gateway {
        let config = data.join("gateway.toml");
        std::fs::write(
            &config,
            format!(
                "[session]\nqueue_messages = 50000\nqueue_bytes = 67108864\n\
                 [mailbox]\nbuffer_messages = 50000\nbuffer_bytes = 67108864\n\
                 [schedule]\n{schedule}"
            ),
        )
        .unwrap();
        let (child, addr) = spawn_gateway_binary(&[
            "--config".as_ref(),
            config.as_ref(),
            "--data-dir".as_ref(),
            data.as_ref(),
        ]);
        Gateway { child, addr }
    }

    /// SIGTERM, and wait for the process to exit.
    fn terminate(mut self) {
        let status = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let exit = self.child.wait().unwrap();
        assert!(exit.success(), "the gateway exited with {exit}");
    }

    /// SIGKILL: no shutdown path runs.
    fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    fn handle(&self) -> TestGateway {
        TestGateway::remote(self.addr)
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The status of notification `id`.
async fn status(client: &reqwest::Client, addr: SocketAddr, id: &str) -> Value {
    client
        .get(format!("http://{addr}/v1/notifications/{id}"))
        .bearer_auth(API_KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Publish `n` notifications for `user` due `delay_ms` from now, in batches
/// of 500; returns each accepted id with its due time.
async fn publish(
    gw: &TestGateway,
    user: &str,
    prefix: &str,
    n: usize,
    delay_ms: u64,
) -> HashMap<String, u64> {
    let mut accepted = HashMap::new();
    let ids: Vec<String> = (0..n).map(|i| format!("{prefix}-{i}")).collect();
    for chunk in ids.chunks(500) {
        let batch: Vec<Value> = chunk
            .iter()
            .map(|id| json!({"id": id, "users": [user], "event": "crash.test", "delay_ms": delay_ms}))
            .collect();
        let (code, body) = gw.publish(Value::Array(batch)).await;
        assert_eq!(code, 202, "{body}");
        for s in body["scheduled"].as_array().unwrap() {
            accepted.insert(
                s["id"].as_str().unwrap().to_owned(),
                s["due_at_ms"].as_u64().unwrap(),
            );
        }
    }
    accepted
}

/// Read MESSAGE frames until `want` ids have been seen (or the connection
/// ends); check that none arrived before its due time.
async fn receive(
    client: &mut StompClient,
    due: &HashMap<String, u64>,
    seen: &mut HashSet<String>,
    want: usize,
) {
    while seen.len() < want {
        let Some(f) = client.next_frame().await else {
            return;
        };
        let at = now_ms();
        let id = f
            .header("message-id")
            .unwrap_or_else(|| panic!("a frame without a message-id: {f:?}"))
            .to_owned();
        assert!(
            !id.starts_with("gap-"),
            "a gap notice: the session fell behind its queue ({f:?})"
        );
        let due_at = *due
            .get(&id)
            .unwrap_or_else(|| panic!("{id} was never published here"));
        assert!(
            at >= due_at,
            "{id} arrived at {at}, before its due time {due_at}"
        );
        seen.insert(id);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_pending_loses_nothing() {
    let data = tempfile::tempdir().unwrap();
    let first = Gateway::start(data.path());
    let due = publish(&first.handle(), "pat", "pending", 3000, 5000).await;
    assert_eq!(due.len(), 3000);
    let earliest = *due.values().min().unwrap();
    assert!(
        now_ms() < earliest,
        "the kill must come while all are pending"
    );
    first.kill9();

    let second = Gateway::start(data.path());
    let gw = second.handle();
    let mut pat = gw.session(&token("pat", None, None)).await;
    let mut seen = HashSet::new();
    receive(&mut pat, &due, &mut seen, due.len()).await;
    assert_eq!(
        seen.len(),
        due.len(),
        "every accepted notification arrives after the restart"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_firing_loses_nothing() {
    let data = tempfile::tempdir().unwrap();
    let first = Gateway::start(data.path());
    let gw = first.handle();
    let mut quinn = gw.session(&token("quinn", None, None)).await;
    let due = publish(&gw, "quinn", "firing", 20_000, 1500).await;
    // Let it start firing, then kill it mid-stream.
    let mut seen = HashSet::new();
    receive(&mut quinn, &due, &mut seen, 500).await;
    first.kill9();
    // Drain what reached the socket before the kill.
    receive(&mut quinn, &due, &mut seen, due.len()).await;
    let before_restart = now_ms();

    let second = Gateway::start(data.path());
    let gw = second.handle();
    let mut quinn = gw.session(&token("quinn", None, None)).await;
    // After the restart, everything not handed to the first process's
    // mailboxes comes (claimed-but-unfinished entries after their lease).
    let client = reqwest::Client::new();
    let mut handed_off_before_kill = HashSet::new();
    for id in due.keys() {
        let body = status(&client, gw.addr, id).await;
        if body["state"] == "delivered" && body["updated_at_ms"].as_u64().unwrap() < before_restart
        {
            handed_off_before_kill.insert(id.clone());
        }
    }
    let owed: HashSet<&String> = due
        .keys()
        .filter(|id| !seen.contains(*id) && !handed_off_before_kill.contains(*id))
        .collect();
    let want = seen.len() + owed.len();
    receive(&mut quinn, &due, &mut seen, want).await;
    for id in &owed {
        assert!(seen.contains(*id), "{id} was accepted but never delivered");
    }
    // Each accepted notification was handed to a mailbox at least once:
    // received by the client, or delivered by the killed process in its
    // last moments (its mailboxes lived in its memory).
    for id in due.keys() {
        assert!(
            seen.contains(id) || handed_off_before_kill.contains(id),
            "{id} lost"
        );
    }
    // The store holds nothing undelivered.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (code, page) = {
            let r = client
                .get(format!("http://{}/v1/notifications?state=firing", gw.addr))
                .bearer_auth(API_KEY)
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        };
        assert_eq!(code, 200);
        if page["items"].as_array().unwrap().is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "entries stuck firing: {page}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A notification claimed ahead of its due time (`claim_ahead_ms`) when the
/// gateway is told to stop goes back to the queue: after the restart it
/// arrives at its due time, not after the lease of the first claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_releases_what_was_claimed_ahead() {
    let data = tempfile::tempdir().unwrap();
    // Claimed as soon as accepted; a lease far longer than the test waits
    // for a frame, so only the release can bring it back in time.
    let schedule = "lease_ms = 600000\nclaim_ahead_ms = 20000\n";
    let first = Gateway::start_with(data.path(), schedule);
    let gw = first.handle();
    let due = publish(&gw, "rita", "ahead", 1, 3000).await;
    let client = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let body = status(&client, gw.addr, "ahead-0").await;
        if body["state"] == "firing" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never claimed ahead: {body}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(now_ms() < due["ahead-0"], "claimed, not yet due");
    first.terminate();

    let second = Gateway::start_with(data.path(), schedule);
    let gw = second.handle();
    let mut rita = gw.session(&token("rita", None, None)).await;
    let mut seen = HashSet::new();
    // `receive` fails after WAIT (10 s) without a frame: far inside the
    // first claim's lease.
    receive(&mut rita, &due, &mut seen, 1).await;
    assert!(seen.contains("ahead-0"));
    let body = status(&client, gw.addr, "ahead-0").await;
    assert_eq!(body["attempts"], 2, "claimed once by each process: {body}");
}
