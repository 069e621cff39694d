//! Memory of a session whose client never reads (issue 19, hole 7): it
//! holds no more than its window and its mailbox's unsent bound, and is cut
//! by its lag. Alone in its test binary, so that the resident set it
//! measures is its own gateway's (`cargo test` runs a file's tests in one
//! process).

mod common;

use common::*;
use herald_gateway::config::WhenFull;
use herald_protocol::stomp::Command;
use serde_json::json;

const SLOW_CONSUMER: &str = "herald_dropped_total{reason=\"slow_consumer\"}";

/// This process's resident set (the gateway runs in it), in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
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
        // Long enough for a loaded machine to send well over twice the
        // bound before the cut: the cut waits for the sending to stop.
        c.session.max_lag_ms = 15_000;
        c.session.queue_messages = 8;
        c.mailbox.buffer_bytes = 1 << 20;
        // What the mailbox keeps unsent for it: the messages pinned for a
        // session are bounded by bytes, and past that drop-oldest drops.
        c.mailbox.unsent_bytes = 1 << 20;
        c.publish.max_payload_bytes = 2 * PAYLOAD;
    })
    .await;
    let mut slow = gw.slow_session(&token("slow", None, None)).await;
    let rss_before = rss();
    // 32 MiB, or until it is cut: far more than the kernel's socket buffers
    // (4 MiB here), the queue and the mailbox hold together.
    let payload = "x".repeat(PAYLOAD);
    let mut sent = 0;
    while sent < 32 << 20 && slow_consumers(&gw) == 0 {
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
    // The cut comes max_lag_ms after the socket stopped taking bytes.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(40);
    while slow_consumers(&gw) == 0 {
        assert!(tokio::time::Instant::now() < deadline, "never cut");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
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
