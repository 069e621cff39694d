//! `herald-bench latency`: the time from an AMQP publish to the router's exchange to the STOMP
//! `MESSAGE` on a browser session, through `herald-router` and an edge `herald-gateway`.
//!
//! 1. A run with names of its own ([`crate::harness::run`]): the router on them, and one gateway in edge
//!    mode (its `edge.exchange` the run's edges exchange, `--edge-id` the run id), ready once
//!    its queue on the broker has a consumer.
//! 2. M STOMP-over-WebSocket sessions on the gateway (the bench's own session code), one user
//!    each, every one reading and parsing what it receives.
//! 3. One publisher publishes at a fixed rate ([`crate::harness::pacing`]) for the given seconds;
//!    publication k goes to user k % M, with confirms awaited off the sending path. Its message
//!    id is `lat-{k}-{ns}`, ns being the publish time on a monotonic clock that the sessions,
//!    in the same process, read too ([`Clock`]); the gateway passes the id on as the
//!    `message-id` header, so each `MESSAGE` yields one latency sample.
//! 4. After the last publication the bench waits until every publication has arrived, or until
//!    nothing has arrived for `--drain-timeout`, and counts the missing.
//! 5. Exact percentiles over every sample ([`crate::harness::stats`]), then the processes are stopped and
//!    everything the run declared is deleted.
//!
//! The timestamp is taken when the message is handed to the AMQP client, not when it was
//! scheduled; if the publisher falls behind its schedule, the report says by how much (the
//! latency of a late publication does not include its lateness).

mod args;
mod report;

pub(crate) use self::args::LatencyArgs;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use tokio::sync::{Semaphore, mpsc};
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use self::report::LatencyReport;
use crate::client::session::websocket::{self, CLOSE_GRACE, Framing, Ws};
use crate::client::session::{Target, xhr_streaming};
use crate::client::stomp_client::{self, Decoded};
use crate::client::transport::Transport;
use crate::harness::amqp::{self, Confirmed, Outgoing, Publisher};
use crate::harness::configs;
use crate::harness::cpu;
use crate::harness::outcome::{BenchError, Outcome};
use crate::harness::pacing::Pacer;
use crate::harness::progress::Progress;
use crate::harness::run::{Cleanup, Run, interruptible};
use crate::harness::service::Service;
use crate::harness::stats::Summary;
use crate::harness::token::random_token;
use crate::harness::token::{Claims, Minter, now_epoch_secs};

/// Routing key and `event` header of the publications.
const EVENT: &str = "bench.latency";
/// Most publications handed to the broker in one burst (a publisher far behind its schedule
/// catches up in bursts of this size, so confirms keep flowing).
const MAX_BURST: u64 = 1000;
/// Sessions opening at once.
const OPEN_CONCURRENCY: usize = 64;
/// How often progress is printed on stderr.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// Tokens stay valid this long beyond the run.
const TOKEN_SLACK: Duration = Duration::from_secs(3600);

/// Nanoseconds on a monotonic clock since a common start, read by the publisher and by every
/// session (they share the process, so `Instant` is the same clock for all).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    start: Instant,
}

impl Clock {
    pub(crate) fn new() -> Self {
        Self {
            start: Instant::now(),
        }
    }

    pub(crate) fn now_ns(&self) -> u64 {
        self.ns_at(Instant::now())
    }

    /// `instant` on this clock (0 for an instant before its start).
    pub(crate) fn ns_at(&self, instant: Instant) -> u64 {
        let since = instant.saturating_duration_since(self.start);
        u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
    }
}

/// The message id of publication `seq`, published at `ns` on the [`Clock`].
fn message_id(seq: u64, ns: u64) -> String {
    format!("lat-{seq}-{ns}")
}

/// `(seq, ns)` from a message id made by [`message_id`].
fn parse_message_id(id: &str) -> Option<(u64, u64)> {
    let (seq, ns) = id.strip_prefix("lat-")?.split_once('-')?;
    Some((seq.parse().ok()?, ns.parse().ok()?))
}

fn validate(args: &LatencyArgs) -> Result<(), String> {
    if args.rate == 0 || args.seconds == 0 {
        return Err("--rate and --seconds must be at least 1".into());
    }
    if args.sessions == 0 || args.sessions > 10_000 {
        return Err("--sessions must be between 1 and 10,000 (they live in this process)".into());
    }
    if args.payload_bytes > 64 * 1024 {
        return Err("--payload-bytes must be at most 64 KiB".into());
    }
    Ok(())
}

pub(crate) async fn run(args: LatencyArgs) -> Result<Outcome, BenchError> {
    validate(&args).map_err(BenchError::Usage)?;
    if let Err(e) = crate::harness::sys::raise_nofile_limit() {
        eprintln!("herald-bench: cannot raise RLIMIT_NOFILE ({e}); continuing");
    }
    let load_before = cpu::load_average();
    let mut run = Run::begin(&args.amqp_url).await?;
    let edge_queue = configs::edge_queue(&run.id);
    run.add_queue(edge_queue.clone());
    eprintln!(
        "herald-bench: run {}: exchange {}, edge {} (queue {edge_queue})",
        run.id, run.topology.exchange, run.id
    );
    let jwt_secret = random_token(48);
    let mut services: Vec<(&'static str, Service)> = Vec::new();
    let started = interruptible(start_services(&args, &run, &jwt_secret)).await;
    let measured = match started {
        Ok((router, gateway)) => {
            services.push(("gateway", gateway));
            services.push(("router", router));
            interruptible(measure(&args, &run, &jwt_secret, &mut services)).await
        }
        Err(e) => Err(e),
    };
    let cleanup = run.finish(services).await;
    let mut report = measured?;
    report.load_before = load_before;
    report.load_after = cpu::load_average();
    report.cleanup = cleanup;
    Ok(crate::harness::report::emit(
        &report,
        || report.human(),
        report.complete,
        args.json,
    ))
}

/// The router, then the edge gateway; ready once the edge's queue has its consumer.
async fn start_services(
    args: &LatencyArgs,
    run: &Run,
    jwt_secret: &str,
) -> Result<(Service, Service), BenchError> {
    let timeout = Duration::from_secs(args.startup_timeout);
    let router = run
        .start_router(
            &args.router_bin,
            args.prefetch,
            args.router_log.as_deref(),
            timeout,
        )
        .await?;
    eprintln!(
        "herald-bench: router pid {} on {}",
        router.pid(),
        router.addr
    );
    let gateway = run
        .start_edge(
            &args.gateway_bin,
            jwt_secret,
            args.gateway_log.as_deref(),
            timeout,
        )
        .await;
    match gateway {
        Ok(gateway) => {
            eprintln!(
                "herald-bench: edge gateway pid {} on {}",
                gateway.pid(),
                gateway.addr
            );
            Ok((router, gateway))
        }
        Err(e) => {
            router.stop().await;
            Err(e)
        }
    }
}

/// What one session received.
#[derive(Debug, Default)]
struct Received {
    /// `(seq, published, received)` per `MESSAGE`, in ns on the [`Clock`].
    samples: Vec<(u64, u64, u64)>,
    /// `MESSAGE` frames whose id is not one of this run's.
    foreign: u64,
    /// Why the session ended before the bench closed it.
    ended: Option<String>,
}

async fn measure(
    args: &LatencyArgs,
    run: &Run,
    jwt_secret: &str,
    services: &mut [(&'static str, Service)],
) -> Result<LatencyReport, BenchError> {
    let failed = |what: &str, e: &dyn std::fmt::Display| BenchError::Failed(format!("{what}: {e}"));
    let pid_of = |name: &str| {
        services
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, s)| s.pid())
            .unwrap_or_default()
    };
    let (router_pid, gateway_pid) = (pid_of("router"), pid_of("gateway"));
    let gateway_addr = services
        .iter()
        .find(|(n, _)| *n == "gateway")
        .map(|(_, s)| s.addr)
        .ok_or_else(|| BenchError::Failed("no gateway".into()))?;

    // Sessions: user bench-0-{i}, all open before anything is published.
    let target = Arc::new(Target {
        transport: Transport::WebSocket,
        host_header: gateway_addr.to_string(),
        path: Transport::WebSocket.gateway_path().to_owned(),
        addr: gateway_addr,
        source: None,
        handshake_timeout: Duration::from_secs(args.handshake_timeout),
        xhr_sends: xhr_streaming::SendPool::new(1),
    });
    let minter = Minter::new(jwt_secret);
    let exp = now_epoch_secs() + args.seconds + args.drain_timeout + TOKEN_SLACK.as_secs();
    let slots = Arc::new(Semaphore::new(OPEN_CONCURRENCY));
    let mut opening = Vec::with_capacity(args.sessions);
    for i in 0..args.sessions {
        let token = minter
            .mint(&Claims::for_session(0, i, exp))
            .map_err(|e| failed("minting a token", &e))?;
        let target = target.clone();
        let slots = slots.clone();
        opening.push(tokio::spawn(async move {
            let _slot = slots.acquire_owned().await;
            websocket::open(&target, &token, Framing::Stomp).await
        }));
    }
    let mut sockets = Vec::with_capacity(args.sessions);
    let mut open_failures = std::collections::BTreeMap::<String, u64>::new();
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

    let clock = Clock::new();
    let cancel = CancellationToken::new();
    let received = Arc::new(AtomicU64::new(0));
    let receivers: Vec<_> = sockets
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

    let conn = amqp::connect(&run.amqp_url, &format!("herald-bench {} publisher", run.id))
        .await
        .map_err(|e| failed("publisher connection", &e))?;
    let publisher = Publisher::open(&conn, &run.topology.exchange)
        .await
        .map_err(|e| failed("publisher channel", &e))?;
    let (confirm_tx, mut confirm_rx) = mpsc::unbounded_channel::<Vec<lapin::PublisherConfirm>>();
    let confirming = AbortOnDropHandle::new(tokio::spawn(async move {
        let mut total = Confirmed::default();
        while let Some(confirms) = confirm_rx.recv().await {
            total.add(amqp::settle(confirms).await);
        }
        total
    }));

    let bench_pid = std::process::id();
    let cpu_of = |pid: u32| cpu::read_cpu(pid).ok();
    let before = [
        cpu_of(router_pid),
        cpu_of(gateway_pid),
        cpu_of(bench_pid),
        args.broker_pid.and_then(cpu_of),
    ];

    // Publish on schedule.
    let pacer = Pacer::new(args.rate, Pacer::total_for(args.rate, args.seconds))
        .ok_or_else(|| BenchError::Usage("--rate must be at least 1".into()))?;
    let users: Vec<String> = (0..args.sessions)
        .map(|i| crate::harness::token::user_id(0, i))
        .collect();
    let routing_key: lapin::types::ShortString = EVENT.into();
    let published = Arc::new(AtomicU64::new(0));
    let window_start = Instant::now();
    let schedule_start_ns = clock.ns_at(window_start);
    let mut publishing = {
        let published = published.clone();
        let payload_bytes = args.payload_bytes;
        let publisher = publisher.clone();
        AbortOnDropHandle::new(tokio::spawn(async move {
            let start = window_start;
            let mut sent = 0u64;
            let mut max_lag = Duration::ZERO;
            while sent < pacer.total() {
                let elapsed = start.elapsed();
                let due = pacer.due(elapsed);
                if due <= sent {
                    let at = tokio::time::Instant::from_std(start + pacer.due_at(sent));
                    tokio::time::sleep_until(at).await;
                    continue;
                }
                max_lag = max_lag.max(elapsed.saturating_sub(pacer.due_at(sent)));
                let upto = due.min(sent + MAX_BURST);
                let batch: Vec<Outgoing> = (sent..upto)
                    .map(|k| {
                        let user = &users[(k % users.len() as u64) as usize];
                        let id = message_id(k, clock.now_ns());
                        Outgoing {
                            routing_key: routing_key.clone(),
                            properties: amqp::publication(&id, EVENT, user, true),
                            body: amqp::payload(k, payload_bytes),
                        }
                    })
                    .collect();
                match publisher.publish_batch(batch).await {
                    Ok(confirms) => {
                        let _ = confirm_tx.send(confirms);
                    }
                    Err(e) => return (sent, start.elapsed(), max_lag, Some(e.to_string())),
                }
                sent = upto;
                published.store(sent, Ordering::Relaxed);
            }
            (sent, start.elapsed(), max_lag, None)
        }))
    };

    // Progress while publishing, then the drain.
    let drain = Duration::from_secs(args.drain_timeout);
    let mut ticker = tokio::time::interval(PROGRESS_EVERY);
    ticker.tick().await;
    let bar = Progress::new(args.rate.saturating_mul(args.seconds));
    let mut publish_outcome = None;
    let mut last_received = 0;
    let mut last_move = Instant::now();
    let mut problems = Vec::new();
    loop {
        tokio::select! {
            joined = &mut publishing, if publish_outcome.is_none() => {
                publish_outcome = Some(joined.map_err(|e| failed("publisher task", &e))?);
                last_move = Instant::now();
            }
            _ = ticker.tick() => {
                let got = received.load(Ordering::Relaxed);
                bar.update(got, || format!(
                    "{:>5.1} s  published {}  received {}",
                    window_start.elapsed().as_secs_f64(),
                    published.load(Ordering::Relaxed),
                    got,
                ));
            }
            _ = tokio::time::sleep(Duration::from_millis(20)), if publish_outcome.is_some() => {}
        }
        if let Some((_, _, _, Some(e))) = &publish_outcome {
            problems.push(format!("publishing: {e}"));
            break;
        }
        let now_received = received.load(Ordering::Relaxed);
        if now_received != last_received {
            last_received = now_received;
            last_move = Instant::now();
        }
        if publish_outcome.is_some() {
            let sent = published.load(Ordering::Relaxed);
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
    let window = window_start.elapsed();
    let after = [
        cpu_of(router_pid),
        cpu_of(gateway_pid),
        cpu_of(bench_pid),
        args.broker_pid.and_then(cpu_of),
    ];
    let used: Vec<Option<f64>> = before
        .iter()
        .zip(&after)
        .map(|(b, a)| Some(a.as_ref()?.since(b.as_ref()?).total()))
        .collect();
    let rss = |pid| crate::harness::rss::read_rss_and_peak(pid).ok();
    let (router_rss, gateway_rss) = (rss(router_pid), rss(gateway_pid));

    drop(publishing);
    cancel.cancel();
    let confirmed = confirming.await.unwrap_or_default();
    publisher.close().await;
    let _ = conn.close(200, "bench done".into()).await;
    let mut latencies = Vec::with_capacity(last_received as usize);
    let mut from_schedule = Vec::with_capacity(last_received as usize);
    let total = published.load(Ordering::Relaxed);
    let mut seen = vec![false; total as usize];
    let (mut distinct, mut duplicates, mut foreign, mut dropped) = (0u64, 0u64, 0u64, 0u64);
    let mut session_ends = std::collections::BTreeMap::<String, u64>::new();
    for job in receivers {
        let r = job.await.unwrap_or_else(|e| Received {
            ended: Some(format!("task: {e}")),
            ..Received::default()
        });
        foreign += r.foreign;
        if let Some(end) = r.ended {
            dropped += 1;
            *session_ends.entry(end).or_default() += 1;
        }
        for (seq, published_ns, received_ns) in r.samples {
            match seen.get_mut(seq as usize) {
                Some(s) if !*s => {
                    *s = true;
                    distinct += 1;
                    latencies.push(received_ns.saturating_sub(published_ns));
                    let due_ns = schedule_start_ns
                        .saturating_add(u64::try_from(pacer.due_at(seq).as_nanos()).unwrap_or(0));
                    from_schedule.push(received_ns.saturating_sub(due_ns));
                }
                Some(_) => duplicates += 1,
                None => foreign += 1,
            }
        }
    }
    for (end, n) in session_ends {
        problems.push(format!("{n} sessions ended early: {end}"));
    }
    let (sent, publish_elapsed, max_lag) = publish_outcome
        .map(|(sent, elapsed, lag, _)| (sent, elapsed, lag))
        .unwrap_or((total, window, Duration::ZERO));
    let missing = sent.saturating_sub(distinct);
    let latency = Summary::of(&mut latencies);
    let latency_from_schedule = Summary::of(&mut from_schedule);
    let complete = missing == 0 && problems.is_empty() && confirmed.acked == sent;
    Ok(LatencyReport {
        command: "latency",
        run_id: run.id.clone(),
        router_pid,
        gateway_pid,
        rate: args.rate,
        seconds: args.seconds,
        sessions: args.sessions,
        payload_bytes: args.payload_bytes,
        published: sent,
        confirmed: confirmed.acked,
        nacked: confirmed.nacked,
        publish_seconds: publish_elapsed.as_secs_f64(),
        achieved_rate: sent as f64 / publish_elapsed.as_secs_f64().max(1e-9),
        max_publisher_lag_ms: max_lag.as_secs_f64() * 1e3,
        received: distinct,
        duplicates,
        foreign,
        missing,
        sessions_dropped: dropped,
        latency,
        latency_from_schedule,
        window_seconds: window.as_secs_f64(),
        router_cpu_seconds: used[0],
        gateway_cpu_seconds: used[1],
        bench_cpu_seconds: used[2],
        broker_cpu_seconds: used[3],
        router_rss_bytes: router_rss.map(|(r, _)| r),
        gateway_rss_bytes: gateway_rss.map(|(r, _)| r),
        gateway_peak_rss_bytes: gateway_rss.map(|(_, p)| p),
        cores: cpu::cores(),
        load_before: None,
        load_after: None,
        complete,
        problems,
        cleanup: Cleanup::default(),
    })
}

/// Reads one session until `cancel`: every `MESSAGE` of this run becomes a sample, stamped
/// when its WebSocket message arrived.
async fn receive(
    mut ws: Ws,
    clock: Clock,
    cancel: CancellationToken,
    received: Arc<AtomicU64>,
) -> Received {
    let mut out = Received::default();
    let mut buffer: Vec<u8> = Vec::new();
    'session: loop {
        let msg = tokio::select! {
            biased;
            () = cancel.cancelled() => break,
            m = ws.next() => m,
        };
        let now = clock.now_ns();
        match msg {
            Some(Ok(Message::Text(t))) => buffer.extend_from_slice(t.as_bytes()),
            Some(Ok(Message::Binary(b))) => buffer.extend_from_slice(&b),
            Some(Ok(Message::Close(_))) | None => {
                out.ended = Some("closed by the gateway".into());
                return out;
            }
            Some(Ok(_)) => continue,
            Some(Err(e)) => {
                out.ended = Some(format!("websocket: {e}"));
                return out;
            }
        }
        loop {
            match stomp_client::decode(&buffer) {
                Ok(Some((decoded, used))) => {
                    buffer.drain(..used);
                    let Decoded::Frame(frame) = decoded else {
                        continue;
                    };
                    match frame.command.as_str() {
                        "MESSAGE" => match frame.header("message-id").and_then(parse_message_id) {
                            Some((seq, sent)) => {
                                out.samples.push((seq, sent, now));
                                received.fetch_add(1, Ordering::Relaxed);
                            }
                            None => out.foreign += 1,
                        },
                        "ERROR" => {
                            out.ended = Some(format!(
                                "stomp error: {}",
                                frame.header("message").unwrap_or("(no message)")
                            ));
                            break 'session;
                        }
                        _ => {}
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    out.ended = Some(format!("stomp: {e}"));
                    break 'session;
                }
            }
        }
    }
    let _ = tokio::time::timeout(CLOSE_GRACE, async {
        if ws.close(None).await.is_ok() {
            while let Some(Ok(_)) = ws.next().await {}
        }
    })
    .await;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_ids_carry_seq_and_time() {
        let id = message_id(17, 1_234_567_890);
        assert_eq!(id, "lat-17-1234567890");
        assert_eq!(parse_message_id(&id), Some((17, 1_234_567_890)));
        assert_eq!(parse_message_id("tp-17"), None);
        assert_eq!(parse_message_id("lat-17"), None);
        assert_eq!(parse_message_id("lat-x-1"), None);
        // Valid Herald ids: 1-200 of A-Z a-z 0-9 . _ ~ @ / + = -
        let longest = message_id(u64::MAX, u64::MAX);
        assert!(longest.len() <= 200);
        assert!(
            longest
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-')
        );
    }

    fn args(extra: &[&str]) -> LatencyArgs {
        use clap::Parser as _;
        let mut argv = vec![
            "herald-bench",
            "latency",
            "--router-bin",
            "r",
            "--gateway-bin",
            "g",
        ];
        argv.extend_from_slice(extra);
        match crate::cli::Cli::try_parse_from(argv).unwrap().command {
            crate::cli::Command::Latency(a) => a,
            _ => unreachable!(),
        }
    }

    #[test]
    fn arguments_are_checked_before_anything_starts() {
        assert_eq!(validate(&args(&[])), Ok(()));
        assert!(validate(&args(&["--rate", "0"])).is_err());
        assert!(validate(&args(&["--seconds", "0"])).is_err());
        assert!(validate(&args(&["--sessions", "0"])).is_err());
        assert!(validate(&args(&["--sessions", "20000"])).is_err());
        assert!(validate(&args(&["--payload-bytes", "100000"])).is_err());
    }

    #[test]
    fn the_clock_is_monotonic() {
        let clock = Clock::new();
        let a = clock.now_ns();
        std::thread::sleep(Duration::from_millis(2));
        let b = clock.now_ns();
        assert!(b >= a + 2_000_000, "{a} {b}");
        let later = Instant::now() + Duration::from_secs(1);
        assert!(clock.ns_at(later) >= 1_000_000_000);
        assert_eq!(clock.ns_at(clock.start - Duration::from_millis(1)), 0);
    }
}
