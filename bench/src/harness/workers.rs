//! Worker processes, from the parent's side: the bench's own binary re-executed as
//! `herald-bench worker ...`, one per [`WorkerPlan`], each line it writes on stdout parsed as a
//! [`WorkerEvent`] ([`crate::harness::events`]) and passed on in one queue, and `close` written on
//! every stdin at the end. Workers never outlive the parent: each is killed when dropped
//! (`kill_on_drop`), and a worker whose stdin ends closes and exits.
//!
//! What the parent makes of the events is its own: `connections` reports the connect phase,
//! `delayed` counts arrivals.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

use crate::harness::events::{CLOSE_COMMAND, WorkerEvent};
use crate::harness::outcome::BenchError;
use crate::harness::plan::WorkerPlan;
use crate::harness::token::JWT_SECRET_ENV;

/// The command line every worker gets, beside its own plan (`--index`, `--sessions`,
/// `--source`).
pub(crate) struct WorkerCommand<'a> {
    /// `--url`: where the sessions connect.
    pub(crate) url: &'a str,
    /// `--transport`, by its name on the command line.
    pub(crate) transport: &'a str,
    /// `--concurrency`: handshakes in flight per worker.
    pub(crate) concurrency: usize,
    /// `--handshake-timeout`, in seconds.
    pub(crate) handshake_timeout_secs: u64,
    /// `--token-ttl`.
    pub(crate) token_ttl: Duration,
    /// `--record`: record the bench's messages (`herald-bench delayed`).
    pub(crate) record: bool,
    /// `--pipelined`: STOMP `SUBSCRIBE` in the same message as `CONNECT`.
    pub(crate) pipelined: bool,
    /// Handed over in the environment ([`JWT_SECRET_ENV`]), not on the command line.
    pub(crate) jwt_secret: &'a str,
}

/// A line from a worker's stdout, or its end.
pub(crate) enum FromWorker {
    /// An event of this worker.
    Event(WorkerEvent),
    /// A line that is not an event of this worker.
    Garbage { worker: usize, line: String },
    /// Its stdout ended: the worker exited (or closed it).
    Eof { worker: usize },
}

/// The running workers, in the order of their plans.
pub(crate) struct Workers {
    children: Vec<Child>,
    stdins: Vec<Option<ChildStdin>>,
    events: mpsc::Receiver<FromWorker>,
}

impl Workers {
    /// Starts one worker per plan, and a task per worker reading its lines into a queue of
    /// `queue` lines. The queue ends once every worker's stdout has.
    pub(crate) fn spawn(
        command: &WorkerCommand<'_>,
        plans: &[WorkerPlan],
        queue: usize,
    ) -> Result<Self, BenchError> {
        let exe = std::env::current_exe()
            .map_err(|e| BenchError::Failed(format!("cannot find own executable: {e}")))?;
        let (tx, events) = mpsc::channel(queue);
        let mut children = Vec::with_capacity(plans.len());
        let mut stdins = Vec::with_capacity(plans.len());
        for plan in plans {
            let mut cmd = Command::new(&exe);
            cmd.arg("worker")
                .args(["--index", &plan.index.to_string()])
                .args(["--url", command.url])
                .args(["--transport", command.transport])
                .args(["--sessions", &plan.sessions.to_string()])
                .args(["--concurrency", &command.concurrency.to_string()])
                .args([
                    "--handshake-timeout",
                    &command.handshake_timeout_secs.to_string(),
                ])
                .args(["--token-ttl", &command.token_ttl.as_secs().to_string()])
                .env(JWT_SECRET_ENV, command.jwt_secret)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .kill_on_drop(true);
            if command.record {
                cmd.arg("--record");
            }
            if command.pipelined {
                cmd.arg("--pipelined");
            }
            if let Some(source) = plan.source {
                cmd.args(["--source", &source.to_string()]);
            }
            let mut child = cmd.spawn().map_err(|e| {
                BenchError::Failed(format!("cannot start worker {}: {e}", plan.index))
            })?;
            let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
                return Err(BenchError::Failed("worker pipes missing".into()));
            };
            tokio::spawn(read_lines(plan.index, stdout, tx.clone()));
            children.push(child);
            stdins.push(Some(stdin));
        }
        Ok(Self {
            children,
            stdins,
            events,
        })
    }

    /// The workers' pids (for their CPU time).
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.children.iter().filter_map(Child::id).collect()
    }

    /// The next line from any worker; `None` once every worker's stdout has ended.
    pub(crate) async fn recv(&mut self) -> Option<FromWorker> {
        self.events.recv().await
    }

    /// The next line already read, without waiting.
    pub(crate) fn try_recv(&mut self) -> Option<FromWorker> {
        self.events.try_recv().ok()
    }

    /// Tells every worker to close its sessions (once; later calls write nothing).
    pub(crate) async fn tell_close(&mut self) {
        for stdin in &mut self.stdins {
            if let Some(mut s) = stdin.take() {
                let _ = s.write_all(format!("{CLOSE_COMMAND}\n").as_bytes()).await;
                let _ = s.flush().await;
            }
        }
    }

    /// The worker processes, in the order of their plans (to wait for them, or kill them).
    pub(crate) fn children_mut(&mut self) -> &mut [Child] {
        &mut self.children
    }
}

/// Passes on worker `worker`'s lines until its stdout ends (or nobody listens any more).
async fn read_lines(
    worker: usize,
    stdout: tokio::process::ChildStdout,
    events: mpsc::Sender<FromWorker>,
) {
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let msg = match WorkerEvent::parse(&line) {
            Ok(event) if event.worker() == worker => FromWorker::Event(event),
            _ => FromWorker::Garbage { worker, line },
        };
        if events.send(msg).await.is_err() {
            return;
        }
    }
    let _ = events.send(FromWorker::Eof { worker }).await;
}
