//! Idle sessions opened by worker processes (`connections`, `compare`), from the parent's
//! side: what it knows about each worker from the lines it wrote (pure), the totals over all
//! of them, the connect phase until every worker is ready, and the close.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::harness::events::{CLOSE_DEADLINE, WorkerEvent};
use crate::harness::plan::WorkerPlan;
use crate::harness::progress::Progress;
use crate::harness::workers::{FromWorker, Workers};

/// How often the parent prints connect progress on stderr.
const PROGRESS_EVERY: Duration = Duration::from_secs(2);
/// Extra time, beyond the workers' own close deadline, before stragglers are killed.
const EXIT_SLACK: Duration = Duration::from_secs(5);

/// File descriptors a worker needs beyond one per session (runtime, pipes, std streams, the
/// xhr_send connections).
const FD_MARGIN: usize = 64;

/// What the parent knows about one worker.
#[derive(Debug)]
pub(crate) struct WorkerState {
    pub(crate) plan: WorkerPlan,
    pub(crate) opened: u64,
    pub(crate) failed: u64,
    pub(crate) ready: bool,
    failures: BTreeMap<String, u64>,
    connect_window: Option<(u64, u64)>,
    pub(crate) closed: bool,
    pub(crate) dropped: u64,
    pub(crate) exited: bool,
}

impl WorkerState {
    pub(crate) fn new(plan: WorkerPlan) -> Self {
        Self {
            plan,
            opened: 0,
            failed: 0,
            ready: false,
            failures: BTreeMap::new(),
            connect_window: None,
            closed: false,
            dropped: 0,
            exited: false,
        }
    }

    /// Marks every session not reported yet as failed with `reason` (worker died or gave up).
    pub(crate) fn fail_rest(&mut self, reason: &str) {
        if self.ready {
            return;
        }
        let rest = (self.plan.sessions as u64).saturating_sub(self.opened);
        self.failed = rest;
        self.failures.clear();
        self.failures.insert(reason.to_owned(), rest);
        self.ready = true;
    }
}

/// Takes in one line (or the end) of a worker's output.
pub(crate) fn apply(workers: &mut [WorkerState], msg: FromWorker) {
    match msg {
        FromWorker::Event(event) => {
            let Some(w) = workers.get_mut(event.worker()) else {
                return;
            };
            match event {
                WorkerEvent::Started {
                    worker,
                    sessions,
                    nofile_limit,
                    ..
                } => {
                    let needed = (sessions + FD_MARGIN) as u64;
                    if nofile_limit < needed {
                        eprintln!(
                            "herald-bench: worker {worker} may run out of file descriptors: \
                             limit {nofile_limit}, needs about {needed}"
                        );
                    }
                }
                WorkerEvent::Progress { opened, failed, .. } => {
                    w.opened = opened;
                    w.failed = failed;
                }
                WorkerEvent::Ready {
                    opened,
                    failed,
                    failures,
                    connect_started_us,
                    connect_finished_us,
                    ..
                } => {
                    w.opened = opened;
                    w.failed = failed;
                    w.failures = failures;
                    w.connect_window = Some((connect_started_us, connect_finished_us));
                    w.ready = true;
                }
                // Only workers started with --record (herald-bench delayed) send these.
                WorkerEvent::Received { .. } | WorkerEvent::Arrivals { .. } => {}
                WorkerEvent::Closed { dropped, .. } => {
                    w.closed = true;
                    w.dropped = dropped;
                }
                WorkerEvent::Fatal { message, .. } => {
                    w.fail_rest(&format!("worker: {message}"));
                }
            }
        }
        FromWorker::Garbage { worker, line } => {
            eprintln!("herald-bench: worker {worker} wrote an unexpected line: {line}");
        }
        FromWorker::Eof { worker } => {
            if let Some(w) = workers.get_mut(worker) {
                w.fail_rest("worker exited before reporting");
                w.exited = true;
            }
        }
    }
}

/// Sessions opened and failed so far, over every worker.
pub(crate) fn opened_and_failed(workers: &[WorkerState]) -> (u64, u64) {
    let opened: u64 = workers.iter().map(|w| w.opened).sum();
    let failed: u64 = workers.iter().map(|w| w.failed).sum();
    (opened, failed)
}

/// The connect phase over every worker, once all are ready.
#[derive(Debug)]
pub(crate) struct Totals {
    pub(crate) opened: u64,
    pub(crate) failed: u64,
    /// Failure counts by reason.
    pub(crate) failures: BTreeMap<String, u64>,
    /// From the first handshake started to the last one finished, across workers.
    pub(crate) connect_seconds: f64,
}

impl Totals {
    pub(crate) fn of(workers: &[WorkerState]) -> Self {
        let (opened, failed) = opened_and_failed(workers);
        let mut failures = BTreeMap::new();
        for w in workers {
            for (reason, count) in &w.failures {
                *failures.entry(reason.clone()).or_default() += count;
            }
        }
        let windows: Vec<(u64, u64)> = workers.iter().filter_map(|w| w.connect_window).collect();
        let connect_seconds = match (
            windows.iter().map(|w| w.0).min(),
            windows.iter().map(|w| w.1).max(),
        ) {
            (Some(start), Some(end)) => end.saturating_sub(start) as f64 / 1e6,
            _ => 0.0,
        };
        Self {
            opened,
            failed,
            failures,
            connect_seconds,
        }
    }
}

/// Takes in the workers' lines until every worker is ready (or gone), with a progress bar
/// towards `sessions`; sessions of a worker that never said `ready` count as failed.
pub(crate) async fn connect(sessions: usize, workers: &mut [WorkerState], processes: &mut Workers) {
    let mut progress = tokio::time::interval(PROGRESS_EVERY);
    progress.tick().await;
    let bar = Progress::new(sessions as u64);
    while !workers.iter().all(|w| w.ready) {
        tokio::select! {
            msg = processes.recv() => match msg {
                Some(msg) => apply(workers, msg),
                None => break,
            },
            _ = progress.tick() => {
                let (opened, failed) = opened_and_failed(workers);
                bar.update(opened + failed, || format!("{opened} opened, {failed} failed of {sessions}"));
            }
        }
    }
    drop(bar);
    for w in workers.iter_mut() {
        w.fail_rest("worker exited before reporting");
    }
}

/// Tells every worker to close, waits for them with a deadline (killing stragglers), and says
/// on stderr what did not end cleanly.
pub(crate) async fn close(workers: &mut [WorkerState], processes: &mut Workers) {
    processes.tell_close().await;
    let deadline = tokio::time::Instant::now() + CLOSE_DEADLINE + EXIT_SLACK;
    while !workers.iter().all(|w| w.exited) {
        match tokio::time::timeout_at(deadline, processes.recv()).await {
            Ok(Some(msg)) => apply(workers, msg),
            Ok(None) | Err(_) => break,
        }
    }
    for (child, w) in processes.children_mut().iter_mut().zip(workers.iter()) {
        match tokio::time::timeout_at(deadline, child.wait()).await {
            Ok(Ok(status)) if !status.success() && w.plan.sessions > 0 => {
                eprintln!("herald-bench: worker {} exited with {status}", w.plan.index);
            }
            Ok(_) => {}
            Err(_) => {
                eprintln!(
                    "herald-bench: worker {} did not exit; killing it",
                    w.plan.index
                );
                let _ = child.kill().await;
            }
        }
    }
    let dropped: u64 = workers.iter().map(|w| w.dropped).sum();
    if dropped > 0 {
        eprintln!(
            "herald-bench: {dropped} sessions were closed by the server or network before the end"
        );
    }
    let unclosed = workers.iter().filter(|w| !w.closed).count();
    if unclosed > 0 {
        eprintln!("herald-bench: {unclosed} workers did not report closing their sessions");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(sessions: usize) -> WorkerState {
        WorkerState::new(WorkerPlan {
            index: 0,
            sessions,
            source: None,
        })
    }

    #[test]
    fn a_worker_that_dies_fails_its_remaining_sessions() {
        let mut workers = vec![state(100)];
        apply(
            &mut workers,
            FromWorker::Event(WorkerEvent::Progress {
                worker: 0,
                opened: 40,
                failed: 2,
            }),
        );
        apply(&mut workers, FromWorker::Eof { worker: 0 });
        let w = &workers[0];
        assert!(w.ready && w.exited);
        assert_eq!((w.opened, w.failed), (40, 60));
        assert_eq!(w.failures["worker exited before reporting"], 60);
    }

    #[test]
    fn ready_then_eof_keeps_the_ready_figures() {
        let mut workers = vec![state(10)];
        apply(
            &mut workers,
            FromWorker::Event(WorkerEvent::Ready {
                worker: 0,
                opened: 9,
                failed: 1,
                failures: BTreeMap::from([("upgrade: http 401".to_owned(), 1)]),
                connect_started_us: 5,
                connect_finished_us: 9,
            }),
        );
        apply(&mut workers, FromWorker::Eof { worker: 0 });
        let w = &workers[0];
        assert_eq!((w.opened, w.failed), (9, 1));
        assert_eq!(w.connect_window, Some((5, 9)));
        assert_eq!(w.failures.len(), 1);
    }

    #[test]
    fn fatal_fails_everything_not_opened() {
        let mut workers = vec![state(10)];
        apply(
            &mut workers,
            FromWorker::Event(WorkerEvent::Fatal {
                worker: 0,
                message: "no such host".into(),
            }),
        );
        assert_eq!(workers[0].failed, 10);
        assert_eq!(workers[0].failures["worker: no such host"], 10);
    }

    #[test]
    fn totals_add_up_failures_and_span_the_connect_windows() {
        let mut workers = vec![state(10), state(10)];
        for (worker, window) in [(0, (5, 2_000_005)), (1, (1_000_005, 3_000_005))] {
            apply(
                &mut workers,
                FromWorker::Event(WorkerEvent::Ready {
                    worker,
                    opened: 9,
                    failed: 1,
                    failures: BTreeMap::from([("upgrade: http 401".to_owned(), 1)]),
                    connect_started_us: window.0,
                    connect_finished_us: window.1,
                }),
            );
        }
        let t = Totals::of(&workers);
        assert_eq!((t.opened, t.failed), (18, 2));
        assert_eq!(t.failures["upgrade: http 401"], 2);
        assert!((t.connect_seconds - 3.0).abs() < 1e-9);
        assert_eq!(Totals::of(&[state(1)]).connect_seconds, 0.0);
    }
}
