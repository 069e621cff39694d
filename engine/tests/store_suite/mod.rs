//! The conformance suite every [`Store`] backend passes.
//!
//! A backend's test file opens a fresh, empty store per case and hands it
//! to the macro:
//!
//! ```ignore
//! #[macro_use]
//! mod store_suite;
//! async fn open() -> (Arc<dyn Store>, Guard) { ... } // Guard cleans up on drop
//! store_suite_tests!(open);
//! ```
//!
//! Every case passes its own clock (`T0` onwards), so nothing here waits
//! for real time.

#![allow(dead_code, unreachable_pub)]

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use herald_engine::callback::attempt::{Attempt, Kind, Verdict};
use herald_engine::schedule::entry::{Entry, Millis, Phase, State, Step, Target};
use herald_engine::schedule::store::{
    Cancel, Cursor, Ending, FIRST_ATTEMPTS_KEPT, Finish, Insert, ListFilter, MAX_ATTEMPTS_KEPT,
    Page, PutTopic, Replay, RetryWait, Settled, Store, StoredTopic,
};
use herald_protocol::envelope::{Notification, Scope};

/// A fixed start of time (2027-01-15).
pub const T0: Millis = 1_800_000_000_000;
/// The lease the cases claim with.
pub const LEASE: u64 = 30_000;

/// A scheduled entry for `user`, due at `due_ms`.
pub fn entry(id: &str, due_ms: Millis, topic: Option<&str>, user: &str) -> Entry {
    Entry {
        notification: Notification {
            id: id.into(),
            scope: Scope::User,
            users: vec![user.into()],
            clients: vec![],
            sites: vec!["site-1".into()],
            event: "reminder.due".into(),
            topic: topic.map(str::to_owned),
            content_type: "application/json".into(),
            payload: Bytes::from(format!("{{\"id\":\"{id}\"}}")),
            payload_is_utf8: true,
            ttl: Some(Duration::from_secs(60)),
            encodings: Default::default(),
            accepted: Default::default(),
        },
        due_ms,
        accepted_ms: T0,
        when_online: false,
        attempts: 0,
        phase: Phase::Deliver,
        fire_ms: 0,
        calls: 0,
        target: Default::default(),
    }
}

/// A `when_online` entry for `user`.
pub fn online_entry(id: &str, due_ms: Millis, user: &str) -> Entry {
    Entry {
        when_online: true,
        ..entry(id, due_ms, Some("online"), user)
    }
}

pub fn ids(entries: &[Entry]) -> Vec<String> {
    entries.iter().map(|e| e.id().to_owned()).collect()
}

async fn insert_ok(store: &dyn Store, entries: Vec<Entry>) {
    let n = entries.len();
    let out = store.insert(entries, T0).await.expect("insert");
    assert_eq!(out, vec![Insert::Accepted; n]);
}

async fn state(store: &dyn Store, id: &str) -> Option<State> {
    store.status(id).await.expect("status").map(|s| s.state)
}

pub async fn insert_then_status(store: &dyn Store) {
    insert_ok(store, vec![entry("a", T0 + 1000, Some("t"), "u1")]).await;
    let s = store.status("a").await.unwrap().expect("stored");
    assert_eq!(s.id, "a");
    assert_eq!(s.state, State::Scheduled);
    assert_eq!(s.topic.as_deref(), Some("t"));
    assert_eq!(s.accepted_ms, T0);
    assert_eq!(s.due_ms, T0 + 1000);
    assert_eq!(s.attempts, 0);
    assert_eq!(store.status("missing").await.unwrap(), None);
}

pub async fn insert_is_idempotent(store: &dyn Store) {
    insert_ok(store, vec![entry("a", T0 + 1000, None, "u1")]).await;
    let again = store
        .insert(vec![entry("a", T0 + 9999, None, "u2")], T0 + 5)
        .await
        .unwrap();
    match &again[..] {
        [Insert::Duplicate(s)] => {
            assert_eq!(s.due_ms, T0 + 1000, "the first submission stands");
            assert_eq!(s.state, State::Scheduled);
        }
        other => panic!("expected one duplicate, got {other:?}"),
    }
    let twice = store
        .insert(
            vec![
                entry("b", T0 + 10, None, "u"),
                entry("b", T0 + 20, None, "u"),
            ],
            T0,
        )
        .await
        .unwrap();
    assert_eq!(twice[0], Insert::Accepted);
    assert!(matches!(twice[1], Insert::Duplicate(_)), "{twice:?}");
    let claimed = store.claim_due(T0 + 100_000, 10, LEASE).await.unwrap();
    assert_eq!(ids(&claimed), vec!["b", "a"], "each id once");
    assert_eq!(claimed[0].due_ms, T0 + 10);
}

pub async fn a_duplicate_of_a_final_entry_is_still_a_duplicate(store: &dyn Store) {
    insert_ok(store, vec![entry("a", T0, None, "u")]).await;
    store.claim_due(T0, 10, LEASE).await.unwrap();
    store.delivered(vec!["a".into()], T0 + 1).await.unwrap();
    let again = store
        .insert(vec![entry("a", T0, None, "u")], T0 + 2)
        .await
        .unwrap();
    assert!(
        matches!(&again[..], [Insert::Duplicate(s)] if s.state == State::Delivered),
        "{again:?}"
    );
    assert!(
        store
            .claim_due(T0 + 100_000, 10, LEASE)
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn nothing_is_claimed_early(store: &dyn Store) {
    insert_ok(
        store,
        vec![
            entry("a", T0 + 100, None, "u"),
            entry("b", T0 + 200, None, "u"),
        ],
    )
    .await;
    assert!(
        store
            .claim_due(T0 + 99, 10, LEASE)
            .await
            .unwrap()
            .is_empty()
    );
    let first = store.claim_due(T0 + 150, 10, LEASE).await.unwrap();
    assert_eq!(ids(&first), vec!["a"]);
    assert_eq!(first[0].attempts, 1);
    assert_eq!(state(store, "a").await, Some(State::Firing));
    assert_eq!(state(store, "b").await, Some(State::Scheduled));
    let second = store.claim_due(T0 + 200, 10, LEASE).await.unwrap();
    assert_eq!(ids(&second), vec!["b"]);
}

pub async fn claims_come_in_order_and_in_batches(store: &dyn Store) {
    insert_ok(
        store,
        vec![
            entry("e", T0 + 50, None, "u"),
            entry("c", T0 + 10, None, "u"),
            entry("b", T0 + 10, None, "u"),
            entry("a", T0 + 30, None, "u"),
            entry("d", T0 + 20, None, "u"),
        ],
    )
    .await;
    let now = T0 + 1000;
    let mut order = Vec::new();
    loop {
        let batch = store.claim_due(now, 2, LEASE).await.unwrap();
        assert!(batch.len() <= 2);
        if batch.is_empty() {
            break;
        }
        order.extend(ids(&batch));
    }
    // Entries due at the same time come in the backend's order (embedded:
    // acceptance; Redis: id).
    let (ties, rest) = order.split_at(2);
    let mut ties = ties.to_vec();
    ties.sort();
    assert_eq!(ties, vec!["b", "c"], "the two due first");
    assert_eq!(rest, ["d", "a", "e"], "then in due order");
}

pub async fn a_claimed_entry_carries_its_notification_intact(store: &dyn Store) {
    let mut e = entry("bin", T0, Some("topic-x"), "u");
    e.notification.content_type = "application/octet-stream".into();
    e.notification.payload = Bytes::from((0..=255u8).collect::<Vec<_>>());
    e.notification.payload_is_utf8 = false;
    e.notification.scope = Scope::Client;
    e.notification.clients = vec!["acme".into(), "globex".into()];
    insert_ok(store, vec![e.clone()]).await;
    let claimed = store.claim_due(T0, 1, LEASE).await.unwrap();
    let expected = Entry {
        attempts: 1,
        fire_ms: T0,
        ..e
    };
    assert_eq!(claimed, vec![expected]);
}

pub async fn an_expired_lease_is_claimed_again(store: &dyn Store) {
    insert_ok(store, vec![entry("a", T0, None, "u")]).await;
    assert_eq!(store.claim_due(T0, 10, 1000).await.unwrap().len(), 1);
    assert!(
        store
            .claim_due(T0 + 999, 10, 1000)
            .await
            .unwrap()
            .is_empty()
    );
    let again = store.claim_due(T0 + 1000, 10, 1000).await.unwrap();
    assert_eq!(ids(&again), vec!["a"]);
    assert_eq!(again[0].attempts, 2);
    assert_eq!(store.status("a").await.unwrap().unwrap().attempts, 2);
}

pub async fn upcoming_lists_fire_times_within_the_horizon(store: &dyn Store) {
    insert_ok(
        store,
        vec![
            entry("a", T0 + 100, None, "u"),
            entry("b", T0 + 200, None, "u"),
            entry("c", T0 + 5000, None, "u"),
        ],
    )
    .await;
    let up = store.upcoming(0, T0 + 1000, 10).await.unwrap();
    assert_eq!(up, vec![(T0 + 100, "a".into()), (T0 + 200, "b".into())]);
    assert_eq!(store.upcoming(0, T0 + 1000, 1).await.unwrap().len(), 1);
    // A firing entry is listed at its lease expiry.
    store.claim_due(T0 + 100, 1, 2000).await.unwrap();
    let up = store.upcoming(0, T0 + 10_000, 10).await.unwrap();
    assert_eq!(
        up,
        vec![
            (T0 + 200, "b".into()),
            (T0 + 2100, "a".into()),
            (T0 + 5000, "c".into())
        ]
    );
}

pub async fn upcoming_reads_a_slice_of_fire_times(store: &dyn Store) {
    insert_ok(
        store,
        vec![
            entry("a", T0 + 100, None, "u"),
            entry("b", T0 + 200, None, "u"),
            entry("c", T0 + 300, None, "u"),
            entry("d", T0 + 300, None, "u"),
            entry("e", T0 + 400, None, "u"),
        ],
    )
    .await;
    // Both ends are included.
    let up = store.upcoming(T0 + 200, T0 + 300, 10).await.unwrap();
    let ids: Vec<&str> = up.iter().map(|(_, id)| id.as_str()).collect();
    assert_eq!(ids, ["b", "c", "d"]);
    assert_eq!(store.upcoming(T0 + 101, T0 + 199, 10).await.unwrap(), []);
    assert_eq!(store.upcoming(T0 + 300, T0 + 200, 10).await.unwrap(), []);
    // The limit counts from the slice's start.
    let up = store.upcoming(T0 + 150, u64::MAX, 2).await.unwrap();
    assert_eq!(up.len(), 2);
    assert_eq!(up[0], (T0 + 200, "b".into()));
    // A firing entry is in the slice holding its lease's end.
    store.claim_due(T0 + 100, 1, 1000).await.unwrap();
    assert_eq!(
        store.upcoming(T0 + 1000, T0 + 1200, 10).await.unwrap(),
        [(T0 + 1100, "a".into())]
    );
    assert_eq!(
        store.upcoming(T0, T0 + 150, 10).await.unwrap(),
        [],
        "no longer at its due time"
    );
}

pub async fn delivered_is_final(store: &dyn Store) {
    insert_ok(
        store,
        vec![entry("a", T0, None, "u"), entry("b", T0 + 10, None, "u")],
    )
    .await;
    store.claim_due(T0, 10, LEASE).await.unwrap();
    // "b" is not firing: left alone.
    store
        .delivered(vec!["a".into(), "b".into(), "nope".into()], T0 + 5)
        .await
        .unwrap();
    let a = store.status("a").await.unwrap().unwrap();
    assert_eq!(
        (a.state, a.updated_ms, a.attempts),
        (State::Delivered, T0 + 5, 1)
    );
    assert_eq!(state(store, "b").await, Some(State::Scheduled));
    let later = store.claim_due(T0 + LEASE * 10, 10, LEASE).await.unwrap();
    assert_eq!(
        ids(&later),
        vec!["b"],
        "a delivered entry never fires again"
    );
    assert!(
        store
            .upcoming(0, u64::MAX, 10)
            .await
            .unwrap()
            .iter()
            .all(|(_, id)| id != "a")
    );
}

pub async fn held_entries_wait_for_their_user(store: &dyn Store) {
    insert_ok(
        store,
        vec![
            online_entry("h1", T0, "alice"),
            online_entry("h2", T0 + 1, "alice"),
            online_entry("h3", T0, "bob"),
        ],
    )
    .await;
    let claimed = store.claim_due(T0 + 1, 10, LEASE).await.unwrap();
    assert_eq!(claimed.len(), 3);
    assert!(claimed.iter().all(|e| e.when_online));
    store
        .hold(ids(&claimed), T0 + 60_000, T0 + 2)
        .await
        .unwrap();
    let h1 = store.status("h1").await.unwrap().unwrap();
    assert_eq!((h1.state, h1.updated_ms), (State::Held, T0 + 2));
    // Held entries are not due any more, even after the lease.
    assert!(
        store
            .claim_due(T0 + LEASE * 10, 10, LEASE)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(store.upcoming(0, u64::MAX, 10).await.unwrap().is_empty());
    assert!(
        store
            .claim_held("carol", T0 + 3, 10, LEASE)
            .await
            .unwrap()
            .is_empty()
    );
    let alice = store.claim_held("alice", T0 + 3, 10, LEASE).await.unwrap();
    assert_eq!(ids(&alice), vec!["h1", "h2"]);
    assert!(alice.iter().all(|e| e.attempts == 2));
    assert_eq!(state(store, "h1").await, Some(State::Firing));
    assert_eq!(state(store, "h3").await, Some(State::Held));
    assert!(
        store
            .claim_held("alice", T0 + 4, 10, LEASE)
            .await
            .unwrap()
            .is_empty()
    );
    // Claimed from held, the entry fires like any other: a crash leaves it
    // to come back after the lease.
    let back = store.claim_due(T0 + 3 + LEASE, 10, LEASE).await.unwrap();
    assert_eq!(ids(&back), vec!["h1", "h2"]);
}

pub async fn claim_held_respects_its_limit(store: &dyn Store) {
    let many: Vec<Entry> = (0..5)
        .map(|i| online_entry(&format!("h{i}"), T0 + i, "alice"))
        .collect();
    insert_ok(store, many).await;
    let claimed = store.claim_due(T0 + 10, 10, LEASE).await.unwrap();
    store
        .hold(ids(&claimed), T0 + 60_000, T0 + 10)
        .await
        .unwrap();
    let first = store.claim_held("alice", T0 + 11, 2, LEASE).await.unwrap();
    assert_eq!(ids(&first), vec!["h0", "h1"]);
    // The next call, before the first ones are settled, takes the next
    // ones (not the same ones again, which would read as nothing left and
    // leave the rest held while the user is online).
    let next = store.claim_held("alice", T0 + 11, 2, LEASE).await.unwrap();
    assert_eq!(ids(&next), vec!["h2", "h3"]);
    let rest = store.claim_held("alice", T0 + 11, 10, LEASE).await.unwrap();
    assert_eq!(ids(&rest), vec!["h4"]);
    let none = store.claim_held("alice", T0 + 11, 10, LEASE).await.unwrap();
    assert!(none.is_empty());
}

pub async fn held_entries_expire(store: &dyn Store) {
    // h2 has no topic.
    let h2 = Entry {
        when_online: true,
        ..entry("h2", T0, None, "bob")
    };
    insert_ok(store, vec![online_entry("h1", T0, "alice"), h2]).await;
    store.claim_due(T0, 10, LEASE).await.unwrap();
    store.hold(vec!["h1".into()], T0 + 1000, T0).await.unwrap();
    store.hold(vec!["h2".into()], T0 + 5000, T0).await.unwrap();
    assert_eq!(
        store.expire(T0 + 999, 10).await.unwrap(),
        Vec::<Option<String>>::new()
    );
    // The topic of each one that expired, for the per-topic counts.
    assert_eq!(
        store.expire(T0 + 1000, 10).await.unwrap(),
        vec![Some("online".to_owned())]
    );
    let h1 = store.status("h1").await.unwrap().unwrap();
    assert_eq!((h1.state, h1.updated_ms), (State::Expired, T0 + 1000));
    assert!(
        store
            .claim_held("alice", T0 + 1001, 10, LEASE)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(state(store, "h2").await, Some(State::Held));
    assert_eq!(store.expire(T0 + 10_000, 10).await.unwrap(), vec![None]);
    assert!(store.expire(T0 + 20_000, 10).await.unwrap().is_empty());
}

pub async fn released_entries_fire_at_the_retry_time(store: &dyn Store) {
    insert_ok(store, vec![entry("a", T0 + 10, None, "u")]).await;
    store.claim_due(T0 + 10, 10, LEASE).await.unwrap();
    store
        .release(vec!["a".into(), "nope".into()], T0 + 500, T0 + 11)
        .await
        .unwrap();
    let a = store.status("a").await.unwrap().unwrap();
    assert_eq!(a.state, State::Scheduled);
    assert_eq!(a.due_ms, T0 + 10, "the reported due time does not move");
    assert!(
        store
            .claim_due(T0 + 499, 10, LEASE)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.upcoming(0, u64::MAX, 10).await.unwrap(),
        vec![(T0 + 500, "a".into())]
    );
    let again = store.claim_due(T0 + 500, 10, LEASE).await.unwrap();
    assert_eq!(ids(&again), vec!["a"]);
    assert_eq!(again[0].attempts, 2);
}

pub async fn an_entry_due_before_the_last_claimed_one_is_still_claimed(store: &dyn Store) {
    insert_ok(
        store,
        vec![
            entry("b", T0 + 100, None, "u"),
            entry("c", T0 + 300, None, "u"),
        ],
    )
    .await;
    assert_eq!(
        ids(&store.claim_due(T0 + 200, 10, LEASE).await.unwrap()),
        ["b"]
    );
    // Accepted late, with a due time already past.
    insert_ok(store, vec![entry("a", T0 + 50, None, "u")]).await;
    assert_eq!(
        ids(&store.claim_due(T0 + 200, 10, LEASE).await.unwrap()),
        ["a"]
    );
    // Released to a time before the last claimed one.
    store
        .release(vec!["b".into()], T0 + 60, T0 + 201)
        .await
        .unwrap();
    let again = store.claim_due(T0 + 200, 10, LEASE).await.unwrap();
    assert_eq!(ids(&again), ["b"]);
    assert_eq!(again[0].attempts, 2);
    assert_eq!(
        ids(&store.claim_due(T0 + 300, 10, LEASE).await.unwrap()),
        ["c"]
    );
}

pub async fn cancel_in_every_state(store: &dyn Store) {
    insert_ok(
        store,
        vec![
            entry("sched", T0 + 1000, None, "u"),
            entry("firing", T0, None, "u"),
            entry("done", T0, None, "u"),
            online_entry("held", T0, "alice"),
            online_entry("exp", T0, "bob"),
        ],
    )
    .await;
    let claimed = store.claim_due(T0, 10, LEASE).await.unwrap();
    assert_eq!(claimed.len(), 4);
    store.delivered(vec!["done".into()], T0 + 1).await.unwrap();
    store
        .hold(vec!["held".into()], T0 + 100_000, T0 + 1)
        .await
        .unwrap();
    store
        .hold(vec!["exp".into()], T0 + 2, T0 + 1)
        .await
        .unwrap();
    assert_eq!(store.expire(T0 + 2, 10).await.unwrap().len(), 1);

    let now = T0 + 3;
    match store.cancel("sched", now).await.unwrap() {
        Cancel::Cancelled(s) => assert_eq!((s.state, s.updated_ms), (State::Cancelled, now)),
        other => panic!("scheduled: {other:?}"),
    }
    match store.cancel("sched", now + 1).await.unwrap() {
        Cancel::Cancelled(s) => assert_eq!(s.updated_ms, now, "idempotent, unchanged"),
        other => panic!("cancelled again: {other:?}"),
    }
    match store.cancel("held", now).await.unwrap() {
        Cancel::Cancelled(s) => assert_eq!(s.state, State::Cancelled),
        other => panic!("held: {other:?}"),
    }
    for (id, st) in [
        ("firing", State::Firing),
        ("done", State::Delivered),
        ("exp", State::Expired),
    ] {
        match store.cancel(id, now).await.unwrap() {
            Cancel::TooLate(s) => assert_eq!(s.state, st, "{id}"),
            other => panic!("{id}: {other:?}"),
        }
    }
    assert_eq!(store.cancel("nope", now).await.unwrap(), Cancel::NotFound);
    // Cancelled entries never fire, nor come back from held.
    assert!(
        store
            .claim_due(T0 + 10_000, 10, LEASE)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .claim_held("alice", now, 10, LEASE)
            .await
            .unwrap()
            .is_empty()
    );
    let up = store.upcoming(0, u64::MAX, 10).await.unwrap();
    assert_eq!(up, vec![(T0 + LEASE, "firing".into())]);
}

/// Cancels race claims for the same entries: every entry ends either
/// claimed (its cancel said too late) or cancelled (no claim returned it),
/// never both, never neither.
pub async fn cancel_racing_claim_has_one_winner(store: Arc<dyn Store>) {
    let n = 200;
    let all: Vec<Entry> = (0..n)
        .map(|i| entry(&format!("r{i:03}"), T0, None, "u"))
        .collect();
    insert_ok(&*store, all).await;
    let claimer = {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let batch = store.claim_due(T0 + 1, 7, LEASE).await.unwrap();
                if batch.is_empty() {
                    break got;
                }
                got.extend(ids(&batch));
            }
        })
    };
    let canceller = {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            let mut cancelled = Vec::new();
            for i in (0..n).rev() {
                let id = format!("r{i:03}");
                match store.cancel(&id, T0 + 1).await.unwrap() {
                    Cancel::Cancelled(_) => cancelled.push(id),
                    Cancel::TooLate(s) => assert_eq!(s.state, State::Firing),
                    Cancel::NotFound => panic!("{id} vanished"),
                }
            }
            cancelled
        })
    };
    let claimed = claimer.await.unwrap();
    let cancelled = canceller.await.unwrap();
    let claimed: HashSet<_> = claimed.into_iter().collect();
    let cancelled: HashSet<_> = cancelled.into_iter().collect();
    assert!(claimed.is_disjoint(&cancelled));
    assert_eq!(claimed.len() + cancelled.len(), n);
}

/// Several firers (routers) share the work: no entry is claimed twice
/// within its lease, and every entry is claimed.
pub async fn concurrent_claimers_never_share_an_entry(store: Arc<dyn Store>) {
    let n = 300;
    let all: Vec<Entry> = (0..n)
        .map(|i| entry(&format!("c{i:03}"), T0 + i, None, "u"))
        .collect();
    insert_ok(&*store, all).await;
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let batch = store.claim_due(T0 + 1000, 9, LEASE).await.unwrap();
                if batch.is_empty() {
                    break got;
                }
                got.extend(ids(&batch));
            }
        }));
    }
    let mut seen = HashSet::new();
    for t in tasks {
        for id in t.await.unwrap() {
            assert!(seen.insert(id.clone()), "{id} claimed twice");
        }
    }
    assert_eq!(seen.len(), n as usize);
}

pub async fn list_pages_by_topic_and_state(store: &dyn Store) {
    let mut all = Vec::new();
    for i in 0..25u64 {
        all.push(entry(&format!("a{i:02}"), T0 + 100 - i, Some("alpha"), "u"));
    }
    for i in 0..5u64 {
        all.push(entry(&format!("b{i}"), T0 + i, Some("beta"), "u"));
    }
    for i in 0..3u64 {
        all.push(entry(&format!("n{i}"), T0 + i, None, "u"));
    }
    // Seven due at the same time: they cross a page boundary.
    for i in 0..7u64 {
        all.push(entry(&format!("t{i}"), T0 + 90, Some("alpha"), "u"));
    }
    insert_ok(store, all).await;
    let filter = ListFilter {
        topic: Some("alpha".into()),
        state: State::Scheduled,
    };
    let mut listed = Vec::new();
    let mut after: Option<Cursor> = None;
    let mut pages = 0;
    loop {
        let page = store.list(filter.clone(), after.clone(), 10).await.unwrap();
        pages += 1;
        assert!(page.items.len() <= 10);
        assert!(
            page.items
                .iter()
                .all(|s| s.state == State::Scheduled && s.topic.as_deref() == Some("alpha"))
        );
        listed.extend(page.items.iter().map(|s| (s.due_ms, s.id.clone())));
        match page.next {
            Some(c) => after = Some(c),
            None => break,
        }
    }
    assert!(pages >= 4);
    assert_eq!(listed.len(), 32);
    // Ordered by due; entries due at the same time in the backend's order
    // (embedded: acceptance; Redis: id), each exactly once.
    assert!(
        listed.windows(2).all(|w| w[0].0 <= w[1].0),
        "ordered by due"
    );
    let distinct: HashSet<&String> = listed.iter().map(|(_, id)| id).collect();
    assert_eq!(distinct.len(), 32, "no entry twice across pages");
    let none = store
        .list(
            ListFilter {
                topic: None,
                state: State::Scheduled,
            },
            None,
            100,
        )
        .await
        .unwrap();
    // No topic lists every entry of the state, whatever its topic, in
    // due order (the console's list when no topic is chosen).
    let mut every: Vec<(u64, String)> = Vec::new();
    let mut after: Option<Cursor> = None;
    loop {
        let page = store
            .list(
                ListFilter {
                    topic: None,
                    state: State::Scheduled,
                },
                after.clone(),
                10,
            )
            .await
            .unwrap();
        every.extend(page.items.iter().map(|s| (s.due_ms, s.id.clone())));
        match page.next {
            Some(c) => after = Some(c),
            None => break,
        }
    }
    assert_eq!(every.len(), 40, "{every:?}");
    assert!(every.windows(2).all(|w| w[0].0 <= w[1].0), "ordered by due");
    let distinct: HashSet<&String> = every.iter().map(|(_, id)| id).collect();
    assert_eq!(distinct.len(), 40, "no entry twice across pages");
    assert_eq!(none.items.len(), 40);
    assert_eq!(none.next, None);
    // A state change moves an entry between lists.
    store.cancel("b3", T0).await.unwrap();
    let beta = |state| ListFilter {
        topic: Some("beta".into()),
        state,
    };
    let scheduled = store.list(beta(State::Scheduled), None, 100).await.unwrap();
    assert_eq!(scheduled.items.len(), 4);
    let cancelled = store.list(beta(State::Cancelled), None, 100).await.unwrap();
    assert_eq!(
        cancelled
            .items
            .iter()
            .map(|s| s.id.as_str())
            .collect::<Vec<_>>(),
        vec!["b3"]
    );
    // Claimed entries are listed as firing, no longer as scheduled.
    let claimed = store.claim_due(T0 + 1, 10, 60_000).await.unwrap();
    let mut claimed_ids = ids(&claimed);
    claimed_ids.sort();
    assert_eq!(claimed_ids, ["b0", "b1", "n0", "n1"]);
    let listed = |page: Page| -> Vec<String> { page.items.into_iter().map(|s| s.id).collect() };
    assert_eq!(
        listed(store.list(beta(State::Firing), None, 100).await.unwrap()),
        ["b0", "b1"]
    );
    assert_eq!(
        listed(store.list(beta(State::Scheduled), None, 100).await.unwrap()),
        ["b2", "b4"]
    );
    let every = |state| ListFilter { topic: None, state };
    let mut firing = listed(store.list(every(State::Firing), None, 100).await.unwrap());
    firing.sort();
    assert_eq!(firing, ["b0", "b1", "n0", "n1"]);
    let scheduled = listed(
        store
            .list(every(State::Scheduled), None, 100)
            .await
            .unwrap(),
    );
    assert_eq!(scheduled.len(), 35, "{scheduled:?}");
    assert!(!scheduled.iter().any(|id| firing.contains(id) || id == "b3"));
    assert_eq!(
        listed(
            store
                .list(every(State::Cancelled), None, 100)
                .await
                .unwrap()
        ),
        ["b3"]
    );
    let empty = store
        .list(
            ListFilter {
                topic: Some("gamma".into()),
                state: State::Scheduled,
            },
            None,
            10,
        )
        .await
        .unwrap();
    assert!(empty.items.is_empty() && empty.next.is_none());
}

pub async fn purge_removes_old_final_statuses(store: &dyn Store) {
    insert_ok(
        store,
        vec![
            entry("d", T0, None, "u"),
            entry("c", T0 + 1000, None, "u"),
            entry("live", T0 + 1000, None, "u"),
        ],
    )
    .await;
    store.claim_due(T0, 10, LEASE).await.unwrap();
    store.delivered(vec!["d".into()], T0 + 10).await.unwrap();
    store.cancel("c", T0 + 20).await.unwrap();
    assert_eq!(store.purge(T0 + 10, 100).await.unwrap(), 0);
    assert_eq!(store.purge(T0 + 11, 100).await.unwrap(), 1);
    assert_eq!(store.status("d").await.unwrap(), None);
    assert_eq!(state(store, "c").await, Some(State::Cancelled));
    assert_eq!(store.purge(u64::MAX, 100).await.unwrap(), 1);
    assert_eq!(
        state(store, "live").await,
        Some(State::Scheduled),
        "live entries stay"
    );
    // A purged id can be used again.
    insert_ok(store, vec![entry("d", T0 + 5, None, "u")]).await;
}

pub async fn counts_by_due_bucket_and_state(store: &dyn Store) {
    let now = T0;
    insert_ok(
        store,
        vec![
            entry("soon", now + 500, None, "u"),
            entry("mid", now + 5000, None, "u"),
            entry("late", now + 100_000, None, "u"),
            entry("overdue", now - 10, None, "u"),
            online_entry("h", now - 20, "alice"),
        ],
    )
    .await;
    let c = store.counts(now, vec![1000, 60_000]).await.unwrap();
    assert_eq!(c.scheduled, vec![3, 1, 1]);
    assert_eq!((c.firing, c.held), (0, 0));
    let claimed = store.claim_due(now, 10, LEASE).await.unwrap();
    assert_eq!(ids(&claimed), vec!["h", "overdue"]);
    store
        .hold(vec!["h".into()], now + 100_000, now)
        .await
        .unwrap();
    let c = store.counts(now, vec![1000, 60_000]).await.unwrap();
    assert_eq!(c.scheduled, vec![1, 1, 1]);
    assert_eq!((c.firing, c.held), (1, 1));
}

/// Topics: put creates then replaces, get and a paged list read them
/// back in name order, delete removes them.
pub async fn topics_put_get_list_delete(store: &dyn Store) {
    let settings = |url: &str| Bytes::from(format!("{{\"callback_url\":\"{url}\"}}"));
    assert_eq!(store.topic("billing").await.unwrap(), None);
    assert_eq!(store.topics(None, 10).await.unwrap(), vec![]);
    let put = |name: &'static str, url: &'static str, now| {
        let s = settings(url);
        async move { store.put_topic(name, s, 100, now).await.unwrap() }
    };
    assert_eq!(
        put("billing", "https://a.example/", T0).await,
        PutTopic::Created
    );
    assert_eq!(
        put("alerts", "https://b.example/", T0 + 1).await,
        PutTopic::Created
    );
    assert_eq!(
        put("zeta:1", "https://c.example/", T0 + 2).await,
        PutTopic::Created
    );
    assert_eq!(
        put("billing", "https://d.example/", T0 + 3).await,
        PutTopic::Replaced
    );
    assert_eq!(
        store.topic("billing").await.unwrap(),
        Some(StoredTopic {
            name: "billing".into(),
            settings: settings("https://d.example/"),
            updated_ms: T0 + 3,
        })
    );
    let names = |page: Vec<StoredTopic>| page.into_iter().map(|t| t.name).collect::<Vec<_>>();
    assert_eq!(
        names(store.topics(None, 10).await.unwrap()),
        ["alerts", "billing", "zeta:1"]
    );
    assert_eq!(
        names(store.topics(None, 2).await.unwrap()),
        ["alerts", "billing"]
    );
    assert_eq!(
        names(store.topics(Some("billing".into()), 2).await.unwrap()),
        ["zeta:1"]
    );
    assert_eq!(
        names(store.topics(Some("b".into()), 10).await.unwrap()),
        ["billing", "zeta:1"],
        "after is exclusive and need not be a name"
    );
    assert!(store.topics(None, 0).await.unwrap().is_empty());
    assert!(store.delete_topic("billing").await.unwrap());
    assert!(
        !store.delete_topic("billing").await.unwrap(),
        "already gone"
    );
    assert_eq!(store.topic("billing").await.unwrap(), None);
    assert_eq!(
        names(store.topics(None, 10).await.unwrap()),
        ["alerts", "zeta:1"]
    );
}

/// A new topic is refused when `max_topics` are registered; replacing one
/// still works, and deleting makes room.
pub async fn topics_are_bounded(store: &dyn Store) {
    let s = || Bytes::from_static(b"{}");
    assert_eq!(
        store.put_topic("a", s(), 2, T0).await.unwrap(),
        PutTopic::Created
    );
    assert_eq!(
        store.put_topic("b", s(), 2, T0).await.unwrap(),
        PutTopic::Created
    );
    assert_eq!(
        store.put_topic("c", s(), 2, T0).await.unwrap(),
        PutTopic::Full
    );
    assert_eq!(store.topic("c").await.unwrap(), None);
    assert_eq!(
        store.put_topic("b", s(), 2, T0).await.unwrap(),
        PutTopic::Replaced
    );
    assert!(store.delete_topic("a").await.unwrap());
    assert_eq!(
        store.put_topic("c", s(), 2, T0).await.unwrap(),
        PutTopic::Created
    );
}

/// Every put and delete changes the version; reads and a delete of
/// nothing do not.
pub async fn topics_version_changes_with_every_change(store: &dyn Store) {
    let v0 = store.topics_version().await.unwrap();
    store
        .put_topic("a", Bytes::from_static(b"{}"), 10, T0)
        .await
        .unwrap();
    let v1 = store.topics_version().await.unwrap();
    assert_ne!(v1, v0);
    store
        .put_topic("a", Bytes::from_static(b"{\"jitter_ms\":1}"), 10, T0)
        .await
        .unwrap();
    let v2 = store.topics_version().await.unwrap();
    assert_ne!(v2, v1);
    store.topic("a").await.unwrap();
    assert!(!store.delete_topic("nope").await.unwrap());
    assert_eq!(store.topics_version().await.unwrap(), v2);
    assert!(store.delete_topic("a").await.unwrap());
    assert_ne!(store.topics_version().await.unwrap(), v2);
    assert_eq!(
        store
            .put_topic("x", Bytes::from_static(b"{}"), 0, T0)
            .await
            .unwrap(),
        PutTopic::Full
    );
}

/// The record of callback attempt `n` (a failed call) made at `at_ms`.
pub fn attempt(n: u32, at_ms: Millis) -> Attempt {
    Attempt {
        at_ms,
        duration_ms: 12,
        attempt: n,
        kind: Kind::Call,
        status: Some(503),
        verdict: Verdict::Failed,
        error: Some(format!("HTTP 503 on attempt {n}")),
        excerpt: "busy".into(),
    }
}

fn wait(id: &str, at_ms: Millis, a: Option<Attempt>) -> RetryWait {
    RetryWait {
        id: id.into(),
        at_ms,
        counted: a.is_some(),
        recheck: None,
        attempt: a,
    }
}

fn end(id: &str, ending: Ending, a: Option<Attempt>) -> Finish {
    Finish {
        id: id.into(),
        ending,
        recheck: None,
        attempt: a,
    }
}

/// A failed callback waits in retry_wait, is never claimed before its
/// time, and then comes back in the callback phase with one more attempt.
pub async fn retry_wait_then_claim_is_the_callback_phase(store: &dyn Store) {
    insert_ok(
        store,
        vec![
            entry("a", T0, Some("cb"), "u"),
            entry("later", T0 + 100_000, None, "u"),
        ],
    )
    .await;
    let first = store.claim_due(T0, 10, LEASE).await.unwrap();
    assert_eq!(ids(&first), ["a"]);
    assert_eq!((first[0].attempts, first[0].phase), (1, Phase::Deliver));
    // "later" is not firing: left alone, nothing logged for it.
    let settled = store
        .retry_wait(
            vec![
                wait("a", T0 + 5000, Some(attempt(1, T0 + 1))),
                wait("later", T0 + 10, Some(attempt(1, T0 + 1))),
                wait("nope", T0 + 10, None),
            ],
            T0 + 2,
        )
        .await
        .unwrap();
    assert_eq!(
        settled,
        Settled {
            moved: 1,
            trimmed: 0
        }
    );
    let a = store.status("a").await.unwrap().unwrap();
    assert_eq!(
        (a.state, a.updated_ms, a.attempts, a.next_attempt_ms),
        (State::RetryWait, T0 + 2, 1, Some(T0 + 5000))
    );
    assert_eq!(a.due_ms, T0, "the reported due time does not move");
    assert_eq!(store.attempts("a").await.unwrap(), [attempt(1, T0 + 1)]);
    assert_eq!(state(store, "later").await, Some(State::Scheduled));
    assert!(store.attempts("later").await.unwrap().is_empty());
    assert!(store.attempts("nope").await.unwrap().is_empty());
    assert!(
        store
            .claim_due(T0 + 4999, 10, LEASE)
            .await
            .unwrap()
            .is_empty(),
        "never before its retry time"
    );
    assert_eq!(
        store.upcoming(0, T0 + 10_000, 10).await.unwrap(),
        [(T0 + 5000, "a".into())]
    );
    let again = store.claim_due(T0 + 5000, 10, LEASE).await.unwrap();
    assert_eq!(ids(&again), ["a"]);
    assert_eq!((again[0].attempts, again[0].phase), (2, Phase::Callback));
    assert_eq!(
        again[0].notification,
        entry("a", T0, Some("cb"), "u").notification
    );
    let a = store.status("a").await.unwrap().unwrap();
    assert_eq!(
        (a.state, a.attempts, a.next_attempt_ms),
        (State::Firing, 2, None)
    );
}

/// The step of a firing callback shows in its status; it goes when the
/// entry leaves firing.
pub async fn mark_step_shows_in_the_status(store: &dyn Store) {
    insert_ok(
        store,
        vec![entry("a", T0, None, "u"), entry("b", T0 + 1000, None, "u")],
    )
    .await;
    store.claim_due(T0, 10, LEASE).await.unwrap();
    store
        .mark_step(
            vec!["a".into(), "b".into(), "nope".into()],
            Step::Rechecking,
            T0 + 7,
        )
        .await
        .unwrap();
    let a = store.status("a").await.unwrap().unwrap();
    assert_eq!(
        (a.state, a.step, a.updated_ms),
        (State::Firing, Some(Step::Rechecking), T0 + 7)
    );
    let b = store.status("b").await.unwrap().unwrap();
    assert_eq!(
        (b.state, b.step),
        (State::Scheduled, None),
        "not firing: left alone"
    );
    store
        .mark_step(vec!["a".into()], Step::Calling, T0 + 8)
        .await
        .unwrap();
    let a = store.status("a").await.unwrap().unwrap();
    assert_eq!((a.step, a.updated_ms), (Some(Step::Calling), T0 + 8));
    store
        .finish(vec![end("a", Ending::Delivered, None)], T0 + 9)
        .await
        .unwrap();
    let a = store.status("a").await.unwrap().unwrap();
    assert_eq!((a.state, a.step), (State::Delivered, None));
}

/// A firer that crashed in the middle of a callback retry: its lease runs
/// out and the entry is claimed again, still in the callback phase, its
/// step gone.
pub async fn a_crashed_callback_lease_comes_back_in_the_callback_phase(store: &dyn Store) {
    insert_ok(store, vec![entry("a", T0, None, "u")]).await;
    store.claim_due(T0, 10, LEASE).await.unwrap();
    store
        .retry_wait(vec![wait("a", T0 + 10, Some(attempt(1, T0)))], T0 + 1)
        .await
        .unwrap();
    let claimed = store.claim_due(T0 + 10, 10, 1000).await.unwrap();
    assert_eq!(claimed[0].phase, Phase::Callback);
    store
        .mark_step(vec!["a".into()], Step::Calling, T0 + 11)
        .await
        .unwrap();
    // The firer dies here.
    assert!(
        store
            .claim_due(T0 + 1009, 10, 1000)
            .await
            .unwrap()
            .is_empty()
    );
    let again = store.claim_due(T0 + 1010, 10, 1000).await.unwrap();
    assert_eq!(ids(&again), ["a"]);
    assert_eq!((again[0].phase, again[0].attempts), (Phase::Callback, 3));
    let a = store.status("a").await.unwrap().unwrap();
    assert_eq!((a.state, a.step, a.attempts), (State::Firing, None, 3));
    // A first fire that crashed comes back in the deliver phase.
    insert_ok(store, vec![entry("b", T0, None, "u")]).await;
    store.claim_due(T0 + 2000, 10, 1000).await.unwrap();
    let b = store.claim_due(T0 + 3000, 10, 1000).await.unwrap();
    let phases: Vec<(String, Phase)> = b.iter().map(|e| (e.id().to_owned(), e.phase)).collect();
    assert!(phases.contains(&("b".into(), Phase::Deliver)), "{phases:?}");
    assert!(
        phases.contains(&("a".into(), Phase::Callback)),
        "{phases:?}"
    );
}

/// Finishing moves firing entries to each final state, with their last
/// attempt logged; ids not firing are left alone.
pub async fn finish_to_each_final_state(store: &dyn Store) {
    insert_ok(
        store,
        vec![
            entry("ok", T0, None, "u"),
            entry("no", T0, None, "u"),
            entry("dead", T0, None, "u"),
            entry("later", T0 + 100_000, None, "u"),
        ],
    )
    .await;
    assert_eq!(store.claim_due(T0, 10, LEASE).await.unwrap().len(), 3);
    let settled = store
        .finish(
            vec![
                end("ok", Ending::Delivered, Some(attempt(1, T0 + 1))),
                end("no", Ending::Declined, Some(attempt(1, T0 + 2))),
                end("dead", Ending::Dead, Some(attempt(1, T0 + 3))),
                end("later", Ending::Dead, Some(attempt(1, T0 + 4))),
                end("dead", Ending::Delivered, Some(attempt(9, T0 + 4))),
            ],
            T0 + 5,
        )
        .await
        .unwrap();
    assert_eq!(settled.moved, 3, "the repeated id is no longer firing");
    for (id, st) in [
        ("ok", State::Delivered),
        ("no", State::Declined),
        ("dead", State::Dead),
    ] {
        let s = store.status(id).await.unwrap().unwrap();
        assert_eq!((s.state, s.updated_ms, s.attempts), (st, T0 + 5, 1), "{id}");
        assert_eq!(store.attempts(id).await.unwrap().len(), 1, "{id}");
    }
    assert_eq!(state(store, "later").await, Some(State::Scheduled));
    assert!(store.attempts("later").await.unwrap().is_empty());
    // Finished entries never fire again, nor can they be cancelled, but
    // for a dead letter (then nobody sends it again); their ids stay taken.
    let later = store.claim_due(T0 + 1_000_000, 10, LEASE).await.unwrap();
    assert_eq!(ids(&later), ["later"]);
    match store.cancel("dead", T0 + 6).await.unwrap() {
        Cancel::Cancelled(s) => assert_eq!((s.state, s.updated_ms), (State::Cancelled, T0 + 6)),
        other => panic!("dead: {other:?}"),
    }
    assert_eq!(
        store.attempts("dead").await.unwrap().len(),
        1,
        "its log is kept"
    );
    assert!(matches!(
        store.replay("dead", T0 + 7).await.unwrap(),
        Replay::NotDead(_)
    ));
    for (id, st) in [("no", State::Declined), ("dead", State::Cancelled)] {
        if st == State::Declined {
            match store.cancel(id, T0 + 6).await.unwrap() {
                Cancel::TooLate(s) => assert_eq!(s.state, st),
                other => panic!("{id}: {other:?}"),
            }
        }
        let again = store
            .insert(vec![entry(id, T0, None, "u")], T0 + 7)
            .await
            .unwrap();
        assert!(
            matches!(&again[..], [Insert::Duplicate(s)] if s.state == st),
            "{again:?}"
        );
    }
}

/// A dead letter keeps its body; replaying it makes it due now, in the
/// callback phase, its attempts counted from 1 again and its log kept.
pub async fn a_dead_letter_keeps_its_body_and_replays_due_now(store: &dyn Store) {
    let mut e = entry("d", T0, Some("cb"), "u");
    e.notification.payload = Bytes::from((0..=255u8).collect::<Vec<_>>());
    e.notification.payload_is_utf8 = false;
    e.notification.content_type = "application/octet-stream".into();
    insert_ok(
        store,
        vec![e.clone(), entry("live", T0 + 100_000, None, "u")],
    )
    .await;
    store.claim_due(T0, 10, LEASE).await.unwrap();
    store
        .retry_wait(vec![wait("d", T0 + 10, Some(attempt(1, T0)))], T0 + 1)
        .await
        .unwrap();
    store.claim_due(T0 + 10, 10, LEASE).await.unwrap();
    store
        .finish(
            vec![end("d", Ending::Dead, Some(attempt(2, T0 + 10)))],
            T0 + 11,
        )
        .await
        .unwrap();
    assert_eq!(state(store, "d").await, Some(State::Dead));
    assert_eq!(
        store.replay("nope", T0 + 50).await.unwrap(),
        Replay::NotFound
    );
    match store.replay("live", T0 + 50).await.unwrap() {
        Replay::NotDead(s) => assert_eq!(s.state, State::Scheduled),
        other => panic!("{other:?}"),
    }
    match store.replay("d", T0 + 100).await.unwrap() {
        Replay::Replayed(s) => assert_eq!(
            (
                s.state,
                s.attempts,
                s.updated_ms,
                s.next_attempt_ms,
                s.due_ms
            ),
            (State::RetryWait, 0, T0 + 100, Some(T0 + 100), T0)
        ),
        other => panic!("{other:?}"),
    }
    assert!(
        store
            .claim_due(T0 + 99, 10, LEASE)
            .await
            .unwrap()
            .is_empty()
    );
    let back = store.claim_due(T0 + 100, 10, LEASE).await.unwrap();
    assert_eq!(
        back,
        vec![Entry {
            attempts: 1,
            phase: Phase::Callback,
            fire_ms: T0 + 100,
            calls: 0,
            target: Default::default(),
            ..e
        }],
        "the body is intact"
    );
    assert_eq!(
        store.attempts("d").await.unwrap(),
        [attempt(1, T0), attempt(2, T0 + 10)],
        "the log is kept"
    );
    match store.replay("d", T0 + 101).await.unwrap() {
        Replay::NotDead(s) => assert_eq!(s.state, State::Firing),
        other => panic!("{other:?}"),
    }
}

/// Attempts are logged in order; past the bound the first ones and the
/// latest are kept.
pub async fn the_attempt_log_is_in_order_and_bounded(store: &dyn Store) {
    insert_ok(store, vec![entry("a", T0, None, "u")]).await;
    let total = MAX_ATTEMPTS_KEPT as u32 + 5;
    for n in 1..=total {
        let now = T0 + u64::from(n) * 10;
        let claimed = store.claim_due(now, 10, LEASE).await.unwrap();
        assert_eq!(ids(&claimed), ["a"], "attempt {n}");
        if n == 3 {
            let log = store.attempts("a").await.unwrap();
            assert_eq!(log, [attempt(1, T0 + 10), attempt(2, T0 + 20)]);
        }
        let settled = store
            .retry_wait(vec![wait("a", now + 10, Some(attempt(n, now)))], now)
            .await
            .unwrap();
        let dropped = u64::from(n > MAX_ATTEMPTS_KEPT as u32);
        assert_eq!(
            settled,
            Settled {
                moved: 1,
                trimmed: dropped
            },
            "attempt {n}"
        );
    }
    let log: Vec<u32> = store
        .attempts("a")
        .await
        .unwrap()
        .iter()
        .map(|a| a.attempt)
        .collect();
    assert_eq!(log.len(), MAX_ATTEMPTS_KEPT);
    let first = FIRST_ATTEMPTS_KEPT as u32;
    let expected: Vec<u32> = (1..=first)
        .chain(total - (MAX_ATTEMPTS_KEPT as u32 - first) + 1..=total)
        .collect();
    assert_eq!(log, expected, "the first ones and the latest");
    assert_eq!(store.status("a").await.unwrap().unwrap().attempts, total);
}

/// Cancelling an entry waiting in retry_wait: its callback is not made.
pub async fn cancel_of_a_retry_wait_entry(store: &dyn Store) {
    insert_ok(store, vec![entry("a", T0, None, "u")]).await;
    store.claim_due(T0, 10, LEASE).await.unwrap();
    store
        .retry_wait(vec![wait("a", T0 + 1000, Some(attempt(1, T0)))], T0 + 1)
        .await
        .unwrap();
    match store.cancel("a", T0 + 2).await.unwrap() {
        Cancel::Cancelled(s) => assert_eq!((s.state, s.updated_ms), (State::Cancelled, T0 + 2)),
        other => panic!("{other:?}"),
    }
    assert!(
        store
            .claim_due(T0 + 100_000, 10, LEASE)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(store.upcoming(0, u64::MAX, 10).await.unwrap().is_empty());
    assert_eq!(store.attempts("a").await.unwrap().len(), 1, "the log stays");
    let c = store.counts(T0, vec![1000]).await.unwrap();
    assert_eq!((c.scheduled, c.retry_wait), (vec![0, 0], 0));
    // Claimed again from retry_wait, it is firing: too late.
    insert_ok(store, vec![entry("b", T0, None, "u")]).await;
    store.claim_due(T0, 10, LEASE).await.unwrap();
    store
        .retry_wait(vec![wait("b", T0 + 10, None)], T0 + 1)
        .await
        .unwrap();
    store.claim_due(T0 + 10, 10, LEASE).await.unwrap();
    assert!(matches!(
        store.cancel("b", T0 + 11).await.unwrap(),
        Cancel::TooLate(s) if s.state == State::Firing
    ));
}

/// Released while in the callback phase, an entry goes back to retry_wait
/// (keeping its phase); it is never held (its browser part is done).
pub async fn release_and_hold_keep_the_callback_phase(store: &dyn Store) {
    insert_ok(store, vec![online_entry("a", T0, "alice")]).await;
    store.claim_due(T0, 10, LEASE).await.unwrap();
    store
        .retry_wait(vec![wait("a", T0 + 10, None)], T0 + 1)
        .await
        .unwrap();
    store.claim_due(T0 + 10, 10, LEASE).await.unwrap();
    store
        .hold(vec!["a".into()], T0 + 100_000, T0 + 11)
        .await
        .unwrap();
    assert_eq!(state(store, "a").await, Some(State::Firing), "not held");
    store
        .release(vec!["a".into()], T0 + 500, T0 + 12)
        .await
        .unwrap();
    let a = store.status("a").await.unwrap().unwrap();
    assert_eq!(
        (a.state, a.next_attempt_ms),
        (State::RetryWait, Some(T0 + 500))
    );
    assert!(
        store
            .claim_due(T0 + 499, 10, LEASE)
            .await
            .unwrap()
            .is_empty()
    );
    let back = store.claim_due(T0 + 500, 10, LEASE).await.unwrap();
    assert_eq!((back[0].phase, back[0].attempts), (Phase::Callback, 3));
}

/// Lists, counts and purge know the callback states: dead letters by
/// topic, retry_wait counted apart from scheduled, old declined and dead
/// entries purged with their logs.
pub async fn list_purge_and_counts_with_the_callback_states(store: &dyn Store) {
    let now = T0;
    insert_ok(
        store,
        vec![
            entry("r", now, Some("cb"), "u"),
            entry("d", now, Some("cb"), "u"),
            entry("d2", now, Some("other"), "u"),
            entry("x", now, Some("cb"), "u"),
            entry("s", now + 500, Some("cb"), "u"),
        ],
    )
    .await;
    assert_eq!(store.claim_due(now, 10, LEASE).await.unwrap().len(), 4);
    store
        .retry_wait(vec![wait("r", now + 30_000, Some(attempt(1, now)))], now)
        .await
        .unwrap();
    store
        .finish(
            vec![
                end("d", Ending::Dead, Some(attempt(1, now))),
                end("d2", Ending::Dead, Some(attempt(1, now))),
                end("x", Ending::Declined, None),
            ],
            now + 1,
        )
        .await
        .unwrap();
    let list = |state, topic: &str| ListFilter {
        topic: Some(topic.into()),
        state,
    };
    let all = |f: ListFilter| async move {
        let mut out: Vec<String> = Vec::new();
        let mut after = None;
        loop {
            let page = store.list(f.clone(), after, 100).await.unwrap();
            out.extend(page.items.into_iter().map(|s| s.id));
            match page.next {
                Some(c) => after = Some(c),
                None => break out,
            }
        }
    };
    assert_eq!(
        all(list(State::Dead, "cb")).await,
        ["d"],
        "dead letters by topic"
    );
    assert_eq!(all(list(State::Dead, "other")).await, ["d2"]);
    assert_eq!(all(list(State::Declined, "cb")).await, ["x"]);
    assert_eq!(all(list(State::RetryWait, "cb")).await, ["r"]);
    assert_eq!(all(list(State::Scheduled, "cb")).await, ["s"]);
    assert!(all(list(State::Firing, "cb")).await.is_empty());
    let c = store.counts(now, vec![1000, 60_000]).await.unwrap();
    assert_eq!(c.scheduled, vec![1, 0, 0], "retry_wait is not scheduled");
    assert_eq!((c.firing, c.held, c.retry_wait), (0, 0, 1));
    let claimed = store.claim_due(now + 30_000, 10, LEASE).await.unwrap();
    let mut claimed = ids(&claimed);
    claimed.sort();
    assert_eq!(claimed, ["r", "s"]);
    assert_eq!(all(list(State::Firing, "cb")).await, ["r", "s"]);
    assert!(all(list(State::RetryWait, "cb")).await.is_empty());
    let c = store.counts(now, vec![1000, 60_000]).await.unwrap();
    assert_eq!((c.scheduled, c.firing, c.retry_wait), (vec![0, 0, 0], 2, 0));
    // Purge: final entries (dead letters too) that entered their state
    // before the bound, with their logs; live ones stay.
    assert_eq!(store.purge(now + 1, 100).await.unwrap(), 0);
    assert_eq!(store.purge(now + 2, 100).await.unwrap(), 3);
    for id in ["d", "d2", "x"] {
        assert_eq!(store.status(id).await.unwrap(), None, "{id}");
        assert!(store.attempts(id).await.unwrap().is_empty(), "{id}");
    }
    assert!(all(list(State::Dead, "cb")).await.is_empty());
    assert_eq!(state(store, "r").await, Some(State::Firing));
    assert_eq!(store.attempts("r").await.unwrap().len(), 1);
    // A purged id can be used again, with an empty log.
    insert_ok(store, vec![entry("d", now + 5, None, "u")]).await;
    assert!(store.attempts("d").await.unwrap().is_empty());
}

/// Own callback settings for a notification: both URLs, no browsers.
pub fn target(id: &str) -> Target {
    Target {
        callback_url: Some(format!("https://cb.example/hook/{id}")),
        recheck_url: Some(format!("https://cb.example/check?id={id}")),
        browsers: false,
    }
}

/// Claim the one entry due at `now`, which must be `id`.
async fn claim_one(store: &dyn Store, id: &str, now: Millis) -> Entry {
    let mut got = store.claim_due(now, 10, LEASE).await.unwrap();
    assert_eq!(ids(&got), [id], "at {now}");
    got.remove(0)
}

/// `calls` counts counted attempts only: a wait without a request (a
/// paused destination), a release, a hold attempt and a lease that ran
/// out leave it; finishing keeps it; a replayed dead letter starts again
/// from 0. Every claim returns it.
pub async fn calls_count_the_counted_attempts_and_replay_resets_them(store: &dyn Store) {
    let mut e = entry("a", T0, Some("cb"), "u");
    e.calls = 9; // not the caller's to set: stored as 0
    insert_ok(store, vec![e]).await;
    let first = claim_one(store, "a", T0).await;
    assert_eq!(
        (first.calls, first.fire_ms),
        (0, T0),
        "fired at its due time"
    );
    let counted = |at_ms, n| RetryWait {
        id: "a".into(),
        at_ms,
        recheck: None,
        attempt: Some(attempt(n, at_ms - 1)),
        counted: true,
    };
    let paused = |at_ms| RetryWait {
        id: "a".into(),
        at_ms,
        recheck: None,
        attempt: None,
        counted: false,
    };
    store
        .retry_wait(vec![counted(T0 + 10, 1)], T0 + 1)
        .await
        .unwrap();
    // Claimed later than its retry time (as a firer claiming ahead would
    // not): the claim says when it was to fire, so it goes no earlier.
    let a = claim_one(store, "a", T0 + 15).await;
    assert_eq!((a.calls, a.attempts, a.phase), (1, 2, Phase::Callback));
    assert_eq!(a.fire_ms, T0 + 10, "its retry time, not its due time");
    store
        .retry_wait(vec![paused(T0 + 20)], T0 + 11)
        .await
        .unwrap();
    assert_eq!(claim_one(store, "a", T0 + 20).await.calls, 1, "not counted");
    // Logged but not counted: the caller decides.
    store
        .retry_wait(
            vec![RetryWait {
                recheck: None,
                attempt: Some(attempt(2, T0 + 21)),
                ..paused(T0 + 30)
            }],
            T0 + 21,
        )
        .await
        .unwrap();
    assert_eq!(claim_one(store, "a", T0 + 30).await.calls, 1);
    store
        .retry_wait(vec![counted(T0 + 40, 2)], T0 + 31)
        .await
        .unwrap();
    assert_eq!(claim_one(store, "a", T0 + 40).await.calls, 2);
    // A release, a refused hold and a lease that ran out keep it.
    store
        .release(vec!["a".into()], T0 + 50, T0 + 41)
        .await
        .unwrap();
    assert_eq!(claim_one(store, "a", T0 + 50).await.calls, 2);
    store
        .hold(vec!["a".into()], T0 + 100_000, T0 + 51)
        .await
        .unwrap();
    let again = claim_one(store, "a", T0 + 50 + LEASE).await;
    assert_eq!((again.calls, again.attempts), (2, 7));
    // Two counted attempts in one call to the same id: the second finds it
    // no longer firing.
    let settled = store
        .retry_wait(
            vec![counted(T0 + 60_000, 3), counted(T0 + 60_000, 4)],
            T0 + 50 + LEASE,
        )
        .await
        .unwrap();
    assert_eq!(settled.moved, 1);
    assert_eq!(claim_one(store, "a", T0 + 60_000).await.calls, 3);
    store
        .finish(
            vec![end("a", Ending::Dead, Some(attempt(4, T0 + 60_001)))],
            T0 + 60_002,
        )
        .await
        .unwrap();
    assert!(matches!(
        store.replay("a", T0 + 70_000).await.unwrap(),
        Replay::Replayed(_)
    ));
    let back = claim_one(store, "a", T0 + 70_000).await;
    assert_eq!(
        (back.calls, back.attempts, back.phase),
        (0, 1, Phase::Callback)
    );
    store
        .retry_wait(vec![counted(T0 + 80_000, 1)], T0 + 70_001)
        .await
        .unwrap();
    assert_eq!(claim_one(store, "a", T0 + 80_000).await.calls, 1);
    store
        .finish(vec![end("a", Ending::Delivered, None)], T0 + 80_001)
        .await
        .unwrap();
    // A retry_wait for an entry that is not firing counts nothing.
    insert_ok(store, vec![entry("later", T0 + 1_000_000, None, "u")]).await;
    let nothing = store
        .retry_wait(
            vec![RetryWait {
                id: "later".into(),
                ..counted(T0 + 90_000, 1)
            }],
            T0 + 80_001,
        )
        .await
        .unwrap();
    assert_eq!(nothing.moved, 0);
    assert_eq!(claim_one(store, "later", T0 + 1_000_000).await.calls, 0);
}

/// A notification's own target is stored with it: every claim returns it
/// (due, held, in the callback phase, a replayed dead letter), and a
/// duplicate does not replace it.
pub async fn the_target_is_kept_and_every_claim_returns_it(store: &dyn Store) {
    let own = Entry {
        target: target("own"),
        ..entry("own", T0, Some("cb"), "u")
    };
    let half = Entry {
        target: Target {
            callback_url: Some("https://cb.example/only-call".into()),
            ..Target::default()
        },
        ..entry("half", T0 + 1, None, "u")
    };
    let online = Entry {
        target: target("online"),
        ..online_entry("online", T0 + 2, "alice")
    };
    let plain = entry("plain", T0 + 3, None, "u");
    insert_ok(
        store,
        vec![own.clone(), half.clone(), online.clone(), plain.clone()],
    )
    .await;
    let again = store
        .insert(
            vec![Entry {
                target: Target::default(),
                ..own.clone()
            }],
            T0 + 1,
        )
        .await
        .unwrap();
    assert!(matches!(&again[..], [Insert::Duplicate(_)]), "{again:?}");
    let claimed = store.claim_due(T0 + 3, 10, LEASE).await.unwrap();
    let targets: Vec<(&str, &Target)> = claimed.iter().map(|e| (e.id(), &e.target)).collect();
    assert_eq!(
        targets,
        [
            ("own", &own.target),
            ("half", &half.target),
            ("online", &online.target),
            ("plain", &Target::default()),
        ]
    );
    for (got, want) in claimed.iter().zip([&own, &half, &online, &plain]) {
        assert_eq!(got.notification, want.notification, "{}", want.id());
    }
    // Held, then claimed for its user.
    store
        .hold(vec!["online".into()], T0 + 100_000, T0 + 4)
        .await
        .unwrap();
    let held = store.claim_held("alice", T0 + 5, 10, LEASE).await.unwrap();
    assert_eq!(ids(&held), ["online"]);
    assert_eq!((&held[0].target, held[0].calls), (&online.target, 0));
    // In the callback phase, and replayed from dead.
    store
        .retry_wait(vec![wait("own", T0 + 10, Some(attempt(1, T0 + 5)))], T0 + 6)
        .await
        .unwrap();
    let own_back = claim_one(store, "own", T0 + 10).await;
    assert_eq!(
        (own_back.phase, &own_back.target, own_back.calls),
        (Phase::Callback, &own.target, 1)
    );
    store
        .finish(vec![end("own", Ending::Dead, None)], T0 + 11)
        .await
        .unwrap();
    store.replay("own", T0 + 12).await.unwrap();
    let replayed = claim_one(store, "own", T0 + 12).await;
    assert_eq!(
        replayed,
        Entry {
            attempts: 1,
            phase: Phase::Callback,
            fire_ms: T0 + 12,
            ..own
        }
    );
}

/// One `#[tokio::test]` per case, each on a fresh store from `$open`, an
/// `async fn() -> (Arc<dyn Store>, Guard)`.
#[macro_export]
macro_rules! store_suite_tests {
    ($open:path) => {
        store_suite_tests!(@by_ref $open;
            insert_then_status,
            insert_is_idempotent,
            a_duplicate_of_a_final_entry_is_still_a_duplicate,
            nothing_is_claimed_early,
            claims_come_in_order_and_in_batches,
            a_claimed_entry_carries_its_notification_intact,
            an_expired_lease_is_claimed_again,
            upcoming_lists_fire_times_within_the_horizon,
            upcoming_reads_a_slice_of_fire_times,
            delivered_is_final,
            held_entries_wait_for_their_user,
            claim_held_respects_its_limit,
            held_entries_expire,
            released_entries_fire_at_the_retry_time,
            an_entry_due_before_the_last_claimed_one_is_still_claimed,
            cancel_in_every_state,
            list_pages_by_topic_and_state,
            purge_removes_old_final_statuses,
            counts_by_due_bucket_and_state,
            topics_put_get_list_delete,
            topics_are_bounded,
            topics_version_changes_with_every_change,
            retry_wait_then_claim_is_the_callback_phase,
            mark_step_shows_in_the_status,
            a_crashed_callback_lease_comes_back_in_the_callback_phase,
            finish_to_each_final_state,
            a_dead_letter_keeps_its_body_and_replays_due_now,
            the_attempt_log_is_in_order_and_bounded,
            cancel_of_a_retry_wait_entry,
            release_and_hold_keep_the_callback_phase,
            list_purge_and_counts_with_the_callback_states,
            calls_count_the_counted_attempts_and_replay_resets_them,
            the_target_is_kept_and_every_claim_returns_it
        );
        store_suite_tests!(@by_arc $open;
            cancel_racing_claim_has_one_winner,
            concurrent_claimers_never_share_an_entry
        );
    };
    (@by_ref $open:path; $($case:ident),+) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let (store, _guard) = $open().await;
                store_suite::$case(&*store).await;
            }
        )+
    };
    (@by_arc $open:path; $($case:ident),+) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let (store, _guard) = $open().await;
                store_suite::$case(store).await;
            }
        )+
    };
}

/// The data the list upgrade tests make old: 25 entries of topic `chat`
/// (`t00` to `t24`), `plain` without a topic, `t01` cancelled.
pub async fn fill_for_list_upgrade(store: &dyn Store) {
    let mut entries: Vec<Entry> = (0..25)
        .map(|i| entry(&format!("t{i:02}"), T0 + i, Some("chat"), "u"))
        .collect();
    entries.push(entry("plain", T0 + 3, None, "u"));
    store.insert(entries, T0).await.unwrap();
    store.cancel("t01", T0).await.unwrap();
}

/// Once upgraded, the list without a topic has every entry of
/// [`fill_for_list_upgrade`], and keeps them as they change.
pub async fn lists_every_entry_after_upgrade(store: &dyn Store) {
    let every = |state| ListFilter { topic: None, state };
    let ids = |page: Page| -> Vec<String> { page.items.into_iter().map(|s| s.id).collect() };
    let scheduled = ids(store
        .list(every(State::Scheduled), None, 100)
        .await
        .unwrap());
    assert_eq!(scheduled.len(), 25, "{scheduled:?}");
    assert!(scheduled.contains(&"plain".to_owned()) && scheduled.contains(&"t24".to_owned()));
    assert_eq!(
        ids(store
            .list(every(State::Cancelled), None, 100)
            .await
            .unwrap()),
        ["t01"]
    );
    store.cancel("t02", T0).await.unwrap();
    let mut cancelled = ids(store
        .list(every(State::Cancelled), None, 100)
        .await
        .unwrap());
    cancelled.sort();
    assert_eq!(cancelled, ["t01", "t02"]);
    let scheduled = store
        .list(every(State::Scheduled), None, 100)
        .await
        .unwrap();
    assert_eq!(scheduled.items.len(), 24);
}
