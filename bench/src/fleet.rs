//! Sessions that receive the bench's notifications (`delayed`, `retained`): worker processes
//! (the bench's own binary, `worker --record`, see [`crate::worker`]) holding
//! STOMP-over-WebSocket sessions on the gateway, one user each (`bench-{worker}-{n}`), that
//! stamp every bench `MESSAGE` with the wall clock on arrival.
//!
//! [`crate::harness::workers`] starts them and reads their lines; the parent follows their
//! events ([`crate::harness::events`]): `ready` once every session is open
//! (or failed), `received` counts while notifications arrive (so it knows when all have),
//! and after `close` the arrivals themselves, then `closed`. Workers never outlive the parent:
//! a worker whose stdin ends closes and exits, and each is killed if the parent drops it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use crate::client::transport::Transport;
use crate::harness::events::{CLOSE_DEADLINE, WorkerEvent};
use crate::harness::outcome::BenchError;
use crate::harness::plan::WorkerPlan;
use crate::harness::progress::Progress;
use crate::harness::workers::{FromWorker, WorkerCommand, Workers};

/// Handshakes in flight per worker.
const CONCURRENCY: usize = 256;
/// Beyond the workers' own close deadline, before stragglers are killed.
const EXIT_SLACK: Duration = Duration::from_secs(5);
/// Worker lines read but not yet taken in.
const QUEUE: usize = 1024;

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
    processes: Workers,
    workers: Vec<WorkerState>,
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
        let url = Transport::WebSocket.url(&ws_addr.to_string());
        let command = WorkerCommand {
            url: &url,
            transport: Transport::WebSocket.name(),
            concurrency: CONCURRENCY,
            handshake_timeout_secs: handshake_timeout.as_secs(),
            token_ttl,
            record: true,
            pipelined: false,
            jwt_secret,
        };
        Ok(Self {
            processes: Workers::spawn(&command, plans, QUEUE)?,
            workers: plans.iter().map(|_| WorkerState::default()).collect(),
            arrivals: Vec::new(),
        })
    }

    /// The workers' pids (for their CPU time).
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.processes.pids()
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
            FromWorker::Garbage { worker, line } => {
                eprintln!("herald-bench: worker {worker} wrote an unexpected line: {line}");
            }
            FromWorker::Eof { worker } => {
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
                msg = self.processes.recv() => match msg {
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
        while let Some(msg) = self.processes.try_recv() {
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
        self.processes.tell_close().await;
        let deadline = tokio::time::Instant::now() + CLOSE_DEADLINE + EXIT_SLACK;
        while !self.workers.iter().all(|w| w.exited) {
            match tokio::time::timeout_at(deadline, self.processes.recv()).await {
                Ok(Some(msg)) => self.apply(msg),
                Ok(None) | Err(_) => break,
            }
        }
        for child in self.processes.children_mut() {
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
