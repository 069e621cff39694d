//! A worker process: opens its share of the sessions, reports on stdout (see [`crate::harness::events`]),
//! holds the sessions until the parent says `close` (or its stdin ends), then closes them.
//!
//! At most `concurrency` handshakes are in flight (a semaphore permit is taken before each
//! session task is spawned and given back when its handshake ends); open sessions cost no
//! permit. A failed session is counted under its reason and never stops the others.
//!
//! With `--record` (WebSocket transport only) the open sessions parse what they receive and
//! record the delayed benchmark's messages ([`crate::client::session::record`]); the worker reports the
//! count every [`RECEIVED_INTERVAL`] while it changes, and the arrivals once the sessions are
//! closed.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use clap::Args;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::io::AsyncBufReadExt as _;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::client::session::record::Recorder;
use crate::client::session::xhr_streaming::{SEND_CONNECTIONS, SendPool};
use crate::client::session::{self, Counters, Failure, Target};
use crate::client::transport::Transport;
use crate::harness::endpoint::Endpoint;
use crate::harness::events::{
    ARRIVALS_PER_LINE, CLOSE_COMMAND, CLOSE_DEADLINE, WorkerEvent, unix_micros,
};
use crate::harness::sys;
use crate::harness::token::{Claims, JWT_SECRET_ENV, Minter, now_epoch_secs};

/// How often a connecting worker reports progress.
pub(crate) const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);
/// Capacity of the channel session tasks report their handshake outcome on. Tasks wait when it
/// is full, which only slows handshakes down.
const OUTCOME_CHANNEL: usize = 1024;
/// How often a recording worker reports how many messages it has.
pub(crate) const RECEIVED_INTERVAL: Duration = Duration::from_millis(250);

/// The arguments of the hidden `herald-bench worker`: what the parent tells each worker.
#[derive(Debug, Args)]
pub(crate) struct WorkerArgs {
    /// This worker's index (user ids are `bench-{index}-{n}`).
    #[arg(long)]
    pub(crate) index: usize,
    #[arg(long)]
    pub(crate) url: String,
    #[arg(long, value_enum)]
    pub(crate) transport: Transport,
    #[arg(long)]
    pub(crate) sessions: usize,
    #[arg(long)]
    pub(crate) source: Option<IpAddr>,
    #[arg(long)]
    pub(crate) concurrency: usize,
    /// Seconds.
    #[arg(long)]
    pub(crate) handshake_timeout: u64,
    /// Seconds the tokens stay valid.
    #[arg(long)]
    pub(crate) token_ttl: u64,
    #[arg(long, env = JWT_SECRET_ENV, hide_env_values = true)]
    pub(crate) jwt_secret: String,
    /// Record the delayed benchmark's messages and report them (websocket only).
    #[arg(long)]
    pub(crate) record: bool,
    /// STOMP: send `SUBSCRIBE` in the same message as `CONNECT`.
    #[arg(long)]
    pub(crate) pipelined: bool,
}

/// What a worker was told to do.
#[derive(Debug, Clone)]
pub(crate) struct WorkerConfig {
    pub(crate) index: usize,
    pub(crate) url: String,
    pub(crate) transport: Transport,
    pub(crate) sessions: usize,
    pub(crate) source: Option<IpAddr>,
    pub(crate) concurrency: usize,
    pub(crate) handshake_timeout: Duration,
    pub(crate) token_ttl: Duration,
    pub(crate) jwt_secret: String,
    /// Record the delayed benchmark's messages (WebSocket transport only).
    pub(crate) record: bool,
    /// STOMP: `SUBSCRIBE` in the same message as `CONNECT`.
    pub(crate) pipelined: bool,
}

impl From<WorkerArgs> for WorkerConfig {
    fn from(a: WorkerArgs) -> Self {
        Self {
            index: a.index,
            url: a.url,
            transport: a.transport,
            sessions: a.sessions,
            source: a.source,
            concurrency: a.concurrency.max(1),
            handshake_timeout: Duration::from_secs(a.handshake_timeout),
            token_ttl: Duration::from_secs(a.token_ttl),
            jwt_secret: a.jwt_secret,
            record: a.record,
            pipelined: a.pipelined,
        }
    }
}

/// Runs the worker; returns the process exit code.
///
/// In phases: check and resolve the target, say `started`, open the sessions and count their
/// handshakes, say `ready`, hold until the parent says `close` (reporting what was recorded),
/// then close the sessions and say what arrived and `closed`.
pub(crate) async fn run(config: WorkerConfig) -> i32 {
    let worker = config.index;
    let resolved = match Resolved::check(&config).await {
        Ok(resolved) => resolved,
        Err(message) => return fatal(worker, message),
    };
    let started = WorkerEvent::Started {
        worker,
        sessions: config.sessions,
        source: config.source.map(|s| s.to_string()),
        nofile_limit: resolved.nofile_limit,
    };
    if started.emit().is_err() {
        return 1; // The parent is gone.
    }

    let target = resolved.target(&config);
    let cancel = CancellationToken::new();
    spawn_stdin_watcher(cancel.clone());
    let (sessions, outcomes) = Sessions::spawn(&config, target, &cancel);
    let mut tally = count_outcomes(worker, config.sessions, outcomes, &cancel).await;
    let connect_finished_us = unix_micros();
    tally.lose_missing(config.sessions);

    let ready = WorkerEvent::Ready {
        worker,
        opened: tally.opened,
        failed: tally.failed,
        failures: tally.failures,
        connect_started_us: sessions.connect_started_us,
        connect_finished_us,
    };
    if ready.emit().is_err() {
        cancel.cancel();
    }

    match &sessions.recorder {
        Some(recorder) => report_received(worker, recorder, &cancel).await,
        None => cancel.cancelled().await,
    }
    sessions.close(worker).await;
    0
}

/// Tells the parent (and stderr) why the worker gives up; the exit code.
fn fatal(worker: usize, message: String) -> i32 {
    eprintln!("herald-bench worker {worker}: {message}");
    let _ = WorkerEvent::Fatal { worker, message }.emit();
    1
}

/// What the worker checked before saying `started`: its fd limit and where it connects.
struct Resolved {
    nofile_limit: u64,
    endpoint: Endpoint,
    addr: SocketAddr,
}

impl Resolved {
    /// Raises the fd limit, checks the options, parses and resolves the URL; `Err` is the
    /// message of the `fatal` event.
    async fn check(config: &WorkerConfig) -> Result<Self, String> {
        let nofile_limit =
            sys::raise_nofile_limit().map_err(|e| format!("cannot raise RLIMIT_NOFILE: {e}"))?;
        if config.record && config.transport != Transport::WebSocket {
            return Err("--record needs the websocket transport".into());
        }
        let endpoint = Endpoint::parse(&config.url).map_err(|e| e.to_string())?;
        let addr = endpoint.resolve().await.map_err(|e| e.to_string())?;
        Ok(Self {
            nofile_limit,
            endpoint,
            addr,
        })
    }

    /// Where and how every session connects.
    fn target(&self, config: &WorkerConfig) -> Arc<Target> {
        let path = match config.transport {
            Transport::WebSocket | Transport::BrokerStomp => self.endpoint.path.clone(),
            // Session URLs (or channel names) are appended to the base path.
            Transport::SockJsWebSocket
            | Transport::XhrStreaming
            | Transport::RawWebSocket
            | Transport::SocketIo
            | Transport::SockJsPlain => self.endpoint.path.trim_end_matches('/').to_owned(),
        };
        Arc::new(Target {
            transport: config.transport,
            host_header: self.endpoint.host_header(),
            path,
            addr: self.addr,
            source: config.source,
            handshake_timeout: config.handshake_timeout,
            pipelined: config.pipelined,
            xhr_sends: SendPool::new(SEND_CONNECTIONS),
        })
    }
}

/// The worker's session tasks and what they share, from the first spawn to the end.
struct Sessions {
    tracker: TaskTracker,
    counters: Arc<Counters>,
    recorder: Option<Arc<Recorder>>,
    /// When the first session task was spawned.
    connect_started_us: u64,
}

/// Each session task's handshake outcome, once.
type Outcomes = mpsc::Receiver<Result<(), Failure>>;

impl Sessions {
    /// Starts spawning the session tasks (at most `concurrency` handshakes at a time).
    fn spawn(
        config: &WorkerConfig,
        target: Arc<Target>,
        cancel: &CancellationToken,
    ) -> (Self, Outcomes) {
        let tracker = TaskTracker::new();
        let counters = Arc::new(Counters::default());
        let recorder = config.record.then(|| Arc::new(Recorder::default()));
        let (outcomes_tx, outcomes) = mpsc::channel(OUTCOME_CHANNEL);
        let connect_started_us = unix_micros();
        tracker.spawn(spawn_sessions(
            config.clone(),
            target,
            outcomes_tx,
            cancel.clone(),
            counters.clone(),
            tracker.clone(),
            recorder.clone(),
        ));
        let sessions = Self {
            tracker,
            counters,
            recorder,
            connect_started_us,
        };
        (sessions, outcomes)
    }

    /// Waits for the sessions to close (they were cancelled), then reports the arrivals, if
    /// recording, and `closed`.
    async fn close(self, worker: usize) {
        self.tracker.close();
        if tokio::time::timeout(CLOSE_DEADLINE, self.tracker.wait())
            .await
            .is_err()
        {
            eprintln!(
                "herald-bench worker {worker}: sessions still closing after {CLOSE_DEADLINE:?}; exiting"
            );
        }
        if let Some(recorder) = &self.recorder {
            let arrivals = recorder.take();
            for chunk in arrivals.chunks(ARRIVALS_PER_LINE) {
                let event = WorkerEvent::Arrivals {
                    worker,
                    arrivals: chunk.to_vec(),
                };
                if event.emit().is_err() {
                    break;
                }
            }
        }
        let _ = WorkerEvent::Closed {
            worker,
            dropped: self.counters.dropped.load(Ordering::Relaxed),
            frames_received: self.counters.frames_received.load(Ordering::Relaxed),
        }
        .emit();
    }
}

/// Counts handshake outcomes until every session reported (or none can any more), telling the
/// parent the progress every [`PROGRESS_INTERVAL`]; cancels `cancel` if the parent is gone.
async fn count_outcomes(
    worker: usize,
    sessions: usize,
    mut outcomes: Outcomes,
    cancel: &CancellationToken,
) -> Tally {
    let mut tally = Tally::default();
    let mut progress = tokio::time::interval(PROGRESS_INTERVAL);
    progress.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while tally.total() < sessions as u64 {
        tokio::select! {
            outcome = outcomes.recv() => match outcome {
                Some(outcome) => tally.add(outcome),
                None => break,
            },
            _ = progress.tick() => {
                let event = WorkerEvent::Progress { worker, opened: tally.opened, failed: tally.failed };
                if event.emit().is_err() {
                    cancel.cancel();
                }
            }
        }
    }
    tally
}

/// Until `cancel`: tells the parent how many messages the sessions recorded, whenever that
/// changed, every [`RECEIVED_INTERVAL`].
async fn report_received(worker: usize, recorder: &Recorder, cancel: &CancellationToken) {
    let mut tick = tokio::time::interval(RECEIVED_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = None;
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let now = (
            recorder.messages.load(Ordering::Relaxed),
            recorder.foreign.load(Ordering::Relaxed),
        );
        if last == Some(now) {
            continue;
        }
        last = Some(now);
        let event = WorkerEvent::Received {
            worker,
            messages: now.0,
            foreign: now.1,
        };
        if event.emit().is_err() {
            cancel.cancel();
        }
    }
}

/// Spawns one task per session, each after taking a handshake permit.
async fn spawn_sessions(
    config: WorkerConfig,
    target: Arc<Target>,
    outcomes: mpsc::Sender<Result<(), Failure>>,
    cancel: CancellationToken,
    counters: Arc<Counters>,
    tracker: TaskTracker,
    recorder: Option<Arc<Recorder>>,
) {
    let handshakes = Arc::new(Semaphore::new(config.concurrency));
    let minter = Minter::new(&config.jwt_secret);
    let exp = now_epoch_secs() + config.token_ttl.as_secs();
    for i in 0..config.sessions {
        // The semaphore is never closed, so this cannot fail; stop cleanly if it ever did.
        let Ok(slot) = handshakes.clone().acquire_owned().await else {
            break;
        };
        let claims = Claims::for_session(config.index, i, exp);
        // A peer's session subscribes to its user's channel; Herald's present a JWT.
        let credential = if config.transport.presents_jwt() {
            match minter.mint(&claims) {
                Ok(token) => token,
                Err(e) => {
                    let _ = outcomes.send(Err(Failure::Token(e.to_string()))).await;
                    continue;
                }
            }
        } else {
            claims.sub
        };
        tracker.spawn(session::run(
            target.clone(),
            credential,
            slot,
            outcomes.clone(),
            cancel.clone(),
            counters.clone(),
            tracker.clone(),
            recorder.clone(),
        ));
    }
}

/// Cancels `cancel` when stdin says `close` or ends.
fn spawn_stdin_watcher(cancel: CancellationToken) {
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
        loop {
            match lines.next_line().await {
                Ok(Some(line)) if line.trim() == CLOSE_COMMAND => break,
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
        cancel.cancel();
    });
}

/// Handshake outcomes counted so far.
#[derive(Debug, Default)]
struct Tally {
    opened: u64,
    failed: u64,
    failures: BTreeMap<String, u64>,
}

impl Tally {
    fn add(&mut self, outcome: Result<(), Failure>) {
        match outcome {
            Ok(()) => self.opened += 1,
            Err(failure) => {
                self.failed += 1;
                *self.failures.entry(failure.reason()).or_default() += 1;
            }
        }
    }

    fn total(&self) -> u64 {
        self.opened + self.failed
    }

    /// Counts sessions that never reported as failed. Every session task reports exactly
    /// once; a shortfall would be a bench bug, so make it visible rather than hang.
    fn lose_missing(&mut self, sessions: usize) {
        let missing = (sessions as u64).saturating_sub(self.total());
        if missing > 0 {
            self.failed += missing;
            *self
                .failures
                .entry("bench: outcome lost".to_owned())
                .or_default() += missing;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tally_counts_by_reason() {
        let mut t = Tally::default();
        t.add(Ok(()));
        t.add(Err(Failure::Http(401)));
        t.add(Err(Failure::Http(401)));
        t.add(Err(Failure::Timeout(session::Stage::Receipt)));
        assert_eq!((t.opened, t.failed, t.total()), (1, 3, 4));
        assert_eq!(t.failures["upgrade: http 401"], 2);
        assert_eq!(t.failures["timeout during receipt"], 1);
    }

    #[test]
    fn sessions_that_never_reported_count_as_lost() {
        let mut t = Tally::default();
        t.add(Ok(()));
        t.lose_missing(3);
        assert_eq!((t.opened, t.failed), (1, 2));
        assert_eq!(t.failures["bench: outcome lost"], 2);
        t.lose_missing(3);
        assert_eq!(t.failed, 2, "nothing more once all are counted");
    }
}
