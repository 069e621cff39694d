//! The embedded store: the conformance suite, reopening, and a real
//! `kill -9` of a process in the middle of acknowledged inserts.

#[macro_use]
mod store_suite;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;

use herald_router::schedule::store::Store;
use herald_router::schedule::store::embedded::EmbeddedStore;

async fn open() -> (Arc<dyn Store>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    (Arc::new(store), dir)
}

store_suite_tests!(open);

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
    let due = store.upcoming(u64::MAX, 1000).await.unwrap();
    assert_eq!(due.len(), 100);
    let s = store.status("e3").await.unwrap().unwrap();
    assert_eq!(s.state, herald_router::schedule::entry::State::Firing);
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
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    while acked.len() < 3000 {
        let line = lines.next().expect("the child stopped early").unwrap();
        if line.starts_with('w') {
            acked.push(line);
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
}
