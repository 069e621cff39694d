//! One run, in phases. Set up: open the sessions, start reading them, open the publisher, read
//! the CPU baselines. Run: publish on schedule while waiting for the arrivals, then read the
//! CPU used and the RSS. Collect: stop the publisher and the sessions, settle the confirms,
//! tally the samples. Report: assemble it.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use super::args::LatencyArgs;
use super::report::LatencyReport;
use super::traffic::{Clock, Published, Received, Schedule, publish_on_schedule, receive};
use crate::client::session::websocket::{self, Framing, Ws};
use crate::client::session::{Target, xhr_streaming};
use crate::client::transport::Transport;
use crate::harness::amqp::{self, Confirmed, Publisher};
use crate::harness::cpu::{self, CpuTime};
use crate::harness::outcome::BenchError;
use crate::harness::pacing::Pacer;
use crate::harness::progress::Progress;
use crate::harness::run::{Cleanup, Run};
use crate::harness::service::Service;
use crate::harness::stats::Summary;
use crate::harness::token::{Claims, Minter, now_epoch_secs};

/// Sessions opening at once.
const OPEN_CONCURRENCY: usize = 64;
/// How often progress is printed on stderr.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// Tokens stay valid this long beyond the run.
const TOKEN_SLACK: Duration = Duration::from_secs(3600);

fn failed(what: &str, e: impl Display) -> BenchError {
    BenchError::Failed(format!("{what}: {e}"))
}

pub(super) async fn measure(
    args: &LatencyArgs,
    run: &Run,
    jwt_secret: &str,
    services: &mut [(&'static str, Service)],
) -> Result<LatencyReport, BenchError> {
    // Set up.
    let herald = Herald::of(services)?;
    let sockets = open_sessions(args, jwt_secret, herald.gateway_addr).await?;
    let clock = Clock::new();
    let sessions = Sessions::start(sockets, clock);
    let (link, confirms) = PublisherLink::open(run).await?;
    let before = CpuTimes::read(args, &herald);

    // Run.
    let mut publishing = Publishing::start(args, clock, &link.publisher, confirms)?;
    let waited = wait_for_arrivals(args, services, &mut publishing, &sessions.received).await?;
    let window = publishing.started.elapsed();
    let used = CpuTimes::read(args, &herald).used_since(&before);
    let rss = |pid| crate::harness::rss::read_rss_and_peak(pid).ok();
    let (router_rss, gateway_rss) = (rss(herald.router_pid), rss(herald.gateway_pid));

    // Collect.
    let Publishing {
        task,
        published,
        pacer,
        started: _,
        schedule_start_ns,
    } = publishing;
    drop(task);
    sessions.cancel.cancel();
    let confirmed = link.close().await;
    let total = published.load(Ordering::Relaxed);
    let due_ns = |seq: u64| {
        schedule_start_ns.saturating_add(u64::try_from(pacer.due_at(seq).as_nanos()).unwrap_or(0))
    };
    let tally = Tally::collect(sessions.readers, total, waited.last_received, due_ns).await;

    // Report.
    let mut problems = waited.problems;
    for (end, n) in &tally.session_ends {
        problems.push(format!("{n} sessions ended early: {end}"));
    }
    let publish = waited.publish.unwrap_or(Published {
        sent: total,
        elapsed: window,
        max_lag: Duration::ZERO,
        error: None,
    });
    let measured = Measured {
        herald,
        publish,
        confirmed,
        tally,
        window,
        used,
        router_rss,
        gateway_rss,
    };
    Ok(assemble(args, run, measured, problems))
}

/// The Herald under test: the router's and the gateway's pids, and where the gateway listens.
struct Herald {
    router_pid: u32,
    gateway_pid: u32,
    gateway_addr: SocketAddr,
}

impl Herald {
    fn of(services: &[(&'static str, Service)]) -> Result<Self, BenchError> {
        let pid_of = |name: &str| {
            services
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, s)| s.pid())
                .unwrap_or_default()
        };
        let gateway_addr = services
            .iter()
            .find(|(n, _)| *n == "gateway")
            .map(|(_, s)| s.addr)
            .ok_or_else(|| BenchError::Failed("no gateway".into()))?;
        Ok(Self {
            router_pid: pid_of("router"),
            gateway_pid: pid_of("gateway"),
            gateway_addr,
        })
    }
}

/// Sessions: user bench-0-{i}, all open before anything is published. Fails unless every one
/// opened.
async fn open_sessions(
    args: &LatencyArgs,
    jwt_secret: &str,
    gateway_addr: SocketAddr,
) -> Result<Vec<Ws>, BenchError> {
    let target = Arc::new(Target {
        transport: Transport::WebSocket,
        host_header: gateway_addr.to_string(),
        path: Transport::WebSocket.gateway_path().to_owned(),
        addr: gateway_addr,
        source: None,
        handshake_timeout: Duration::from_secs(args.handshake_timeout),
        pipelined: false,
        xhr_sends: xhr_streaming::SendPool::new(1),
    });
    let minter = Minter::new(jwt_secret);
    let exp = now_epoch_secs() + args.seconds + args.drain_timeout + TOKEN_SLACK.as_secs();
    let slots = Arc::new(Semaphore::new(OPEN_CONCURRENCY));
    let mut opening = Vec::with_capacity(args.sessions);
    for i in 0..args.sessions {
        let token = minter
            .mint(&Claims::for_session(0, i, exp))
            .map_err(|e| failed("minting a token", e))?;
        let target = target.clone();
        let slots = slots.clone();
        opening.push(tokio::spawn(async move {
            let _slot = slots.acquire_owned().await;
            websocket::open(&target, &token, Framing::Stomp).await
        }));
    }
    let mut sockets = Vec::with_capacity(args.sessions);
    let mut open_failures = BTreeMap::<String, u64>::new();
    for job in opening {
        match job.await {
            Ok(Ok(ws)) => sockets.push(ws),
            Ok(Err(f)) => *open_failures.entry(f.reason()).or_default() += 1,
            Err(e) => *open_failures.entry(format!("task: {e}")).or_default() += 1,
        }
    }
    if !open_failures.is_empty() {
        return Err(BenchError::Failed(format!(
            "{} of {} sessions did not open: {open_failures:?}",
            open_failures.values().sum::<u64>(),
            args.sessions
        )));
    }
    eprintln!("herald-bench: {} sessions open", sockets.len());
    Ok(sockets)
}

/// A reader per session until `cancel`, all counting what arrived in `received`.
struct Sessions {
    readers: Vec<AbortOnDropHandle<Received>>,
    cancel: CancellationToken,
    received: Arc<AtomicU64>,
}

impl Sessions {
    fn start(sockets: Vec<Ws>, clock: Clock) -> Self {
        let cancel = CancellationToken::new();
        let received = Arc::new(AtomicU64::new(0));
        let readers = sockets
            .into_iter()
            .map(|ws| {
                AbortOnDropHandle::new(tokio::spawn(receive(
                    ws,
                    clock,
                    cancel.clone(),
                    received.clone(),
                )))
            })
            .collect();
        Self {
            readers,
            cancel,
            received,
        }
    }
}

/// Sends a burst's confirms to [`PublisherLink`]'s settling task.
type ConfirmSender = mpsc::Sender<Vec<lapin::PublisherConfirm>>;

/// Bursts whose confirms wait to be settled, at most (each up to
/// [`super::traffic::MAX_BURST`] publications). Policy when full: the publisher waits, which
/// shows as its lag behind the schedule (`max_lag`).
const CONFIRM_BURSTS: usize = 64;

/// The publisher's connection and channel, and the task settling its confirms (until the
/// [`ConfirmSender`] is dropped).
struct PublisherLink {
    conn: lapin::Connection,
    publisher: Publisher,
    confirming: AbortOnDropHandle<Confirmed>,
}

impl PublisherLink {
    async fn open(run: &Run) -> Result<(Self, ConfirmSender), BenchError> {
        let conn = amqp::connect(&run.amqp_url, &format!("herald-bench {} publisher", run.id))
            .await
            .map_err(|e| failed("publisher connection", e))?;
        let publisher = Publisher::open(&conn, &run.topology.exchange)
            .await
            .map_err(|e| failed("publisher channel", e))?;
        let (confirm_tx, mut confirm_rx) =
            mpsc::channel::<Vec<lapin::PublisherConfirm>>(CONFIRM_BURSTS);
        let confirming = AbortOnDropHandle::new(tokio::spawn(async move {
            let mut total = Confirmed::default();
            while let Some(confirms) = confirm_rx.recv().await {
                total.add(amqp::settle(confirms).await);
            }
            total
        }));
        let link = Self {
            conn,
            publisher,
            confirming,
        };
        Ok((link, confirm_tx))
    }

    /// Waits for the confirms still out (the [`ConfirmSender`] must be gone), then closes.
    async fn close(self) -> Confirmed {
        let confirmed = self.confirming.await.unwrap_or_default();
        self.publisher.close().await;
        let _ = self.conn.close(200, "bench done".into()).await;
        confirmed
    }
}

/// CPU times of the router, the gateway, the bench and the broker (when its pid is given).
struct CpuTimes {
    router: Option<CpuTime>,
    gateway: Option<CpuTime>,
    bench: Option<CpuTime>,
    broker: Option<CpuTime>,
}

/// CPU seconds each used over the window.
struct CpuUsed {
    router: Option<f64>,
    gateway: Option<f64>,
    bench: Option<f64>,
    broker: Option<f64>,
}

impl CpuTimes {
    fn read(args: &LatencyArgs, herald: &Herald) -> Self {
        let cpu_of = |pid: u32| cpu::read_cpu(pid).ok();
        Self {
            router: cpu_of(herald.router_pid),
            gateway: cpu_of(herald.gateway_pid),
            bench: cpu_of(std::process::id()),
            broker: args.broker_pid.and_then(cpu_of),
        }
    }

    fn used_since(&self, before: &Self) -> CpuUsed {
        let used =
            |a: &Option<CpuTime>, b: &Option<CpuTime>| Some(a.as_ref()?.since(b.as_ref()?).total());
        CpuUsed {
            router: used(&self.router, &before.router),
            gateway: used(&self.gateway, &before.gateway),
            bench: used(&self.bench, &before.bench),
            broker: used(&self.broker, &before.broker),
        }
    }
}

/// The publisher's task, and what the schedule says.
struct Publishing {
    task: AbortOnDropHandle<Published>,
    /// Publications out so far.
    published: Arc<AtomicU64>,
    pacer: Pacer,
    /// When publication 0 was due: the start of the window.
    started: Instant,
    /// `started` on the [`Clock`].
    schedule_start_ns: u64,
}

impl Publishing {
    fn start(
        args: &LatencyArgs,
        clock: Clock,
        publisher: &Publisher,
        confirms: ConfirmSender,
    ) -> Result<Self, BenchError> {
        let pacer = Pacer::new(args.rate, Pacer::total_for(args.rate, args.seconds))
            .ok_or_else(|| BenchError::Usage("--rate must be at least 1".into()))?;
        let users: Vec<String> = (0..args.sessions)
            .map(|i| crate::harness::token::user_id(0, i))
            .collect();
        let published = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        let schedule = Schedule {
            pacer,
            users,
            payload_bytes: args.payload_bytes,
            start: started,
            clock,
        };
        let task = AbortOnDropHandle::new(tokio::spawn(publish_on_schedule(
            publisher.clone(),
            schedule,
            confirms,
            published.clone(),
        )));
        Ok(Self {
            task,
            published,
            pacer,
            started,
            schedule_start_ns: clock.ns_at(started),
        })
    }
}

/// How the wait ended.
struct Waited {
    /// What the publisher did, once it finished.
    publish: Option<Published>,
    /// Publications received when the wait ended.
    last_received: u64,
    problems: Vec<String>,
}

/// Shows progress while publishing, then waits until every publication has arrived; gives up
/// when publishing fails, nothing arrives for `--drain-timeout` after the last publication,
/// or a service exits.
async fn wait_for_arrivals(
    args: &LatencyArgs,
    services: &mut [(&'static str, Service)],
    publishing: &mut Publishing,
    received: &AtomicU64,
) -> Result<Waited, BenchError> {
    let drain = Duration::from_secs(args.drain_timeout);
    let mut ticker = tokio::time::interval(PROGRESS_EVERY);
    ticker.tick().await;
    let bar = Progress::new(args.rate.saturating_mul(args.seconds));
    let mut publish: Option<Published> = None;
    let mut last_received = 0;
    let mut last_move = Instant::now();
    let mut problems = Vec::new();
    loop {
        tokio::select! {
            joined = &mut publishing.task, if publish.is_none() => {
                publish = Some(joined.map_err(|e| failed("publisher task", e))?);
                last_move = Instant::now();
            }
            _ = ticker.tick() => {
                let got = received.load(Ordering::Relaxed);
                bar.update(got, || format!(
                    "{:>5.1} s  published {}  received {}",
                    publishing.started.elapsed().as_secs_f64(),
                    publishing.published.load(Ordering::Relaxed),
                    got,
                ));
            }
            _ = tokio::time::sleep(Duration::from_millis(20)), if publish.is_some() => {}
        }
        if let Some(Published { error: Some(e), .. }) = &publish {
            problems.push(format!("publishing: {e}"));
            break;
        }
        let now_received = received.load(Ordering::Relaxed);
        if now_received != last_received {
            last_received = now_received;
            last_move = Instant::now();
        }
        if publish.is_some() {
            let sent = publishing.published.load(Ordering::Relaxed);
            if now_received >= sent {
                break;
            }
            if last_move.elapsed() >= drain {
                problems.push(format!(
                    "nothing received for {} s after the last publication",
                    drain.as_secs()
                ));
                break;
            }
        }
        let mut exited = None;
        for (name, service) in services.iter_mut() {
            if let Some(status) = service.exited() {
                exited = Some(format!("the {name} exited ({status})"));
            }
        }
        if let Some(e) = exited {
            problems.push(e);
            break;
        }
    }
    Ok(Waited {
        publish,
        last_received,
        problems,
    })
}

/// The samples of every session: one latency per distinct publication.
struct Tally {
    /// Publish to `MESSAGE`, ns.
    latencies: Vec<u64>,
    /// Due on the schedule to `MESSAGE`, ns.
    from_schedule: Vec<u64>,
    distinct: u64,
    duplicates: u64,
    foreign: u64,
    /// Sessions that ended before the bench closed them, and why.
    dropped: u64,
    session_ends: BTreeMap<String, u64>,
}

impl Tally {
    /// Waits for every reader (cancelled by now) and counts what they received of the
    /// `total` publications; `due_ns` is when the schedule meant publication `seq` to go out.
    async fn collect(
        readers: Vec<AbortOnDropHandle<Received>>,
        total: u64,
        expected: u64,
        due_ns: impl Fn(u64) -> u64,
    ) -> Self {
        let mut t = Tally {
            latencies: Vec::with_capacity(expected as usize),
            from_schedule: Vec::with_capacity(expected as usize),
            distinct: 0,
            duplicates: 0,
            foreign: 0,
            dropped: 0,
            session_ends: BTreeMap::new(),
        };
        let mut seen = vec![false; total as usize];
        for job in readers {
            let r = job.await.unwrap_or_else(|e| Received {
                ended: Some(format!("task: {e}")),
                ..Received::default()
            });
            t.foreign += r.foreign;
            if let Some(end) = r.ended {
                t.dropped += 1;
                *t.session_ends.entry(end).or_default() += 1;
            }
            for (seq, published_ns, received_ns) in r.samples {
                match seen.get_mut(seq as usize) {
                    Some(s) if !*s => {
                        *s = true;
                        t.distinct += 1;
                        t.latencies.push(received_ns.saturating_sub(published_ns));
                        t.from_schedule
                            .push(received_ns.saturating_sub(due_ns(seq)));
                    }
                    Some(_) => t.duplicates += 1,
                    None => t.foreign += 1,
                }
            }
        }
        t
    }
}

/// Everything the phases measured, for [`assemble`].
struct Measured {
    herald: Herald,
    publish: Published,
    confirmed: Confirmed,
    tally: Tally,
    /// From the first publication to the end of the wait.
    window: Duration,
    used: CpuUsed,
    router_rss: Option<(u64, u64)>,
    gateway_rss: Option<(u64, u64)>,
}

/// The report (without the load averages and cleanup, which `run` adds).
fn assemble(args: &LatencyArgs, run: &Run, m: Measured, problems: Vec<String>) -> LatencyReport {
    let Measured {
        herald,
        publish,
        confirmed,
        mut tally,
        window,
        used,
        router_rss,
        gateway_rss,
    } = m;
    let sent = publish.sent;
    let missing = sent.saturating_sub(tally.distinct);
    let latency = Summary::of(&mut tally.latencies);
    let latency_from_schedule = Summary::of(&mut tally.from_schedule);
    let complete = missing == 0 && problems.is_empty() && confirmed.acked == sent;
    LatencyReport {
        command: "latency",
        run_id: run.id.clone(),
        router_pid: herald.router_pid,
        gateway_pid: herald.gateway_pid,
        rate: args.rate,
        seconds: args.seconds,
        sessions: args.sessions,
        payload_bytes: args.payload_bytes,
        published: sent,
        confirmed: confirmed.acked,
        nacked: confirmed.nacked,
        publish_seconds: publish.elapsed.as_secs_f64(),
        achieved_rate: sent as f64 / publish.elapsed.as_secs_f64().max(1e-9),
        max_publisher_lag_ms: publish.max_lag.as_secs_f64() * 1e3,
        received: tally.distinct,
        duplicates: tally.duplicates,
        foreign: tally.foreign,
        missing,
        sessions_dropped: tally.dropped,
        latency,
        latency_from_schedule,
        window_seconds: window.as_secs_f64(),
        router_cpu_seconds: used.router,
        gateway_cpu_seconds: used.gateway,
        bench_cpu_seconds: used.bench,
        broker_cpu_seconds: used.broker,
        router_rss_bytes: router_rss.map(|(r, _)| r),
        gateway_rss_bytes: gateway_rss.map(|(r, _)| r),
        gateway_peak_rss_bytes: gateway_rss.map(|(_, p)| p),
        cores: cpu::cores(),
        load_before: None,
        load_after: None,
        complete,
        problems,
        cleanup: Cleanup::default(),
    }
}
