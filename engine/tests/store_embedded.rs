//! The embedded store: the conformance suite, reopening, and a real
//! `kill -9` of a process in the middle of acknowledged inserts.

#[macro_use]
mod store_suite;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;

use herald_engine::schedule::entry::{Entry, Phase, State};
use herald_engine::schedule::store::embedded::{EmbeddedConfig, EmbeddedStore};
use herald_engine::schedule::store::{Ending, Finish, Insert, Replay, RetryWait, Store};

async fn open() -> (Arc<dyn Store>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    (Arc::new(store), dir)
}

store_suite_tests!(open);

/// The whole suite again with the recent ids folded into the on-disk index
/// after every two new ones, so every case crosses folds.
mod folding_often {
    use super::*;

    async fn open() -> (Arc<dyn Store>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let config = EmbeddedConfig {
            fold_ids: 2,
            ..EmbeddedConfig::default()
        };
        let store = EmbeddedStore::open_with(dir.path(), config).unwrap();
        (Arc::new(store), dir)
    }

    store_suite_tests!(open);
}

/// The whole suite again with room in memory for one user with something
/// held, so every case with two such users runs past the bound (every
/// claim reads the tables) and back (nothing held: tracked again).
mod held_users_overflowing {
    use super::*;

    async fn open() -> (Arc<dyn Store>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let config = EmbeddedConfig {
            held_users: 1,
            ..EmbeddedConfig::default()
        };
        let store = EmbeddedStore::open_with(dir.path(), config).unwrap();
        (Arc::new(store), dir)
    }

    store_suite_tests!(open);
}

#[tokio::test]
async fn users_with_something_held_are_known_after_a_reopen() {
    use store_suite::{LEASE, T0, ids, online_entry};
    let dir = tempfile::tempdir().unwrap();
    // "al" is a prefix of "alice": learning the users skips from one to
    // the next without missing either.
    let users = ["al", "alice", "bob"];
    {
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let entries = users
            .iter()
            .enumerate()
            .flat_map(|(i, u)| {
                (0..3).map(move |k| online_entry(&format!("{u}-{k}"), T0 + i as u64, u))
            })
            .collect();
        store.insert(entries, T0).await.unwrap();
        let claimed = store.claim_due(T0 + 10, 100, LEASE).await.unwrap();
        assert_eq!(claimed.len(), 9);
        store
            .hold(ids(&claimed), T0 + 60_000, T0 + 10)
            .await
            .unwrap();
    }
    let store = EmbeddedStore::open(dir.path()).unwrap();
    assert!(
        store
            .claim_held("carol", T0 + 11, 10, LEASE)
            .await
            .unwrap()
            .is_empty()
    );
    for u in users {
        let got = store.claim_held(u, T0 + 11, 10, LEASE).await.unwrap();
        assert_eq!(
            ids(&got),
            vec![format!("{u}-0"), format!("{u}-1"), format!("{u}-2")]
        );
        // Delivered, nothing is held for them any more; held again, it is
        // found again.
        store.delivered(ids(&got), T0 + 12).await.unwrap();
        assert!(
            store
                .claim_held(u, T0 + 13, 10, LEASE)
                .await
                .unwrap()
                .is_empty()
        );
        store
            .insert(
                vec![online_entry(&format!("{u}-again"), T0 + 14, u)],
                T0 + 13,
            )
            .await
            .unwrap();
        let again = store.claim_due(T0 + 14, 10, LEASE).await.unwrap();
        store.hold(ids(&again), T0 + 60_000, T0 + 14).await.unwrap();
        let got = store.claim_held(u, T0 + 15, 10, LEASE).await.unwrap();
        assert_eq!(ids(&got), vec![format!("{u}-again")]);
    }
}

/// The moment this file began keeping tenants' ids apart is written by the
/// first open and kept by every later one.
#[tokio::test]
async fn the_moment_tenants_began_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let first = EmbeddedStore::open(dir.path()).unwrap().tenants_since();
    assert!(first > 0);
    let again = EmbeddedStore::open(dir.path()).unwrap().tenants_since();
    assert_eq!(again, first);
}

#[tokio::test]
async fn ids_folded_or_not_are_known_after_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let config = EmbeddedConfig {
        fold_ids: 40,
        ..EmbeddedConfig::default()
    };
    let entry = |i: u64| store_suite::entry(&format!("f{i}"), store_suite::T0 + i, None, "u");
    {
        let store = EmbeddedStore::open_with(dir.path(), config.clone()).unwrap();
        // 100 ids in batches of 10: two folds of 40, then 20 in memory only.
        for batch in 0..10 {
            let entries = (batch * 10..batch * 10 + 10).map(entry).collect();
            store.insert(entries, store_suite::T0).await.unwrap();
        }
        store.cancel("f95", store_suite::T0).await.unwrap();
    }
    let store = EmbeddedStore::open_with(dir.path(), config).unwrap();
    for i in 0..100 {
        let s = store.status(&format!("f{i}")).await.unwrap();
        assert!(s.is_some(), "f{i} is gone after the reopen");
    }
    let again = store
        .insert((0..100).map(entry).collect(), store_suite::T0)
        .await
        .unwrap();
    assert!(
        again.iter().all(|i| matches!(i, Insert::Duplicate(_))),
        "every id is still known as a duplicate"
    );
    let fresh = store
        .insert(vec![entry(100)], store_suite::T0)
        .await
        .unwrap();
    assert_eq!(fresh, vec![Insert::Accepted]);
    let claimed = store
        .claim_due(store_suite::T0 + 200, 1000, 1000)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 100, "all but the cancelled one fire, once");
}

#[tokio::test]
async fn a_store_of_the_first_format_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = redb::Database::create(dir.path().join("store.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        let def: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("entries");
        txn.open_table(def).unwrap();
        txn.commit().unwrap();
    }
    let err = EmbeddedStore::open(dir.path()).unwrap_err().to_string();
    assert!(
        err.contains("store format 1") && err.contains("formats 2 to 5"),
        "{err}"
    );
}

/// A file of format 2 (before the callback states) is read as it is, and
/// stamped 5 so that an older Herald refuses it instead of meeting states
/// it does not know.
#[tokio::test]
async fn a_store_of_format_2_is_upgraded_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let meta: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("meta");
    {
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let e = store_suite::entry("kept", store_suite::T0 + 5, None, "u");
        store.insert(vec![e], store_suite::T0).await.unwrap();
    }
    {
        // What a format 2 Herald wrote: the same tables, less `retry` and
        // `attempts`, headers without calls, stamped 2.
        to_format_3(&dir.path().join("store.redb"));
        let db = redb::Database::create(dir.path().join("store.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(meta).unwrap().insert("format", 2).unwrap();
        for gone in ["retry", "attempts"] {
            let def: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new(gone);
            assert!(txn.delete_table(def).unwrap(), "{gone} existed");
        }
        txn.commit().unwrap();
    }
    {
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let claimed = store
            .claim_due(store_suite::T0 + 5, 10, 1000)
            .await
            .unwrap();
        assert_eq!(claimed.len(), 1, "the entry of format 2 fires");
        assert_eq!(store.attempts("kept").await.unwrap(), vec![]);
    }
    let db = redb::Database::create(dir.path().join("store.redb")).unwrap();
    let txn = db.begin_read().unwrap();
    let format = txn.open_table(meta).unwrap().get("format").unwrap();
    assert_eq!(format.map(|v| v.value()), Some(5));
}

/// Rewrite every stored value of the closed store at `path` the way
/// formats 2 and 3 wrote it: a 29-byte header (state without the 0x80
/// bit, no calls) and a record of version 1 (no target); stamped 3.
fn to_format_3(path: &std::path::Path) {
    use redb::{ReadableTable, TableDefinition};
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut records = txn
            .open_table(TableDefinition::<u64, &[u8]>::new("records"))
            .unwrap();
        let all: Vec<(u64, Vec<u8>)> = records
            .iter()
            .unwrap()
            .map(|kv| {
                let (k, v) = kv.unwrap();
                (k.value(), v.value().to_vec())
            })
            .collect();
        for (seq, raw) in all {
            assert_eq!(raw[0] & 0x80, 0x80, "a value of format 4");
            let mut old = vec![raw[0] & 0x7f];
            old.extend(&raw[1..5]); // attempts
            old.extend(&raw[9..]); // updated, deadline, fire, id, the rest
            let id_len = usize::from(u16::from_be_bytes([old[29], old[30]]));
            let body = 31 + id_len;
            if old.len() > body && old[body] == 2 {
                // A record of version 2 with the default target is one of
                // version 1 and a zero flags byte.
                assert_eq!(old.last(), Some(&0), "a default target");
                old[body] = 1;
                old.pop();
            }
            records.insert(seq, old.as_slice()).unwrap();
        }
        let mut meta = txn
            .open_table(TableDefinition::<&str, u64>::new("meta"))
            .unwrap();
        meta.insert("format", 3).unwrap();
    }
    txn.commit().unwrap();
}

/// A file of format 3 (headers without calls, records of version 1) is
/// read as it is and stamped 5: its entries fire with calls 0 and the
/// default target, count calls from there, and are written in format 4
/// when they change, which survives a reopen.
#[tokio::test]
async fn a_store_of_format_3_is_read_as_it_is_and_counts_calls_from_there() {
    let t0 = store_suite::T0;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    {
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let entries = ["w", "d", "x"].map(|id| store_suite::entry(id, t0, Some("cb"), "u"));
        store.insert(entries.to_vec(), t0).await.unwrap();
        // "d" is a dead letter and "x" delivered when the file is made old.
        store.claim_due(t0, 10, 60_000).await.unwrap();
        store
            .finish(
                vec![
                    Finish {
                        id: "d".into(),
                        ending: Ending::Dead,
                        recheck: None,
                        attempt: Some(store_suite::attempt(1, t0)),
                    },
                    Finish {
                        id: "x".into(),
                        ending: Ending::Delivered,
                        recheck: None,
                        attempt: None,
                    },
                ],
                t0 + 1,
            )
            .await
            .unwrap();
    }
    to_format_3(&path);
    {
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let x = store.status("x").await.unwrap().unwrap();
        assert_eq!((x.state, x.due_ms), (State::Delivered, t0));
        let w = store.claim_due(t0 + 2, 10, 60_000).await.unwrap();
        assert_eq!(w.len(), 1, "the claim ended with the process");
        assert_eq!(
            w[0],
            Entry {
                attempts: 1,
                fire_ms: t0,
                ..store_suite::entry("w", t0, Some("cb"), "u")
            },
            "calls 0 and the default target"
        );
        store
            .retry_wait(
                vec![RetryWait {
                    id: "w".into(),
                    at_ms: t0 + 10,
                    recheck: None,
                    attempt: Some(store_suite::attempt(1, t0 + 2)),
                    counted: true,
                }],
                t0 + 3,
            )
            .await
            .unwrap();
        assert!(matches!(
            store.replay("d", t0 + 4).await.unwrap(),
            Replay::Replayed(_)
        ));
    }
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let back = store.claim_due(t0 + 10, 10, 60_000).await.unwrap();
    let calls: Vec<(&str, u32, Phase)> = back.iter().map(|e| (e.id(), e.calls, e.phase)).collect();
    assert_eq!(
        calls,
        [("d", 0, Phase::Callback), ("w", 1, Phase::Callback)],
        "d replayed (due at {}), w counted once",
        t0 + 4
    );
    assert_eq!(store.attempts("d").await.unwrap().len(), 1);
    drop(store);
    let db = redb::Database::open(&path).unwrap();
    let txn = db.begin_read().unwrap();
    let meta: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("meta");
    let format = txn.open_table(meta).unwrap().get("format").unwrap();
    assert_eq!(format.map(|v| v.value()), Some(5));
}

/// Calls and the target are on disk: a reopened store returns them, and
/// counts on from the calls it kept.
#[tokio::test]
async fn calls_and_the_target_survive_a_reopen() {
    let t0 = store_suite::T0;
    let dir = tempfile::tempdir().unwrap();
    let own = Entry {
        target: store_suite::target("a"),
        ..store_suite::entry("a", t0, Some("cb"), "u")
    };
    let wait = |at_ms, counted| RetryWait {
        id: "a".into(),
        at_ms,
        recheck: None,
        attempt: Some(store_suite::attempt(1, at_ms - 1)),
        counted,
    };
    {
        let store = EmbeddedStore::open(dir.path()).unwrap();
        store.insert(vec![own.clone()], t0).await.unwrap();
        store.claim_due(t0, 10, 60_000).await.unwrap();
        store
            .retry_wait(vec![wait(t0 + 10, true)], t0 + 1)
            .await
            .unwrap();
        store.claim_due(t0 + 10, 10, 60_000).await.unwrap();
        store
            .retry_wait(vec![wait(t0 + 20, true)], t0 + 11)
            .await
            .unwrap();
        store.claim_due(t0 + 20, 10, 60_000).await.unwrap();
        store
            .retry_wait(vec![wait(t0 + 30, false)], t0 + 21)
            .await
            .unwrap();
        // Claimed when the process stops: the claim goes, the calls stay.
        let claimed = store.claim_due(t0 + 30, 10, 60_000).await.unwrap();
        assert_eq!(claimed[0].calls, 2);
    }
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let back = store.claim_due(t0 + 30, 10, 60_000).await.unwrap();
    assert_eq!(back.len(), 1);
    assert_eq!(
        (back[0].calls, &back[0].target, back[0].phase),
        (2, &own.target, Phase::Callback)
    );
    store
        .retry_wait(vec![wait(t0 + 40, true)], t0 + 31)
        .await
        .unwrap();
    assert_eq!(
        store.claim_due(t0 + 40, 10, 60_000).await.unwrap()[0].calls,
        3
    );
}

#[tokio::test]
async fn a_reopened_store_has_everything_it_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let entries = (0..100)
            .map(|i| store_suite::entry(&format!("e{i}"), store_suite::T0 + i, None, "u"))
            .collect();
        store.insert(entries, store_suite::T0).await.unwrap();
        store
            .claim_due(store_suite::T0 + 10, 5, 1000)
            .await
            .unwrap();
    }
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let due = store.upcoming(0, u64::MAX, 1000).await.unwrap();
    assert_eq!(due.len(), 100);
    // Claims live in memory: what the closed store had claimed is
    // scheduled again, and due at once.
    let s = store.status("e3").await.unwrap().unwrap();
    assert_eq!(s.state, herald_engine::schedule::entry::State::Scheduled);
    let again = store
        .claim_due(store_suite::T0 + 10, 5, 1000)
        .await
        .unwrap();
    let ids: Vec<&str> = again.iter().map(|e| e.id()).collect();
    assert_eq!(ids, ["e0", "e1", "e2", "e3", "e4"]);
}

/// The callback states survive a restart: an entry claimed from
/// retry_wait when the process stopped comes back in the callback phase at
/// once, a dead letter keeps its body, and the attempt logs are there.
#[tokio::test]
async fn a_reopened_store_keeps_the_callback_states() {
    let t0 = store_suite::T0;
    let dir = tempfile::tempdir().unwrap();
    {
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let entries = ["w", "d"].map(|id| store_suite::entry(id, t0, Some("cb"), "u"));
        store.insert(entries.to_vec(), t0).await.unwrap();
        store.claim_due(t0, 10, 60_000).await.unwrap();
        let attempt = |n| Some(store_suite::attempt(n, t0));
        store
            .retry_wait(
                vec![RetryWait {
                    id: "w".into(),
                    at_ms: t0 + 10,
                    recheck: None,
                    attempt: attempt(1),
                    counted: true,
                }],
                t0 + 1,
            )
            .await
            .unwrap();
        store
            .finish(
                vec![Finish {
                    id: "d".into(),
                    ending: Ending::Dead,
                    recheck: None,
                    attempt: attempt(1),
                }],
                t0 + 1,
            )
            .await
            .unwrap();
        // Claimed again, in the callback phase, when the process stops.
        let claimed = store.claim_due(t0 + 10, 10, 60_000).await.unwrap();
        assert_eq!(claimed[0].phase, Phase::Callback);
    }
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let w = store.status("w").await.unwrap().unwrap();
    assert_eq!(
        w.state,
        State::RetryWait,
        "the claim ended with the process"
    );
    let back = store.claim_due(t0 + 10, 10, 60_000).await.unwrap();
    assert_eq!(back.len(), 1);
    assert_eq!((back[0].id(), back[0].phase), ("w", Phase::Callback));
    for id in ["w", "d"] {
        assert_eq!(store.attempts(id).await.unwrap().len(), 1, "{id}");
    }
    assert!(matches!(
        store.replay("d", t0 + 20).await.unwrap(),
        Replay::Replayed(_)
    ));
    let d = store.claim_due(t0 + 20, 10, 60_000).await.unwrap();
    assert_eq!(
        d[0].notification,
        store_suite::entry("d", t0, Some("cb"), "u").notification
    );
}

#[tokio::test]
async fn a_page_of_firing_entries_among_many_scheduled_ones_ends_early_and_goes_on() {
    use herald_engine::schedule::entry::State;
    use herald_engine::schedule::store::ListFilter;
    let (store, _dir) = open().await;
    let t0 = store_suite::T0;
    let firing = ["f0", "f1"].map(|id| store_suite::entry(id, t0, Some("many"), "u"));
    store.insert(firing.to_vec(), t0).await.unwrap();
    assert_eq!(store.claim_due(t0, 10, 60_000).await.unwrap().len(), 2);
    // Listed under scheduled, and before the firing ones: a page of firing
    // entries reads past them.
    let scheduled: Vec<_> = (0..10_050)
        .map(|i| store_suite::entry(&format!("s{i}"), t0 - 1, Some("many"), "u"))
        .collect();
    store.insert(scheduled, t0).await.unwrap();
    let filter = ListFilter {
        topic: Some("many".into()),
        state: State::Firing,
    };
    let mut found = Vec::new();
    let mut after = None;
    let mut pages = 0;
    loop {
        let page = store.list(filter.clone(), after, 100).await.unwrap();
        pages += 1;
        found.extend(page.items.into_iter().map(|s| s.id));
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(found, ["f0", "f1"]);
    assert_eq!(pages, 2, "the first page stops after 10,000 keys");
}

/// The `list` keys of topic `t` in state `state` (raw, with the store
/// closed).
fn raw_list_keys(path: &std::path::Path, topic: &str, state: u8) -> Vec<Vec<u8>> {
    use redb::{ReadableTable, TableDefinition};
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_read().unwrap();
    let list = txn
        .open_table(TableDefinition::<&[u8], ()>::new("list"))
        .unwrap();
    let mut prefix = topic.as_bytes().to_vec();
    prefix.extend([0, state]);
    list.iter()
        .unwrap()
        .map(|kv| kv.unwrap().0.value().to_vec())
        .filter(|k| k.starts_with(&prefix))
        .collect()
}

/// Make the one entry of a closed store firing under a lease until
/// `lease_until`, the way stores written before claims were kept in
/// memory hold an entry claimed when their process died: state, attempts
/// and deadline in the record's header, a `lease` key instead of its
/// `sched` key, a list key of its own state, and the counters.
fn make_firing_the_old_way(path: &std::path::Path, topic: &str, lease_until: u64) {
    use redb::{ReadableTable, TableDefinition};
    to_format_3(path);
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut records = txn
            .open_table(TableDefinition::<u64, &[u8]>::new("records"))
            .unwrap();
        let mut raw = records.get(0).unwrap().unwrap().value().to_vec();
        let fire = u64::from_be_bytes(raw[21..29].try_into().unwrap());
        raw[0] = 1; // firing
        raw[1..5].copy_from_slice(&1u32.to_be_bytes());
        raw[13..21].copy_from_slice(&lease_until.to_be_bytes());
        let id =
            std::str::from_utf8(&raw[31..31 + usize::from(u16::from_be_bytes([raw[29], raw[30]]))])
                .unwrap()
                .to_owned();
        records.insert(0, raw.as_slice()).unwrap();
        let key = |t: u64| {
            let mut k = t.to_be_bytes().to_vec();
            k.extend(0u64.to_be_bytes());
            k.extend(id.as_bytes());
            k
        };
        let mut sched = txn
            .open_table(TableDefinition::<&[u8], ()>::new("sched"))
            .unwrap();
        assert!(sched.remove(key(fire).as_slice()).unwrap().is_some());
        let mut lease = txn
            .open_table(TableDefinition::<&[u8], ()>::new("lease"))
            .unwrap();
        lease.insert(key(lease_until).as_slice(), ()).unwrap();
        let mut list = txn
            .open_table(TableDefinition::<&[u8], ()>::new("list"))
            .unwrap();
        let mut listed = topic.as_bytes().to_vec();
        listed.extend([0, 0]);
        listed.extend(key(fire));
        assert!(list.remove(listed.as_slice()).unwrap().is_some());
        listed[topic.len() + 1] = 1;
        list.insert(listed.as_slice(), ()).unwrap();
        let mut counts = txn
            .open_table(TableDefinition::<u8, u64>::new("counts"))
            .unwrap();
        counts.insert(0, 0).unwrap();
        counts.insert(1, 1).unwrap();
        let mut hist = txn
            .open_table(TableDefinition::<u64, u64>::new("hist"))
            .unwrap();
        assert!(hist.remove(fire / 60_000).unwrap().is_some());
    }
    txn.commit().unwrap();
}

#[tokio::test]
async fn an_entry_left_firing_by_an_older_store_fires_when_its_lease_ends() {
    use herald_engine::schedule::entry::State;
    use herald_engine::schedule::store::ListFilter;
    let dir = tempfile::tempdir().unwrap();
    let t0 = store_suite::T0;
    let lease_until = t0 + 600_000;
    {
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let e = store_suite::entry("old", t0, Some("t"), "u");
        store.insert(vec![e], t0).await.unwrap();
    }
    let path = dir.path().join("store.redb");
    make_firing_the_old_way(&path, "t", lease_until);
    assert_eq!(raw_list_keys(&path, "t", State::Firing.code()).len(), 1);
    {
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let s = store.status("old").await.unwrap().unwrap();
        assert_eq!((s.state, s.attempts), (State::Scheduled, 1));
        let counts = store.counts(t0, vec![]).await.unwrap();
        assert_eq!((counts.scheduled, counts.firing), (vec![1], 0));
        assert_eq!(
            store.upcoming(0, u64::MAX, 10).await.unwrap(),
            vec![(lease_until, "old".to_owned())]
        );
        let scheduled = store
            .list(
                ListFilter {
                    topic: Some("t".into()),
                    state: State::Scheduled,
                },
                None,
                10,
            )
            .await
            .unwrap();
        assert_eq!(scheduled.items.len(), 1);
        assert!(
            store
                .claim_due(lease_until - 1, 10, 1000)
                .await
                .unwrap()
                .is_empty()
        );
        let again = store.claim_due(lease_until, 10, 1000).await.unwrap();
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].attempts, 2);
    }
    assert!(raw_list_keys(&path, "t", State::Firing.code()).is_empty());
}

#[test]
fn a_second_process_on_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _first = EmbeddedStore::open(dir.path()).unwrap();
    let err = EmbeddedStore::open(dir.path()).unwrap_err();
    assert!(err.to_string().contains("another process"), "{err}");
}

/// Set in the child process of the crash test.
const CHILD: &str = "HERALD_STORE_CRASH_CHILD";

/// The child: insert batches forever, printing each acknowledged id.
#[tokio::test]
async fn crash_child() {
    let Ok(dir) = std::env::var(CHILD) else {
        return; // Only meaningful as the crash test's child.
    };
    let store = Arc::new(EmbeddedStore::open(std::path::Path::new(&dir)).unwrap());
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            for n in 0.. {
                let id = format!("w{worker}-{n}");
                let e = store_suite::entry(&id, store_suite::T0 + 1000, None, "u");
                store.insert(vec![e], store_suite::T0).await.unwrap();
                println!("{id}");
            }
        }));
    }
    // Beside them, callbacks one after the other: each fails once (to
    // retry_wait), is claimed again and dies, each step printed once it
    // is acknowledged. The others' entries are due later than any claim
    // here, so each claim takes this loop's entry alone.
    let store = Arc::clone(&store);
    tasks.push(tokio::spawn(async move {
        let t0 = store_suite::T0;
        for n in 0.. {
            let id = format!("c{n}");
            let e = store_suite::entry(&id, t0, None, "u");
            store.insert(vec![e], t0).await.unwrap();
            let claimed = store.claim_due(t0, 10, 60_000).await.unwrap();
            assert_eq!(claimed.len(), 1);
            let wait = RetryWait {
                id: id.clone(),
                at_ms: t0 + 500,
                recheck: None,
                attempt: Some(store_suite::attempt(1, t0)),
                counted: true,
            };
            store.retry_wait(vec![wait], t0 + 1).await.unwrap();
            println!("rw {id}");
            let claimed = store.claim_due(t0 + 500, 10, 60_000).await.unwrap();
            assert_eq!(claimed[0].phase, Phase::Callback);
            let dead = Finish {
                id: id.clone(),
                ending: Ending::Dead,
                recheck: None,
                attempt: Some(store_suite::attempt(2, t0 + 500)),
            };
            store.finish(vec![dead], t0 + 501).await.unwrap();
            println!("dead {id}");
        }
    }));
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test]
async fn kill_9_mid_ingest_keeps_every_acknowledged_entry() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "crash_child",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut acked = Vec::new();
    let (mut waiting, mut dead) = (Vec::new(), Vec::new());
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    while acked.len() < 3000 || dead.len() < 20 {
        let line = lines.next().expect("the child stopped early").unwrap();
        if line.starts_with('w') {
            acked.push(line);
        } else if let Some(id) = line.strip_prefix("rw ") {
            waiting.push(id.to_owned());
        } else if let Some(id) = line.strip_prefix("dead ") {
            dead.push(id.to_owned());
        }
    }
    child.kill().unwrap(); // SIGKILL: no destructor, no flush
    child.wait().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    for id in &acked {
        assert!(
            store.status(id).await.unwrap().is_some(),
            "{id} was acknowledged but is gone"
        );
    }
    // Every callback state acknowledged is there, with its log: a dead
    // letter as dead with both attempts (and its body: it replays); one
    // only known to wait, waiting (its claim ended with the process) or
    // dead (finished, not printed yet).
    for id in &waiting {
        let s = store.status(id).await.unwrap().expect("acknowledged");
        let log = store.attempts(id).await.unwrap().len();
        if dead.contains(id) {
            assert_eq!((s.state, log), (State::Dead, 2), "{id}");
        } else {
            assert!(
                matches!(s.state, State::RetryWait | State::Dead),
                "{id}: {s:?}"
            );
            assert!(log >= 1, "{id}");
        }
    }
    let last = dead.last().unwrap();
    assert!(matches!(
        store.replay(last, store_suite::T0 + 600).await.unwrap(),
        Replay::Replayed(_)
    ));
    let back = store
        .claim_due(store_suite::T0 + 600, 100, 60_000)
        .await
        .unwrap();
    let replayed = back.iter().find(|e| e.id() == last).expect("replayed");
    assert_eq!(
        replayed.notification,
        store_suite::entry(last, store_suite::T0, None, "u").notification
    );
}

/// A file of format 4 listed an entry with a topic under that topic
/// alone, so a list without a topic missed it. Opened, it gets the
/// missing list keys and is stamped 5: the list without a topic has every
/// entry, in every state, and keeps them as they change.
#[tokio::test]
async fn a_store_of_format_4_lists_every_entry_without_a_topic_once_opened() {
    use redb::{ReadableTable, TableDefinition};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    {
        let store = EmbeddedStore::open(dir.path()).unwrap();
        store_suite::fill_for_list_upgrade(&store).await;
    }
    {
        // What format 4 wrote: no list key under no topic for an entry
        // with one.
        let db = redb::Database::open(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut list = txn
                .open_table(TableDefinition::<&[u8], ()>::new("list"))
                .unwrap();
            let twins: Vec<Vec<u8>> = list
                .iter()
                .unwrap()
                .map(|kv| kv.unwrap().0.value().to_vec())
                .filter(|k| k[0] != 0)
                .map(|k| k[k.iter().position(|&b| b == 0).unwrap()..].to_vec())
                .collect();
            assert_eq!(twins.len(), 25);
            for twin in twins {
                assert!(list.remove(twin.as_slice()).unwrap().is_some());
            }
            txn.open_table(TableDefinition::<&str, u64>::new("meta"))
                .unwrap()
                .insert("format", 4)
                .unwrap();
        }
        txn.commit().unwrap();
    }
    let store = EmbeddedStore::open(dir.path()).unwrap();
    store_suite::lists_every_entry_after_upgrade(&store).await;
    drop(store);
    let db = redb::Database::open(&path).unwrap();
    let txn = db.begin_read().unwrap();
    let meta = txn
        .open_table(TableDefinition::<&str, u64>::new("meta"))
        .unwrap();
    assert_eq!(meta.get("format").unwrap().map(|v| v.value()), Some(5));
}
