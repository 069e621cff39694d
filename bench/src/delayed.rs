//! `herald-bench delayed`: delayed notifications (`docs/delayed-notifications.md`), measured
//! over Herald's HTTP API on a router with Redis (`--target router`) or on a standalone gateway
//! with its embedded store (`--target standalone`).
//!
//! Scenarios:
//! - `ingest`: N notifications due far in the future (none fires), published in batches over
//!   C keep-alive connections as fast as Herald answers `202` (accepted = durable); the rate
//!   is accepted notifications per second from the first request to the last answer.
//! - `lateness`: `rate` notifications per second falling due over `seconds`, from `lead` after
//!   the start of publishing, all published before the first is due; each to a user with a
//!   live STOMP session. Lateness = arrival on the session (wall clock) - `due_at_ms`.
//! - `herd`: N notifications all due at one instant, `lead` after the start of publishing:
//!   time from due to the last arrival, and whether all arrived.
//! - `footprint`: N far-future notifications; the store's growth (Redis `used_memory`, or the
//!   embedded store's bytes on disk) and the server's RSS growth per notification; then
//!   `--probe` notifications due soon, whose lateness shows whether the backlog slows firing.
//!
//! Every scenario also reads Herald's own `herald_delayed_*` metrics before and after
//! ([`metrics`]), and the CPU every process used ([`usage`]).
//!
//! # Layout
//! - [`plan`]: which notifications, due when, to whom (pure); [`crate::harness::delayed_ids`]: their ids (pure).
//! - [`body`]: the publish API's batch bodies and `202` answers (pure).
//! - [`api`]: a keep-alive HTTP/1.1 connection; [`ingest`]: publishing a plan over C of them.
//! - [`fleet`]: worker processes holding the sessions that record arrivals.
//! - [`delivery`]: arrivals against due times (pure); [`metrics`]: Herald's metrics (pure).
//! - [`system`]: starting and cleaning up the Herald under test; [`store`]: measuring its store.
//! - [`usage`]: CPU per process; [`report`]: the result.

pub(crate) mod api;
mod args;
pub(crate) mod body;
pub(crate) mod delivery;
pub(crate) mod fleet;
pub(crate) mod ingest;
pub(crate) mod metrics;
pub(crate) mod plan;
pub(crate) mod report;
pub(crate) mod store;
pub(crate) mod system;
pub(crate) mod usage;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

pub(crate) use self::args::{DelayedArgs, DelayedTarget, Scenario};

use self::api::ApiConnection;
use self::delivery::Delivery;
use self::fleet::Fleet;
use self::ingest::{Ingested, Progress};
use self::metrics::{Scrape, ServerCounters, ServerLateness};
use self::plan::{DAY_MS, DueOrder, Dues, Plan, Users};
use self::report::{DelayedReport, Goal, Growth};
use self::store::AofRewrites;
use self::system::System;
use self::usage::{Reading, Split, Usage};
use crate::harness::cpu;
use crate::harness::outcome::{BenchError, Outcome};
use crate::harness::plan::WorkerPlan;
use crate::harness::report::grouped;
use crate::harness::run::interruptible;

/// The issue's goals.
const INGEST_GOAL_ROUTER: f64 = 100_000.0;
const INGEST_GOAL_STANDALONE: f64 = 50_000.0;
const LATENESS_GOAL_P99_MS: u64 = 10;
const HERD_GOAL_MS: u64 = 2_000;
/// Longest wait for Herald's counters to catch up with what arrived.
const COUNTERS_WAIT: Duration = Duration::from_secs(10);

/// The gateway holds one socket per session and may hold at most 20,000 file descriptors.
const MAX_SESSIONS: usize = 19_000;
/// Herald's default `publish.max_batch`.
const MAX_BATCH: u64 = 1_000;
/// The footprint's probe falls due this long after it is published.
const PROBE_LEAD_MS: u64 = 5_000;
/// Users the notifications of `ingest` go to (nobody is connected).
const OFFLINE_USERS: usize = 1_000;
/// How often progress is printed.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// Tokens stay valid this long beyond the run's own length.
const TOKEN_SLACK: Duration = Duration::from_secs(3600);

/// The arguments with every default resolved and checked.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) scenario: Scenario,
    pub(crate) target: DelayedTarget,
    pub(crate) router_bin: Option<PathBuf>,
    pub(crate) gateway_bin: Option<PathBuf>,
    pub(crate) amqp_url: String,
    pub(crate) redis_url: String,
    pub(crate) count: u64,
    pub(crate) batch: u64,
    pub(crate) connections: usize,
    pub(crate) payload_bytes: usize,
    pub(crate) rate: u64,
    pub(crate) lead_ms: u64,
    pub(crate) sessions: usize,
    pub(crate) processes: Option<usize>,
    pub(crate) probe: u64,
    pub(crate) probe_rate: u64,
    pub(crate) far_days: u64,
    pub(crate) due_order: DueOrder,
    pub(crate) drain_timeout: Duration,
    pub(crate) handshake_timeout: Duration,
    pub(crate) startup_timeout: u64,
    pub(crate) broker_pid: Option<u32>,
    /// `[schedule]` settings for the Herald under test.
    pub(crate) schedule: toml::Table,
    pub(crate) router_log: Option<PathBuf>,
    pub(crate) gateway_log: Option<PathBuf>,
    pub(crate) json: bool,
}

impl Settings {
    /// Resolves the defaults of `a` and checks everything before anything starts.
    pub(crate) fn from_args(a: &DelayedArgs) -> Result<Self, String> {
        let scenario = a.scenario;
        let count = match (scenario, a.count) {
            (Scenario::Lateness, Some(_)) => {
                return Err(
                    "lateness publishes --rate x --seconds; --count is for the other scenarios"
                        .into(),
                );
            }
            (Scenario::Lateness, None) => {
                if a.rate == 0 || a.seconds == 0 {
                    return Err("--rate and --seconds must be at least 1".into());
                }
                a.rate.saturating_mul(a.seconds)
            }
            (_, Some(n)) => n,
            (Scenario::Ingest, None) => 500_000,
            (Scenario::Herd, None) => 200_000,
            (Scenario::Footprint, None) => 1_000_000,
        };
        if count == 0 {
            return Err("--count must be at least 1".into());
        }
        let probe = if scenario == Scenario::Footprint {
            a.probe
        } else {
            0
        };
        let sessions = match (scenario, a.sessions) {
            (Scenario::Ingest, Some(n)) if n > 0 => {
                return Err("ingest publishes to users nobody is connected as; --sessions is for the other scenarios".into());
            }
            (Scenario::Ingest, _) => 0,
            (Scenario::Footprint, _) if probe == 0 => 0,
            (_, Some(n)) => n,
            (Scenario::Lateness, None) => 1_000,
            (Scenario::Herd, None) => 10_000,
            (Scenario::Footprint, None) => 100,
        };
        if scenario != Scenario::Ingest && probe_or_delivery(scenario, probe) && sessions == 0 {
            return Err("--sessions must be at least 1 to receive the notifications".into());
        }
        if sessions > MAX_SESSIONS {
            return Err(format!(
                "--sessions must be at most {MAX_SESSIONS}: the gateway holds one socket per session and may hold at most 20,000 file descriptors"
            ));
        }
        if a.batch == 0 || a.batch > MAX_BATCH {
            return Err(format!(
                "--batch must be between 1 and {MAX_BATCH} (Herald's publish.max_batch)"
            ));
        }
        if a.connections == 0 || a.connections > 256 {
            return Err("--connections must be between 1 and 256".into());
        }
        if a.payload_bytes > 64 * 1024 {
            return Err("--payload-bytes must be at most 64 KiB".into());
        }
        if a.far_days == 0 || a.far_days > 300 {
            return Err(
                "--far-days must be between 1 and 300 (Herald refuses more than 365 days ahead)"
                    .into(),
            );
        }
        if scenario == Scenario::Footprint && probe > 0 && a.probe_rate == 0 {
            return Err("--probe-rate must be at least 1".into());
        }
        let lead_ms = a.lead_ms.unwrap_or_else(|| plan::default_lead_ms(count));
        if matches!(scenario, Scenario::Lateness | Scenario::Herd) && lead_ms < 1_000 {
            return Err("--lead-ms must be at least 1000".into());
        }
        match a.target {
            DelayedTarget::Router if a.router_bin.is_none() => {
                return Err("--target router needs --router-bin".into());
            }
            DelayedTarget::Router if sessions > 0 && a.gateway_bin.is_none() => {
                return Err(
                    "--target router needs --gateway-bin for the sessions' edge gateway".into(),
                );
            }
            DelayedTarget::Standalone if a.gateway_bin.is_none() => {
                return Err("--target standalone needs --gateway-bin".into());
            }
            _ => {}
        }
        if sessions > 0 {
            crate::harness::plan::plan(sessions, a.processes, &[], IpAddr::V4(Ipv4Addr::LOCALHOST))
                .map_err(|e| e.to_string())?;
        }
        Ok(Self {
            scenario,
            target: a.target,
            router_bin: a.router_bin.clone(),
            gateway_bin: a.gateway_bin.clone(),
            amqp_url: a.amqp_url.clone(),
            redis_url: a.redis_url.clone(),
            count,
            batch: a.batch,
            connections: a.connections,
            payload_bytes: a.payload_bytes,
            rate: a.rate,
            lead_ms,
            sessions,
            processes: a.processes,
            probe,
            probe_rate: a.probe_rate,
            far_days: a.far_days,
            due_order: a.due_order,
            drain_timeout: Duration::from_secs(a.drain_timeout),
            handshake_timeout: Duration::from_secs(a.handshake_timeout),
            startup_timeout: a.startup_timeout,
            broker_pid: a.broker_pid,
            schedule: crate::harness::configs::parse_settings(&a.schedule)
                .map_err(|e| format!("--schedule {e}"))?,
            router_log: a.router_log.clone(),
            gateway_log: a.gateway_log.clone(),
            json: a.json,
        })
    }

    /// The worker split of the sessions.
    fn worker_plans(&self) -> Result<Vec<WorkerPlan>, BenchError> {
        crate::harness::plan::plan(
            self.sessions,
            self.processes,
            &[],
            IpAddr::V4(Ipv4Addr::LOCALHOST),
        )
        .map_err(|e| BenchError::Usage(e.to_string()))
    }

    /// The scenario's main plan, its due times counted from `now_ms`.
    fn main_plan(&self, now_ms: u64) -> Plan {
        let dues = match self.scenario {
            Scenario::Ingest | Scenario::Footprint => {
                let start_ms = now_ms + self.far_days * DAY_MS;
                match self.due_order {
                    DueOrder::Sequential => Dues::Spread { start_ms },
                    DueOrder::Random => Dues::scattered(start_ms, self.count),
                }
            }
            Scenario::Lateness => Dues::Steady {
                start_ms: now_ms + self.lead_ms,
                rate: self.rate,
            },
            Scenario::Herd => Dues::Herd {
                at_ms: now_ms + self.lead_ms,
            },
        };
        Plan {
            first: 0,
            count: self.count,
            dues,
        }
    }

    /// The plan in words.
    fn describe_plan(&self) -> String {
        match self.scenario {
            Scenario::Ingest => format!(
                "due in {} days (none fires), {}",
                self.far_days,
                self.due_order.describe()
            ),
            Scenario::Footprint => format!(
                "due in {} days (none fires), {}, then {} probe notifications due at {}/s from {} s after",
                self.far_days,
                self.due_order.describe(),
                self.probe,
                grouped(self.probe_rate as f64),
                PROBE_LEAD_MS / 1000
            ),
            Scenario::Lateness => format!(
                "due at {}/s for {} s, from {:.1} s after publishing starts",
                grouped(self.rate as f64),
                self.count / self.rate.max(1),
                self.lead_ms as f64 / 1000.0
            ),
            Scenario::Herd => format!(
                "all due at one instant, {:.1} s after publishing starts",
                self.lead_ms as f64 / 1000.0
            ),
        }
    }

    /// The issue's goal for this scenario and target, met or not.
    fn goal(&self, ingest: Option<&Ingested>, delivery: Option<&Delivery>) -> Option<Goal> {
        match self.scenario {
            Scenario::Ingest => {
                let target = match self.target {
                    DelayedTarget::Router => INGEST_GOAL_ROUTER,
                    DelayedTarget::Standalone => INGEST_GOAL_STANDALONE,
                };
                let i = ingest?;
                Some(Goal {
                    goal: format!("durable ingest >= {}/s", grouped(target)),
                    met: i.rate >= target && i.refused.is_empty(),
                })
            }
            Scenario::Lateness => {
                let d = delivery?;
                Some(Goal {
                    goal: format!(
                        "lateness p99 <= {LATENESS_GOAL_P99_MS} ms at {}/s, nothing lost",
                        grouped(self.rate as f64)
                    ),
                    met: d.missing == 0
                        && d.lateness
                            .as_ref()
                            .is_some_and(|l| l.p99_ns <= LATENESS_GOAL_P99_MS * 1_000_000),
                })
            }
            Scenario::Herd => {
                let d = delivery?;
                Some(Goal {
                    goal: format!(
                        "all {} delivered within {} s of their due time",
                        grouped(self.count as f64),
                        HERD_GOAL_MS / 1000
                    ),
                    met: d.missing == 0 && d.within_goal == Some(d.expected),
                })
            }
            Scenario::Footprint => None,
        }
    }
}

fn probe_or_delivery(scenario: Scenario, probe: u64) -> bool {
    match scenario {
        Scenario::Ingest => false,
        Scenario::Lateness | Scenario::Herd => true,
        Scenario::Footprint => probe > 0,
    }
}

pub(crate) async fn run(args: DelayedArgs) -> Result<Outcome, BenchError> {
    let settings = Settings::from_args(&args).map_err(BenchError::Usage)?;
    if let Err(e) = crate::harness::sys::raise_nofile_limit() {
        eprintln!("herald-bench: cannot raise RLIMIT_NOFILE ({e}); continuing");
    }
    let load_before = cpu::load_average();
    let reference_ms = cpu::reference_ms();
    let mut system = System::begin(&settings).await?;
    eprintln!(
        "herald-bench: run {}: {} on {}",
        system.run_id,
        settings.scenario.name(),
        settings.target.name()
    );
    let measured = interruptible(measure(&settings, &mut system)).await;
    let cleanup = system.finish().await;
    let mut report = measured?;
    report.load_before = load_before;
    report.reference_ms = reference_ms;
    report.load_after = cpu::load_average();
    if cleanup.redis_problem.is_some() || !cleanup.amqp.problems.is_empty() {
        report.complete = false;
    }
    report.cleanup = cleanup;
    Ok(crate::harness::report::emit(
        &report,
        || report.human(),
        report.complete,
        settings.json,
    ))
}

/// Epoch ms now (the clock Herald fixes due times with).
fn now_ms() -> u64 {
    crate::harness::events::unix_nanos() / 1_000_000
}

/// `GET /metrics`, parsed. The connection sits idle between scrapes and the server may have
/// closed it meanwhile: a GET is idempotent, so a failed one is sent once more on a new
/// connection (as HTTP clients do with a stale keep-alive connection).
async fn scrape(conn: &mut ApiConnection) -> Result<Scrape, BenchError> {
    let r = match conn.get("/metrics").await {
        Ok(r) => Ok(r),
        Err(_) => conn.get("/metrics").await,
    }
    .map_err(|e| BenchError::Failed(format!("GET /metrics: {e}")))?;
    if r.status != 200 {
        return Err(BenchError::Failed(format!(
            "GET /metrics: http {}",
            r.status
        )));
    }
    Ok(Scrape::parse(&String::from_utf8_lossy(&r.body)))
}

/// Byte counts the footprint compares: the store, and the RSS of each Herald process.
#[derive(Debug, Clone)]
struct Snapshot {
    store: (u64, Option<u64>),
    rss: Vec<(&'static str, crate::harness::rss::Reading)>,
}

async fn snapshot(system: &System) -> Result<Snapshot, BenchError> {
    let store = system
        .store_bytes()
        .await
        .map_err(|e| BenchError::Failed(format!("measuring the store: {e}")))?;
    let mut rss = Vec::new();
    for (name, pid) in system.pids() {
        let reading = crate::harness::rss::settled_rss(pid)
            .await
            .map_err(|e| BenchError::Failed(format!("RSS of the {name}: {e}")))?;
        rss.push((name, reading));
    }
    Ok(Snapshot { store, rss })
}

fn growth(system: &System, before: &Snapshot, after: &Snapshot, n: u64) -> Vec<Growth> {
    let mut out = Vec::new();
    match &system.store {
        system::Store::Redis(_) => {
            out.push(Growth::new(
                "redis used_memory",
                before.store.0,
                after.store.0,
                n,
                true,
            ));
        }
        system::Store::Embedded(_) => {
            out.push(Growth::new(
                "embedded store on disk (allocated)",
                before.store.0,
                after.store.0,
                n,
                true,
            ));
            if let (Some(b), Some(a)) = (before.store.1, after.store.1) {
                out.push(Growth::new("embedded store files' length", b, a, n, true));
            }
        }
    }
    for ((name, b), (_, a)) in before.rss.iter().zip(&after.rss) {
        out.push(Growth::new(
            &format!("{name} RSS"),
            b.bytes,
            a.bytes,
            n,
            b.settled && a.settled,
        ));
    }
    out
}

/// Publishes `plan` with progress on stderr; fails the run if a Herald process exits.
async fn publish(
    s: &Settings,
    system: &mut System,
    plan: Plan,
    users: Arc<Users>,
    keep_dues: bool,
    label: &str,
) -> Result<Ingested, BenchError> {
    let settings = ingest::Settings {
        addr: system
            .api_addr
            .ok_or_else(|| BenchError::Failed("no API address".into()))?,
        api_key: system.api_key.clone(),
        connections: s.connections,
        batch: s.batch,
        payload_bytes: s.payload_bytes,
        keep_dues,
    };
    let progress = Arc::new(Progress::default());
    let mut task = tokio::spawn({
        let progress = progress.clone();
        async move { ingest::publish(&settings, plan, users, progress).await }
    });
    let started = Instant::now();
    let mut tick = tokio::time::interval(PROGRESS_EVERY);
    tick.tick().await;
    loop {
        tokio::select! {
            joined = &mut task => {
                return joined.map_err(|e| BenchError::Failed(format!("publishing: {e}")));
            }
            _ = tick.tick() => {
                let answered = progress.answered.load(Ordering::Relaxed);
                let secs = started.elapsed().as_secs_f64();
                eprintln!(
                    "herald-bench: {label}: {answered} of {} answered in {secs:.1} s ({}/s)",
                    plan.count,
                    grouped(answered as f64 / secs.max(1e-9)),
                );
                if let Some(gone) = system.exited() {
                    progress.stop.store(true, Ordering::Relaxed);
                    let _ = task.await;
                    return Err(BenchError::Failed(gone));
                }
            }
        }
    }
}

/// Due times of `plan` by position: Herald's answers where given, else the plan's own.
fn due_table(plan: &Plan, answered: &[(u64, u64)]) -> Vec<u64> {
    let mut dues: Vec<u64> = plan.seqs().map(|seq| plan.due_ms(seq)).collect();
    for &(seq, due) in answered {
        if plan.contains(seq) {
            dues[(seq - plan.first) as usize] = due;
        }
    }
    dues
}

/// Waits for the notifications of `plan` to arrive: until `expected` have, or nothing more
/// arrived for the drain timeout after the last due time, or a process exited. Returns the
/// CPU split from just before the first due time to the end, and the Redis AOF rewrites that
/// ran meanwhile.
async fn await_delivery(
    s: &Settings,
    system: &mut System,
    fleet: &mut Fleet,
    usage: &Usage,
    plan: &Plan,
    expected: u64,
    problems: &mut Vec<String>,
) -> (Split, Option<u64>) {
    // Sleep to just before the first due time, then start the CPU window.
    let first_due = plan.first_due_ms();
    let until_due = first_due.saturating_sub(now_ms()).saturating_sub(500);
    if until_due > 0 {
        eprintln!(
            "herald-bench: first due in {:.1} s",
            (first_due.saturating_sub(now_ms())) as f64 / 1000.0
        );
        tokio::time::sleep(Duration::from_millis(until_due)).await;
    }
    let window = Window::open(system, usage).await;
    let base = fleet.received();
    let mut last_count = base;
    let mut last_move = Instant::now();
    let mut last_print = Instant::now();
    let last_due = plan.last_due_ms();
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        fleet.pump();
        let got = fleet.received().saturating_sub(base);
        if got != last_count {
            last_count = got;
            last_move = Instant::now();
        }
        if last_print.elapsed() >= PROGRESS_EVERY {
            last_print = Instant::now();
            let now = now_ms();
            let position = if now < last_due {
                format!(
                    "{:.1} s before the last due time",
                    (last_due - now) as f64 / 1000.0
                )
            } else {
                format!(
                    "{:.1} s after the last due time",
                    (now - last_due) as f64 / 1000.0
                )
            };
            eprintln!("herald-bench: received {got} of {expected}, {position}");
        }
        if got >= expected {
            break;
        }
        if now_ms() > last_due && last_move.elapsed() >= s.drain_timeout {
            problems.push(format!(
                "{} of {expected} arrived; nothing more for {} s after the last due time",
                got,
                s.drain_timeout.as_secs()
            ));
            break;
        }
        if let Some(gone) = system.exited() {
            problems.push(gone);
            break;
        }
        if fleet.any_exited() {
            problems.push("a worker process exited".into());
            break;
        }
    }
    window.close(system, usage).await
}

/// A measuring window: the CPU every watched process used, and the Redis AOF rewrites that
/// ran (when the store is Redis), from [`Window::open`] to [`Window::close`].
struct Window {
    cpu: Reading,
    rewrites: Option<AofRewrites>,
}

impl Window {
    async fn open(system: &System, usage: &Usage) -> Window {
        Window {
            rewrites: system.aof_rewrites().await,
            cpu: usage.read(),
        }
    }

    /// The CPU split over the window, and how many AOF rewrites ran in it (when Redis said so
    /// at both ends).
    async fn close(self, system: &System, usage: &Usage) -> (Split, Option<u64>) {
        let cpu = Split::between(&self.cpu, &usage.read());
        let rewrites = match (self.rewrites, system.aof_rewrites().await) {
            (Some(start), Some(end)) => Some(start.during(&end)),
            _ => None,
        };
        (cpu, rewrites)
    }
}

async fn measure(s: &Settings, system: &mut System) -> Result<DelayedReport, BenchError> {
    let needs_sessions = s.sessions > 0;
    system.start(s, needs_sessions).await?;
    let api_addr = system
        .api_addr
        .ok_or_else(|| BenchError::Failed("no API address".into()))?;
    let mut problems = Vec::new();

    // Sessions first, so their cost is in every baseline.
    let plans = if needs_sessions {
        s.worker_plans()?
    } else {
        Vec::new()
    };
    let mut fleet = match system.ws_addr {
        Some(ws) if needs_sessions => {
            let ttl = Duration::from_millis(s.lead_ms) + s.drain_timeout + TOKEN_SLACK;
            let mut fleet = Fleet::spawn(&plans, ws, &system.jwt_secret, s.handshake_timeout, ttl)?;
            fleet.wait_ready(s.sessions).await?;
            eprintln!(
                "herald-bench: {} sessions open over {} processes",
                s.sessions,
                plans.len()
            );
            Some(fleet)
        }
        _ => None,
    };
    let users = Arc::new(if needs_sessions {
        Users::of_workers(&plans.iter().map(|p| p.sessions).collect::<Vec<_>>())
    } else {
        Users::offline(OFFLINE_USERS)
    });

    let mut usage = Usage::default();
    for (name, pid) in system.pids() {
        usage.watch(name, vec![pid]);
    }
    if let Some(pid) = system.redis.as_ref().and_then(|r| r.pid) {
        usage.watch("redis", vec![pid]);
    }
    if let Some(pid) = s.broker_pid {
        usage.watch("broker", vec![pid]);
    }
    usage.watch("bench", vec![std::process::id()]);
    if let Some(f) = &fleet {
        usage.watch("bench workers", f.pids());
    }

    let mut metrics_conn = ApiConnection::new(api_addr, &system.api_key);
    let scrape_before = scrape(&mut metrics_conn).await?;
    let footprint = s.scenario == Scenario::Footprint;
    let before = if matches!(s.scenario, Scenario::Ingest | Scenario::Footprint) {
        Some(snapshot(system).await?)
    } else {
        None
    };

    let main = s.main_plan(now_ms());
    let delivers = matches!(s.scenario, Scenario::Lateness | Scenario::Herd);
    let window = Window::open(system, &usage).await;
    let ingested = publish(s, system, main, users.clone(), delivers, "publishing").await?;
    let (cpu_ingest, rewrites_ingest) = window.close(system, &usage).await;
    if !ingested.refused.is_empty() {
        problems.push(format!("refused: {:?}", ingested.refused));
    }
    if ingested.due_mismatches > 0 {
        problems.push(format!(
            "{} due times answered differ from the deliver_at asked",
            ingested.due_mismatches
        ));
    }
    if delivers && now_ms() >= main.first_due_ms() {
        problems.push(format!(
            "publishing ended {:.1} s after the first due time: firing competed with ingest (raise --lead-ms)",
            (now_ms() - main.first_due_ms()) as f64 / 1000.0
        ));
    }
    eprintln!(
        "herald-bench: {} accepted in {:.2} s: {}/s",
        ingested.accepted,
        ingested.seconds,
        grouped(ingested.rate)
    );

    let mut growth_rows = Vec::new();
    if let Some(before) = &before {
        eprintln!("herald-bench: measuring the store and the RSS");
        let after = snapshot(system).await?;
        growth_rows = growth(system, before, &after, ingested.accepted);
    }

    // The notifications whose arrivals are measured, and their due times.
    let mut probe_ingest = None;
    let to_deliver = if delivers {
        Some((main, due_table(&main, &ingested.dues), ingested.accepted))
    } else if footprint && s.probe > 0 {
        let probe = Plan {
            first: s.count,
            count: s.probe,
            dues: Dues::Steady {
                start_ms: now_ms() + PROBE_LEAD_MS,
                rate: s.probe_rate,
            },
        };
        let p = publish(s, system, probe, users.clone(), true, "probe").await?;
        if !p.refused.is_empty() {
            problems.push(format!("probe refused: {:?}", p.refused));
        }
        let dues = due_table(&probe, &p.dues);
        let accepted = p.accepted;
        probe_ingest = Some(p);
        Some((probe, dues, accepted))
    } else {
        None
    };

    let mut cpu_delivery = None;
    let mut rewrites_firing = None;
    let mut delivery = None;
    let (mut dropped, mut foreign) = (0, 0);
    if let (Some((plan, dues, expected)), Some(mut f)) = (to_deliver, fleet.take()) {
        let (cpu, rewrites) =
            await_delivery(s, system, &mut f, &usage, &plan, expected, &mut problems).await;
        cpu_delivery = Some(cpu);
        rewrites_firing = rewrites;
        let received = f.close().await;
        dropped = received.dropped;
        foreign = received.foreign;
        if received.lost_workers > 0 {
            problems.push(format!(
                "{} worker processes did not report their arrivals",
                received.lost_workers
            ));
        }
        let goal = (s.scenario == Scenario::Herd).then_some(HERD_GOAL_MS);
        let d = delivery::summarize(&plan, &dues, expected, &received.arrivals, goal);
        if d.missing > 0 {
            problems.push(format!("{} notifications never arrived", d.missing));
        }
        if d.early > 0 {
            problems.push(format!(
                "{} notifications arrived before their due time",
                d.early
            ));
        }
        delivery = Some(d);
    }
    if let Some(f) = fleet {
        f.close().await;
    }
    if dropped > 0 {
        problems.push(format!("{dropped} sessions were ended by the gateway"));
    }

    // Herald counts a notification fired once its link took it, a step
    // after the sessions got it: read the counters once they have caught
    // up with what arrived (or after COUNTERS_WAIT, reporting them as
    // they are).
    let arrived = delivery.as_ref().map_or(0, |d| d.received);
    let counters_deadline = tokio::time::Instant::now() + COUNTERS_WAIT;
    let scrape_after = loop {
        let scraped = scrape(&mut metrics_conn).await?;
        let fired = ServerCounters::between(&scrape_before, &scraped).fired;
        if fired >= arrived || tokio::time::Instant::now() >= counters_deadline {
            break scraped;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let server_lateness = ServerLateness::between(&scrape_before, &scrape_after);
    let server_counters = ServerCounters::between(&scrape_before, &scrape_after);
    if !server_counters.store_errors.is_empty() {
        problems.push(format!("store errors: {:?}", server_counters.store_errors));
    }
    let goal = s.goal(Some(&ingested), delivery.as_ref());
    let pids: BTreeMap<String, u32> = system
        .pids()
        .into_iter()
        .map(|(n, p)| (n.to_owned(), p))
        .collect();
    let complete = problems.is_empty();
    Ok(DelayedReport {
        command: "delayed",
        scenario: s.scenario.name(),
        target: s.target.name(),
        run_id: system.run_id.clone(),
        pids,
        redis: system.redis.clone(),
        notifications: s.count,
        batch: s.batch,
        connections: s.connections,
        payload_bytes: s.payload_bytes,
        sessions: s.sessions,
        processes: plans.len(),
        plan: s.describe_plan(),
        schedule: s.schedule.iter().map(|(k, v)| format!("{k}={v}")).collect(),
        ingest: Some(ingested),
        growth: growth_rows,
        probe_ingest,
        delivery,
        server_lateness,
        server_counters,
        cpu_ingest: Some(cpu_ingest),
        cpu_delivery,
        aof_rewrites_ingest: rewrites_ingest,
        aof_rewrites_firing: rewrites_firing,
        goal,
        sessions_dropped: dropped,
        foreign_messages: foreign,
        cores: cpu::cores(),
        reference_ms: 0.0,
        load_before: None,
        load_after: None,
        complete,
        problems,
        cleanup: system::SystemCleanup::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Result<Settings, String> {
        use clap::Parser as _;
        let mut argv = vec![
            "herald-bench",
            "delayed",
            "--router-bin",
            "r",
            "--gateway-bin",
            "g",
        ];
        argv.extend_from_slice(extra);
        match crate::cli::Cli::try_parse_from(argv).unwrap().command {
            crate::cli::Command::Delayed(a) => Settings::from_args(&a),
            _ => unreachable!(),
        }
    }

    #[test]
    fn defaults_follow_the_scenario() {
        let s = args(&["--scenario", "ingest"]).unwrap();
        assert_eq!((s.count, s.sessions), (500_000, 0));
        let s = args(&["--scenario", "lateness"]).unwrap();
        assert_eq!((s.count, s.sessions, s.rate), (100_000, 1_000, 10_000));
        assert_eq!(s.lead_ms, 15_000);
        let s = args(&["--scenario", "herd"]).unwrap();
        assert_eq!((s.count, s.sessions, s.lead_ms), (200_000, 10_000, 25_000));
        let s = args(&["--scenario", "footprint"]).unwrap();
        assert_eq!((s.count, s.sessions, s.probe), (1_000_000, 100, 1_000));
        let s = args(&["--scenario", "footprint", "--probe", "0"]).unwrap();
        assert_eq!(s.sessions, 0, "no probe, no sessions");
        let s = args(&["--scenario", "herd", "--count", "1000", "--lead-ms", "3000"]).unwrap();
        assert_eq!((s.count, s.lead_ms), (1000, 3000));
    }

    #[test]
    fn due_order_picks_the_ingest_plan() {
        let start = 1_000 + 30 * DAY_MS;
        let s = args(&["--scenario", "ingest", "--count", "1000"]).unwrap();
        assert_eq!(s.main_plan(1_000).dues, Dues::Spread { start_ms: start });
        let s = args(&[
            "--scenario",
            "ingest",
            "--count",
            "1000",
            "--due-order",
            "random",
        ])
        .unwrap();
        assert_eq!(s.main_plan(1_000).dues, Dues::scattered(start, 1000));
        assert!(s.describe_plan().contains("scrambled"));
        use clap::Parser as _;
        let bad = [
            "herald-bench",
            "delayed",
            "--scenario",
            "ingest",
            "--due-order",
            "sideways",
        ];
        assert!(crate::cli::Cli::try_parse_from(bad).is_err());
    }

    #[test]
    fn bad_arguments_are_refused_before_anything_starts() {
        for bad in [
            &["--scenario", "lateness", "--count", "5"][..],
            &["--scenario", "lateness", "--rate", "0"],
            &["--scenario", "ingest", "--sessions", "10"],
            &["--scenario", "herd", "--count", "0"],
            &["--scenario", "herd", "--sessions", "0"],
            &["--scenario", "herd", "--sessions", "20000"],
            &[
                "--scenario",
                "herd",
                "--sessions",
                "100",
                "--processes",
                "200",
            ],
            &["--scenario", "ingest", "--batch", "1001"],
            &["--scenario", "ingest", "--batch", "0"],
            &["--scenario", "ingest", "--connections", "0"],
            &["--scenario", "ingest", "--payload-bytes", "100000"],
            &["--scenario", "ingest", "--far-days", "400"],
            &["--scenario", "herd", "--lead-ms", "10"],
            &["--scenario", "footprint", "--probe-rate", "0"],
            &["--scenario", "ingest", "--schedule", "claim_batch"],
        ] {
            assert!(args(bad).is_err(), "{bad:?}");
        }
        use clap::Parser as _;
        let parse = |argv: &[&str]| match crate::cli::Cli::try_parse_from(argv).unwrap().command {
            crate::cli::Command::Delayed(a) => Settings::from_args(&a),
            _ => unreachable!(),
        };
        assert!(
            parse(&["herald-bench", "delayed", "--scenario", "ingest"]).is_err(),
            "router needs --router-bin"
        );
        assert!(
            parse(&[
                "herald-bench",
                "delayed",
                "--scenario",
                "ingest",
                "--router-bin",
                "r"
            ])
            .is_ok(),
            "ingest on a router needs no gateway"
        );
        assert!(
            parse(&[
                "herald-bench",
                "delayed",
                "--scenario",
                "herd",
                "--router-bin",
                "r"
            ])
            .is_err(),
            "sessions need the edge gateway"
        );
        assert!(
            parse(&[
                "herald-bench",
                "delayed",
                "--scenario",
                "ingest",
                "--target",
                "standalone"
            ])
            .is_err(),
            "standalone needs --gateway-bin"
        );
    }

    #[test]
    fn plans_per_scenario() {
        let now = 1_800_000_000_000;
        let s = args(&["--scenario", "lateness", "--lead-ms", "5000"]).unwrap();
        let p = s.main_plan(now);
        assert_eq!(p.first_due_ms(), now + 5_000);
        assert_eq!(p.last_due_ms(), now + 5_000 + 9_999);
        let s = args(&["--scenario", "herd", "--count", "10", "--lead-ms", "2000"]).unwrap();
        let p = s.main_plan(now);
        assert_eq!(
            (p.first_due_ms(), p.last_due_ms()),
            (now + 2_000, now + 2_000)
        );
        let s = args(&["--scenario", "ingest", "--count", "10"]).unwrap();
        assert_eq!(s.main_plan(now).first_due_ms(), now + 30 * DAY_MS);
    }

    #[test]
    fn due_tables_take_herald_s_answers() {
        let p = Plan {
            first: 5,
            count: 3,
            dues: Dues::Herd { at_ms: 100 },
        };
        assert_eq!(due_table(&p, &[(6, 107), (99, 1)]), [100, 107, 100]);
    }

    #[test]
    fn goals() {
        let s = args(&["--scenario", "ingest", "--count", "10"]).unwrap();
        let mut i = Ingested {
            rate: 120_000.0,
            ..Ingested::default()
        };
        assert!(s.goal(Some(&i), None).unwrap().met);
        i.rate = 60_000.0;
        assert!(
            !s.goal(Some(&i), None).unwrap().met,
            "100,000/s on a router"
        );
        let s = args(&[
            "--scenario",
            "ingest",
            "--count",
            "10",
            "--target",
            "standalone",
        ])
        .unwrap();
        assert!(s.goal(Some(&i), None).unwrap().met, "50,000/s standalone");
        let s = args(&["--scenario", "footprint"]).unwrap();
        assert_eq!(s.goal(Some(&i), None), None);
    }
}
