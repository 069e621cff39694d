//! The BullMQ peer: `bench/peers/bullmq/peer.js` run by Node.js, one process per run holding a
//! BullMQ Queue (the producer of delayed jobs) and a Worker that makes the same signed HTTP POST
//! to the same receiver as Herald (see the script's header).
//!
//! Its dependencies are pinned in `package-lock.json` and installed with `npm ci` in its
//! directory when `node_modules` is missing ([`install`]); nothing is installed globally.
//!
//! The bench and the script talk in lines: its configuration is its one argument (JSON); it
//! prints `{"event":"ready"}` once connected; `publish {plan}` on its stdin adds the jobs, each
//! with `delay` to its due time, and it prints `{"event":"published",...}`; `close` closes the
//! Worker and the Queue. Its keys are under a prefix of the run's own,
//! `herald-bench.{run id}`, which the bench deletes at the end ([`RedisProbe`]: `SCAN` +
//! `UNLINK` of that prefix only), also when the script failed.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use serde::Deserialize;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

use super::outcome::{self, BENCH, Published, RunOutcome};
use super::settings::{SIGNING_SECRET, Settings, Side, TOPIC};
use crate::harness::configs::new_run_id;
use crate::harness::interrupt::interruptible;
use crate::harness::outcome::BenchError;
use crate::harness::receiver::Receiver;
use crate::scheduled::clock::now_ms;
use crate::scheduled::plan::{Dues, Plan};
use crate::scheduled::store::RedisProbe;
use crate::scheduled::usage::{Split, Usage};

/// The queue's name (under the run's prefix).
const QUEUE: &str = "callbacks";
/// Publishing may take this long at most.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(600);
/// `close` may take this long before the process is killed.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(15);
/// Per-request timeout of the worker's calls (Herald's default `timeout_ms`).
const CALL_TIMEOUT_MS: u64 = 10_000;

/// Runs `npm ci` in the peer's directory when its `node_modules` is missing.
pub(crate) async fn install(s: &Settings) -> Result<(), BenchError> {
    if s.peer_dir.join("node_modules").join("bullmq").is_dir() {
        return Ok(());
    }
    eprintln!(
        "herald-bench: npm ci in {} (BullMQ peer)",
        s.peer_dir.display()
    );
    let status = Command::new(&s.npm)
        .args(["ci", "--no-audit", "--no-fund"])
        .current_dir(&s.peer_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .await
        .map_err(|e| BenchError::Failed(format!("cannot run {}: {e}", s.npm.display())))?;
    if !status.success() {
        return Err(BenchError::Failed(format!(
            "npm ci in {} failed ({status})",
            s.peer_dir.display()
        )));
    }
    Ok(())
}

/// A line the script prints.
#[derive(Debug, Deserialize)]
#[serde(tag = "event", rename_all = "lowercase")]
enum Event {
    Ready {
        bullmq: String,
    },
    Published {
        accepted: u64,
        seconds: f64,
        #[serde(default)]
        errors: BTreeMap<String, u64>,
    },
    Closed {
        completed: u64,
        failed: u64,
    },
    Fatal {
        error: String,
    },
}

/// The running script.
struct Peer {
    child: Child,
    stdin: ChildStdin,
    events: mpsc::Receiver<Result<Event, String>>,
    pid: u32,
}

impl Peer {
    async fn start(
        s: &Settings,
        prefix: &str,
        receiver_url: &str,
    ) -> Result<(Self, String), BenchError> {
        let config = serde_json::json!({
            "redis_url": s.system.redis_url,
            "prefix": prefix,
            "queue": QUEUE,
            "receiver_url": receiver_url,
            "concurrency": s.concurrency,
            "signing_secret": SIGNING_SECRET,
            "topic": TOPIC,
            "timeout_ms": CALL_TIMEOUT_MS,
            "payload_bytes": s.payload_bytes,
            "batch": s.batch,
            "connections": s.connections,
        });
        let stderr = match &s.peer_log {
            Some(path) => std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map(Stdio::from)
                .map_err(|e| BenchError::Failed(format!("{}: {e}", path.display())))?,
            None => Stdio::null(),
        };
        let mut child = Command::new(&s.node)
            .arg(s.peer_dir.join("peer.js"))
            .arg(config.to_string())
            .current_dir(&s.peer_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| BenchError::Failed(format!("cannot start {}: {e}", s.node.display())))?;
        let pid = child.id().unwrap_or_default();
        let (stdin, stdout) = match (child.stdin.take(), child.stdout.take()) {
            (Some(i), Some(o)) => (i, o),
            _ => return Err(BenchError::Failed("the BullMQ peer has no stdio".into())),
        };
        let (tx, events) = mpsc::channel(16);
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let event = serde_json::from_str::<Event>(&line)
                    .map_err(|e| format!("unexpected line from the BullMQ peer ({e}): {line}"));
                if tx.send(event).await.is_err() {
                    break;
                }
            }
        });
        let mut peer = Self {
            child,
            stdin,
            events,
            pid,
        };
        let startup = Duration::from_secs(s.system.startup_timeout);
        match peer.next(startup).await? {
            Event::Ready { bullmq } => Ok((peer, bullmq)),
            other => Err(BenchError::Failed(format!(
                "the BullMQ peer did not start: {other:?}"
            ))),
        }
    }

    /// The next event within `timeout`.
    async fn next(&mut self, timeout: Duration) -> Result<Event, BenchError> {
        match tokio::time::timeout(timeout, self.events.recv()).await {
            Ok(Some(Ok(Event::Fatal { error }))) => {
                Err(BenchError::Failed(format!("BullMQ peer: {error}")))
            }
            Ok(Some(Ok(event))) => Ok(event),
            Ok(Some(Err(e))) => Err(BenchError::Failed(e)),
            Ok(None) => Err(BenchError::Failed(
                "the BullMQ peer exited (see --peer-log)".into(),
            )),
            Err(_) => Err(BenchError::Failed(format!(
                "the BullMQ peer said nothing for {} s",
                timeout.as_secs()
            ))),
        }
    }

    async fn command(&mut self, line: &str) -> Result<(), BenchError> {
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .map_err(|e| BenchError::Failed(format!("writing to the BullMQ peer: {e}")))
    }

    async fn publish(&mut self, plan: &Plan) -> Result<Published, BenchError> {
        let mut p = serde_json::json!({ "first": plan.first, "count": plan.count });
        match plan.dues {
            Dues::Herd { at_ms } => {
                p["kind"] = "herd".into();
                p["at_ms"] = at_ms.into();
            }
            Dues::Steady { start_ms, rate } => {
                p["kind"] = "steady".into();
                p["start_ms"] = start_ms.into();
                p["rate"] = rate.into();
            }
            other => {
                return Err(BenchError::Failed(format!(
                    "the BullMQ peer takes herds and steady rates, not {other:?}"
                )));
            }
        }
        self.command(&format!("publish {p}")).await?;
        match self.next(PUBLISH_TIMEOUT).await? {
            Event::Published {
                accepted,
                seconds,
                errors,
            } => Ok(Published {
                accepted,
                seconds,
                refused: errors,
            }),
            other => Err(BenchError::Failed(format!(
                "the BullMQ peer answered {other:?} to publish"
            ))),
        }
    }

    fn exited(&mut self) -> Option<String> {
        self.child
            .try_wait()
            .ok()
            .flatten()
            .map(|status| format!("the BullMQ peer exited ({status})"))
    }

    /// Closes the Worker and the Queue; kills the process if that does not end in time.
    async fn close(mut self) -> String {
        let closed = match self.command("close").await {
            Ok(()) => self.next(CLOSE_TIMEOUT).await,
            Err(e) => Err(e),
        };
        let how = match closed {
            Ok(Event::Closed { completed, failed }) => {
                format!("bullmq peer closed ({completed} jobs completed, {failed} failed)")
            }
            Ok(other) => format!("bullmq peer answered {other:?} to close"),
            Err(BenchError::Failed(e) | BenchError::Usage(e)) => format!("bullmq peer: {e}"),
        };
        match tokio::time::timeout(CLOSE_TIMEOUT, self.child.wait()).await {
            Ok(_) => how,
            Err(_) => {
                let _ = self.child.kill().await;
                format!("{how}; killed")
            }
        }
    }
}

/// One run of BullMQ, its keys deleted after. Returns the run and BullMQ's version.
pub(crate) async fn run(s: &Settings, round: usize) -> Result<(RunOutcome, String), BenchError> {
    let run_id = new_run_id();
    let prefix = format!("herald-bench.{run_id}");
    let probe = RedisProbe::connect(&s.system.redis_url, &prefix)
        .await
        .map_err(BenchError::Failed)?;
    let redis_pid = probe.describe().await.ok().and_then(|r| r.pid);
    let receiver = Receiver::start(s.count, s.receiver_delay)
        .await
        .map_err(|e| BenchError::Failed(format!("receiver: {e}")))?;
    let started = Peer::start(s, &prefix, &receiver.url()).await;
    let measured = match started {
        Ok((mut peer, version)) => {
            let m = interruptible(measure(s, round, &run_id, &mut peer, receiver, redis_pid)).await;
            let how = peer.close().await;
            m.map(|mut o| {
                o.cleanup.push(how);
                (o, version)
            })
        }
        Err(e) => Err(e),
    };
    eprintln!("herald-bench: deleting the BullMQ run's Redis keys ({prefix}:*)");
    let deleted = probe.delete_run_keys().await;
    let (mut outcome, version) = measured?;
    match deleted {
        Ok(n) => outcome.cleanup.push(format!("{n} Redis keys deleted")),
        Err(e) => outcome.problems.push(format!("cleanup: {e}")),
    }
    Ok((outcome, version))
}

async fn measure(
    s: &Settings,
    round: usize,
    run_id: &str,
    peer: &mut Peer,
    receiver: Receiver,
    redis_pid: Option<u32>,
) -> Result<RunOutcome, BenchError> {
    let mut usage = Usage::default();
    usage.watch("node", vec![peer.pid]);
    if let Some(pid) = redis_pid {
        usage.watch("redis", vec![pid]);
    }
    usage.watch(BENCH, vec![std::process::id()]);
    let plan = s.plan(now_ms());
    let before = usage.read();
    let published = peer.publish(&plan).await?;
    let publish_cpu = Split::between(&before, &usage.read());
    eprintln!(
        "herald-bench: bullmq accepted {} in {:.2} s",
        published.accepted, published.seconds
    );
    let mut problems = Vec::new();
    if now_ms() >= plan.first_due_ms() {
        problems.push("publishing ended after the first due time (raise --lead-ms)".to_owned());
    }
    // The jobs are due exactly when the plan says: the script sets each job's `timestamp` and
    // `delay` so that their sum is its due time.
    let dues: Vec<u64> = plan.seqs().map(|seq| plan.due_ms(seq)).collect();
    let mut exited = || peer.exited();
    let firing = outcome::await_arrivals(
        s,
        &receiver,
        &plan,
        published.accepted,
        &usage,
        &mut exited,
        &mut problems,
    )
    .await;
    let arrived = receiver.stop();
    Ok(RunOutcome::new(
        s,
        Side::Bullmq,
        round,
        run_id.to_owned(),
        &plan,
        &dues,
        published,
        arrived,
        publish_cpu,
        firing,
        problems,
    ))
}
