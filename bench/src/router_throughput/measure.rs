//! One run, in phases: declare the queues, start the edges consumer, open the publishers, read
//! the CPU baselines, publish (or prefill, then start the router), wait until every
//! publication was forwarded, read the CPU used, close everything, and assemble the report.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use lapin::options::{BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Connection};
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use super::args::RouterThroughputArgs;
use super::report::{ContextSwitches, ThroughputReport, read_context_switches};
use super::traffic::{Forwarded, Progress, Published, Share, consume, publish_share};
use crate::harness::amqp::{self, Publisher};
use crate::harness::cpu::{self, CpuTime};
use crate::harness::outcome::BenchError;
use crate::harness::progress::Progress as Bar;
use crate::harness::run::{Cleanup, ROUTER_DEFAULT_PREFETCH, Run};
use crate::harness::service::Service;

/// How often progress is printed on stderr.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

fn failed(what: &str, e: lapin::Error) -> BenchError {
    BenchError::Failed(format!("{what}: {e}"))
}

pub(super) async fn measure(
    args: &RouterThroughputArgs,
    run: &Run,
    edges_queue: &str,
    router: &mut Option<Service>,
) -> Result<ThroughputReport, BenchError> {
    let admin = declare(args, run, edges_queue).await?;
    let progress = Arc::new(Progress::default());
    let cancel = CancellationToken::new();
    let (consumer_conn, mut consuming) =
        start_consumer(args, run, edges_queue, &progress, &cancel).await?;
    let publishers = open_publishers(args, run).await?;
    let mut before = CpuBefore::read(args, router.as_ref())?;

    let publish_started = Instant::now();
    let mut publishing = start_publishing(args, &publishers, &progress);
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
        before.restart_bench_and_broker(args);
        let started = Instant::now();
        *router = Some(start_router(args, run).await?);
        started
    } else {
        publish_started
    };
    let Some(router) = router.as_mut() else {
        return Err(BenchError::Failed("no router".into()));
    };
    let router_pid = router.pid();

    let (forwarded, gave_up) =
        wait_for_forwards(args, router, &mut consuming, &progress, &cancel, started).await;
    let used = CpuUsed::since(&before, router_pid, args);

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
    let clocks = Clocks {
        publish_started,
        started,
    };
    Ok(assemble(
        args,
        run,
        router_pid,
        &published,
        &forwarded,
        clocks,
        used,
        dead_letters,
        problems,
    ))
}

/// Starts the router on the run's names and says where it is.
pub(super) async fn start_router(
    args: &RouterThroughputArgs,
    run: &Run,
) -> Result<Service, BenchError> {
    let router = run
        .start_router(
            &args.router_bin,
            args.prefetch,
            args.router_log.as_deref(),
            Duration::from_secs(args.startup_timeout),
        )
        .await?;
    eprintln!(
        "herald-bench: router pid {} on {}",
        router.pid(),
        router.addr
    );
    Ok(router)
}

/// Declares the edges queue (bound as an edge's would be), and with `--prefill` the router's
/// topology too, since the router is not running yet. Returns the admin channel.
async fn declare(
    args: &RouterThroughputArgs,
    run: &Run,
    edges_queue: &str,
) -> Result<Channel, BenchError> {
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
    Ok(admin)
}

/// The edges consumer, on a connection of its own.
async fn start_consumer(
    args: &RouterThroughputArgs,
    run: &Run,
    edges_queue: &str,
    progress: &Arc<Progress>,
    cancel: &CancellationToken,
) -> Result<(Connection, AbortOnDropHandle<Forwarded>), BenchError> {
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
    let consuming = AbortOnDropHandle::new(tokio::spawn(consume(
        consumer,
        channel,
        args.messages,
        u64::from(args.consumer_prefetch / 4),
        progress.clone(),
        cancel.clone(),
    )));
    Ok((consumer_conn, consuming))
}

/// The publishers, each on a connection of its own, all ready before the clock starts.
async fn open_publishers(
    args: &RouterThroughputArgs,
    run: &Run,
) -> Result<Vec<(Connection, Publisher)>, BenchError> {
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
    Ok(publishers)
}

/// One publishing task per publisher, each with its share of the publications.
fn start_publishing(
    args: &RouterThroughputArgs,
    publishers: &[(Connection, Publisher)],
    progress: &Arc<Progress>,
) -> Vec<AbortOnDropHandle<Published>> {
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
    publishing
}

/// CPU times (and the router's context switches) when the measuring window opens.
struct CpuBefore {
    bench_pid: u32,
    bench: CpuTime,
    broker: Option<CpuTime>,
    router: CpuTime,
    router_switches: ContextSwitches,
}

impl CpuBefore {
    fn read(args: &RouterThroughputArgs, router: Option<&Service>) -> Result<Self, BenchError> {
        let bench_pid = std::process::id();
        Ok(Self {
            bench_pid,
            bench: cpu::read_cpu(bench_pid).unwrap_or_default(),
            broker: args.broker_pid.and_then(|pid| cpu::read_cpu(pid).ok()),
            // A router started after the prefill has used no CPU before it.
            router: match router {
                Some(r) => cpu::read_cpu(r.pid())
                    .map_err(|e| BenchError::Failed(format!("router CPU time: {e}")))?,
                None => CpuTime::default(),
            },
            router_switches: match router {
                Some(r) => read_context_switches(r.pid()).unwrap_or_default(),
                None => ContextSwitches::default(),
            },
        })
    }

    /// After a prefill the window starts with the router: the bench's and the broker's CPU
    /// are read again.
    fn restart_bench_and_broker(&mut self, args: &RouterThroughputArgs) {
        self.bench = cpu::read_cpu(self.bench_pid).unwrap_or_default();
        self.broker = args.broker_pid.and_then(|pid| cpu::read_cpu(pid).ok());
    }
}

/// What the processes used over the window, and the router's RSS at its end.
struct CpuUsed {
    router: CpuTime,
    router_switches: ContextSwitches,
    bench: f64,
    broker: Option<f64>,
    router_rss: u64,
    router_peak_rss: u64,
}

impl CpuUsed {
    fn since(before: &CpuBefore, router_pid: u32, args: &RouterThroughputArgs) -> Self {
        let router = cpu::read_cpu(router_pid)
            .map(|after| after.since(&before.router))
            .unwrap_or_default();
        let router_switches = read_context_switches(router_pid)
            .map(|after| after.since(&before.router_switches))
            .unwrap_or_default();
        let bench = cpu::read_cpu(before.bench_pid)
            .map(|after| after.since(&before.bench).total())
            .unwrap_or_default();
        let broker = args.broker_pid.and_then(|pid| {
            let after = cpu::read_cpu(pid).ok()?;
            Some(after.since(&before.broker?).total())
        });
        let (router_rss, router_peak_rss) =
            crate::harness::rss::read_rss_and_peak(router_pid).unwrap_or_default();
        Self {
            router,
            router_switches,
            bench,
            broker,
            router_rss,
            router_peak_rss,
        }
    }
}

/// Waits for the consumer to have seen every publication, showing progress, and gives up
/// when nothing moves for --stall-timeout or the router dies. Returns what the consumer saw
/// and why it gave up, if it did.
async fn wait_for_forwards(
    args: &RouterThroughputArgs,
    router: &mut Service,
    consuming: &mut AbortOnDropHandle<Forwarded>,
    progress: &Progress,
    cancel: &CancellationToken,
    started: Instant,
) -> (Forwarded, Option<String>) {
    let stall = Duration::from_secs(args.stall_timeout);
    let mut last_forwarded = 0;
    let mut last_move = Instant::now();
    let mut ticker = tokio::time::interval(PROGRESS_EVERY);
    ticker.tick().await;
    let bar = Bar::new(args.messages);
    let mut gave_up = None;
    let forwarded = loop {
        tokio::select! {
            joined = &mut *consuming => {
                break joined.unwrap_or_else(|e| Forwarded {
                    error: Some(format!("consumer task: {e}")),
                    ..Forwarded::default()
                });
            }
            _ = ticker.tick() => {
                let now = progress.forwarded.load(Ordering::Relaxed);
                bar.update(now, || format!(
                    "{:>6.1} s  published {}  confirmed {}  forwarded {}",
                    started.elapsed().as_secs_f64(),
                    progress.published.load(Ordering::Relaxed),
                    progress.confirmed.load(Ordering::Relaxed),
                    now,
                ));
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
    (forwarded, gave_up)
}

/// When the clocks started: the first publish, and the forwarding window (the same instant,
/// or the router's start after a prefill).
struct Clocks {
    publish_started: Instant,
    started: Instant,
}

#[allow(clippy::too_many_arguments)]
fn assemble(
    args: &RouterThroughputArgs,
    run: &Run,
    router_pid: u32,
    published: &Published,
    forwarded: &Forwarded,
    clocks: Clocks,
    used: CpuUsed,
    dead_letters: Option<u32>,
    problems: Vec<String>,
) -> ThroughputReport {
    let forward_seconds = forwarded
        .last_at
        .map(|t| t.duration_since(clocks.started).as_secs_f64());
    let publish_seconds = published
        .done_at
        .map(|t| t.duration_since(clocks.publish_started).as_secs_f64());
    let complete = forwarded.distinct == args.messages && problems.is_empty();
    ThroughputReport {
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
        router_cpu: used.router,
        router_cpu_seconds: used.router.total(),
        per_cpu_second: (complete && used.router.total() > 0.0)
            .then(|| args.messages as f64 / used.router.total()),
        router_context_switches: used.router_switches,
        context_switches_per_publication: complete
            .then(|| used.router_switches.total() as f64 / args.messages as f64),
        router_rss_bytes: used.router_rss,
        router_peak_rss_bytes: used.router_peak_rss,
        bench_cpu_seconds: used.bench,
        broker_cpu_seconds: used.broker,
        dead_letters,
        cores: cpu::cores(),
        load_before: None,
        load_after: None,
        complete,
        problems,
        cleanup: Cleanup::default(),
    }
}
