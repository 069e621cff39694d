//! What the parent knows about each worker, from the lines it wrote (pure), and the totals
//! over all of them.

use std::collections::BTreeMap;

use crate::harness::events::WorkerEvent;
use crate::harness::plan::WorkerPlan;
use crate::harness::workers::FromWorker;

/// File descriptors a worker needs beyond one per session (runtime, pipes, std streams, the
/// xhr_send connections).
const FD_MARGIN: usize = 64;

/// What the parent knows about one worker.
#[derive(Debug)]
pub(super) struct WorkerState {
    pub(super) plan: WorkerPlan,
    pub(super) opened: u64,
    pub(super) failed: u64,
    pub(super) ready: bool,
    failures: BTreeMap<String, u64>,
    connect_window: Option<(u64, u64)>,
    pub(super) closed: bool,
    pub(super) dropped: u64,
    pub(super) exited: bool,
}

impl WorkerState {
    pub(super) fn new(plan: WorkerPlan) -> Self {
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
    pub(super) fn fail_rest(&mut self, reason: &str) {
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
pub(super) fn apply(workers: &mut [WorkerState], msg: FromWorker) {
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
pub(super) fn opened_and_failed(workers: &[WorkerState]) -> (u64, u64) {
    let opened: u64 = workers.iter().map(|w| w.opened).sum();
    let failed: u64 = workers.iter().map(|w| w.failed).sum();
    (opened, failed)
}

/// The connect phase over every worker, once all are ready.
#[derive(Debug)]
pub(super) struct Totals {
    pub(super) opened: u64,
    pub(super) failed: u64,
    /// Failure counts by reason.
    pub(super) failures: BTreeMap<String, u64>,
    /// From the first handshake started to the last one finished, across workers.
    pub(super) connect_seconds: f64,
}

impl Totals {
    pub(super) fn of(workers: &[WorkerState]) -> Self {
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
