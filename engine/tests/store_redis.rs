//! The Redis store against real Redis, never a mock.
//!
//! - The shared conformance suite (`store_suite`), one test per case, on
//!   the single Redis at 127.0.0.1:6379 (or `HERALD_TEST_REDIS_URL`), each
//!   case under its own key prefix, removed afterwards.
//! - The whole suite again on a Redis Cluster: the one named by
//!   `HERALD_TEST_REDIS_CLUSTER` (comma-separated seed URLs), or three
//!   masters started here with `scripts/redis-cluster.sh` on free loopback
//!   ports in a temporary directory, and stopped at the end.
//! - What only the Redis backend has: several stores (routers) sharing one
//!   Redis, order across shards, the per-user hint of held entries, bad
//!   stored values, the persistence check, and Redis killed and restarted
//!   mid-run with AOF (a redis-server of the test's own).
//!
//! Nothing here waits for time: conditions are polled with a deadline.

#[macro_use]
mod store_suite;

use std::collections::HashSet;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use herald_engine::schedule::entry::{Entry, Phase, State};
use herald_engine::schedule::store::redis::{Durability, Eviction, RedisConfig, RedisStore};
use herald_engine::schedule::store::{
    Cancel, Cursor, Ending, Finish, Insert, ListFilter, Replay, RetryWait, Store, StoreError,
};
use store_suite::{LEASE, T0, attempt, entry, online_entry};

// ---------------------------------------------------------------------------
// Helpers: URLs, prefixes, key inspection and clean-up.

fn redis_url() -> String {
    std::env::var("HERALD_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

fn unique_prefix() -> String {
    format!("herald-test-{:016x}", rand::random::<u64>())
}

fn sync_conn(url: &str) -> redis::Connection {
    redis::Client::open(url)
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
        .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"))
}

/// Every key of one node matching `pattern` (SCAN, not KEYS: the shared
/// Redis may hold much else).
fn scan(url: &str, pattern: &str) -> Vec<Vec<u8>> {
    let mut c = sync_conn(url);
    let mut cursor = 0u64;
    let mut out = Vec::new();
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query(&mut c)
            .unwrap();
        out.extend(keys);
        if next == 0 {
            return out;
        }
        cursor = next;
    }
}

fn scan_names(url: &str, pattern: &str) -> Vec<String> {
    scan(url, pattern)
        .into_iter()
        .map(|k| String::from_utf8(k).unwrap())
        .collect()
}

/// Removes every key under its prefix from its nodes when dropped.
struct Guard {
    nodes: Vec<String>,
    prefix: String,
}

impl Drop for Guard {
    fn drop(&mut self) {
        for url in &self.nodes {
            let keys = scan(url, &format!("{}:*", self.prefix));
            let mut c = sync_conn(url);
            for chunk in keys.chunks(500) {
                // One key per UNLINK: on a cluster node, keys of several
                // slots cannot share a command.
                let mut pipe = redis::pipe();
                for k in chunk {
                    pipe.cmd("UNLINK").arg(k).ignore();
                }
                pipe.query::<()>(&mut c).unwrap();
            }
        }
    }
}

/// A fresh key prefix on the single Redis, and the guard that deletes its
/// keys.
fn fresh_prefix() -> (String, Guard) {
    let prefix = unique_prefix();
    let guard = Guard {
        nodes: vec![redis_url()],
        prefix: prefix.clone(),
    };
    (prefix, guard)
}

fn config(prefix: &str) -> RedisConfig {
    RedisConfig {
        prefix: prefix.into(),
        ..RedisConfig::single(redis_url())
    }
}

async fn connect(config: RedisConfig) -> RedisStore {
    RedisStore::connect(config).await.expect("connect to Redis")
}

/// A fresh store on the single Redis, for the suite.
async fn open() -> (Arc<dyn Store>, Guard) {
    let (prefix, guard) = fresh_prefix();
    (Arc::new(connect(config(&prefix)).await), guard)
}

store_suite_tests!(open);

/// The moment a prefix began keeping tenants' ids apart is written by the
/// first Herald to connect and kept by every later one.
#[tokio::test]
async fn the_moment_tenants_began_is_written_once_per_prefix() {
    let (prefix, _guard) = fresh_prefix();
    let first = connect(config(&prefix)).await.tenants_since();
    assert!(first > 0);
    let (other, _other_guard) = fresh_prefix();
    let later = connect(config(&other)).await.tenants_since();
    assert!(later >= first);
    assert_eq!(connect(config(&prefix)).await.tenants_since(), first);
}

fn ids(entries: &[Entry]) -> Vec<String> {
    entries.iter().map(|e| e.id().to_owned()).collect()
}

/// Poll `f` until it returns `Some`, or panic after `limit`.
async fn eventually<T, F, Fut>(what: &str, limit: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---------------------------------------------------------------------------
// Redis servers of the tests' own.

/// A loopback port nobody listens on now (and, with `bus`, port + 10000
/// too, for a cluster node's bus).
fn free_port(bus: bool) -> u16 {
    loop {
        let port = if bus {
            20_000 + rand::random::<u16>() % 10_000
        } else {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && (!bus || free(port + 10_000)) {
            return port;
        }
    }
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "herald-{tag}-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn wait_ping(url: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let ok = redis::Client::open(url)
            .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
            .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
            .is_ok();
        if ok {
            return;
        }
        assert!(Instant::now() < deadline, "{url} never answered PING");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A redis-server child on a free loopback port with its data in a
/// temporary directory; killed and removed on drop.
struct Server {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    args: Vec<String>,
}

impl Server {
    fn start(args: &[&str]) -> Server {
        let mut s = Server {
            child: None,
            port: free_port(false),
            dir: temp_dir("redis"),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--save", ""])
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed (Debian: redis-server)");
        self.child = Some(child);
        wait_ping(&self.url());
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// SIGKILL: no shutdown, no final fsync.
    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// Start again on the same port and directory.
    fn restart(&mut self) {
        assert!(self.child.is_none());
        self.spawn();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Redis Cluster: the one named by `HERALD_TEST_REDIS_CLUSTER`, or three
/// masters of our own (stopped on drop).
struct Cluster {
    seeds: Vec<String>,
    masters: Vec<String>,
    own: Option<PathBuf>,
}

fn cluster_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/redis-cluster.sh")
}

impl Cluster {
    fn ensure() -> Cluster {
        let (seeds, own) = match std::env::var("HERALD_TEST_REDIS_CLUSTER") {
            Ok(list) => (list.split(',').map(str::to_owned).collect::<Vec<_>>(), None),
            Err(_) => {
                let dir = temp_dir("redis-cluster");
                let ports: Vec<u16> = (0..3).map(|_| free_port(true)).collect();
                let out = Command::new(cluster_script())
                    .arg("start")
                    .arg(&dir)
                    .args(ports.iter().map(u16::to_string))
                    .output()
                    .unwrap();
                assert!(out.status.success(), "redis-cluster.sh start: {out:?}");
                let seeds = ports
                    .iter()
                    .map(|p| format!("redis://127.0.0.1:{p}"))
                    .collect();
                (seeds, Some(dir))
            }
        };
        let mut c = sync_conn(&seeds[0]);
        let nodes: String = redis::cmd("CLUSTER").arg("NODES").query(&mut c).unwrap();
        let masters = nodes
            .lines()
            .filter(|l| l.split(' ').nth(2).is_some_and(|f| f.contains("master")))
            .filter_map(|l| l.split(' ').nth(1))
            .map(|addr| format!("redis://{}", addr.split('@').next().unwrap()))
            .collect();
        Cluster {
            seeds,
            masters,
            own,
        }
    }

    async fn open(&self) -> (Arc<dyn Store>, Guard) {
        let (store, guard) = self.open_store().await;
        (Arc::new(store), guard)
    }

    async fn open_store(&self) -> (RedisStore, Guard) {
        let prefix = unique_prefix();
        let store = connect(RedisConfig {
            prefix: prefix.clone(),
            ..RedisConfig::cluster(self.seeds.clone())
        })
        .await;
        let guard = Guard {
            nodes: self.masters.clone(),
            prefix,
        };
        (store, guard)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(dir) = &self.own {
            let out = Command::new(cluster_script())
                .arg("stop")
                .arg(dir)
                .output()
                .unwrap();
            assert!(out.status.success(), "redis-cluster.sh stop: {out:?}");
        }
    }
}

/// The case names the suite's macro lists after `@by_ref` or `@by_arc`,
/// read from its source, so the cluster run below cannot miss a case.
fn suite_cases(kind: &str) -> Vec<String> {
    let src = include_str!("store_suite/mod.rs");
    let from = src
        .find(&format!("store_suite_tests!({kind} $open;"))
        .unwrap_or_else(|| panic!("no {kind} list in the suite"));
    let list = &src[from..];
    let list = &list[list.find(';').unwrap() + 1..list.find(')').unwrap()];
    list.split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

// ---------------------------------------------------------------------------
// The suite on a Redis Cluster.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_cluster_passes_the_suite() {
    let cluster = Cluster::ensure();
    macro_rules! run {
        ($kind:literal, $call:ident; $($case:ident),+ $(,)?) => {
            assert_eq!(
                vec![$(stringify!($case)),+],
                suite_cases($kind),
                "the cluster run must list every {} case of the suite",
                $kind
            );
            $({
                eprintln!("cluster: {}", stringify!($case));
                let (store, _guard) = cluster.open().await;
                store_suite::$case($call(&store)).await;
            })+
        };
    }
    fn by_ref(s: &Arc<dyn Store>) -> &dyn Store {
        &**s
    }
    fn by_arc(s: &Arc<dyn Store>) -> Arc<dyn Store> {
        Arc::clone(s)
    }
    run!("@by_ref", by_ref;
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
        the_target_is_kept_and_every_claim_returns_it,
    );
    run!("@by_arc", by_arc;
        cancel_racing_claim_has_one_winner,
        concurrent_claimers_never_share_an_entry,
    );

    // The shards spread over every master, and the persistence of each is
    // reported.
    let (store, guard) = cluster.open_store().await;
    let many: Vec<Entry> = (0..200)
        .map(|i| entry(&format!("k{i}"), T0, None, "u"))
        .collect();
    store.insert(many, T0).await.unwrap();
    for node in &cluster.masters {
        assert!(
            !scan(node, &format!("{}:*:e:*", guard.prefix)).is_empty(),
            "no entry on {node}"
        );
    }
    assert_eq!(store.persistence().nodes.len(), cluster.masters.len());
    let Some(dir) = &cluster.own else {
        return; // Someone else's cluster: not ours to crash.
    };
    assert_eq!(*store.durability(), Durability::Always);

    // A master is SIGKILLed and started again on its files: operations that
    // need it fail meanwhile, and the same store works again after, with
    // every acknowledged entry.
    let node = |cmd: &str, port: &str| {
        let out = Command::new(cluster_script())
            .args([cmd, dir.to_str().unwrap(), port])
            .output()
            .unwrap();
        assert!(out.status.success(), "redis-cluster.sh {cmd}: {out:?}");
    };
    let port = cluster.masters[0].rsplit(':').next().unwrap().to_owned();
    node("kill-node", &port);
    assert!(matches!(
        store.counts(T0, vec![]).await,
        Err(StoreError::Unavailable(_))
    ));
    node("start-node", &port);
    let counts = eventually(
        "the cluster store to work again",
        Duration::from_secs(20),
        || async { store.counts(T0, vec![]).await.ok() },
    )
    .await;
    assert_eq!(counts.scheduled, vec![200]);
    for i in 0..200 {
        let id = format!("k{i}");
        assert!(store.status(&id).await.unwrap().is_some(), "{id} lost");
    }
    assert_eq!(store.claim_due(T0, 500, LEASE).await.unwrap().len(), 200);
    drop(guard);
}

// ---------------------------------------------------------------------------
// Several routers, one Redis.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_routers_claim_every_entry_once() {
    let (prefix, _guard) = fresh_prefix();
    let a = Arc::new(connect(config(&prefix)).await);
    let b = Arc::new(connect(config(&prefix)).await);
    let n = 2000;
    let all: Vec<Entry> = (0..n)
        .map(|i| entry(&format!("e{i:05}"), T0 + (i % 97), None, "u"))
        .collect();
    let out = a.insert(all, T0).await.unwrap();
    assert!(out.iter().all(|o| *o == Insert::Accepted));
    let mut tasks = Vec::new();
    for store in [&a, &b, &a, &b] {
        let store = Arc::clone(store);
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let batch = store.claim_due(T0 + 1000, 25, LEASE).await.unwrap();
                if batch.is_empty() {
                    break got;
                }
                assert!(batch.iter().all(|e| e.attempts == 1));
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
    let c = b.counts(T0, vec![]).await.unwrap();
    assert_eq!((c.scheduled, c.firing), (vec![0], n));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_routers_claims_come_back_to_another_after_the_lease() {
    let (prefix, _guard) = fresh_prefix();
    let survivor = connect(config(&prefix)).await;
    {
        let crashed = connect(config(&prefix)).await;
        let all: Vec<Entry> = (0..30)
            .map(|i| entry(&format!("c{i:02}"), T0, None, "u"))
            .collect();
        crashed.insert(all, T0).await.unwrap();
        assert_eq!(crashed.claim_due(T0, 100, 5000).await.unwrap().len(), 30);
    }
    assert!(
        survivor
            .claim_due(T0 + 4999, 100, LEASE)
            .await
            .unwrap()
            .is_empty()
    );
    let back = survivor.claim_due(T0 + 5000, 100, LEASE).await.unwrap();
    assert_eq!(back.len(), 30);
    assert!(back.iter().all(|e| e.attempts == 2));
    let mut sorted = ids(&back);
    sorted.sort();
    assert_eq!(ids(&back), sorted, "(fire time, id) order across shards");
}

/// Calls and the target are in Redis, not in a router: what one router
/// counted, another claiming the entry sees (after a release, and after
/// the first router's lease ran out), and a replay through either resets
/// it for both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_router_sees_the_calls_and_the_target() {
    let (prefix, _guard) = fresh_prefix();
    let a = connect(config(&prefix)).await;
    let b = connect(config(&prefix)).await;
    let own = Entry {
        target: store_suite::target("x"),
        ..entry("x", T0, Some("cb"), "u")
    };
    a.insert(vec![own.clone()], T0).await.unwrap();
    let wait = |at_ms: u64, counted| RetryWait {
        id: "x".into(),
        at_ms,
        recheck: None,
        attempt: Some(attempt(1, at_ms - 1)),
        counted,
    };
    assert_eq!(a.claim_due(T0, 10, LEASE).await.unwrap().len(), 1);
    a.retry_wait(vec![wait(T0 + 10, true)], T0 + 1)
        .await
        .unwrap();
    let on_b = b.claim_due(T0 + 10, 10, LEASE).await.unwrap();
    assert_eq!(
        (on_b[0].calls, &on_b[0].target, on_b[0].phase),
        (1, &own.target, Phase::Callback)
    );
    b.retry_wait(vec![wait(T0 + 20, true)], T0 + 11)
        .await
        .unwrap();
    // a claims it, and dies: b takes it when the lease runs out.
    assert_eq!(a.claim_due(T0 + 20, 10, 1000).await.unwrap()[0].calls, 2);
    assert!(b.claim_due(T0 + 1019, 10, LEASE).await.unwrap().is_empty());
    let back = b.claim_due(T0 + 1020, 10, LEASE).await.unwrap();
    assert_eq!((back[0].calls, back[0].attempts), (2, 4));
    b.finish(
        vec![Finish {
            id: "x".into(),
            ending: Ending::Dead,
            recheck: None,
            attempt: None,
        }],
        T0 + 1021,
    )
    .await
    .unwrap();
    assert!(matches!(
        a.replay("x", T0 + 2000).await.unwrap(),
        Replay::Replayed(_)
    ));
    let replayed = b.claim_due(T0 + 2000, 10, LEASE).await.unwrap();
    assert_eq!((replayed[0].calls, &replayed[0].target), (0, &own.target));
}

/// `raw` (an entry's value) as a build from before calls were kept stored
/// it: no flag 32 (offset 40), the header (its length at offset 38) 4
/// bytes shorter.
fn without_calls(raw: &[u8]) -> Vec<u8> {
    let len = usize::from(u16::from_be_bytes([raw[38], raw[39]]));
    assert_eq!(raw[40] & 32, 32, "a value with calls");
    let mut old = raw[..len - 4].to_vec();
    old[38..40].copy_from_slice(&((len - 4) as u16).to_be_bytes());
    old[40] &= !32;
    old.extend_from_slice(&raw[len..]);
    old
}

/// An entry stored before calls were kept (its header has none) reads
/// with calls 0; its first counted attempt writes it again with them, its
/// body intact; a replay of one without them leaves it without.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_stored_before_calls_were_kept_gets_them_when_first_counted() {
    let (prefix, _guard) = fresh_prefix();
    let store = connect(config(&prefix)).await;
    let mut big = online_entry("old", T0, "alice");
    big.notification.payload = bytes::Bytes::from(vec![b'p'; 100_000]);
    let dead = entry("dead", T0, Some("cb"), "u");
    store
        .insert(vec![big.clone(), dead.clone()], T0)
        .await
        .unwrap();
    let mut c = sync_conn(&redis_url());
    for id in ["old", "dead"] {
        let key = format!("{prefix}:{{{}}}:e:{id}", shard_of_entry(&prefix, id));
        let raw: Vec<u8> = redis::cmd("GET").arg(&key).query(&mut c).unwrap();
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg(without_calls(&raw))
            .query(&mut c)
            .unwrap();
    }
    let first = store.claim_due(T0, 10, LEASE).await.unwrap();
    assert_eq!(first.len(), 2);
    assert!(first.iter().all(|e| e.calls == 0));
    let key = format!("{prefix}:{{{}}}:e:old", shard_of_entry(&prefix, "old"));
    let len_of =
        |c: &mut redis::Connection| -> i64 { redis::cmd("STRLEN").arg(&key).query(c).unwrap() };
    let before = len_of(&mut c);
    store
        .retry_wait(
            vec![RetryWait {
                id: "old".into(),
                at_ms: T0 + 10,
                recheck: None,
                attempt: Some(attempt(1, T0)),
                counted: true,
            }],
            T0 + 1,
        )
        .await
        .unwrap();
    assert_eq!(len_of(&mut c), before + 4, "the header gained calls");
    let s = store.status("old").await.unwrap().unwrap();
    assert_eq!(
        (s.state, s.topic.as_deref(), s.next_attempt_ms),
        (State::RetryWait, Some("online"), Some(T0 + 10))
    );
    let back = store.claim_due(T0 + 10, 10, LEASE).await.unwrap();
    assert_eq!(
        back,
        vec![Entry {
            attempts: 2,
            calls: 1,
            phase: Phase::Callback,
            fire_ms: T0 + 10,
            ..big
        }]
    );
    // In place from now on.
    store
        .retry_wait(
            vec![RetryWait {
                id: "old".into(),
                at_ms: T0 + 20,
                recheck: None,
                attempt: None,
                counted: true,
            }],
            T0 + 11,
        )
        .await
        .unwrap();
    assert_eq!(len_of(&mut c), before + 4);
    assert_eq!(
        store.claim_due(T0 + 20, 10, LEASE).await.unwrap()[0].calls,
        2
    );
    // A dead letter without calls is replayed without them.
    store
        .finish(
            vec![Finish {
                id: "dead".into(),
                ending: Ending::Dead,
                recheck: None,
                attempt: None,
            }],
            T0 + 21,
        )
        .await
        .unwrap();
    store.replay("dead", T0 + 22).await.unwrap();
    let d = store.claim_due(T0 + 22, 10, LEASE).await.unwrap();
    assert_eq!(ids(&d), ["dead"]);
    assert_eq!((d[0].calls, d[0].phase), (0, Phase::Callback));
}

// ---------------------------------------------------------------------------
// Order and pages across shards.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_upcoming_and_lists_keep_due_id_order_across_shards() {
    let (store, _guard) = open().await;
    // 300 entries over 16 shards, with many equal due times.
    let all: Vec<Entry> = (0..300u64)
        .map(|i| {
            entry(
                &format!("o{:03}", (i * 7919) % 1000),
                T0 + (i % 10),
                Some("t"),
                "u",
            )
        })
        .collect();
    let mut expected: Vec<(u64, String)> =
        all.iter().map(|e| (e.due_ms, e.id().to_owned())).collect();
    expected.sort();
    store.insert(all, T0).await.unwrap();

    let up = store.upcoming(0, T0 + 100, 57).await.unwrap();
    assert_eq!(up, expected[..57].to_vec());
    assert_eq!(store.upcoming(0, T0 + 4, 1000).await.unwrap().len(), 150);

    let filter = ListFilter {
        topic: Some("t".into()),
        state: State::Scheduled,
    };
    let mut listed = Vec::new();
    let mut after: Option<Cursor> = None;
    loop {
        let page = store.list(filter.clone(), after.clone(), 7).await.unwrap();
        assert!(page.items.len() <= 7);
        listed.extend(page.items.iter().map(|s| (s.due_ms, s.id.clone())));
        match page.next {
            Some(c) => after = Some(c),
            None => break,
        }
    }
    assert_eq!(listed, expected);

    let mut claimed = Vec::new();
    loop {
        let batch = store.claim_due(T0 + 100, 13, LEASE).await.unwrap();
        if batch.is_empty() {
            break;
        }
        claimed.extend(batch.iter().map(|e| (e.due_ms, e.id().to_owned())));
    }
    assert_eq!(
        claimed, expected,
        "one claimer gets the earliest first, every time"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_larger_than_a_script_is_split_and_duplicates_within_it_are_found() {
    let (prefix, _guard) = fresh_prefix();
    let store = connect(RedisConfig {
        max_entries_per_script: 10,
        ..config(&prefix)
    })
    .await;
    let mut batch: Vec<Entry> = (0..500)
        .map(|i| entry(&format!("b{i}"), T0 + 5, None, "u"))
        .collect();
    batch.extend((0..20).map(|i| entry(&format!("b{i}"), T0 + 9, None, "u")));
    let out = store.insert(batch, T0).await.unwrap();
    assert_eq!(out.len(), 520);
    assert!(out[..500].iter().all(|o| *o == Insert::Accepted));
    for o in &out[500..] {
        match o {
            Insert::Duplicate(s) => assert_eq!((s.due_ms, s.state), (T0 + 5, State::Scheduled)),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(store.counts(T0, vec![]).await.unwrap().scheduled, vec![500]);
    // Delivered, released and held batches are split the same way.
    let claimed = store.claim_due(T0 + 5, 1000, LEASE).await.unwrap();
    assert_eq!(claimed.len(), 500);
    store
        .release(ids(&claimed[..100]), T0 + 50, T0 + 6)
        .await
        .unwrap();
    store.delivered(ids(&claimed), T0 + 6).await.unwrap();
    let c = store.counts(T0, vec![]).await.unwrap();
    assert_eq!((c.scheduled, c.firing), (vec![100], 0));
    assert_eq!(store.purge(T0 + 7, 150).await.unwrap(), 150);
    assert_eq!(store.purge(T0 + 7, 1000).await.unwrap(), 250);
}

/// The ids listed under `topic` in `state`, page by page.
async fn listed(store: &RedisStore, topic: Option<&str>, state: State) -> Vec<String> {
    let filter = ListFilter {
        topic: topic.map(str::to_owned),
        state,
    };
    let mut out = Vec::new();
    let mut after: Option<Cursor> = None;
    loop {
        let page = store.list(filter.clone(), after, 2).await.unwrap();
        out.extend(page.items.into_iter().map(|s| s.id));
        match page.next {
            Some(c) => after = Some(c),
            None => return out,
        }
    }
}

/// The insert script stores an all-new batch with one MSETNX and indexes
/// it per topic; a batch with a known id goes one entry at a time. One
/// shard, so each batch is one script whose entries the store sorts by
/// topic: the answers still come in the caller's order, and every new
/// entry is indexed under its own topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_new_and_known_ids_over_several_topics_is_stored_and_listed_per_topic() {
    let (prefix, _guard) = fresh_prefix();
    let store = connect(RedisConfig {
        shards: 1,
        ..config(&prefix)
    })
    .await;
    // All new, topics interleaved: the one-call path.
    let first = vec![
        entry("a1", T0 + 1, Some("alpha"), "u"),
        entry("n1", T0 + 2, None, "u"),
        entry("b1", T0 + 3, Some("beta"), "u"),
        entry("a2", T0 + 4, Some("alpha"), "u"),
    ];
    assert_eq!(
        store.insert(first, T0).await.unwrap(),
        vec![Insert::Accepted; 4]
    );
    // Two known ids among new ones: one at a time. "a1" comes back under
    // another due time and "n1" under another topic: the first submission
    // stands, and neither is indexed again.
    let second = vec![
        entry("b2", T0 + 5, Some("beta"), "u"),
        entry("a1", T0 + 50, Some("alpha"), "u"),
        entry("n2", T0 + 6, None, "u"),
        entry("a3", T0 + 7, Some("alpha"), "u"),
        entry("n1", T0 + 60, Some("gamma"), "u"),
        entry("n3", T0 + 8, None, "u"),
    ];
    let out = store.insert(second, T0 + 1).await.unwrap();
    let accepted: Vec<bool> = out.iter().map(|o| *o == Insert::Accepted).collect();
    assert_eq!(accepted, [true, false, true, true, false, true], "{out:?}");
    match (&out[1], &out[4]) {
        (Insert::Duplicate(a1), Insert::Duplicate(n1)) => {
            assert_eq!((a1.due_ms, a1.topic.as_deref()), (T0 + 1, Some("alpha")));
            assert_eq!((n1.due_ms, n1.topic.as_deref()), (T0 + 2, None));
        }
        other => panic!("{other:?}"),
    }
    let s = State::Scheduled;
    assert_eq!(listed(&store, Some("alpha"), s).await, ["a1", "a2", "a3"]);
    assert_eq!(listed(&store, Some("beta"), s).await, ["b1", "b2"]);
    // No topic: every entry, once, at its first due time.
    assert_eq!(
        listed(&store, None, s).await,
        ["a1", "n1", "b1", "a2", "b2", "n2", "a3", "n3"]
    );
    assert!(listed(&store, Some("gamma"), s).await.is_empty());
    let claimed = store.claim_due(T0 + 100, 100, LEASE).await.unwrap();
    assert_eq!(
        ids(&claimed),
        ["a1", "n1", "b1", "a2", "b2", "n2", "a3", "n3"],
        "each once, at its first due time"
    );
}

/// Batches handed in together go to Redis as groups of at most
/// `max_entries_per_script` x `shards` entries, and each caller gets its
/// own answers. On a current-thread runtime the four inserts are all queued
/// before the store's insert task runs, so the grouping is exact: A and B
/// (6 entries; C would make 9 of at most 8), then C and D.
#[tokio::test]
async fn batches_handed_in_together_go_as_groups_and_each_gets_its_own_answers() {
    let (prefix, _guard) = fresh_prefix();
    let store = connect(RedisConfig {
        max_entries_per_script: 4,
        shards: 2,
        ..config(&prefix)
    })
    .await;
    let stored_before = entry("before", T0 + 1, None, "u");
    assert_eq!(
        store.insert(vec![stored_before], T0).await.unwrap(),
        vec![Insert::Accepted]
    );
    let groups = store.metrics().insert_groups.get();
    let batches = store.metrics().insert_batches.get();
    let batch = |ids: &[&str], due: u64| -> Vec<Entry> {
        ids.iter()
            .map(|id| entry(id, T0 + due, None, "u"))
            .collect()
    };
    let (a, b, c, d) = tokio::join!(
        store.insert(batch(&["a1", "a2", "twice"], 10), T0),
        // "twice" again, due later: the copy in A (earlier in the group) wins.
        store.insert(batch(&["b1", "twice", "b2"], 20), T0),
        store.insert(batch(&["c1", "before", "c2"], 30), T0),
        store.insert(batch(&["d1", "d2", "d3"], 40), T0),
    );
    let accepted = |out: &[Insert], which: &[bool]| {
        let got: Vec<bool> = out.iter().map(|o| *o == Insert::Accepted).collect();
        assert_eq!(got, which, "{out:?}");
    };
    let (a, b, c, d) = (a.unwrap(), b.unwrap(), c.unwrap(), d.unwrap());
    accepted(&a, &[true, true, true]);
    accepted(&b, &[true, false, true]);
    accepted(&c, &[true, false, true]);
    accepted(&d, &[true, true, true]);
    match (&b[1], &c[1]) {
        (Insert::Duplicate(twice), Insert::Duplicate(before)) => {
            assert_eq!((twice.due_ms, twice.state), (T0 + 10, State::Scheduled));
            assert_eq!((before.due_ms, before.state), (T0 + 1, State::Scheduled));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(store.metrics().insert_groups.get() - groups, 2);
    assert_eq!(store.metrics().insert_batches.get() - batches, 4);
    assert_eq!(store.counts(T0, vec![]).await.unwrap().scheduled, vec![11]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_of_thousands_in_one_shard_moves_them_all_in_order() {
    // One shard: the whole claim is one script, its sorted-set moves made
    // with variadic calls sliced below Lua's unpack limit.
    let (prefix, _guard) = fresh_prefix();
    let store = connect(RedisConfig {
        shards: 1,
        max_entries_per_script: 2_000,
        ..config(&prefix)
    })
    .await;
    let all: Vec<Entry> = (0..6_000)
        .map(|i| entry(&format!("k{i:05}"), T0 + 5, None, "u"))
        .collect();
    store.insert(all.clone(), T0).await.unwrap();
    let claimed = store.claim_due(T0 + 5, 6_000, LEASE).await.unwrap();
    assert_eq!(ids(&claimed), ids(&all));
    assert!(claimed.iter().all(|e| e.attempts == 1));
    let c = store.counts(T0 + 5, vec![]).await.unwrap();
    assert_eq!((c.scheduled, c.firing), (vec![0], 6_000));
    assert!(store.claim_due(T0 + 5, 10, LEASE).await.unwrap().is_empty());
    store.delivered(ids(&claimed), T0 + 6).await.unwrap();
    let c = store.counts(T0 + 6, vec![]).await.unwrap();
    assert_eq!((c.scheduled, c.firing), (vec![0], 0));
    let s = store.status("k05999").await.unwrap().unwrap();
    assert_eq!((s.state, s.attempts), (State::Delivered, 1));
    assert_eq!(store.purge(T0 + 7, 10_000).await.unwrap(), 6_000);
    assert_eq!(store.status("k00000").await.unwrap(), None);
}

// ---------------------------------------------------------------------------
// Held entries and the per-user hint.

async fn hold_all(store: &RedisStore, entries: Vec<Entry>, expires: u64) {
    store.insert(entries, T0).await.unwrap();
    let claimed = store.claim_due(T0, 10_000, LEASE).await.unwrap();
    store.hold(ids(&claimed), expires, T0).await.unwrap();
}

fn hint_keys(prefix: &str, user: &str) -> Vec<String> {
    let mut keys = scan_names(&redis_url(), &format!("{prefix}:*:hint:{user}"));
    keys.extend(scan_names(&redis_url(), &format!("{prefix}:*:ht:{user}")));
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_entries_in_many_shards_come_back_in_order_and_the_hint_goes() {
    let (prefix, _guard) = fresh_prefix();
    let store = connect(config(&prefix)).await;
    let mut all: Vec<Entry> = (0..40u64)
        .map(|i| online_entry(&format!("a{i:02}"), T0 - 100 + (i % 5), "alice"))
        .collect();
    all.extend((0..10).map(|i| online_entry(&format!("b{i}"), T0 - 100, "bob")));
    hold_all(&store, all.clone(), T0 + 60_000).await;
    assert!(!hint_keys(&prefix, "alice").is_empty());
    let mut expected: Vec<(u64, String)> = all[..40]
        .iter()
        .map(|e| (e.due_ms, e.id().to_owned()))
        .collect();
    expected.sort();
    let mut got = Vec::new();
    loop {
        let batch = store.claim_held("alice", T0 + 1, 7, LEASE).await.unwrap();
        if batch.is_empty() {
            break;
        }
        assert!(batch.len() <= 7);
        assert!(batch.iter().all(|e| e.attempts == 2));
        got.extend(batch.iter().map(|e| (e.due_ms, e.id().to_owned())));
    }
    assert_eq!(got, expected);
    assert_eq!(
        hint_keys(&prefix, "alice"),
        Vec::<String>::new(),
        "alice's hint is gone"
    );
    assert!(!hint_keys(&prefix, "bob").is_empty(), "bob's stays");
    assert_eq!(
        store
            .claim_held("bob", T0 + 1, 100, LEASE)
            .await
            .unwrap()
            .len(),
        10
    );
    assert_eq!(hint_keys(&prefix, "bob"), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_and_expire_clean_the_hint_and_a_stale_hint_is_harmless() {
    let (prefix, _guard) = fresh_prefix();
    let store = connect(config(&prefix)).await;
    let carol: Vec<Entry> = (0..6)
        .map(|i| online_entry(&format!("c{i}"), T0, "carol"))
        .collect();
    hold_all(&store, carol.clone(), T0 + 1000).await;
    let dave: Vec<Entry> = (0..6)
        .map(|i| online_entry(&format!("d{i}"), T0, "dave"))
        .collect();
    hold_all(&store, dave, T0 + 500).await;
    for e in &carol {
        assert!(matches!(
            store.cancel(e.id(), T0 + 1).await.unwrap(),
            Cancel::Cancelled(_)
        ));
    }
    assert_eq!(hint_keys(&prefix, "carol"), Vec::<String>::new());
    assert_eq!(store.expire(T0 + 500, 100).await.unwrap().len(), 6);
    assert_eq!(hint_keys(&prefix, "dave"), Vec::<String>::new());

    // A hint naming a shard that holds nothing (a router died between the
    // hint and the hold) costs a call and finds nothing.
    let mut c = sync_conn(&redis_url());
    let key = {
        // The user's shard: the hint key a hold writes for carol.
        hold_all(
            &store,
            vec![online_entry("c-later", T0, "carol")],
            T0 + 9000,
        )
        .await;
        scan_names(&redis_url(), &format!("{prefix}:*:hint:carol"))
            .pop()
            .unwrap()
    };
    redis::cmd("HSET")
        .arg(&key)
        .arg("5:00000000deadbeef")
        .arg(1)
        .query::<i64>(&mut c)
        .unwrap();
    let got = store.claim_held("carol", T0 + 2, 10, LEASE).await.unwrap();
    assert_eq!(ids(&got), vec!["c-later"]);
    assert!(
        store
            .claim_held("carol", T0 + 3, 10, LEASE)
            .await
            .unwrap()
            .is_empty()
    );
}

/// The shard an entry is stored in, read from its key `<prefix>:{<s>}:e:<id>`.
fn shard_of_entry(prefix: &str, id: &str) -> String {
    let key = scan_names(&redis_url(), &format!("{prefix}:*:e:{id}"))
        .pop()
        .unwrap_or_else(|| panic!("no entry {id}"));
    key[key.find('{').unwrap() + 1..key.find('}').unwrap()].to_owned()
}

/// A hold that has written its hint field but not yet held anything (its
/// router is slow, or just between the two requests) must keep its field
/// when a claim, cancel or expire empties the user's held set in that
/// shard: removing it would strand what the hold is about to hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emptying_a_shard_keeps_the_hint_field_of_a_hold_in_flight() {
    let (prefix, _guard) = fresh_prefix();
    let store = connect(config(&prefix)).await;
    let mut c = sync_conn(&redis_url());
    for (user, empty_it) in ["claimed", "cancelled", "expired"].into_iter().enumerate() {
        let user = format!("u{user}");
        let id = format!("{user}-e");
        hold_all(&store, vec![online_entry(&id, T0, &user)], T0 + 1000).await;
        let s = shard_of_entry(&prefix, &id);
        let hint = scan_names(&redis_url(), &format!("{prefix}:*:hint:{user}"))
            .pop()
            .unwrap();
        let in_flight = format!("{s}:00000000feedf00d");
        redis::cmd("HSET")
            .arg(&hint)
            .arg(&in_flight)
            .arg(1)
            .query::<i64>(&mut c)
            .unwrap();
        match empty_it {
            "claimed" => {
                let got = store.claim_held(&user, T0 + 1, 10, LEASE).await.unwrap();
                assert_eq!(ids(&got), vec![id.clone()]);
            }
            "cancelled" => {
                let out = store.cancel(&id, T0 + 1).await.unwrap();
                assert!(matches!(out, Cancel::Cancelled(_)), "{out:?}");
            }
            _ => assert_eq!(store.expire(T0 + 1000, 10).await.unwrap().len(), 1),
        }
        let fields: Vec<String> = redis::cmd("HKEYS").arg(&hint).query(&mut c).unwrap();
        assert_eq!(
            fields,
            vec![in_flight],
            "{empty_it}: only the finished hold's field goes"
        );
    }
}

/// Holds (from one router) race claims of the same user's held entries
/// (from another): every entry is claimed exactly once in the end; none is
/// stranded held by a hint field removed too early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_racing_claim_held_never_strand_an_entry() {
    let (prefix, _guard) = fresh_prefix();
    let holder = Arc::new(connect(config(&prefix)).await);
    let claimer = Arc::new(connect(config(&prefix)).await);
    let n = 90;
    let all: Vec<Entry> = (0..n)
        .map(|i| online_entry(&format!("z{i:02}"), T0, "zoe"))
        .collect();
    holder.insert(all, T0).await.unwrap();
    let claimed = holder.claim_due(T0, 1000, LEASE).await.unwrap();
    assert_eq!(claimed.len(), n);
    let holding_done = Arc::new(AtomicBool::new(false));
    let holding = {
        let (store, done) = (Arc::clone(&holder), Arc::clone(&holding_done));
        let ids = ids(&claimed);
        tokio::spawn(async move {
            for chunk in ids.chunks(3) {
                store
                    .hold(chunk.to_vec(), T0 + 60_000, T0 + 1)
                    .await
                    .unwrap();
            }
            done.store(true, Ordering::SeqCst);
        })
    };
    let claiming = {
        let (store, done) = (Arc::clone(&claimer), Arc::clone(&holding_done));
        tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let finished = done.load(Ordering::SeqCst);
                let batch = store.claim_held("zoe", T0 + 2, 4, LEASE).await.unwrap();
                if finished && batch.is_empty() {
                    break got;
                }
                got.extend(ids(&batch));
            }
        })
    };
    holding.await.unwrap();
    let got = claiming.await.unwrap();
    let unique: HashSet<_> = got.iter().collect();
    assert_eq!(unique.len(), got.len(), "an entry claimed twice");
    assert_eq!(got.len(), n, "an entry left held");
    assert_eq!(holder.counts(T0, vec![]).await.unwrap().held, 0);
    assert_eq!(hint_keys(&prefix, "zoe"), Vec::<String>::new());
}

// ---------------------------------------------------------------------------
// Bad values, bad configurations.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_entry_is_reported_and_skipped_and_a_missing_one_dropped() {
    let (prefix, _guard) = fresh_prefix();
    let store = connect(config(&prefix)).await;
    store
        .insert(
            vec![
                entry("bad", T0, None, "u"),
                entry("gone", T0, None, "u"),
                entry("good", T0, None, "u"),
            ],
            T0,
        )
        .await
        .unwrap();
    let mut c = sync_conn(&redis_url());
    let bad = scan_names(&redis_url(), &format!("{prefix}:*:e:bad"))
        .pop()
        .unwrap();
    redis::cmd("SETRANGE")
        .arg(&bad)
        .arg(0)
        .arg(&[9u8][..])
        .query::<i64>(&mut c)
        .unwrap();
    let gone = scan_names(&redis_url(), &format!("{prefix}:*:e:gone"))
        .pop()
        .unwrap();
    redis::cmd("DEL").arg(&gone).query::<i64>(&mut c).unwrap();

    assert!(matches!(
        store.status("bad").await,
        Err(StoreError::Corrupt { id, .. }) if id == "bad"
    ));
    let claimed = store.claim_due(T0, 10, 1000).await.unwrap();
    assert_eq!(ids(&claimed), vec!["good"]);
    assert_eq!(store.metrics().corrupt.get(), 1);
    assert_eq!(store.metrics().orphans.get(), 1);
    // The corrupt one stays firing and comes back after its lease; the
    // missing one is gone from the indexes.
    let up = store.upcoming(0, u64::MAX, 10).await.unwrap();
    assert_eq!(
        up,
        vec![(T0 + 1000, "bad".into()), (T0 + 1000, "good".into())]
    );
    // A batch with a corrupt entry in it still works for the others.
    store
        .hold(vec!["bad".into(), "good".into()], T0 + 5000, T0 + 1)
        .await
        .unwrap();
    assert_eq!(store.metrics().corrupt.get(), 2);
    store
        .delivered(vec!["bad".into(), "good".into()], T0 + 2)
        .await
        .unwrap();
    let good = store.status("good").await.unwrap().unwrap();
    assert_eq!(good.state, State::Delivered);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_configurations_and_unreachable_redis_are_refused() {
    let (prefix, _guard) = fresh_prefix();
    connect(config(&prefix)).await;
    let other = RedisStore::connect(RedisConfig {
        shards: 8,
        ..config(&prefix)
    })
    .await;
    assert!(
        matches!(&other, Err(StoreError::Unavailable(m)) if m.contains("16 shards")),
        "{other:?}"
    );
    let braces = RedisStore::connect(config("a{b}")).await;
    assert!(matches!(&braces, Err(StoreError::Unavailable(m)) if m.contains("brace")));
    let port = free_port(false);
    let down = RedisStore::connect(RedisConfig::single(format!("redis://127.0.0.1:{port}"))).await;
    assert!(matches!(&down, Err(StoreError::Unavailable(m)) if m.contains("cannot connect")));
}

// ---------------------------------------------------------------------------
// Persistence and restarts.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistence_settings_are_read_and_reported() {
    let server = Server::start(&["--appendonly", "yes", "--appendfsync", "always"]);
    let open = || connect(RedisConfig::single(server.url()));
    let store = open().await;
    assert_eq!(*store.durability(), Durability::Always);
    assert_eq!(store.persistence().eviction, Eviction::Never);
    let mut c = sync_conn(&server.url());
    let mut set = |k: &str, v: &str| {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg(k)
            .arg(v)
            .query::<()>(&mut c)
            .unwrap()
    };
    set("appendfsync", "everysec");
    set("maxmemory-policy", "allkeys-lru");
    let store = open().await;
    assert_eq!(*store.durability(), Durability::EverySec);
    assert_eq!(
        store.persistence().eviction,
        Eviction::Policy("allkeys-lru".into())
    );
    set("appendfsync", "no");
    assert_eq!(*open().await.durability(), Durability::OsDecides);
    set("appendonly", "no");
    assert_eq!(*open().await.durability(), Durability::NoAof);
    drop(server);

    let locked = Server::start(&["--rename-command", "CONFIG", ""]);
    let store = connect(RedisConfig::single(locked.url())).await;
    assert!(matches!(store.durability(), Durability::Unknown(_)));
    assert_eq!(store.persistence().eviction, Eviction::Unknown);
}

/// Redis (AOF, fsync always) is SIGKILLed mid-run and restarted on the same
/// directory and port: every acknowledged change is there, operations fail
/// while it is down, and the same store object works again after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_and_restarted_with_aof_keeps_every_acknowledged_entry() {
    let mut server = Server::start(&["--appendonly", "yes", "--appendfsync", "always"]);
    let store = connect(RedisConfig {
        operation_timeout: Duration::from_secs(5),
        ..RedisConfig::single(server.url())
    })
    .await;
    assert_eq!(*store.durability(), Durability::Always);
    let mut all: Vec<Entry> = (0..400)
        .map(|i| entry(&format!("p{i:03}"), T0 + 10_000 + i, None, "u"))
        .collect();
    all.extend((0..20).map(|i| online_entry(&format!("h{i:02}"), T0, "alice")));
    all.extend((0..20).map(|i| entry(&format!("f{i:02}"), T0, None, "u")));
    let out = store.insert(all.clone(), T0).await.unwrap();
    assert!(out.iter().all(|o| *o == Insert::Accepted));
    let claimed = store.claim_due(T0, 100, LEASE).await.unwrap();
    assert_eq!(claimed.len(), 40);
    let held: Vec<String> = (0..20).map(|i| format!("h{i:02}")).collect();
    store
        .hold(held.clone(), T0 + 600_000, T0 + 1)
        .await
        .unwrap();
    assert!(matches!(
        store.cancel("p000", T0 + 2).await.unwrap(),
        Cancel::Cancelled(_)
    ));
    // Callbacks: f00-f04 wait for a retry, f05-f09 are dead letters, each
    // with its attempt logged.
    let f = |i: usize| format!("f{i:02}");
    let waiting = (0..5)
        .map(|i| RetryWait {
            id: f(i),
            at_ms: T0 + 20,
            recheck: None,
            attempt: Some(attempt(1, T0 + 3)),
            counted: true,
        })
        .collect();
    store.retry_wait(waiting, T0 + 3).await.unwrap();
    let dead = (5..10)
        .map(|i| Finish {
            id: f(i),
            ending: Ending::Dead,
            recheck: None,
            attempt: Some(attempt(1, T0 + 3)),
        })
        .collect();
    store.finish(dead, T0 + 3).await.unwrap();

    server.kill9();
    assert!(matches!(
        store.status("p001").await,
        Err(StoreError::Unavailable(_))
    ));
    assert!(matches!(
        store.insert(vec![entry("late", T0, None, "u")], T0).await,
        Err(StoreError::Unavailable(_))
    ));
    server.restart();

    let first = eventually(
        "the store to reach Redis again",
        Duration::from_secs(15),
        || async { store.status("p001").await.ok() },
    )
    .await;
    assert_eq!(first.map(|s| s.state), Some(State::Scheduled));
    for e in &all {
        let s = store
            .status(e.id())
            .await
            .unwrap()
            .expect("acknowledged entry lost");
        let want = match e.id() {
            "p000" => State::Cancelled,
            id if id.starts_with('h') => State::Held,
            "f00" | "f01" | "f02" | "f03" | "f04" => State::RetryWait,
            "f05" | "f06" | "f07" | "f08" | "f09" => State::Dead,
            id if id.starts_with('f') => State::Firing,
            _ => State::Scheduled,
        };
        assert_eq!(s.state, want, "{}", e.id());
        let logged = store.attempts(e.id()).await.unwrap().len();
        let callback = matches!(want, State::RetryWait | State::Dead);
        assert_eq!(logged, usize::from(callback), "{}", e.id());
    }
    // Scripts are loaded again transparently (Redis forgot them).
    let back = store.claim_held("alice", T0 + 3, 100, LEASE).await.unwrap();
    assert_eq!(ids(&back), held);
    let due = store.claim_due(T0 + 10_010, 100, LEASE).await.unwrap();
    assert_eq!(due.len(), 15, "10 scheduled, 5 retries");
    for e in &due {
        let retry = e.id().starts_with('f');
        let phase = if retry {
            Phase::Callback
        } else {
            Phase::Deliver
        };
        assert_eq!(e.phase, phase, "{}", e.id());
    }
    let c = store.counts(T0, vec![]).await.unwrap();
    assert_eq!(
        (c.scheduled, c.firing, c.held, c.retry_wait),
        (vec![389], 45, 0, 0)
    );
    // A dead letter kept its body through the crash.
    assert!(matches!(
        store.replay("f05", T0 + 10_011).await.unwrap(),
        Replay::Replayed(_)
    ));
    let back = store.claim_due(T0 + 10_011, 100, LEASE).await.unwrap();
    let f05 = back.iter().find(|e| e.id() == "f05").expect("f05 is due");
    let sent = all.iter().find(|e| e.id() == "f05").unwrap();
    assert_eq!(f05.notification, sent.notification);
    assert_eq!((f05.phase, f05.attempts), (Phase::Callback, 1));
}

/// An entry claimed by an older Herald is listed in the firing set
/// (`l:firing`); a claim now leaves it in scheduled's. Settling either
/// takes it out of where it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_listed_as_firing_by_an_older_router_leaves_that_list_when_it_settles() {
    let (prefix, _guard) = fresh_prefix();
    let store = connect(config(&prefix)).await;
    let (old, new) = (
        entry("old", T0, Some("t"), "u"),
        entry("new", T0, Some("t"), "u"),
    );
    store.insert(vec![old, new], T0).await.unwrap();
    assert_eq!(store.claim_due(T0, 10, 60_000).await.unwrap().len(), 2);
    let shard = shard_of_entry(&prefix, "old");
    let base = format!("{prefix}:{{{shard}}}");
    let scheduled = format!("{base}:l:scheduled:t");
    let firing = format!("{base}:l:firing:t");
    let mut member = T0.to_be_bytes().to_vec();
    member.extend_from_slice(b"old");
    let mut c = sync_conn(&redis_url());
    // What an older router's claim left: the member in the firing set.
    let moved: i64 = redis::cmd("ZREM")
        .arg(&scheduled)
        .arg(&member)
        .query(&mut c)
        .unwrap();
    assert_eq!(moved, 1, "a claim leaves the entry in scheduled's list");
    let _: i64 = redis::cmd("ZADD")
        .arg(&firing)
        .arg(0)
        .arg(&member)
        .query(&mut c)
        .unwrap();
    // Released, it is listed as scheduled again; claimed again, it stays.
    store
        .release(vec!["old".into()], T0 + 5, T0 + 1)
        .await
        .unwrap();
    let listed = |state| ListFilter {
        topic: Some("t".into()),
        state,
    };
    let page = store
        .list(listed(State::Scheduled), None, 10)
        .await
        .unwrap();
    assert_eq!(
        page.items.len(),
        1,
        "the released one is listed as scheduled"
    );
    assert_eq!(
        ids(&store.claim_due(T0 + 5, 10, 60_000).await.unwrap()),
        ["old"]
    );
    let page = store.list(listed(State::Firing), None, 10).await.unwrap();
    assert_eq!(page.items.len(), 2);
    store
        .delivered(vec!["old".into(), "new".into()], T0 + 6)
        .await
        .unwrap();
    for set in [&scheduled, &firing] {
        let left: i64 = redis::cmd("ZCARD").arg(set).query(&mut c).unwrap();
        assert_eq!(left, 0, "{set} still lists something");
    }
    let delivered = store
        .list(listed(State::Delivered), None, 10)
        .await
        .unwrap();
    assert_eq!(delivered.items.len(), 2);
}

// ---------------------------------------------------------------------------
// Presence: what edges report, and the presence API's answers from it.

mod presence {
    use std::collections::BTreeMap;

    use herald_engine::presence::transition::{Move, Transition, event_id};
    use herald_engine::presence::view::{MailboxSessions, PresenceView, UserSessions};
    use herald_engine::presence::{PresenceBook, PresenceReport};

    use super::*;

    fn mailbox(client: &str, since_ms: u64, transport: &str, n: u32) -> MailboxSessions {
        MailboxSessions {
            site: String::new(),
            client: Some(client.into()),
            since_ms,
            by_transport: BTreeMap::from([(transport.to_owned(), n)]),
        }
    }

    fn report(
        edge: &str,
        boot: &str,
        online: &[&str],
        detail: Vec<UserSessions>,
    ) -> PresenceReport {
        PresenceReport {
            edge: edge.into(),
            boot: boot.into(),
            seq: 0,
            online: online.iter().map(|u| (*u).to_owned()).collect(),
            offline: vec![],
            detail,
            ..PresenceReport::default()
        }
    }

    fn numbered(edge: &str, boot: &str, seq: u64, detail: Vec<UserSessions>) -> PresenceReport {
        PresenceReport {
            seq,
            ..report(edge, boot, &[], detail)
        }
    }

    fn moves(t: &[Transition]) -> Vec<(String, Move, String)> {
        t.iter()
            .map(|t| (t.user.clone(), t.event, t.edge.clone()))
            .collect()
    }

    #[tokio::test]
    async fn a_report_delivered_by_two_roots_moves_a_user_once_and_the_last_edge_takes_them_offline()
     {
        let (prefix, _guard) = fresh_prefix();
        let store = connect(config(&prefix)).await;
        // Two routers on one Redis, each getting every report (two roots).
        let (a, b) = (
            store.presence(Duration::from_secs(30)),
            store.presence(Duration::from_secs(30)),
        );
        let on_e1 = numbered(
            "e1",
            "b1",
            1,
            vec![user("alice", vec![mailbox("acme", 100, "websocket", 1)])],
        );
        let first = a.record(&on_e1, 1_000).await.unwrap();
        assert_eq!(
            moves(&first),
            vec![("alice".into(), Move::Online, "e1".into())]
        );
        let t = &first[0];
        assert_eq!(
            (t.client.as_deref(), t.site.as_str(), t.at_ms),
            (Some("acme"), "", 100)
        );
        assert_eq!(t.id, event_id(&["e1", "b1", "1", "alice", "online"]));
        assert!(
            b.record(&on_e1, 1_001).await.unwrap().is_empty(),
            "the second root's copy moves nobody"
        );
        // A second edge: alice is online already.
        let on_e2 = numbered(
            "e2",
            "b2",
            1,
            vec![user("alice", vec![mailbox("acme", 200, "eventsource", 1)])],
        );
        assert!(a.record(&on_e2, 1_002).await.unwrap().is_empty());
        assert!(b.record(&on_e2, 1_002).await.unwrap().is_empty());
        // She leaves the first edge: still online on the second.
        let off_e1 = numbered("e1", "b1", 2, vec![user("alice", vec![])]);
        assert!(b.record(&off_e1, 1_003).await.unwrap().is_empty());
        assert!(a.record(&off_e1, 1_003).await.unwrap().is_empty());
        // And the second: offline, once.
        let off_e2 = numbered("e2", "b2", 2, vec![user("alice", vec![])]);
        let last = b.record(&off_e2, 1_004).await.unwrap();
        assert_eq!(
            moves(&last),
            vec![("alice".into(), Move::Offline, "e2".into())]
        );
        assert_eq!(
            last[0].client.as_deref(),
            Some("acme"),
            "named from what the edge had"
        );
        assert_eq!(last[0].at_ms, 1_004);
        assert_eq!(last[0].id, event_id(&["e2", "b2", "2", "alice", "offline"]));
        assert!(a.record(&off_e2, 1_005).await.unwrap().is_empty());
        // Back again: a new online with its own id.
        let again = numbered(
            "e1",
            "b1",
            3,
            vec![user("alice", vec![mailbox("acme", 300, "websocket", 1)])],
        );
        let back = a.record(&again, 1_006).await.unwrap();
        assert_eq!(
            moves(&back),
            vec![("alice".into(), Move::Online, "e1".into())]
        );
        assert_ne!(back[0].id, first[0].id);
        // An older edge's report (no detail, no seq) moves users too.
        let legacy = report("e9", "b9", &["carol"], vec![]);
        let moved = a.record(&legacy, 1_007).await.unwrap();
        assert_eq!(
            moves(&moved),
            vec![("carol".into(), Move::Online, "e9".into())]
        );
        assert_eq!(moved[0].at_ms, 1_007);
        // The mark does not show in the presence API.
        let alice = a.user("alice", None).await.unwrap();
        assert_eq!(alice.edges.len(), 1);
    }

    #[tokio::test]
    async fn the_sweep_takes_the_users_of_a_dead_edge_process_offline_once_and_bounded() {
        let (prefix, _guard) = fresh_prefix();
        let store = connect(config(&prefix)).await;
        let book = store.presence(Duration::from_secs(30));
        let other = store.presence(Duration::from_secs(30));
        let on = |u: &str| user(u, vec![mailbox("acme", 100, "websocket", 1)]);
        let moved = book
            .record(
                &numbered("e1", "b1", 1, vec![on("alice"), on("bob"), on("carol")]),
                1_000,
            )
            .await
            .unwrap();
        assert_eq!(moved.len(), 3);
        // bob is on a second edge too.
        assert!(
            book.record(&numbered("e2", "b2", 1, vec![on("bob")]), 1_000)
                .await
                .unwrap()
                .is_empty()
        );
        // Nothing is dead yet.
        let swept = book.sweep(1_100, 100).await.unwrap();
        assert_eq!((swept.users, swept.moved.len()), (0, 0));
        // e1 restarts: its old process is dead at once.
        assert!(
            book.record(&numbered("e1", "b1-new", 1, vec![]), 2_000)
                .await
                .unwrap()
                .is_empty()
        );
        // Bounded: two users this round (two routers sweeping share them).
        let first = book.sweep(2_100, 2).await.unwrap();
        let second = other.sweep(2_100, 100).await.unwrap();
        assert_eq!(first.users + second.users, 3);
        assert_eq!(first.users, 2);
        let mut gone: Vec<(String, Move, String)> = moves(&first.moved);
        gone.extend(moves(&second.moved));
        gone.sort();
        assert_eq!(
            gone,
            vec![
                ("alice".into(), Move::Offline, "e1".into()),
                ("carol".into(), Move::Offline, "e1".into()),
            ],
            "bob is still on e2"
        );
        let alice = first
            .moved
            .iter()
            .chain(&second.moved)
            .find(|t| t.user == "alice")
            .unwrap();
        assert_eq!(
            alice.id,
            event_id(&["e1", "b1", "expired", "alice", "offline"])
        );
        assert_eq!(alice.client.as_deref(), Some("acme"));
        let again = book.sweep(2_200, 100).await.unwrap();
        assert_eq!(
            (again.users, again.moved.len()),
            (0, 0),
            "each user is swept once"
        );
        // alice comes back on the new process: online again.
        let back = book
            .record(&numbered("e1", "b1-new", 2, vec![on("alice")]), 3_000)
            .await
            .unwrap();
        assert_eq!(
            moves(&back),
            vec![("alice".into(), Move::Online, "e1".into())]
        );
        // bob leaves e2: his last live edge.
        let off = book
            .record(&numbered("e2", "b2", 2, vec![user("bob", vec![])]), 3_100)
            .await
            .unwrap();
        assert_eq!(
            moves(&off),
            vec![("bob".into(), Move::Offline, "e2".into())]
        );
    }

    #[tokio::test]
    async fn an_edge_whose_liveness_key_expires_is_swept() {
        let (prefix, _guard) = fresh_prefix();
        let store = connect(config(&prefix)).await;
        let book = store.presence(Duration::from_millis(300));
        let on = user("dave", vec![mailbox("acme", 100, "websocket", 1)]);
        assert_eq!(
            book.record(&numbered("e1", "b1", 1, vec![on]), 1_000)
                .await
                .unwrap()
                .len(),
            1
        );
        let swept = until(
            "e1's key expires and the sweep takes dave offline",
            async || {
                let s = book.sweep(2_000, 100).await.unwrap();
                (s.users > 0).then_some(s)
            },
        )
        .await;
        assert_eq!(
            moves(&swept.moved),
            vec![("dave".into(), Move::Offline, "e1".into())]
        );
    }

    fn user(name: &str, mailboxes: Vec<MailboxSessions>) -> UserSessions {
        UserSessions {
            user: name.into(),
            mailboxes,
            missed_since_ms: 0,
        }
    }

    async fn until<T>(what: &str, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(v) = probe().await {
                return v;
            }
            assert!(Instant::now() < deadline, "{what}");
            tokio::time::sleep(Duration::from_millis(20)).await; // poll interval
        }
    }

    #[tokio::test]
    async fn sessions_edges_and_companies_follow_the_reports_and_edge_liveness() {
        let (prefix, _guard) = fresh_prefix();
        let store = connect(config(&prefix)).await;
        let book = store.presence(Duration::from_millis(400));
        book.record(
            &report(
                "e1",
                "b1",
                &["alice", "bob"],
                vec![
                    user("alice", vec![mailbox("acme", 100, "websocket", 1)]),
                    user("bob", vec![mailbox("acme", 90, "websocket", 2)]),
                ],
            ),
            0,
        )
        .await
        .unwrap();
        book.record(
            &report(
                "e2",
                "b1",
                &["alice"],
                vec![user("alice", vec![mailbox("acme", 50, "xhr_streaming", 1)])],
            ),
            0,
        )
        .await
        .unwrap();
        // An edge of the previous version: no detail.
        book.record(&report("e3", "b1", &["carol"], vec![]), 0)
            .await
            .unwrap();

        let alice = book.user("alice", None).await.unwrap();
        assert!(alice.online);
        assert_eq!(alice.sessions.total, 2);
        assert_eq!(alice.since_ms, Some(50));
        let edges: Vec<_> = alice.edges.iter().map(|e| e.edge.as_str()).collect();
        assert_eq!(edges, ["e1", "e2"]);
        let carol = book.user("carol", None).await.unwrap();
        assert_eq!(carol.sessions.by_transport["unknown"], 1);
        assert_eq!(carol.since_ms, None);
        let acme = book.client("acme").await.unwrap();
        assert_eq!((acme.users, acme.sessions), (2, 4));
        let page = book.clients(None, 10).await.unwrap();
        assert_eq!(page.items, vec![acme.clone()]);
        assert_eq!(page.next, None);

        // alice's session on e2 ends (her last there).
        let mut gone = report("e2", "b1", &[], vec![user("alice", vec![])]);
        gone.offline = vec!["alice".into()];
        book.record(&gone, 0).await.unwrap();
        let acme = book.client("acme").await.unwrap();
        assert_eq!((acme.users, acme.sessions), (2, 3));
        assert_eq!(book.user("alice", None).await.unwrap().edges.len(), 1);

        // e1 goes quiet: once its liveness key expires its users stop
        // counting (e2 keeps reporting).
        until("e1 to stop counting", async || {
            book.record(&report("e2", "b1", &[], vec![]), 0)
                .await
                .unwrap();
            let a = book.user("alice", None).await.unwrap();
            (!a.online).then_some(())
        })
        .await;
        assert_eq!(book.client("acme").await.unwrap().users, 0);

        // e1 restarts (a new boot): the old process's entries are swept
        // from the company when it is read, and the company leaves the list.
        book.record(&report("e1", "b2", &[], vec![]), 0)
            .await
            .unwrap();
        assert!(book.clients(None, 10).await.unwrap().items.is_empty());
        let left: Vec<String> = scan_names(&redis_url(), &format!("{prefix}:{{pc}}:*"));
        assert!(left.is_empty(), "{left:?}");
    }

    #[tokio::test]
    async fn pages_of_companies_follow_name_order() {
        let (prefix, _guard) = fresh_prefix();
        let store = connect(config(&prefix)).await;
        let book = store.presence(Duration::from_secs(30));
        let detail = ["c1", "c2", "c3"]
            .iter()
            .enumerate()
            .map(|(i, c)| user(&format!("u{i}"), vec![mailbox(c, 1, "websocket", 1)]))
            .collect();
        book.record(&report("e1", "b1", &["u0", "u1", "u2"], detail), 0)
            .await
            .unwrap();
        let first = book.clients(None, 2).await.unwrap();
        let names: Vec<_> = first.items.iter().map(|c| c.client.as_str()).collect();
        assert_eq!(names, ["c1", "c2"]);
        assert_eq!(first.next.as_deref(), Some("c2"));
        let rest = book.clients(first.next.as_deref(), 2).await.unwrap();
        assert_eq!(rest.items.len(), 1);
        assert_eq!(rest.items[0].client, "c3");
        assert_eq!(rest.next, None);
    }
}

// The cluster's stats parts (RedisStatsBook): the latest per process,
// bounded, old and unreadable ones forgotten.

mod stats_book {
    use herald_engine::schedule::store::redis::{FORGET_MS, MAX_PARTS, Put};
    use herald_engine::stats::part::Part;

    use super::*;

    fn part(kind: &str, id: &str, at_ms: u64, mailboxes: u64) -> Part {
        Part {
            kind: kind.into(),
            id: id.into(),
            at_ms,
            mailboxes,
            ..Part::default()
        }
    }

    #[tokio::test]
    async fn the_book_keeps_each_processs_latest_and_forgets_old_ones() {
        let (prefix, _guard) = fresh_prefix();
        let store = connect(config(&prefix)).await;
        let book = store.stats_book();
        let now = T0 + FORGET_MS;
        assert_eq!(book.put(&part("edge", "e1", now, 1)).await, Ok(Put::Stored));
        assert_eq!(
            book.put(&part("edge", "e1", now + 5, 2)).await,
            Ok(Put::Stored)
        );
        // An older report (out of order) does not replace the newer one.
        assert_eq!(
            book.put(&part("edge", "e1", now + 1, 9)).await,
            Ok(Put::Older)
        );
        // A router and an edge of the same id are two parts.
        assert_eq!(
            book.put(&part("router", "e1", now, 3)).await,
            Ok(Put::Stored)
        );
        // Measured more than FORGET_MS ago: removed when read.
        assert_eq!(
            book.put(&part("edge", "gone", T0 - 1, 4)).await,
            Ok(Put::Stored)
        );
        // Not a part at all: removed when read.
        let mut c = sync_conn(&redis_url());
        let _: () = redis::cmd("HSET")
            .arg(format!("{prefix}:stats"))
            .arg("edge:junk")
            .arg("{not json")
            .query(&mut c)
            .unwrap();
        let mut all = book.all(now + 5).await.unwrap();
        all.sort_by(|a, b| (&a.kind, &a.id).cmp(&(&b.kind, &b.id)));
        let seen: Vec<(&str, &str, u64)> = all
            .iter()
            .map(|p| (p.kind.as_str(), p.id.as_str(), p.mailboxes))
            .collect();
        assert_eq!(seen, [("edge", "e1", 2), ("router", "e1", 3)]);
        let fields: usize = redis::cmd("HLEN")
            .arg(format!("{prefix}:stats"))
            .query(&mut c)
            .unwrap();
        assert_eq!(fields, 2, "the old and the unreadable part are gone");
    }

    #[tokio::test]
    async fn a_full_book_refuses_new_processes_and_keeps_updating_known_ones() {
        let (prefix, _guard) = fresh_prefix();
        let store = connect(config(&prefix)).await;
        let book = store.stats_book();
        let mut c = sync_conn(&redis_url());
        let mut pipe = redis::pipe();
        for i in 0..MAX_PARTS {
            let p = part("edge", &format!("e{i}"), T0, 1);
            pipe.cmd("HSET")
                .arg(format!("{prefix}:stats"))
                .arg(format!("edge:e{i}"))
                .arg(serde_json::to_string(&p).unwrap())
                .ignore();
        }
        pipe.query::<()>(&mut c).unwrap();
        assert_eq!(book.put(&part("edge", "new", T0, 1)).await, Ok(Put::Full));
        assert_eq!(
            book.put(&part("edge", "e7", T0 + 1, 5)).await,
            Ok(Put::Stored)
        );
        let all = book.all(T0 + 1).await.unwrap();
        assert_eq!(all.len(), MAX_PARTS);
        assert_eq!(all.iter().find(|p| p.id == "e7").unwrap().mailboxes, 5);
    }
}

/// Data written before meta `lists` 2 listed an entry with a topic under
/// its topic alone, so a list without a topic missed it. A router
/// connecting to it lists those under their state too and records
/// `lists` 2: the list without a topic has every entry, and keeps them as
/// they change.
#[tokio::test]
async fn data_listed_by_topic_alone_is_listed_without_a_topic_once_connected() {
    let (prefix, _guard) = fresh_prefix();
    {
        let store = connect(config(&prefix)).await;
        store_suite::fill_for_list_upgrade(&store).await;
    }
    // What an older router wrote: topic entries in their topic's list alone.
    let url = redis_url();
    let mut c = sync_conn(&url);
    let mut removed = 0;
    for topic_list in scan_names(&url, &format!("{prefix}:*:l:*:chat")) {
        let all = topic_list.trim_end_matches(":chat").to_owned();
        let members: Vec<Vec<u8>> = redis::cmd("ZRANGE")
            .arg(&topic_list)
            .arg(0)
            .arg(-1)
            .query(&mut c)
            .unwrap();
        let n: usize = redis::cmd("ZREM")
            .arg(&all)
            .arg(&members)
            .query(&mut c)
            .unwrap();
        removed += n;
    }
    assert_eq!(removed, 25);
    let _: () = redis::cmd("HDEL")
        .arg(format!("{prefix}:meta"))
        .arg("lists")
        .query(&mut c)
        .unwrap();
    let store = connect(config(&prefix)).await;
    store_suite::lists_every_entry_after_upgrade(&store).await;
    let lists: Option<u8> = redis::cmd("HGET")
        .arg(format!("{prefix}:meta"))
        .arg("lists")
        .query(&mut c)
        .unwrap();
    assert_eq!(lists, Some(2));
}
