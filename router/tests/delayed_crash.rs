//! Crash tests of the distributed router: `kill -9` the `herald-router`
//! binary while delayed notifications are pending, and while they are
//! firing, then start another on the same Redis. Every notification
//! answered 202 reaches the edges exchange at least once, none before its
//! due time. Real RabbitMQ and Redis.

mod harness;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use harness::*;
use herald_amqp::Topology;
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_herald-router");

/// The router binary; SIGKILLed when dropped.
struct RouterProcess {
    child: Child,
    addr: SocketAddr,
}

impl RouterProcess {
    fn start(config: &Path) -> RouterProcess {
        let mut child = Command::new(BIN)
            .arg("--config")
            .arg(config)
            .args(["--log-format", "json"])
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        // Ready once it listens and consumes (the topology is declared).
        let mut addr = None;
        loop {
            let line = lines.next().expect("the router exited").unwrap();
            let v: Value = serde_json::from_str(&line).unwrap_or_default();
            if let Some(a) = v["fields"]["addr"].as_str() {
                addr = Some(a.parse().unwrap());
            }
            if addr.is_some() && line.contains("consuming publications") {
                break;
            }
        }
        std::thread::spawn(move || for _ in lines {});
        RouterProcess {
            child,
            addr: addr.unwrap(),
        }
    }

    fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for RouterProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A config for a router on `topology`, with a Redis prefix of its own and
/// a short lease.
fn write_config(dir: &Path, topology: &Topology, prefix: &str) -> std::path::PathBuf {
    let file = dir.join("router.toml");
    let t = topology;
    std::fs::write(
        &file,
        format!(
            "listen = \"127.0.0.1:0\"\napi_keys = [\"{API_KEY}\"]\n\
             [amqp]\nurl = \"{}\"\n\
             [amqp.topology]\nexchange = \"{}\"\nqueue = \"{}\"\ndead_exchange = \"{}\"\ndead_queue = \"{}\"\nedges_exchange = \"{}\"\npresence_exchange = \"{}\"\npresence_queue = \"{}\"\n\
             [redis]\nurl = \"{}\"\nprefix = \"{prefix}\"\n\
             [schedule]\nlease_ms = 1000\nclaim_batch = 200\n",
            amqp_url(),
            t.exchange,
            t.queue,
            t.dead_exchange,
            t.dead_queue,
            t.edges_exchange,
            t.presence_exchange,
            t.presence_queue,
            redis_url(),
        ),
    )
    .unwrap();
    file
}

/// Publish `n` delayed notifications over HTTP; each accepted id with its
/// due time.
async fn publish(addr: SocketAddr, prefix: &str, n: usize, delay_ms: u64) -> HashMap<String, u64> {
    let http = reqwest::Client::new();
    let mut due = HashMap::new();
    let ids: Vec<String> = (0..n).map(|i| format!("{prefix}-{i}")).collect();
    for chunk in ids.chunks(500) {
        let batch: Vec<Value> = chunk
            .iter()
            .map(
                |id| json!({"id": id, "users": ["u"], "event": "crash.test", "delay_ms": delay_ms}),
            )
            .collect();
        let r = http
            .post(format!("http://{addr}/v1/notifications"))
            .bearer_auth(API_KEY)
            .json(&batch)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 202);
        let body: Value = r.json().await.unwrap();
        for s in body["scheduled"].as_array().unwrap() {
            due.insert(
                s["id"].as_str().unwrap().to_owned(),
                s["due_at_ms"].as_u64().unwrap(),
            );
        }
    }
    due
}

/// Drain the edge queue until every id in `due` has been seen (duplicates
/// allowed: at least once); none may arrive before its due time.
async fn expect_all(broker: &Broker, due: &HashMap<String, u64>, seen: &mut HashSet<String>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.len() < due.len() {
        assert!(
            Instant::now() < deadline,
            "{} of {} delivered",
            seen.len(),
            due.len()
        );
        let got = broker
            .channel
            .basic_get(
                broker.edge_queue.as_str().into(),
                lapin::options::BasicGetOptions { no_ack: true },
            )
            .await
            .unwrap();
        let Some(m) = got else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let at = now_ms();
        for n in notifications_of(&m.delivery) {
            let due_at = due[&n.id];
            // Forwarded when due; read here a little later, never before.
            assert!(
                at >= due_at,
                "{} forwarded before its due time {due_at} (read at {at})",
                n.id
            );
            seen.insert(n.id);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_pending_loses_nothing() {
    let topology = Topology::with_suffix(&suffix());
    let broker = Broker::connect(topology.clone()).await;
    let prefix = RedisPrefix(format!("herald-crash{}", suffix()));
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &topology, &prefix.0);
    let first = RouterProcess::start(&config);
    let due = publish(first.addr, "pending", 2000, 4000).await;
    let earliest = *due.values().min().unwrap();
    assert!(
        now_ms() < earliest,
        "the kill must come while all are pending"
    );
    first.kill9();
    let _second = RouterProcess::start(&config);
    let mut seen = HashSet::new();
    expect_all(&broker, &due, &mut seen).await;
    broker.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_firing_loses_nothing() {
    let topology = Topology::with_suffix(&suffix());
    let broker = Broker::connect(topology.clone()).await;
    let prefix = RedisPrefix(format!("herald-crash{}", suffix()));
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &topology, &prefix.0);
    let first = RouterProcess::start(&config);
    let due = publish(first.addr, "firing", 20_000, 1500).await;
    // Wait for the first forwards (bundles of up to 256), then kill it
    // mid-stream.
    let deadline = Instant::now() + Duration::from_secs(30);
    while broker.ready(&broker.edge_queue).await < 2 {
        assert!(Instant::now() < deadline, "nothing fired");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    first.kill9();
    let _second = RouterProcess::start(&config);
    let mut seen = HashSet::new();
    expect_all(&broker, &due, &mut seen).await;
    broker.cleanup().await;
}
