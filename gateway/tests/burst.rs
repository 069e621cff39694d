//! Bursts for one user (issue 19, hole 7): a client that reads at a normal
//! pace is not cut by a burst its queue cannot hold and its mailbox can
//! (the session reads on from the mailbox's buffer), and a client that does
//! not read is still cut as a slow consumer, with bounded memory.

mod common;

use std::collections::HashSet;

use common::*;
use herald_gateway::config::WhenFull;
use herald_gateway::metrics::{DropLabels, DropReason};
use herald_protocol::stomp::Command;
use serde_json::{Value, json};

const SLOW_CONSUMER: &str = "herald_dropped_total{reason=\"slow_consumer\"}";
const BEHIND: &str = "herald_sessions_behind_total";

/// Read `count` MESSAGE frames: their sequences are consecutive from the
/// first, and their ids are `ids`, each once.
async fn read_in_order(c: &mut StompClient, count: usize, ids: &HashSet<String>) {
    let mut seen = HashSet::new();
    let mut last: Option<u64> = None;
    for i in 0..count {
        let m = c.message().await;
        assert_ne!(
            m.header("event"),
            Some("herald.gap"),
            "message {i}: nothing may be lost"
        );
        let seq: u64 = m.header("seq").unwrap().parse().unwrap();
        if let Some(prev) = last {
            assert_eq!(seq, prev + 1, "message {i}: in order, no gap, no repeat");
        }
        last = Some(seq);
        let id = m.header("message-id").unwrap().to_owned();
        assert!(ids.contains(&id), "{id} was not sent");
        assert!(seen.insert(id), "message {i} twice");
    }
    assert_eq!(seen.len(), ids.len());
}

fn batch(prefix: &str, user: &str, count: usize, extra: Value) -> (Value, HashSet<String>) {
    let ids: Vec<String> = (0..count).map(|i| format!("{prefix}-{i}")).collect();
    let body = ids
        .iter()
        .map(|id| {
            let mut n = json!({"id": id, "users": [user], "event": "burst", "payload": {"id": id}});
            for (k, v) in extra.as_object().unwrap() {
                n[k] = v.clone();
            }
            n
        })
        .collect();
    (Value::Array(body), ids.into_iter().collect())
}

/// The field case, on the default configuration: 400 delayed notifications
/// due at the same instant for one user (more than the 256-message session
/// queue) reach a client that reads, in order; nobody is cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_hundred_delayed_notifications_due_at_once_reach_a_reading_client() {
    let gw = start(|_| {}).await;
    let mut alice = gw.session(&token("alice", None, None)).await;
    // Far enough ahead that the whole batch is stored before any is due.
    let due = now_ms() + 1500;
    let (body, ids) = batch("due", "alice", 400, json!({"deliver_at": due}));
    let (status, answer) = gw.publish(body).await;
    assert_eq!(status, 202, "{answer}");
    read_in_order(&mut alice, 400, &ids).await;
    let metrics = gw.metrics().await;
    assert_eq!(sample(&metrics, SLOW_CONSUMER), Some(0.0));
    // Still open: the next one arrives.
    notify(&gw, "alice", "after").await;
    assert_eq!(alice.message().await.header("event"), Some("after"));
}

/// A batch of 400 immediate notifications for one user through a queue of
/// 8: the session falls behind at once, reads the rest from the mailbox as
/// its socket drains, and its client gets every one in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_far_beyond_the_queue_is_read_from_the_mailbox_in_order() {
    let gw = start(|c| {
        c.session.queue_messages = 8;
        c.mailbox.buffer_messages = 1000;
    })
    .await;
    let mut alice = gw.session(&token("alice", None, None)).await;
    let (body, ids) = batch("now", "alice", 400, json!({}));
    let (status, answer) = gw.publish(body).await;
    assert_eq!(status, 202, "{answer}");
    read_in_order(&mut alice, 400, &ids).await;
    let metrics = gw.metrics().await;
    assert_eq!(sample(&metrics, SLOW_CONSUMER), Some(0.0));
    assert!(
        sample(&metrics, BEHIND).unwrap() >= 1.0,
        "the session fell behind its queue of 8: {metrics}"
    );
    notify(&gw, "alice", "after").await;
    assert_eq!(alice.message().await.header("event"), Some("after"));
}

/// This process's resident set (the gateway runs in it), in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// The in-process gateway's `slow_consumer` count.
fn slow_consumers(gw: &TestGateway) -> u64 {
    let (shared, _) = gw.local.as_ref().expect("an in-process gateway");
    shared
        .metrics
        .dropped
        .get_or_create(&DropLabels {
            reason: DropReason::SlowConsumer,
        })
        .get()
}

/// A client that never reads, under `drop-oldest` (which never cuts for a
/// loss): however much is sent to it, its session holds no more than its
/// queue and the mailbox, and once its socket has taken nothing for
/// `session.max_lag_ms` it is cut as a slow consumer, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_is_cut_by_its_lag_with_bounded_memory() {
    const PAYLOAD: usize = 256 * 1024;
    /// What one session may retain: its queue (8 messages, 2 MiB), the
    /// mailbox (1 MiB), what waits for its socket, and allocator slack
    /// (6-7 MiB measured in all).
    const RETAINED: u64 = 12 << 20;
    let gw = start(|c| {
        c.session.when_full = WhenFull::DropOldest;
        c.session.max_lag_ms = 5000;
        c.session.queue_messages = 8;
        c.mailbox.buffer_bytes = 1 << 20;
        c.publish.max_payload_bytes = 2 * PAYLOAD;
    })
    .await;
    let mut slow = gw.slow_session(&token("slow", None, None)).await;
    let rss_before = rss();
    // Until it is cut, or 64 MiB: far more than the kernel's socket buffers
    // (4 MiB here), the queue and the mailbox hold together.
    let payload = "x".repeat(PAYLOAD);
    let mut sent = 0;
    while sent < 64 << 20 && slow_consumers(&gw) == 0 {
        let (s, body) = gw
            .publish(json!({"users": ["slow"], "event": "big", "payload": payload}))
            .await;
        assert_eq!(s, 202, "{body}");
        sent += PAYLOAD;
    }
    let grown = rss().saturating_sub(rss_before);
    eprintln!(
        "sent {} MiB to a client that reads nothing; the process grew {} MiB",
        sent >> 20,
        grown >> 20
    );
    assert!(
        sent as u64 > 2 * RETAINED,
        "only {} MiB went out before the cut: too little to tell a bound",
        sent >> 20
    );
    assert!(
        grown < RETAINED,
        "the process grew {} MiB for one client that reads nothing",
        grown >> 20
    );
    gw.until_metric(SLOW_CONSUMER, 1.0).await;
    // Reading now: what the socket held, then the ERROR that says why.
    let mut error = None;
    while let Some(f) = slow.next_frame().await {
        if f.command == Command::Error {
            error = f.header("message").map(str::to_owned);
        }
    }
    let error = error.expect("an ERROR before the close");
    assert!(error.starts_with("slow consumer"), "{error}");
    assert!(error.contains("max_lag_ms"), "{error}");
    assert_eq!(slow.close_code, Some(1008));
    let metrics = gw.metrics().await;
    assert!(
        sample(
            &metrics,
            "herald_dropped_total{reason=\"queue_full_drop_oldest\"}"
        )
        .unwrap()
            > 0.0,
        "drop-oldest dropped instead of cutting while it lagged"
    );
    assert_eq!(sample(&metrics, SLOW_CONSUMER), Some(1.0), "counted once");
}
