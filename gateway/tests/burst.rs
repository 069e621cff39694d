//! Bursts for one user (issue 19, hole 7; issue 36, item 1): a client that
//! reads at a normal pace is never cut by a burst, however many messages
//! (the session reads on from its mailbox, which keeps what it was not sent
//! yet up to `mailbox.unsent_bytes`): 10,000 and 100,000 due at once, and
//! immediate bursts faster than the socket drains, all arrive in order. A
//! client that stops reading is cut by those bytes (`slow_memory.rs`: or by
//! its lag, with bounded memory).

mod common;

use std::collections::HashSet;

use common::*;
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

/// Publish `notes` in batches of the API's largest (1,000), `lanes` at a
/// time.
async fn publish_all(gw: &TestGateway, notes: Vec<Value>, lanes: usize) {
    let batches: Vec<Value> = notes
        .chunks(1000)
        .map(|c| Value::Array(c.to_vec()))
        .collect();
    for wave in batches.chunks(lanes) {
        let answers =
            futures_util::future::join_all(wave.iter().map(|b| gw.publish(b.clone()))).await;
        for (status, answer) in answers {
            assert_eq!(status, 202, "{answer}");
        }
    }
}

/// A herd of `count` delayed notifications due at the same instant
/// (`lead_ms` after the first is published: far enough that the whole herd
/// is stored first) for one user who reads, on the default configuration:
/// every one arrives, in sequence order, nothing lost, nobody cut, no gap
/// marker; the status API reads `delivered`; the session stays open.
async fn herd_reaches_a_reading_client(count: usize, lead_ms: u64) {
    let gw = start(|_| {}).await;
    let user = format!("herd{count}");
    let mut client = gw.session(&token(&user, None, None)).await;
    let due = now_ms() + lead_ms;
    let (body, ids) = batch("due", &user, count, json!({"deliver_at": due}));
    let Value::Array(notes) = body else {
        unreachable!()
    };
    let started = std::time::Instant::now();
    publish_all(&gw, notes, 2).await;
    let stored = started.elapsed();
    assert!(
        now_ms() < due,
        "storing {count} took {stored:?}, past their due time: raise the lead"
    );
    let answer = gw.status_of("due-0").await;
    assert_eq!(answer["state"], "scheduled", "{answer}");
    // The first comes at the due time; a frame may also wait behind a
    // whole herd in a loaded debug build.
    client.wait = std::time::Duration::from_millis(lead_ms + 60_000);
    read_in_order(&mut client, count, &ids).await;
    eprintln!(
        "a herd of {count}: stored in {stored:?}, all read {} ms after due",
        now_ms().saturating_sub(due)
    );
    let metrics = gw.metrics().await;
    assert_eq!(sample(&metrics, SLOW_CONSUMER), Some(0.0));
    assert_eq!(
        sample(&metrics, "herald_gaps_total"),
        Some(0.0),
        "no gap marker: {metrics}"
    );
    // Marked delivered by the settler's next round.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let answer = gw.status_of("due-0").await;
        if answer["state"] == "delivered" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{answer}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    notify(&gw, &user, "after").await;
    assert_eq!(client.message().await.header("event"), Some("after"));
}

/// The coupon herd of the field reports: 10,000 due at the same instant
/// for one user (forty times the session's window, past the mailbox's
/// 256-message replay bound), over a real WebSocket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_delayed_notifications_due_at_once_reach_a_reading_client() {
    herd_reaches_a_reading_client(10_000, 30_000).await;
}

/// 10,000 immediate notifications for one user published ten batches at a
/// time, faster than the socket drains, on the default configuration:
/// every one arrives, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_immediate_burst_faster_than_the_socket_drains_arrives_whole() {
    let gw = start(|_| {}).await;
    let mut alice = gw.session(&token("alice", None, None)).await;
    let (body, ids) = batch("now", "alice", 10_000, json!({}));
    let Value::Array(notes) = body else {
        unreachable!()
    };
    publish_all(&gw, notes, 10).await;
    read_in_order(&mut alice, 10_000, &ids).await;
    let metrics = gw.metrics().await;
    assert_eq!(sample(&metrics, SLOW_CONSUMER), Some(0.0));
    assert!(
        sample(&metrics, BEHIND).unwrap() >= 1.0,
        "the session fell behind its window: {metrics}"
    );
}

/// A client that stops reading, under `disconnect`, with `max_lag_ms` far
/// off: it is cut by bytes, once what its mailbox holds unsent for it
/// passes `mailbox.unsent_bytes` (here 1 MiB; a burst of 10 and 100 times
/// it), saying so; resuming from before the loss, it gets a gap marker,
/// then live messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_cut_by_the_unsent_bytes() {
    for times in [10, 100] {
        const BOUND: usize = 1 << 20;
        let gw = start(|c| {
            c.session.max_lag_ms = 600_000;
            c.session.queue_messages = 8;
            c.mailbox.unsent_bytes = BOUND;
        })
        .await;
        let t = token("stalled", None, None);
        let mut slow = gw.slow_session(&t).await;
        let payload = "x".repeat(16 * 1024);
        let messages = times * BOUND / payload.len();
        let notes: Vec<Value> = (0..messages)
            .map(|i| json!({"id": format!("s-{i}"), "users": ["stalled"], "event": "big", "payload": payload}))
            .collect();
        let mut chunks = notes.chunks(16);
        let mut sent = 0;
        // Until the cut: the unsent bytes pass the bound (the kernel's
        // socket buffers took some first: 4 MiB here at most).
        while slow_consumers(&gw) == 0 {
            let chunk = chunks.next().expect("cut before the burst's end");
            let (s, answer) = gw.publish(Value::Array(chunk.to_vec())).await;
            assert_eq!(s, 202, "{answer}");
            sent += chunk.len() * payload.len();
        }
        assert!(sent < BOUND + (6 << 20), "cut only after {sent} bytes");
        // Reading now, within the close's grace: what the socket held,
        // then the ERROR that says why.
        let mut error = None;
        while let Some(f) = slow.next_frame().await {
            if f.command == Command::Error {
                error = f.header("message").map(str::to_owned);
            }
        }
        // The rest of the burst goes to the mailbox alone, within its bounds.
        for chunk in chunks {
            let (s, answer) = gw.publish(Value::Array(chunk.to_vec())).await;
            assert_eq!(s, 202, "{answer}");
        }
        let error = error.expect("an ERROR before the close");
        assert!(error.contains("mailbox.unsent_bytes"), "{error}");
        assert_eq!(slow.close_code, Some(1008));
        // Back, from the start: a gap marker for what was dropped (the
        // app reloads its state), then live messages after it.
        let epoch = epoch_of(slow.connected.as_ref().unwrap());
        let (mut again, answer) = gw
            .connect_with(&[("passcode", &t), ("last-seq", "0"), ("epoch", &epoch)])
            .await;
        assert_eq!(answer.command, Command::Connected);
        again.subscribe("s", &[]).await;
        let gap = again.message().await;
        assert_eq!(gap.header("event"), Some("herald.gap"));
        assert_eq!(gap.header("reason"), Some("buffer-exceeded"));
        assert_eq!(gap.header("seq"), Some(messages.to_string().as_str()));
        notify(&gw, "stalled", "after").await;
        let next = again.message().await;
        assert_eq!(next.header("event"), Some("after"));
        assert_eq!(
            next.header("seq"),
            Some((messages + 1).to_string().as_str())
        );
        assert!(sample(&gw.metrics().await, "herald_gaps_total").unwrap() >= 1.0);
    }
}

/// The chat backlog of the field reports: 100,000 `when_online`
/// notifications held for a user who is away, all released at once when
/// the user connects, on the default configuration: every one arrives, in
/// sequence order, nothing lost or repeated, nobody cut, no gap marker;
/// then a live one after them. (Until the embedded store's `claim_held`
/// passed over the entries an earlier call had claimed, the second
/// release batch found only those and stopped: 20,000 arrived, 80,000
/// stayed held while the user was online.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_held_notifications_reach_the_user_who_comes_online() {
    const COUNT: usize = 100_000;
    let gw = start(|_| {}).await;
    let user = "backlog";
    let (body, ids) = batch("held", user, COUNT, json!({"when_online": true}));
    let Value::Array(notes) = body else {
        unreachable!()
    };
    let started = std::time::Instant::now();
    publish_all(&gw, notes, 2).await;
    // All held (the firer found the user offline), the last one included.
    let last = format!("held-{}", COUNT - 1);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(300);
    while gw.status_of(&last).await["state"] != "held" {
        assert!(tokio::time::Instant::now() < deadline, "{last} never held");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let held = started.elapsed();
    let online = std::time::Instant::now();
    let mut client = gw.session(&token(user, None, None)).await;
    client.wait = std::time::Duration::from_secs(120);
    read_in_order(&mut client, COUNT, &ids).await;
    eprintln!(
        "a backlog of {COUNT}: held in {held:?}, all read {:?} after connecting",
        online.elapsed()
    );
    let metrics = gw.metrics().await;
    assert_eq!(sample(&metrics, SLOW_CONSUMER), Some(0.0));
    assert_eq!(sample(&metrics, "herald_gaps_total"), Some(0.0));
    notify(&gw, user, "after").await;
    assert_eq!(client.message().await.header("event"), Some("after"));
}
