//! The sessions that receive the delayed notifications: worker processes (the bench's own
//! binary, `worker --record`, see [`crate::worker`]) holding STOMP-over-WebSocket sessions on
//! the gateway, one user each (`bench-{worker}-{n}`), that stamp every bench `MESSAGE` with the
//! wall clock on arrival.
//!
//! The parent follows their JSON lines ([`crate::harness::events`]): `ready` once every session is open
//! (or failed), `received` counts while notifications arrive (so it knows when all have),
//! and after `close` the arrivals themselves, then `closed`. Workers never outlive the parent:
//! a worker whose stdin ends closes and exits, and each is killed if the parent drops it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

use crate::client::transport::Transport;
use crate::harness::events::{CLOSE_COMMAND, CLOSE_DEADLINE, WorkerEvent};
use crate::harness::outcome::BenchError;
use crate::harness::plan::WorkerPlan;
use crate::harness::progress::Progress;
use crate::harness::token::JWT_SECRET_ENV;

/// Handshakes in flight per worker.
const CONCURRENCY: usize = 256;
/// Beyond the workers' own close deadline, before stragglers are killed.
const EXIT_SLACK: Duration = Duration::from_secs(5);

/// A line from a worker, or its end.
enum FromWorker {
    Event(WorkerEvent),
    Garbage(usize, String),
    Eof(usize),
}

#[derive(Debug, Default)]
struct WorkerState {
    opened: u64,
    failed: u64,
    failures: BTreeMap<String, u64>,
    ready: bool,
    messages: u64,
    foreign: u64,
    closed: bool,
    dropped: u64,
    exited: bool,
}

/// What the sessions received, once closed.
#[derive(Debug, Default)]
pub(crate) struct Received {
    /// `(seq, arrival in unix ns)`, every arrival (duplicates included).
    pub(crate) arrivals: Vec<(u64, u64)>,
    /// `MESSAGE` frames that were not the bench's.
    pub(crate) foreign: u64,
    /// Sessions the gateway ended before the bench closed them.
    pub(crate) dropped: u64,
    /// Workers that did not report their arrivals (exited or timed out).
    pub(crate) lost_workers: u64,
}

/// The running worker processes.
pub(crate) struct Fleet {
    children: Vec<Child>,
    stdins: Vec<Option<ChildStdin>>,
    workers: Vec<WorkerState>,
    events: mpsc::Receiver<FromWorker>,
    arrivals: Vec<(u64, u64)>,
}

impl Fleet {
    /// Starts one worker per plan, its sessions on `ws_addr`'s `/ws`, tokens signed with
    /// `jwt_secret` and valid for `token_ttl`.
    pub(crate) fn spawn(
        plans: &[WorkerPlan],
        ws_addr: SocketAddr,
        jwt_secret: &str,
        handshake_timeout: Duration,
        token_ttl: Duration,
    ) -> Result<Self, BenchError> {
        let exe = std::env::current_exe()
            .map_err(|e| BenchError::Failed(format!("cannot find own executable: {e}")))?;
        let url = Transport::WebSocket.url(&ws_addr.to_string());
        let (tx, events) = mpsc::channel(1024);
        let mut children = Vec::with_capacity(plans.len());
        let mut stdins = Vec::with_capacity(plans.len());
        for plan in plans {
            let mut cmd = Command::new(&exe);
            cmd.arg("worker")
                .args(["--index", &plan.index.to_string()])
                .args(["--url", &url])
                .args(["--transport", Transport::WebSocket.name()])
                .args(["--sessions", &plan.sessions.to_string()])
                .args(["--concurrency", &CONCURRENCY.to_string()])
                .args([
                    "--handshake-timeout",
                    &handshake_timeout.as_secs().to_string(),
                ])
                .args(["--token-ttl", &token_ttl.as_secs().to_string()])
                .arg("--record")
                .env(JWT_SECRET_ENV, jwt_secret)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .kill_on_drop(true);
            if let Some(source) = plan.source {
                cmd.args(["--source", &source.to_string()]);
            }
            let mut child = cmd.spawn().map_err(|e| {
                BenchError::Failed(format!("cannot start worker {}: {e}", plan.index))
            })?;
            let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
                return Err(BenchError::Failed("worker pipes missing".into()));
            };
            let worker = plan.index;
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut lines = tokio::io::BufReader::new(stdout).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let msg = match WorkerEvent::parse(&line) {
                        Ok(event) if event.worker() == worker => FromWorker::Event(event),
                        _ => FromWorker::Garbage(worker, line),
                    };
                    if tx.send(msg).await.is_err() {
                        return;
                    }
                }
                let _ = tx.send(FromWorker::Eof(worker)).await;
            });
            children.push(child);
            stdins.push(Some(stdin));
        }
        Ok(Self {
            children,
            stdins,
            workers: plans.iter().map(|_| WorkerState::default()).collect(),
            events,
            arrivals: Vec::new(),
        })
    }

    /// The workers' pids (for their CPU time).
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.children.iter().filter_map(Child::id).collect()
    }

    fn apply(&mut self, msg: FromWorker) {
        match msg {
            FromWorker::Event(event) => {
                let Some(w) = self.workers.get_mut(event.worker()) else {
                    return;
                };
                match event {
                    WorkerEvent::Started { .. } => {}
                    WorkerEvent::Progress { opened, failed, .. } => {
                        w.opened = opened;
                        w.failed = failed;
                    }
                    WorkerEvent::Ready {
                        opened,
                        failed,
                        failures,
                        ..
                    } => {
                        w.opened = opened;
                        w.failed = failed;
                        w.failures = failures;
                        w.ready = true;
                    }
                    WorkerEvent::Received {
                        messages, foreign, ..
                    } => {
                        w.messages = messages;
                        w.foreign = foreign;
                    }
                    WorkerEvent::Arrivals { arrivals, .. } => self.arrivals.extend(arrivals),
                    WorkerEvent::Closed { dropped, .. } => {
                        w.closed = true;
                        w.dropped = dropped;
                    }
                    WorkerEvent::Fatal { message, .. } => {
                        w.ready = true;
                        w.failures.insert(format!("worker: {message}"), 1);
                        w.failed += 1;
                    }
                }
            }
            FromWorker::Garbage(worker, line) => {
                eprintln!("herald-bench: worker {worker} wrote an unexpected line: {line}");
            }
            FromWorker::Eof(worker) => {
                if let Some(w) = self.workers.get_mut(worker) {
                    if !w.ready {
                        w.ready = true;
                        w.failures
                            .insert("worker exited before reporting".into(), 1);
                        w.failed += 1;
                    }
                    w.exited = true;
                }
            }
        }
    }

    /// Waits until every worker has opened (or failed) all its sessions, printing progress.
    /// Fails unless every session opened: a missing session would count as lost deliveries.
    pub(crate) async fn wait_ready(&mut self, sessions: usize) -> Result<(), BenchError> {
        let mut tick = tokio::time::interval(Duration::from_secs(2));
        tick.tick().await;
        let bar = Progress::new(sessions as u64);
        while !self.workers.iter().all(|w| w.ready) {
            tokio::select! {
                msg = self.events.recv() => match msg {
                    Some(m) => self.apply(m),
                    None => break,
                },
                _ = tick.tick() => {
                    let opened: u64 = self.workers.iter().map(|w| w.opened).sum();
                    bar.update(opened, || format!("{opened} of {sessions} sessions open"));
                }
            }
        }
        let opened: u64 = self.workers.iter().map(|w| w.opened).sum();
        let mut failures = BTreeMap::<String, u64>::new();
        for w in &self.workers {
            for (reason, n) in &w.failures {
                *failures.entry(reason.clone()).or_default() += n;
            }
        }
        if opened < sessions as u64 || !failures.is_empty() {
            return Err(BenchError::Failed(format!(
                "{opened} of {sessions} sessions opened; failures: {failures:?}"
            )));
        }
        Ok(())
    }

    /// Takes in what the workers reported since the last call, without waiting.
    pub(crate) fn pump(&mut self) {
        while let Ok(msg) = self.events.try_recv() {
            self.apply(msg);
        }
    }

    /// Bench messages received so far, over every worker (as last reported).
    pub(crate) fn received(&self) -> u64 {
        self.workers.iter().map(|w| w.messages).sum()
    }

    /// Whether a worker has exited (its sessions are gone).
    pub(crate) fn any_exited(&self) -> bool {
        self.workers.iter().any(|w| w.exited)
    }

    /// Closes the sessions and collects every arrival.
    pub(crate) async fn close(mut self) -> Received {
        for stdin in &mut self.stdins {
            if let Some(mut s) = stdin.take() {
                let _ = s.write_all(format!("{CLOSE_COMMAND}\n").as_bytes()).await;
                let _ = s.flush().await;
            }
        }
        let deadline = tokio::time::Instant::now() + CLOSE_DEADLINE + EXIT_SLACK;
        while !self.workers.iter().all(|w| w.exited) {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some(msg)) => self.apply(msg),
                Ok(None) | Err(_) => break,
            }
        }
        for child in &mut self.children {
            if tokio::time::timeout_at(deadline, child.wait())
                .await
                .is_err()
            {
                let _ = child.kill().await;
            }
        }
        Received {
            arrivals: std::mem::take(&mut self.arrivals),
            foreign: self.workers.iter().map(|w| w.foreign).sum(),
            dropped: self.workers.iter().map(|w| w.dropped).sum(),
            lost_workers: self.workers.iter().filter(|w| !w.closed).count() as u64,
        }
    }
}
