//! `herald-bench router-throughput`: how many publications per second one `herald-router`
//! validates and forwards, and what CPU that costs it.
//!
//! 1. A run with names of its own ([`crate::harness::run`]); the router is started on them with a
//!    generated configuration, and is ready once its `/healthz` says it has declared them.
//! 2. An edges queue is declared and bound to the edges exchange, as an edge would, so every
//!    forward is routed, and the bench consumes it (large prefetch, acks `multiple`).
//! 3. P publishers (a connection each) publish the N publications to the router's exchange as
//!    fast as the broker takes them: batches handed over without waiting, confirms awaited in
//!    a sliding window.
//! 4. The clock runs from the first publish to the moment the edges consumer has seen all N
//!    (distinct) publications; the router's CPU time (`/proc/PID/stat`) over the same window
//!    gives publications per CPU-second, which is the per-core figure. The router's context
//!    switches (`/proc/PID/task/*/status`) over the window say how often its threads handed
//!    work to each other.
//! 5. The router is stopped (SIGTERM) and everything the run declared is deleted.

mod args;

pub(crate) use self::args::RouterThroughputArgs;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Consumer};
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use crate::harness::amqp::{self, Confirmed, Outgoing, Publisher};
use crate::harness::configs;
use crate::harness::cpu::{self, CpuTime};
use crate::harness::outcome::{BenchError, Outcome};
use crate::harness::report::{grouped, maybe};
use crate::harness::rss::human_bytes;
use crate::harness::run::{Cleanup, ROUTER_DEFAULT_PREFETCH, Run, interruptible};
use crate::harness::service::Service;

/// Routing key and `event` header of the publications.
const EVENT: &str = "bench.throughput";
/// Publications go to this many distinct users (`bench-0-{k % USERS}`).
const USERS: u64 = 1000;
/// How often progress is printed on stderr.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// The message id of publication `seq`.
fn message_id(seq: u64) -> String {
    format!("tp-{seq}")
}

/// The `seq` of a message id made by [`message_id`].
fn parse_message_id(id: &str) -> Option<u64> {
    id.strip_prefix("tp-")?.parse().ok()
}

/// Checks the arguments before anything starts.
fn validate(args: &RouterThroughputArgs) -> Result<(), String> {
    if args.messages == 0 {
        return Err("--messages must be at least 1".into());
    }
    if args.publishers == 0 || args.publishers as u64 > args.messages {
        return Err("--publishers must be between 1 and --messages".into());
    }
    if args.batch == 0 || args.confirm_window < args.batch {
        return Err("--batch must be at least 1 and --confirm-window at least --batch".into());
    }
    if args.payload_bytes > 1024 * 1024 {
        return Err("--payload-bytes must be at most 1 MiB (the router's default limit)".into());
    }
    if args.consumer_prefetch < 4 {
        return Err("--consumer-prefetch must be at least 4".into());
    }
    Ok(())
}

pub(crate) async fn run(args: RouterThroughputArgs) -> Result<Outcome, BenchError> {
    validate(&args).map_err(BenchError::Usage)?;
    let load_before = cpu::load_average();
    let mut run = Run::begin(&args.amqp_url).await?;
    let edges_queue = configs::edge_queue(&run.id);
    run.add_queue(edges_queue.clone());
    eprintln!(
        "herald-bench: run {}: exchange {}, edges queue {edges_queue}",
        run.id, run.topology.exchange
    );

    let mut router = None;
    if !args.prefill {
        let started = interruptible(run.start_router(
            &args.router_bin,
            args.prefetch,
            args.router_log.as_deref(),
            Duration::from_secs(args.startup_timeout),
        ))
        .await;
        match started {
            Ok(r) => router = Some(announce(r)),
            Err(e) => {
                run.finish(Vec::new()).await;
                return Err(e);
            }
        }
    }
    let measured = interruptible(measure(&args, &run, &edges_queue, &mut router)).await;
    let cleanup = run
        .finish(router.into_iter().map(|r| ("router", r)).collect())
        .await;
    let mut report = measured?;
    report.load_after = cpu::load_average();
    report.load_before = load_before;
    report.cleanup = cleanup;
    Ok(crate::harness::report::emit(
        &report,
        || report.human(),
        report.complete,
        args.json,
    ))
}

fn announce(router: Service) -> Service {
    eprintln!(
        "herald-bench: router pid {} on {}",
        router.pid(),
        router.addr
    );
    router
}

/// What one publisher did.
#[derive(Debug, Default)]
struct Published {
    published: u64,
    confirmed: Confirmed,
    /// When its last confirm arrived.
    done_at: Option<Instant>,
    error: Option<String>,
}

impl Published {
    /// Adds up the publishers' results.
    fn merge(
        &mut self,
        joined: Result<Published, tokio::task::JoinError>,
        errors: &mut Vec<String>,
    ) {
        let p = joined.unwrap_or_else(|e| Published {
            error: Some(format!("publisher task: {e}")),
            ..Published::default()
        });
        self.published += p.published;
        self.confirmed.add(p.confirmed);
        self.done_at = self.done_at.max(p.done_at);
        errors.extend(p.error);
    }
}

/// What the edges consumer saw.
#[derive(Debug, Default)]
struct Forwarded {
    /// Deliveries, duplicates included.
    received: u64,
    /// Distinct publications of this run.
    distinct: u64,
    /// Deliveries of a publication already seen (the router redelivers after a failure).
    duplicates: u64,
    /// Deliveries whose message id is not one of this run's.
    foreign: u64,
    /// When the last distinct publication arrived.
    last_at: Option<Instant>,
    error: Option<String>,
}

/// Live counters for the progress line and the stall check.
#[derive(Debug, Default)]
struct Progress {
    published: AtomicU64,
    confirmed: AtomicU64,
    forwarded: AtomicU64,
}

async fn measure(
    args: &RouterThroughputArgs,
    run: &Run,
    edges_queue: &str,
    router: &mut Option<Service>,
) -> Result<ThroughputReport, BenchError> {
    let failed = |what: &str, e: lapin::Error| BenchError::Failed(format!("{what}: {e}"));
    let admin = run
        .admin
        .create_channel()
        .await
        .map_err(|e| failed("admin channel", e))?;
    if args.prefill {
        amqp::declare_topology(&admin, &run.topology)
            .await
            .map_err(|e| failed("declaring the router's topology", e))?;
    }
    amqp::declare_bound_queue(
        &admin,
        edges_queue,
        &run.topology.edges_exchange,
        !args.transient,
    )
    .await
    .map_err(|e| failed("declaring the edges queue", e))?;

    let progress = Arc::new(Progress::default());
    let cancel = CancellationToken::new();

    // The edges consumer, on a connection of its own.
    let consumer_conn = amqp::connect(&run.amqp_url, &format!("herald-bench {} edges", run.id))
        .await
        .map_err(|e| failed("consumer connection", e))?;
    let channel = consumer_conn
        .create_channel()
        .await
        .map_err(|e| failed("consumer channel", e))?;
    channel
        .basic_qos(args.consumer_prefetch, BasicQosOptions::default())
        .await
        .map_err(|e| failed("consumer qos", e))?;
    let consumer = channel
        .basic_consume(
            edges_queue.into(),
            format!("herald-bench-{}", run.id).as_str().into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .map_err(|e| failed("consuming the edges queue", e))?;
    let mut consuming = AbortOnDropHandle::new(tokio::spawn(consume(
        consumer,
        channel,
        args.messages,
        u64::from(args.consumer_prefetch / 4),
        progress.clone(),
        cancel.clone(),
    )));

    // The publishers, each on a connection of its own, all ready before the clock starts.
    let mut publishers = Vec::with_capacity(args.publishers);
    for p in 0..args.publishers {
        let conn = amqp::connect(
            &run.amqp_url,
            &format!("herald-bench {} publisher {p}", run.id),
        )
        .await
        .map_err(|e| failed("publisher connection", e))?;
        let publisher = Publisher::open(&conn, &run.topology.exchange)
            .await
            .map_err(|e| failed("publisher channel", e))?;
        publishers.push((conn, publisher));
    }

    let bench_pid = std::process::id();
    let mut bench_cpu_before = cpu::read_cpu(bench_pid).unwrap_or_default();
    let mut broker_cpu_before = args.broker_pid.and_then(|pid| cpu::read_cpu(pid).ok());
    // A router started after the prefill has used no CPU before it.
    let router_cpu_before = match router.as_ref() {
        Some(r) => cpu::read_cpu(r.pid())
            .map_err(|e| BenchError::Failed(format!("router CPU time: {e}")))?,
        None => CpuTime::default(),
    };
    let router_switches_before = match router.as_ref() {
        Some(r) => read_context_switches(r.pid()).unwrap_or_default(),
        None => ContextSwitches::default(),
    };

    let publish_started = Instant::now();
    let mut publishing = Vec::with_capacity(args.publishers);
    for (index, (_, publisher)) in publishers.iter().enumerate() {
        let share = Share {
            first: index as u64,
            step: args.publishers as u64,
            end: args.messages,
        };
        let job = publish_share(
            publisher.clone(),
            share,
            args.batch,
            args.confirm_window,
            args.payload_bytes,
            !args.transient,
            progress.clone(),
        );
        publishing.push(AbortOnDropHandle::new(tokio::spawn(job)));
    }
    let mut published = Published::default();
    let mut publish_errors = Vec::new();
    let started = if args.prefill {
        for job in std::mem::take(&mut publishing) {
            published.merge(job.await, &mut publish_errors);
        }
        eprintln!(
            "herald-bench: prefilled {} publications in {:.2} s; starting the router",
            published.confirmed.acked,
            publish_started.elapsed().as_secs_f64()
        );
        // The CPU window starts with the router too.
        bench_cpu_before = cpu::read_cpu(bench_pid).unwrap_or_default();
        broker_cpu_before = args.broker_pid.and_then(|pid| cpu::read_cpu(pid).ok());
        let started = Instant::now();
        *router = Some(announce(
            run.start_router(
                &args.router_bin,
                args.prefetch,
                args.router_log.as_deref(),
                Duration::from_secs(args.startup_timeout),
            )
            .await?,
        ));
        started
    } else {
        publish_started
    };
    let Some(router) = router.as_mut() else {
        return Err(BenchError::Failed("no router".into()));
    };
    let router_pid = router.pid();

    // Wait for the consumer to have seen every publication, printing progress, and give up
    // when nothing moves for --stall-timeout or the router dies.
    let stall = Duration::from_secs(args.stall_timeout);
    let mut last_forwarded = 0;
    let mut last_move = Instant::now();
    let mut ticker = tokio::time::interval(PROGRESS_EVERY);
    ticker.tick().await;
    let mut gave_up = None;
    let forwarded = loop {
        tokio::select! {
            joined = &mut consuming => {
                break joined.unwrap_or_else(|e| Forwarded {
                    error: Some(format!("consumer task: {e}")),
                    ..Forwarded::default()
                });
            }
            _ = ticker.tick() => {
                let now = progress.forwarded.load(Ordering::Relaxed);
                eprintln!(
                    "herald-bench: {:>6.1} s  published {}  confirmed {}  forwarded {}",
                    started.elapsed().as_secs_f64(),
                    progress.published.load(Ordering::Relaxed),
                    progress.confirmed.load(Ordering::Relaxed),
                    now,
                );
                if now != last_forwarded {
                    last_forwarded = now;
                    last_move = Instant::now();
                } else if last_move.elapsed() >= stall {
                    gave_up = Some(format!("nothing forwarded for {} s", stall.as_secs()));
                } else if let Some(status) = router.exited() {
                    gave_up = Some(format!("the router exited ({status})"));
                }
                if gave_up.is_some() {
                    cancel.cancel();
                }
            }
        }
    };
    let router_cpu = cpu::read_cpu(router_pid)
        .map(|after| after.since(&router_cpu_before))
        .unwrap_or_default();
    let router_switches = read_context_switches(router_pid)
        .map(|after| after.since(&router_switches_before))
        .unwrap_or_default();
    let bench_cpu = cpu::read_cpu(bench_pid)
        .map(|after| after.since(&bench_cpu_before).total())
        .unwrap_or_default();
    let broker_cpu = args.broker_pid.and_then(|pid| {
        let after = cpu::read_cpu(pid).ok()?;
        Some(after.since(&broker_cpu_before?).total())
    });
    let (router_rss, router_peak_rss) =
        crate::harness::rss::read_rss_and_peak(router_pid).unwrap_or_default();

    cancel.cancel();
    for job in publishing {
        published.merge(job.await, &mut publish_errors);
    }
    for (conn, publisher) in publishers {
        publisher.close().await;
        let _ = conn.close(200, "bench done".into()).await;
    }
    let _ = consumer_conn.close(200, "bench done".into()).await;
    let dead_letters = amqp::queue_state(&run.admin, &run.topology.dead_queue)
        .await
        .ok()
        .flatten()
        .map(|(ready, _)| ready);
    let _ = admin.close(200, "OK".into()).await;

    let mut problems: Vec<String> = publish_errors;
    problems.extend(forwarded.error.clone());
    problems.extend(gave_up);
    let forward_seconds = forwarded
        .last_at
        .map(|t| t.duration_since(started).as_secs_f64());
    let publish_seconds = published
        .done_at
        .map(|t| t.duration_since(publish_started).as_secs_f64());
    let complete = forwarded.distinct == args.messages && problems.is_empty();
    Ok(ThroughputReport {
        command: "router-throughput",
        run_id: run.id.clone(),
        router_pid,
        router_prefetch: args.prefetch.unwrap_or(ROUTER_DEFAULT_PREFETCH),
        prefill: args.prefill,
        transient: args.transient,
        messages: args.messages,
        payload_bytes: args.payload_bytes,
        publishers: args.publishers,
        batch: args.batch,
        confirm_window: args.confirm_window,
        published: published.published,
        confirmed: published.confirmed.acked,
        nacked: published.confirmed.nacked,
        confirm_failures: published.confirmed.failed,
        publish_seconds,
        publish_rate: publish_seconds.map(|s| published.confirmed.acked as f64 / s),
        forwarded: forwarded.distinct,
        duplicates: forwarded.duplicates,
        foreign: forwarded.foreign,
        forward_seconds,
        forward_rate: forward_seconds
            .filter(|_| complete)
            .map(|s| args.messages as f64 / s),
        router_cpu,
        router_cpu_seconds: router_cpu.total(),
        per_cpu_second: (complete && router_cpu.total() > 0.0)
            .then(|| args.messages as f64 / router_cpu.total()),
        router_context_switches: router_switches,
        context_switches_per_publication: complete
            .then(|| router_switches.total() as f64 / args.messages as f64),
        router_rss_bytes: router_rss,
        router_peak_rss_bytes: router_peak_rss,
        bench_cpu_seconds: bench_cpu,
        broker_cpu_seconds: broker_cpu,
        dead_letters,
        cores: cpu::cores(),
        load_before: None,
        load_after: None,
        complete,
        problems,
        cleanup: Cleanup::default(),
    })
}

/// The publications of one publisher: `first`, `first + step`, ... below `end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Share {
    first: u64,
    step: u64,
    end: u64,
}

impl Share {
    fn seqs(self) -> impl Iterator<Item = u64> {
        (self.first..self.end).step_by(self.step as usize)
    }
}

/// Publishes a share in batches; at most `window` publications are unconfirmed at a time
/// (the oldest batch's confirms are awaited when the next batch would exceed it).
async fn publish_share(
    publisher: Publisher,
    share: Share,
    batch: usize,
    window: usize,
    payload_bytes: usize,
    persistent: bool,
    progress: Arc<Progress>,
) -> Published {
    let mut out = Published::default();
    let mut pending: std::collections::VecDeque<Vec<lapin::PublisherConfirm>> =
        std::collections::VecDeque::new();
    let mut unconfirmed = 0usize;
    let routing_key: lapin::types::ShortString = EVENT.into();
    let mut seqs = share.seqs().peekable();
    while seqs.peek().is_some() {
        let messages: Vec<Outgoing> = seqs
            .by_ref()
            .take(batch)
            .map(|seq| Outgoing {
                routing_key: routing_key.clone(),
                properties: amqp::publication(
                    &message_id(seq),
                    EVENT,
                    &crate::harness::token::user_id(0, (seq % USERS) as usize),
                    persistent,
                ),
                body: amqp::payload(seq, payload_bytes),
            })
            .collect();
        let n = messages.len();
        while unconfirmed + n > window {
            let Some(oldest) = pending.pop_front() else {
                break;
            };
            unconfirmed -= oldest.len();
            let c = amqp::settle(oldest).await;
            progress.confirmed.fetch_add(c.acked, Ordering::Relaxed);
            out.confirmed.add(c);
        }
        match publisher.publish_batch(messages).await {
            Ok(confirms) => {
                out.published += confirms.len() as u64;
                progress
                    .published
                    .fetch_add(confirms.len() as u64, Ordering::Relaxed);
                unconfirmed += confirms.len();
                pending.push_back(confirms);
            }
            Err(e) => {
                out.error = Some(format!("publishing: {e}"));
                break;
            }
        }
    }
    for confirms in pending {
        let c = amqp::settle(confirms).await;
        progress.confirmed.fetch_add(c.acked, Ordering::Relaxed);
        out.confirmed.add(c);
    }
    out.done_at = Some(Instant::now());
    out
}

/// Consumes the edges queue until every one of the `n` publications has arrived (or
/// `cancel`), acking every `ack_every` deliveries at once.
async fn consume(
    mut consumer: Consumer,
    channel: Channel,
    n: u64,
    ack_every: u64,
    progress: Arc<Progress>,
    cancel: CancellationToken,
) -> Forwarded {
    let mut out = Forwarded::default();
    let mut seen = vec![false; n as usize];
    let mut unacked = 0u64;
    let multiple = BasicAckOptions { multiple: true };
    loop {
        let delivery = tokio::select! {
            biased;
            _ = cancel.cancelled() => break,
            d = consumer.next() => d,
        };
        let delivery = match delivery {
            Some(Ok(d)) => d,
            Some(Err(e)) => {
                out.error = Some(format!("edges consumer: {e}"));
                break;
            }
            None => {
                out.error = Some("the broker ended the edges consumer".into());
                break;
            }
        };
        out.received += 1;
        let seq = delivery
            .properties
            .message_id()
            .as_ref()
            .and_then(|id| parse_message_id(id.as_str()))
            .filter(|&seq| seq < n);
        match seq {
            Some(seq) if !seen[seq as usize] => {
                seen[seq as usize] = true;
                out.distinct += 1;
                progress.forwarded.store(out.distinct, Ordering::Relaxed);
            }
            Some(_) => out.duplicates += 1,
            None => out.foreign += 1,
        }
        unacked += 1;
        let done = out.distinct == n;
        if done {
            out.last_at = Some(Instant::now());
        }
        if unacked >= ack_every || done {
            if let Err(e) = channel.basic_ack(delivery.delivery_tag, multiple).await {
                out.error = Some(format!("acking the edges queue: {e}"));
                break;
            }
            unacked = 0;
        }
        if done {
            break;
        }
    }
    out
}

/// The result, as one JSON object (`--json`) or as text.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ThroughputReport {
    command: &'static str,
    run_id: String,
    router_pid: u32,
    router_prefetch: u16,
    /// Published before the router started (the clock starts with the router).
    prefill: bool,
    /// Transient publications and a non-durable edges queue.
    transient: bool,
    messages: u64,
    payload_bytes: usize,
    publishers: usize,
    batch: usize,
    confirm_window: usize,
    /// Publications handed to the broker.
    published: u64,
    /// Of which the broker confirmed (acked).
    confirmed: u64,
    nacked: u64,
    confirm_failures: u64,
    /// From the first publish to the last confirm.
    publish_seconds: Option<f64>,
    /// `confirmed / publish_seconds`.
    publish_rate: Option<f64>,
    /// Distinct publications that reached the edges queue.
    forwarded: u64,
    duplicates: u64,
    foreign: u64,
    /// From the first publish (with --prefill: the router's start) to the last forward.
    forward_seconds: Option<f64>,
    /// `messages / forward_seconds`, when all were forwarded.
    forward_rate: Option<f64>,
    /// The router's CPU time over the same window.
    router_cpu: CpuTime,
    router_cpu_seconds: f64,
    /// `messages / router_cpu_seconds`: publications per CPU-second (one core for one second).
    per_cpu_second: Option<f64>,
    /// The router's context switches over the window (its threads alive at the end).
    router_context_switches: ContextSwitches,
    /// `router_context_switches / messages`, when all were forwarded.
    context_switches_per_publication: Option<f64>,
    router_rss_bytes: u64,
    router_peak_rss_bytes: u64,
    /// CPU the bench itself used over the window (publishers and consumer).
    bench_cpu_seconds: f64,
    /// CPU the broker used over the window (with --broker-pid).
    broker_cpu_seconds: Option<f64>,
    /// Publications waiting in the dead-letter queue at the end (should be 0).
    dead_letters: Option<u32>,
    cores: usize,
    load_before: Option<f64>,
    load_after: Option<f64>,
    complete: bool,
    problems: Vec<String>,
    cleanup: Cleanup,
}

/// Context switches of a process's threads: the sums of `voluntary_ctxt_switches` (the thread
/// waited: a lock, a channel, the socket) and `nonvoluntary_ctxt_switches` (it was preempted)
/// over `/proc/PID/task/*/status`. Threads that ended are not counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub(crate) struct ContextSwitches {
    voluntary: u64,
    involuntary: u64,
}

impl ContextSwitches {
    fn total(&self) -> u64 {
        self.voluntary + self.involuntary
    }

    /// The switches between `earlier` and `self` (0 for a count that went down: a thread
    /// ended).
    fn since(&self, earlier: &ContextSwitches) -> ContextSwitches {
        ContextSwitches {
            voluntary: self.voluntary.saturating_sub(earlier.voluntary),
            involuntary: self.involuntary.saturating_sub(earlier.involuntary),
        }
    }

    /// Add the counts of one thread's `status` text.
    fn add_status(&mut self, status: &str) {
        for line in status.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let Ok(n) = value.trim().parse::<u64>() else {
                continue;
            };
            match key {
                "voluntary_ctxt_switches" => self.voluntary += n,
                "nonvoluntary_ctxt_switches" => self.involuntary += n,
                _ => {}
            }
        }
    }
}

/// The context switches of every live thread of `pid` so far.
fn read_context_switches(pid: u32) -> std::io::Result<ContextSwitches> {
    let mut switches = ContextSwitches::default();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        // A thread may end between the listing and the read: skip it.
        if let Ok(status) = std::fs::read_to_string(task?.path().join("status")) {
            switches.add_status(&status);
        }
    }
    Ok(switches)
}

impl ThroughputReport {
    fn human(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let mode = match (self.prefill, self.transient) {
            (false, false) => "",
            (true, false) => ", prefilled",
            (false, true) => ", transient",
            (true, true) => ", prefilled, transient",
        };
        let _ = writeln!(
            s,
            "router        pid {}, prefetch {}, run {}{mode}",
            self.router_pid, self.router_prefetch, self.run_id
        );
        let confirms = if self.confirmed == self.published && self.nacked == 0 {
            "all confirmed".to_owned()
        } else {
            format!(
                "{} confirmed, {} nacked, {} failed",
                self.confirmed, self.nacked, self.confirm_failures
            )
        };
        let _ = writeln!(
            s,
            "published     {} x {} B by {} publishers (batches of {}, {} unconfirmed at most): {} s, {}/s, {confirms}",
            self.published,
            self.payload_bytes,
            self.publishers,
            self.batch,
            self.confirm_window,
            maybe(self.publish_seconds, 2),
            maybe(self.publish_rate.map(|r| r.round()), 0),
        );
        let _ = writeln!(
            s,
            "forwarded     {} of {} in {} s{}: {} publications/s{}",
            self.forwarded,
            self.messages,
            maybe(self.forward_seconds, 2),
            if self.prefill {
                " from the router's start"
            } else {
                ""
            },
            self.forward_rate.map_or_else(|| "?".into(), grouped),
            if self.duplicates > 0 {
                format!(" ({} duplicates)", self.duplicates)
            } else {
                String::new()
            },
        );
        let _ = writeln!(
            s,
            "router CPU    {:.2} s ({:.2} user + {:.2} sys): {} publications per CPU-second (per core)",
            self.router_cpu_seconds,
            self.router_cpu.user_seconds,
            self.router_cpu.system_seconds,
            self.per_cpu_second.map_or_else(|| "?".into(), grouped),
        );
        let _ = writeln!(
            s,
            "router ctxsw  {} voluntary + {} involuntary context switches: {} per publication",
            self.router_context_switches.voluntary,
            self.router_context_switches.involuntary,
            maybe(self.context_switches_per_publication, 2),
        );
        let _ = writeln!(
            s,
            "router RSS    {} at the end, {} peak",
            human_bytes(self.router_rss_bytes as f64),
            human_bytes(self.router_peak_rss_bytes as f64),
        );
        let _ = writeln!(
            s,
            "machine       {} cores, load {} before, {} after; over the window the bench used {:.2} s CPU{}",
            self.cores,
            maybe(self.load_before, 2),
            maybe(self.load_after, 2),
            self.bench_cpu_seconds,
            self.broker_cpu_seconds
                .map_or_else(String::new, |b| format!(", the broker {b:.2} s")),
        );
        let _ = writeln!(
            s,
            "dead letters  {}",
            self.dead_letters
                .map_or_else(|| "?".into(), |d| d.to_string())
        );
        for p in &self.problems {
            let _ = writeln!(s, "problem       {p}");
        }
        for p in &self.cleanup.problems {
            let _ = writeln!(s, "cleanup       {p}");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_switches_add_up_over_threads() {
        let mut s = ContextSwitches::default();
        s.add_status(
            "Name:\tlapin-io-loop\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t3\n",
        );
        s.add_status("Name:\ttokio-rt-worker\nvoluntary_ctxt_switches:\t30\nnonvoluntary_ctxt_switches:\t4\n");
        assert_eq!(
            s,
            ContextSwitches {
                voluntary: 42,
                involuntary: 7
            }
        );
        assert_eq!(s.total(), 49);
        let earlier = ContextSwitches {
            voluntary: 40,
            involuntary: 9,
        };
        assert_eq!(
            s.since(&earlier),
            ContextSwitches {
                voluntary: 2,
                involuntary: 0
            }
        );
        assert!(read_context_switches(std::process::id()).is_ok());
    }

    #[test]
    fn message_ids_round_trip() {
        assert_eq!(message_id(42), "tp-42");
        assert_eq!(parse_message_id("tp-42"), Some(42));
        assert_eq!(parse_message_id("lat-42-1"), None);
        assert_eq!(parse_message_id("tp-x"), None);
    }

    #[test]
    fn shares_cover_every_publication_once() {
        let shares: Vec<Share> = (0..3)
            .map(|first| Share {
                first,
                step: 3,
                end: 10,
            })
            .collect();
        let mut all: Vec<u64> = shares.iter().flat_map(|s| s.seqs()).collect();
        all.sort_unstable();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
        assert_eq!(shares[1].seqs().collect::<Vec<_>>(), [1, 4, 7]);
    }

    fn args(extra: &[&str]) -> RouterThroughputArgs {
        use clap::Parser as _;
        let mut argv = vec!["herald-bench", "router-throughput", "--router-bin", "r"];
        argv.extend_from_slice(extra);
        match crate::cli::Cli::try_parse_from(argv).unwrap().command {
            crate::cli::Command::RouterThroughput(a) => a,
            _ => unreachable!(),
        }
    }

    #[test]
    fn arguments_are_checked_before_anything_starts() {
        assert_eq!(validate(&args(&[])), Ok(()));
        assert!(validate(&args(&["--messages", "0"])).is_err());
        assert!(validate(&args(&["--messages", "3", "--publishers", "4"])).is_err());
        assert!(validate(&args(&["--publishers", "0"])).is_err());
        assert!(validate(&args(&["--batch", "600", "--confirm-window", "500"])).is_err());
        assert!(validate(&args(&["--payload-bytes", "2000000"])).is_err());
        assert!(validate(&args(&["--consumer-prefetch", "2"])).is_err());
    }
}
