//! What a retained notification costs the gateway: its payload plus a
//! small constant, on every publish path, whatever buffer the payload
//! arrived in.
//!
//! Subscribed sessions receive notifications published one per request;
//! each stays in its user's mailbox for replay. The heap bytes the process
//! holds (counted by this binary's global allocator, so the figure is
//! exact and does not depend on the allocator's page reuse) grow by at
//! most `PAYLOAD + 256` per notification, the bound docs/performance.md states.
//! `herald-bench retained` measures the same with the gateway's RSS.
//!
//! Before each fix, the raw path (`Content-Type: text/plain`) kept the
//! connection's whole read buffer alive with every payload (about 8 KiB
//! each), and the JSON path kept the routed `Notification` (about 600
//! bytes of struct, strings and duplicate-filter entry around 100 bytes of
//! payload).

// A counting global allocator is `unsafe impl GlobalAlloc`; it forwards
// every call to the system allocator unchanged.
#![allow(unsafe_code)]

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use common::*;
use herald_protocol::stomp::Command;

/// Heap bytes currently allocated by the whole process.
static LIVE: AtomicIsize = AtomicIsize::new(0);

struct Counting;

// SAFETY: every call is forwarded to `System` with its own arguments; the
// counter is only arithmetic on the sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Both tests measure the one process-wide counter: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const USERS: usize = 50;
/// Enough notifications that what moves the heap besides them (buffers
/// the runtime and the HTTP stacks grow on their own, about 80 KB from
/// run to run) is a few bytes each.
const PER_USER: usize = 100;
const PAYLOAD: usize = 100;
/// The bound on what a retained notification may cost beyond its payload.
const OVERHEAD: usize = 256;

#[derive(Debug, Clone, Copy)]
enum Path {
    /// `Content-Type: text/plain`, the envelope in the query string.
    Raw,
    /// `Content-Type: application/json`, the payload a JSON string.
    Json,
}

/// Publish one notification of `PAYLOAD` bytes (as delivered) to `user`.
async fn publish(http: &reqwest::Client, gw: &TestGateway, path: Path, user: &str) {
    let url = format!("http://{}/v1/notifications", gw.addr);
    let request = match path {
        Path::Raw => http
            .post(format!("{url}?users={user}&event=t.e"))
            .header("content-type", "text/plain")
            .body(vec![b'r'; PAYLOAD]),
        // The payload as delivered is the JSON string, quotes included.
        Path::Json => http.post(url).json(&serde_json::json!({
            "users": [user], "event": "t.e", "payload": "j".repeat(PAYLOAD - 2),
        })),
    };
    let r = request.bearer_auth(API_KEY).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 202, "{}", r.text().await.unwrap());
}

/// Read `count` MESSAGEs on `client`, then a round trip (a subscription
/// that matches nothing, added and removed with receipts), so the session
/// has written, and let go of, everything before.
async fn drain(client: &mut StompClient, count: usize) {
    for _ in 0..count {
        let m = client.message().await;
        assert_eq!(m.body.len(), PAYLOAD);
    }
    client.subscribe("sync", &[("events", "sync.never")]).await;
    client
        .send(
            Command::Unsubscribe,
            &[("id", "sync"), ("receipt", "r-unsync")],
        )
        .await;
    let f = client.next_frame().await.expect("RECEIPT");
    assert_eq!(f.command, Command::Receipt, "{f:?}");
}

/// Heap bytes each retained notification adds on `path`.
async fn retained_bytes_per_notification(path: Path) -> f64 {
    let _one_at_a_time = SERIAL.lock().await;
    // The publish API's idempotency ledger holds each id for its window
    // (about 100 B, bounded by publish.dedup_max; docs/publishing.md):
    // not the mailbox's retention measured here, so off.
    let gw = start(|c| c.publish.dedup_window_secs = 0).await;
    let http = reqwest::Client::new();
    let users: Vec<String> = (0..USERS).map(|i| format!("mem-{i}")).collect();
    let mut clients = Vec::with_capacity(USERS);
    for u in &users {
        clients.push(gw.session(&token(u, None, None)).await);
    }
    // One notification each first: mailboxes, connections and buffers
    // exist before the baseline.
    for u in &users {
        publish(&http, &gw, path, u).await;
    }
    for c in &mut clients {
        drain(c, 1).await;
    }
    let before = LIVE.load(Ordering::Relaxed);
    for _ in 0..PER_USER {
        for u in &users {
            publish(&http, &gw, path, u).await;
        }
    }
    for c in &mut clients {
        drain(c, PER_USER).await;
    }
    let after = LIVE.load(Ordering::Relaxed);
    let count = USERS * PER_USER;
    let per = (after - before) as f64 / count as f64;
    eprintln!(
        "{path:?}: heap {before} B -> {after} B for {count} retained notifications of {PAYLOAD} B: {per:.0} B each"
    );
    gw.shutdown.cancel();
    per
}

fn assert_bounded(path: Path, per: f64) {
    assert!(
        per <= (PAYLOAD + OVERHEAD) as f64,
        "{path:?}: a retained notification of {PAYLOAD} B costs {per:.0} B of heap, over payload + {OVERHEAD} B"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_notification_retained_costs_its_payload_plus_a_constant() {
    let per = retained_bytes_per_notification(Path::Raw).await;
    assert_bounded(Path::Raw, per);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_notification_retained_costs_its_payload_plus_a_constant() {
    let per = retained_bytes_per_notification(Path::Json).await;
    assert_bounded(Path::Json, per);
}
