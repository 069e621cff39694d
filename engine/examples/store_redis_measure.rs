//! Measure the Redis store: insert and claim throughput, the memory each
//! pending entry costs, and behaviour with many entries pending.
//!
//! ```text
//! cargo run --release -p herald-router --example store_redis_measure -- \
//!     --url redis://127.0.0.1:6379 --entries 1000000
//! ```
//!
//! `--url` may name a Redis Cluster's masters, separated by commas: the
//! store connects as a cluster client and the CPU and memory figures add
//! up every master.
//!
//! Works under a fresh key prefix and deletes it at the end (`--keep` to
//! leave it). Phases, each timed: insert `--entries` entries in batches of
//! `--batch` from `--concurrency` tasks; read `INFO memory` before and
//! after (bytes per pending entry); time `upcoming`, `counts` and single
//! claims with everything pending; claim (`--claim-batches` batches, or
//! everything), mark delivered, purge. Results are printed as one line per
//! measurement, for docs/redis-store.md. `--keep`, then `--reuse PREFIX`,
//! measures claims again with the same entries pending. `--callback` settles
//! the claimed entries as a callback sender does instead: its step marked
//! (`calling`), then finished as delivered with its attempt logged.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use herald_engine::callback::attempt::{Attempt, Kind, Verdict};
use herald_engine::schedule::entry::{Entry, Millis, Phase, Step};
use herald_engine::schedule::store::redis::{RedisConfig, RedisStore};
use herald_engine::schedule::store::{Ending, Finish, Store};
use herald_protocol::envelope::{Notification, Scope};
use tokio::sync::Mutex;

#[derive(Parser, Debug)]
struct Args {
    /// The Redis server to measure, or a cluster's masters separated by
    /// commas (the CPU and memory figures add up every one of them).
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    url: String,
    /// Entries to insert.
    #[arg(long, default_value_t = 1_000_000)]
    entries: usize,
    /// Entries per insert call.
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    /// Concurrent callers (tasks sharing one store).
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Shards.
    #[arg(long, default_value_t = 16)]
    shards: u16,
    /// Payload bytes per entry.
    #[arg(long, default_value_t = 100)]
    payload: usize,
    /// Entries per claim.
    #[arg(long, default_value_t = 1000)]
    claim_limit: usize,
    /// Claim only this many batches (0: claim everything, then deliver and
    /// purge everything).
    #[arg(long, default_value_t = 0)]
    claim_batches: usize,
    /// Settle as callbacks: mark the step, then finish with an attempt
    /// record, instead of marking delivered.
    #[arg(long)]
    callback: bool,
    /// Leave the keys in Redis.
    #[arg(long)]
    keep: bool,
    /// Measure entries kept by an earlier `--keep` run under this prefix
    /// instead of inserting: reads and claims with them pending.
    #[arg(long)]
    reuse: Option<String>,
}

/// A fixed clock: every entry is due within the first minute after it.
const T0: Millis = 1_800_000_000_000;

fn entry(i: usize, payload: &Bytes) -> Entry {
    Entry {
        notification: Notification {
            // As long as a UUID.
            id: format!("{i:036}"),
            scope: Scope::User,
            users: vec![format!("user-{}", i % 100_000)],
            clients: vec![],
            sites: vec!["site-1".into()],
            event: "reminder.due".into(),
            topic: Some("reminders".into()),
            content_type: "application/json".into(),
            payload: payload.clone(),
            payload_is_utf8: true,
            ttl: None,
            encodings: Default::default(),
            accepted: Default::default(),
        },
        due_ms: T0 + (i % 60_000) as u64,
        accepted_ms: T0,
        when_online: false,
        attempts: 0,
        phase: Phase::Deliver,
        fire_ms: 0,
        calls: 0,
        target: Default::default(),
    }
}

/// `INFO section` of each node `url` names: one, or a cluster's masters
/// separated by commas.
fn infos(url: &str, section: &str) -> Vec<String> {
    url.split(',')
        .map(|node| {
            let mut c = redis::Client::open(node)
                .and_then(|c| c.get_connection())
                .expect("connect for INFO");
            redis::cmd("INFO").arg(section).query(&mut c).unwrap()
        })
        .collect()
}

/// Field `name` (with its colon) of an `INFO` answer.
fn field(info: &str, name: &str) -> Option<f64> {
    info.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().parse().ok())
}

/// Bytes of memory Redis uses, over every node.
fn used_memory(url: &str) -> u64 {
    infos(url, "memory")
        .iter()
        .map(|info| field(info, "used_memory:").expect("used_memory in INFO memory") as u64)
        .sum()
}

/// Microseconds of CPU Redis's main thread has used (`INFO cpu`): the
/// server's own cost of the work, whatever the client's and however loaded
/// the machine.
fn busy_usec(url: &str) -> u64 {
    infos(url, "cpu")
        .iter()
        .map(|info| {
            let secs = |name: &str| field(info, name).unwrap_or(0.0);
            ((secs("used_cpu_user_main_thread:") + secs("used_cpu_sys_main_thread:")) * 1e6) as u64
        })
        .sum()
}

/// Microseconds of CPU this process has used (user + system, from
/// /proc/self/stat, in ticks of 10 ms: Linux USER_HZ is 100): the
/// client's cost.
fn own_usec() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Field 3 (state) comes first here: utime (14) and stime (15) are at 11
    // and 12.
    let field = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    let ticks = field(11) + field(12);
    ticks * 10_000
}

/// What Redis spent per entry since `since` (see [`busy_usec`]).
fn redis_cost(url: &str, since: (u64, u64), n: usize) -> String {
    let us = busy_usec(url).saturating_sub(since.0) as f64 / n.max(1) as f64;
    let client = own_usec().saturating_sub(since.1) as f64 / n.max(1) as f64;
    format!(
        "Redis main thread {us:.1} us CPU per entry (one Redis core: at most {:.0}/s); client {client:.1} us CPU per entry",
        1e6 / us.max(0.001)
    )
}

fn costs(url: &str) -> (u64, u64) {
    (busy_usec(url), own_usec())
}

/// Every key of `node` matching `pattern`, a SCAN page at a time.
fn scan_each(node: &str, pattern: &str, mut f: impl FnMut(&mut redis::Connection, Vec<Vec<u8>>)) {
    let mut c = redis::Client::open(node)
        .and_then(|c| c.get_connection())
        .unwrap();
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(10_000)
            .query(&mut c)
            .unwrap();
        if !keys.is_empty() {
            f(&mut c, keys);
        }
        if next == 0 {
            return;
        }
        cursor = next;
    }
}

/// `MEMORY USAGE` of every key matching `pattern` (SCAN, on every node),
/// summed, and how many keys.
fn usage_of(url: &str, pattern: &str) -> (u64, u64) {
    let (mut bytes, mut keys) = (0u64, 0u64);
    for node in url.split(',') {
        scan_each(node, pattern, |c, batch| {
            for k in batch {
                let n: Option<u64> = redis::cmd("MEMORY")
                    .arg("USAGE")
                    .arg(&k)
                    .arg("SAMPLES")
                    .arg(0)
                    .query(c)
                    .unwrap();
                bytes += n.unwrap_or(0);
                keys += 1;
            }
        });
    }
    (bytes, keys)
}

/// Delete every key under `prefix` on every node: one UNLINK per key (on
/// a cluster node, keys of several slots cannot share a command),
/// pipelined.
fn delete_prefix(url: &str, prefix: &str) -> u64 {
    let mut n = 0u64;
    for node in url.split(',') {
        scan_each(node, &format!("{prefix}:*"), |c, keys| {
            n += keys.len() as u64;
            let mut pipe = redis::pipe();
            for k in &keys {
                pipe.cmd("UNLINK").arg(k).ignore();
            }
            pipe.query::<()>(c).unwrap();
        });
    }
    n
}

/// Latency percentiles of `samples`.
fn percentiles(samples: &mut [Duration]) -> String {
    if samples.is_empty() {
        return "-".into();
    }
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    format!(
        "p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        at(0.5).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3,
        at(1.0).as_secs_f64() * 1e3
    )
}

/// Run `work(i)` for i in 0..n from `tasks` tasks; the latency of each.
async fn spread<F, Fut>(n: usize, tasks: usize, work: F) -> (Duration, Vec<Duration>)
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let work = Arc::new(work);
    let next = Arc::new(AtomicUsize::new(0));
    let lat = Arc::new(Mutex::new(Vec::with_capacity(n.min(1 << 16))));
    let start = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (work, next, lat) = (Arc::clone(&work), Arc::clone(&next), Arc::clone(&lat));
        handles.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let t = Instant::now();
                let more = work(i).await;
                lat.lock().await.push(t.elapsed());
                if !more {
                    break;
                }
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    let elapsed = start.elapsed();
    let lat = std::mem::take(&mut *lat.lock().await);
    (elapsed, lat)
}

fn rate(n: usize, d: Duration) -> String {
    format!("{:.0}/s", n as f64 / d.as_secs_f64())
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let args = Args::parse();
    let prefix = args
        .reuse
        .clone()
        .unwrap_or_else(|| format!("herald-measure-{:08x}", rand::random::<u32>()));
    let store = Arc::new(
        RedisStore::connect(RedisConfig {
            prefix: prefix.clone(),
            shards: args.shards,
            operation_timeout: Duration::from_secs(60),
            ..if args.url.contains(',') {
                RedisConfig::cluster(args.url.split(','))
            } else {
                RedisConfig::single(args.url.clone())
            }
        })
        .await
        .expect("connect"),
    );
    println!(
        "redis {} prefix {prefix}: durability {}, {} shards, payload {} B, batch {}, concurrency {}",
        args.url,
        store.durability(),
        args.shards,
        args.payload,
        args.batch,
        args.concurrency
    );
    let payload = Bytes::from(
        format!(
            "{{\"text\":\"{}\"}}",
            "x".repeat(args.payload.saturating_sub(11))
        )
        .into_bytes(),
    );
    if args.reuse.is_none() {
        let before = used_memory(&args.url);
        let busy = costs(&args.url);

        // Insert.
        let batches = args.entries.div_ceil(args.batch);
        let (elapsed, mut lat) = {
            let (store, payload, n, b) = (
                Arc::clone(&store),
                payload.clone(),
                args.entries,
                args.batch,
            );
            spread(batches, args.concurrency, move |k| {
                let store = Arc::clone(&store);
                let batch: Vec<Entry> = (k * b..((k + 1) * b).min(n))
                    .map(|i| entry(i, &payload))
                    .collect();
                async move {
                    store.insert(batch, T0).await.expect("insert");
                    true
                }
            })
            .await
        };
        println!(
            "insert: {} entries in {:.2} s = {}; per call of {}: {}",
            args.entries,
            elapsed.as_secs_f64(),
            rate(args.entries, elapsed),
            args.batch,
            percentiles(&mut lat)
        );
        println!("insert: {}", redis_cost(&args.url, busy, args.entries));

        // Memory.
        let after = used_memory(&args.url);
        let per = (after.saturating_sub(before)) as f64 / args.entries as f64;
        println!(
            "memory: used_memory {} -> {} MB: {:.0} bytes per pending entry",
            before / 1_000_000,
            after / 1_000_000,
            per
        );
        if args.entries <= 100_000 {
            for (what, pattern) in [
                ("entry values", format!("{prefix}:*:e:*")),
                ("due sets", format!("{prefix}:*:due")),
                ("list sets", format!("{prefix}:*:l:*")),
            ] {
                let (bytes, keys) = usage_of(&args.url, &pattern);
                println!(
                    "memory: {what}: {keys} keys, {:.0} bytes per entry (MEMORY USAGE)",
                    bytes as f64 / args.entries as f64
                );
            }
        }
    }

    // Reads with everything pending.
    let mut reads = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        store.upcoming(0, T0 + 60_000, 1000).await.unwrap();
        reads.push(t.elapsed());
    }
    println!(
        "upcoming(1000) with all pending: {}",
        percentiles(&mut reads)
    );
    let mut reads = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        store.counts(T0, vec![1000, 10_000, 60_000]).await.unwrap();
        reads.push(t.elapsed());
    }
    println!(
        "counts(3 bounds) with all pending: {}",
        percentiles(&mut reads)
    );

    // Claim.
    let now = T0 + 120_000;
    let claimed = Arc::new(Mutex::new(Vec::<String>::with_capacity(args.entries)));
    let busy = costs(&args.url);
    let rounds = if args.claim_batches == 0 {
        usize::MAX
    } else {
        args.claim_batches
    };
    let (elapsed, mut lat) = {
        let (store, claimed, limit) = (Arc::clone(&store), Arc::clone(&claimed), args.claim_limit);
        spread(rounds, args.concurrency, move |_| {
            let (store, claimed) = (Arc::clone(&store), Arc::clone(&claimed));
            async move {
                let got = store.claim_due(now, limit, 300_000).await.expect("claim");
                let more = !got.is_empty();
                claimed
                    .lock()
                    .await
                    .extend(got.into_iter().map(|e| e.notification.id));
                more
            }
        })
        .await
    };
    let claimed = std::mem::take(&mut *claimed.lock().await);
    println!(
        "claim_due: {} entries in {:.2} s = {}; per call of {}: {}",
        claimed.len(),
        elapsed.as_secs_f64(),
        rate(claimed.len(), elapsed),
        args.claim_limit,
        percentiles(&mut lat)
    );
    println!("claim_due: {}", redis_cost(&args.url, busy, claimed.len()));

    // Delivered (or the callback's step and end), then purge.
    let n = claimed.len();
    let claimed = Arc::new(claimed);
    if args.callback {
        settle_as_callbacks(&store, &claimed, &args).await;
    }
    let busy = costs(&args.url);
    let (elapsed, mut lat) = {
        let (store, claimed, b) = (Arc::clone(&store), Arc::clone(&claimed), args.batch);
        spread(n.div_ceil(b), args.concurrency, move |k| {
            let (store, claimed) = (Arc::clone(&store), Arc::clone(&claimed));
            async move {
                let ids = claimed[k * b..((k + 1) * b).min(claimed.len())].to_vec();
                store.delivered(ids, T0 + 1).await.expect("delivered");
                true
            }
        })
        .await
    };
    println!(
        "delivered: {n} entries in {:.2} s = {}; per call of {}: {}",
        elapsed.as_secs_f64(),
        rate(n, elapsed),
        args.batch,
        percentiles(&mut lat)
    );
    println!("delivered: {}", redis_cost(&args.url, busy, n));
    let busy = costs(&args.url);
    if args.callback {
        // They were finished already: the delivered calls found nothing
        // firing (what that costs is the line above).
        println!("(--callback: delivered found nothing left to mark)");
    }
    let t = Instant::now();
    let mut purged = 0;
    loop {
        let k = store.purge(T0 + 2, 10_000).await.expect("purge");
        purged += k as usize;
        if k == 0 {
            break;
        }
    }
    println!(
        "purge: {purged} statuses in {:.2} s = {}",
        t.elapsed().as_secs_f64(),
        rate(purged, t.elapsed())
    );
    println!("purge: {}", redis_cost(&args.url, busy, purged));

    if args.keep {
        println!("kept the keys under {prefix}");
    } else {
        let t = Instant::now();
        let n = delete_prefix(&args.url, &prefix);
        println!(
            "cleanup: {n} keys deleted in {:.1} s; used_memory now {} MB",
            t.elapsed().as_secs_f64(),
            used_memory(&args.url) / 1_000_000
        );
    }
}

/// Settle `claimed` as a callback sender does: the step of each batch
/// marked `calling`, then each finished as delivered with its attempt
/// logged; prints the time and the Redis CPU of each.
async fn settle_as_callbacks(store: &Arc<RedisStore>, claimed: &Arc<Vec<String>>, args: &Args) {
    let n = claimed.len();
    let b = args.batch;
    let busy = costs(&args.url);
    let (elapsed, mut lat) = {
        let (store, claimed) = (Arc::clone(store), Arc::clone(claimed));
        spread(n.div_ceil(b), args.concurrency, move |k| {
            let (store, claimed) = (Arc::clone(&store), Arc::clone(&claimed));
            async move {
                let ids = claimed[k * b..((k + 1) * b).min(claimed.len())].to_vec();
                store
                    .mark_step(ids, Step::Calling, T0 + 1)
                    .await
                    .expect("mark_step");
                true
            }
        })
        .await
    };
    println!(
        "mark_step: {n} entries in {:.2} s = {}; per call of {b}: {}",
        elapsed.as_secs_f64(),
        rate(n, elapsed),
        percentiles(&mut lat)
    );
    println!("mark_step: {}", redis_cost(&args.url, busy, n));
    let busy = costs(&args.url);
    let (elapsed, mut lat) = {
        let (store, claimed) = (Arc::clone(store), Arc::clone(claimed));
        spread(n.div_ceil(b), args.concurrency, move |k| {
            let (store, claimed) = (Arc::clone(&store), Arc::clone(&claimed));
            async move {
                let items = claimed[k * b..((k + 1) * b).min(claimed.len())]
                    .iter()
                    .map(|id| Finish {
                        id: id.clone(),
                        ending: Ending::Delivered,
                        recheck: None,
                        attempt: Some(Attempt {
                            at_ms: T0 + 1,
                            duration_ms: 1,
                            attempt: 1,
                            kind: Kind::Call,
                            status: Some(200),
                            verdict: Verdict::Delivered,
                            error: None,
                            excerpt: "OK".into(),
                        }),
                    })
                    .collect();
                store.finish(items, T0 + 1).await.expect("finish");
                true
            }
        })
        .await
    };
    println!(
        "finish: {n} entries in {:.2} s = {}; per call of {b}: {}",
        elapsed.as_secs_f64(),
        rate(n, elapsed),
        percentiles(&mut lat)
    );
    println!("finish: {}", redis_cost(&args.url, busy, n));
}
