//! One run of a scenario, in phases: open the sessions, take the baselines, publish, measure
//! the growth, publish the probe, wait for the deliveries, read Herald's counters once they
//! caught up, and assemble the report. Every phase adds what went wrong to `problems`, in
//! that order.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::args::Scenario;
use super::metrics::{Scrape, ServerCounters, ServerLateness};
use super::report::{DelayedReport, Growth};
use super::settings::{HERD_GOAL_MS, PROBE_LEAD_MS, Settings};
use super::snapshot::{growth, scrape, snapshot};
use super::watch::{Window, await_delivery, publish};
use crate::client::api::ApiConnection;
use crate::fleet::Fleet;
use crate::harness::cpu;
use crate::harness::outcome::BenchError;
use crate::harness::plan::WorkerPlan;
use crate::harness::report::grouped;
use crate::scheduled::clock::now_ms;
use crate::scheduled::delivery::due_table;
use crate::scheduled::delivery::{self, Delivery};
use crate::scheduled::ingest::Ingested;
use crate::scheduled::plan::{Dues, Plan, Users};
use crate::scheduled::system::{self, System};
use crate::scheduled::usage::{Split, Usage};

/// Longest wait for Herald's counters to catch up with what arrived.
const COUNTERS_WAIT: Duration = Duration::from_secs(10);
/// Users the notifications of `ingest` go to (nobody is connected).
const OFFLINE_USERS: usize = 1_000;
/// Tokens stay valid this long beyond the run's own length.
const TOKEN_SLACK: Duration = Duration::from_secs(3600);

pub(super) async fn measure(
    s: &Settings,
    system: &mut System,
) -> Result<DelayedReport, BenchError> {
    let needs_sessions = s.sessions > 0;
    system.start(&s.system, needs_sessions).await?;
    let api_addr = system
        .api_addr
        .ok_or_else(|| BenchError::Failed("no API address".into()))?;
    let mut problems = Vec::new();

    // Sessions first, so their cost is in every baseline.
    let sessions = Sessions::open(s, system).await?;
    let usage = watch_processes(s, system, sessions.fleet.as_ref());
    let mut metrics_conn = ApiConnection::new(api_addr, &system.api_key);
    let scrape_before = scrape(&mut metrics_conn).await?;
    let before = if matches!(s.scenario, Scenario::Ingest | Scenario::Footprint) {
        Some(snapshot(system).await?)
    } else {
        None
    };

    let main = publish_main(s, system, &usage, &sessions.users, &mut problems).await?;
    let growth_rows = match &before {
        Some(before) => {
            eprintln!("herald-bench: measuring the store and the RSS");
            let after = snapshot(system).await?;
            growth(system, before, &after, main.ingested.accepted)
        }
        None => Vec::new(),
    };
    let (to_deliver, probe_ingest) =
        to_deliver(s, system, &main, &sessions.users, &mut problems).await?;
    let delivered = deliver(s, system, sessions.fleet, &usage, to_deliver, &mut problems).await;
    let scrape_after =
        counters_caught_up(&mut metrics_conn, &scrape_before, &delivered.delivery).await?;

    Ok(assemble(
        s,
        system,
        Measured {
            processes: sessions.plans.len(),
            main,
            growth: growth_rows,
            probe_ingest,
            delivered,
            scrape_before,
            scrape_after,
        },
        problems,
    ))
}

/// The sessions receiving the notifications (none for `ingest`), and the users the plans
/// address.
struct Sessions {
    plans: Vec<WorkerPlan>,
    fleet: Option<Fleet>,
    users: Arc<Users>,
}

impl Sessions {
    async fn open(s: &Settings, system: &System) -> Result<Self, BenchError> {
        let needs_sessions = s.sessions > 0;
        let plans = if needs_sessions {
            s.worker_plans()?
        } else {
            Vec::new()
        };
        let fleet = match system.ws_addr {
            Some(ws) if needs_sessions => {
                let ttl = Duration::from_millis(s.lead_ms) + s.drain_timeout + TOKEN_SLACK;
                let mut fleet =
                    Fleet::spawn(&plans, ws, &system.jwt_secret, s.handshake_timeout, ttl)?;
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
        Ok(Self {
            plans,
            fleet,
            users,
        })
    }
}

/// The processes whose CPU time the report splits: Herald's, Redis, the broker, the bench and
/// its workers.
fn watch_processes(s: &Settings, system: &System, fleet: Option<&Fleet>) -> Usage {
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
    if let Some(f) = fleet {
        usage.watch("bench workers", f.pids());
    }
    usage
}

/// The scenario's main plan, published, with the CPU and AOF rewrites of its window.
struct MainIngest {
    plan: Plan,
    /// Whether the main plan's notifications are the ones whose arrivals are measured
    /// (`lateness`, `herd`).
    delivers: bool,
    ingested: Ingested,
    cpu: Split,
    rewrites: Option<u64>,
}

async fn publish_main(
    s: &Settings,
    system: &mut System,
    usage: &Usage,
    users: &Arc<Users>,
    problems: &mut Vec<String>,
) -> Result<MainIngest, BenchError> {
    let main = s.main_plan(now_ms());
    let delivers = matches!(s.scenario, Scenario::Lateness | Scenario::Herd);
    let window = Window::open(system, usage).await;
    let ingested = publish(s, system, main, users.clone(), delivers, "publishing").await?;
    let (cpu, rewrites) = window.close(system, usage).await;
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
    Ok(MainIngest {
        plan: main,
        delivers,
        ingested,
        cpu,
        rewrites,
    })
}

/// The notifications whose arrivals are measured: their plan, due times, and how many Herald
/// accepted.
struct ToDeliver {
    plan: Plan,
    dues: Vec<u64>,
    expected: u64,
}

/// The main plan (`lateness`, `herd`), or the footprint's probe, published now; the probe's
/// ingest goes to the report too.
async fn to_deliver(
    s: &Settings,
    system: &mut System,
    main: &MainIngest,
    users: &Arc<Users>,
    problems: &mut Vec<String>,
) -> Result<(Option<ToDeliver>, Option<Ingested>), BenchError> {
    if main.delivers {
        let deliver = ToDeliver {
            plan: main.plan,
            dues: due_table(&main.plan, &main.ingested.dues),
            expected: main.ingested.accepted,
        };
        return Ok((Some(deliver), None));
    }
    if s.scenario != Scenario::Footprint || s.probe == 0 {
        return Ok((None, None));
    }
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
    let deliver = ToDeliver {
        plan: probe,
        dues: due_table(&probe, &p.dues),
        expected: p.accepted,
    };
    Ok((Some(deliver), Some(p)))
}

/// What the sessions received, against the due times.
#[derive(Default)]
struct Delivered {
    cpu: Option<Split>,
    rewrites: Option<u64>,
    delivery: Option<Delivery>,
    dropped: u64,
    foreign: u64,
}

/// Waits for the deliveries (when there are any and sessions to receive them), closes the
/// sessions, and sums up the arrivals.
async fn deliver(
    s: &Settings,
    system: &mut System,
    fleet: Option<Fleet>,
    usage: &Usage,
    to_deliver: Option<ToDeliver>,
    problems: &mut Vec<String>,
) -> Delivered {
    let mut delivered = Delivered::default();
    let (Some(d), Some(mut f)) = (to_deliver, fleet) else {
        // A fleet with nothing to receive is dropped: its workers are killed (kill_on_drop).
        return delivered;
    };
    let (cpu, rewrites) =
        await_delivery(s, system, &mut f, usage, &d.plan, d.expected, problems).await;
    delivered.cpu = Some(cpu);
    delivered.rewrites = rewrites;
    let received = f.close().await;
    delivered.dropped = received.dropped;
    delivered.foreign = received.foreign;
    if received.lost_workers > 0 {
        problems.push(format!(
            "{} worker processes did not report their arrivals",
            received.lost_workers
        ));
    }
    let goal = (s.scenario == Scenario::Herd).then_some(HERD_GOAL_MS);
    let summary = delivery::summarize(&d.plan, &d.dues, d.expected, &received.arrivals, goal);
    if summary.missing > 0 {
        problems.push(format!("{} notifications never arrived", summary.missing));
    }
    if summary.early > 0 {
        problems.push(format!(
            "{} notifications arrived before their due time",
            summary.early
        ));
    }
    delivered.delivery = Some(summary);
    if delivered.dropped > 0 {
        problems.push(format!(
            "{} sessions were ended by the gateway",
            delivered.dropped
        ));
    }
    delivered
}

/// Herald counts a notification fired once its link took it, a step after the sessions got
/// it: reads the counters once they have caught up with what arrived (or after
/// [`COUNTERS_WAIT`], as they are).
async fn counters_caught_up(
    conn: &mut ApiConnection,
    before: &Scrape,
    delivery: &Option<Delivery>,
) -> Result<Scrape, BenchError> {
    let arrived = delivery.as_ref().map_or(0, |d| d.received);
    let counters_deadline = tokio::time::Instant::now() + COUNTERS_WAIT;
    loop {
        let scraped = scrape(conn).await?;
        let fired = ServerCounters::between(before, &scraped).fired;
        if fired >= arrived || tokio::time::Instant::now() >= counters_deadline {
            return Ok(scraped);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Everything the phases measured, for [`assemble`].
struct Measured {
    processes: usize,
    main: MainIngest,
    growth: Vec<Growth>,
    probe_ingest: Option<Ingested>,
    delivered: Delivered,
    scrape_before: Scrape,
    scrape_after: Scrape,
}

/// The report (without the load averages and cleanup, which `run` adds).
fn assemble(
    s: &Settings,
    system: &System,
    m: Measured,
    mut problems: Vec<String>,
) -> DelayedReport {
    let server_lateness = ServerLateness::between(&m.scrape_before, &m.scrape_after);
    let server_counters = ServerCounters::between(&m.scrape_before, &m.scrape_after);
    if !server_counters.store_errors.is_empty() {
        problems.push(format!("store errors: {:?}", server_counters.store_errors));
    }
    let goal = s.goal(Some(&m.main.ingested), m.delivered.delivery.as_ref());
    let pids: BTreeMap<String, u32> = system
        .pids()
        .into_iter()
        .map(|(n, p)| (n.to_owned(), p))
        .collect();
    let complete = problems.is_empty();
    DelayedReport {
        command: "delayed",
        scenario: s.scenario.name(),
        target: s.system.target.name(),
        run_id: system.run_id.clone(),
        pids,
        redis: system.redis.clone(),
        notifications: s.count,
        batch: s.batch,
        connections: s.connections,
        payload_bytes: s.payload_bytes,
        sessions: s.sessions,
        processes: m.processes,
        plan: s.describe_plan(),
        schedule: s
            .system
            .schedule
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect(),
        ingest: Some(m.main.ingested),
        growth: m.growth,
        probe_ingest: m.probe_ingest,
        delivery: m.delivered.delivery,
        server_lateness,
        server_counters,
        cpu_ingest: Some(m.main.cpu),
        cpu_delivery: m.delivered.cpu,
        aof_rewrites_ingest: m.main.rewrites,
        aof_rewrites_firing: m.delivered.rewrites,
        goal,
        sessions_dropped: m.delivered.dropped,
        foreign_messages: m.delivered.foreign,
        cores: cpu::cores(),
        reference_ms: 0.0,
        load_before: None,
        load_after: None,
        complete,
        problems,
        cleanup: system::SystemCleanup::default(),
    }
}
