//! `herald-bench connections`: the parent process.
//!
//! The parent never opens sessions. It plans the split ([`crate::harness::plan`]), optionally
//! starts the gateway, reads a baseline RSS, re-executes its own binary as `worker` processes
//! ([`crate::harness::workers`]), follows their JSON-line events ([`crate::harness::events`])
//! until every worker is ready, reads the settled RSS, prints the report, holds, tells the
//! workers to close, waits for them (with a deadline), and stops a gateway it started.

mod args;
mod gateway;
mod report;

pub(crate) use self::args::ConnectionsArgs;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use self::gateway::SpawnedGateway;
use self::report::{ConnectionsReport, Memory};
use crate::harness::endpoint::Endpoint;
use crate::harness::events::{CLOSE_DEADLINE, WorkerEvent};
use crate::harness::outcome::{BenchError, Outcome};
use crate::harness::plan::{self, WorkerPlan};
use crate::harness::progress::Progress;
use crate::harness::rss;
use crate::harness::sys;
use crate::harness::token::random_token;
use crate::harness::workers::{FromWorker, WorkerCommand, Workers};

/// How often the parent prints connect progress on stderr.
const PROGRESS_EVERY: Duration = Duration::from_secs(2);
/// Extra time, beyond the workers' own close deadline, before stragglers are killed.
const EXIT_SLACK: Duration = Duration::from_secs(5);
/// File descriptors a worker needs beyond one per session (runtime, pipes, std streams, the
/// xhr_send connections).
const FD_MARGIN: usize = 64;
/// Tokens stay valid this long beyond the hold.
const TOKEN_SLACK: Duration = Duration::from_secs(3600);
/// Worker lines read but not yet taken in.
const QUEUE: usize = 256;

/// What the parent knows about one worker.
#[derive(Debug)]
struct WorkerState {
    plan: WorkerPlan,
    opened: u64,
    failed: u64,
    ready: bool,
    failures: BTreeMap<String, u64>,
    connect_window: Option<(u64, u64)>,
    closed: bool,
    dropped: u64,
    exited: bool,
}

impl WorkerState {
    fn new(plan: WorkerPlan) -> Self {
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
    fn fail_rest(&mut self, reason: &str) {
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

pub(crate) async fn run(args: ConnectionsArgs) -> Result<Outcome, BenchError> {
    if let Err(e) = sys::raise_nofile_limit() {
        eprintln!("herald-bench: cannot raise RLIMIT_NOFILE ({e}); continuing");
    }

    // Validate everything before starting anything.
    let target_ip = match &args.spawn_gateway {
        Some(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        None => {
            let endpoint =
                Endpoint::parse(&args.url()).map_err(|e| BenchError::Usage(e.to_string()))?;
            endpoint
                .resolve()
                .await
                .map_err(|e| BenchError::Failed(e.to_string()))?
                .ip()
        }
    };
    let plans = plan::plan(args.sessions, args.processes, &args.source_addrs, target_ip)
        .map_err(|e| BenchError::Usage(e.to_string()))?;
    let jwt_secret = args.jwt_secret.clone().unwrap_or_else(|| random_token(32));

    let gateway = match &args.spawn_gateway {
        Some(path) => {
            let gw = SpawnedGateway::start(
                path,
                &jwt_secret,
                args.gateway_log.as_deref(),
                Duration::from_secs(args.startup_timeout),
            )
            .await
            .map_err(|e| BenchError::Failed(e.to_string()))?;
            eprintln!(
                "herald-bench: started gateway pid {} on {}",
                gw.pid(),
                gw.addr
            );
            Some(gw)
        }
        None => None,
    };
    let result = measure(&args, &plans, &jwt_secret, gateway.as_ref()).await;
    if let Some(gw) = gateway {
        let how = gw.stop().await;
        eprintln!("herald-bench: gateway {how}");
    }
    result
}

async fn measure(
    args: &ConnectionsArgs,
    plans: &[WorkerPlan],
    jwt_secret: &str,
    gateway: Option<&SpawnedGateway>,
) -> Result<Outcome, BenchError> {
    let url = gateway.map_or_else(|| args.url(), |gw| gw.url(args.transport));
    let gateway_pid = gateway.map(SpawnedGateway::pid).or(args.gateway_pid);

    let baseline = match gateway_pid {
        Some(pid) => Some(
            rss::settled_rss(pid)
                .await
                .map_err(|e| BenchError::Failed(format!("cannot read RSS of pid {pid}: {e}")))?,
        ),
        None => None,
    };

    let mut workers: Vec<WorkerState> = plans.iter().cloned().map(WorkerState::new).collect();
    let command = WorkerCommand {
        url: &url,
        transport: args.transport.name(),
        concurrency: args.concurrency,
        handshake_timeout_secs: args.handshake_timeout,
        token_ttl: Duration::from_secs(args.hold) + TOKEN_SLACK,
        record: false,
        jwt_secret,
    };
    let mut processes = Workers::spawn(&command, plans, QUEUE)?;

    // Connect phase: until every worker is ready (or gone).
    let mut progress = tokio::time::interval(PROGRESS_EVERY);
    progress.tick().await;
    let bar = Progress::new(args.sessions as u64);
    while !workers.iter().all(|w| w.ready) {
        tokio::select! {
            msg = processes.recv() => match msg {
                Some(msg) => apply(&mut workers, msg),
                None => break,
            },
            _ = progress.tick() => {
                let opened: u64 = workers.iter().map(|w| w.opened).sum();
                let failed: u64 = workers.iter().map(|w| w.failed).sum();
                bar.update(opened + failed, || format!("{opened} opened, {failed} failed of {}", args.sessions));
            }
        }
    }
    drop(bar);
    for w in &mut workers {
        w.fail_rest("worker exited before reporting");
    }

    let opened: u64 = workers.iter().map(|w| w.opened).sum();
    let failed: u64 = workers.iter().map(|w| w.failed).sum();
    let mut failures = BTreeMap::new();
    for w in &workers {
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

    let memory = match (gateway_pid, baseline) {
        (Some(pid), Some(before)) => {
            let after = rss::settled_rss(pid)
                .await
                .map_err(|e| BenchError::Failed(format!("cannot read RSS of pid {pid}: {e}")))?;
            Some(Memory::new(
                pid,
                before.bytes,
                after.bytes,
                before.settled && after.settled,
                opened,
            ))
        }
        _ => None,
    };

    let report = ConnectionsReport {
        command: "connections",
        transport: args.transport.name(),
        url,
        processes: plans.len(),
        sessions_requested: args.sessions as u64,
        sessions_opened: opened,
        sessions_failed: failed,
        failures,
        connect_seconds,
        connect_rate: ConnectionsReport::connect_rate(opened, connect_seconds),
        memory,
    };
    if args.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.to_text());
    }

    if args.hold > 0 {
        eprintln!("herald-bench: holding the sessions for {} s", args.hold);
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(args.hold)) => {}
            _ = tokio::signal::ctrl_c() => eprintln!("herald-bench: interrupted; closing"),
        }
    }

    // Close: tell every worker, then wait for them with a deadline.
    processes.tell_close().await;
    let deadline = tokio::time::Instant::now() + CLOSE_DEADLINE + EXIT_SLACK;
    while !workers.iter().all(|w| w.exited) {
        match tokio::time::timeout_at(deadline, processes.recv()).await {
            Ok(Some(msg)) => apply(&mut workers, msg),
            Ok(None) | Err(_) => break,
        }
    }
    for (child, w) in processes.children_mut().iter_mut().zip(&workers) {
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

    Ok(if opened == args.sessions as u64 {
        Outcome::AllOpened
    } else {
        Outcome::SomeFailed
    })
}

fn apply(workers: &mut [WorkerState], msg: FromWorker) {
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
}
