//! `herald-bench soak`: the distributed deployment (`deploy/up`: two RabbitMQ roots, Redis, two
//! routers, three edges, HAProxy) under mixed traffic for a long while, sampled once a minute:
//! does anything grow with time?
//!
//! The run: deploy/up on its own state directory and port offset from binaries already built
//! ([`deployment`]); the traffic ([`traffic`]): steady sessions checked for every delivery,
//! connect/disconnect churn, per-user, client-scoped and global publications over HTTP and
//! AMQP, delayed and callback notifications (to the bench's receiver on 127.0.0.1), presence
//! queries; a sample at the start and every `--sample-secs` ([`sample`]): every process's RSS,
//! descriptors and threads, the Herald processes' gauges, Redis's memory and keys, the roots'
//! queues; at the end the traffic stops, what is still due is waited for, and the
//! [`ledger`] says what was lost; deploy/down. The figure is the least-squares slope of each
//! series after the warm-up ([`fit`]), per hour and relative to its level; [`report`] writes
//! it as Markdown, JSON and an SVG plot.
//!
//! Unlike the other commands the soak holds its sessions itself, not in worker processes: a
//! hundred or so, far below the parent's descriptor limit.
//!
//! Imports go one way: this module -> `traffic` -> `ledger`; `report` -> `fit`, `sample`;
//! `deployment` -> `sample`; all of them on [`crate::client`] and [`crate::harness`].

pub(crate) mod args;
mod deployment;
mod fit;
mod ledger;
mod report;
mod sample;
mod traffic;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub(crate) use self::args::SoakArgs;
use self::deployment::{Deployment, UpOptions};
use self::fit::{Fit, fit};
use self::ledger::Totals;
use self::report::{Sample, beyond, limit, series, slopes_table, svg};
use self::sample::{Process, Values};
use self::traffic::{CountersSnapshot, Plan, Shared};
use crate::harness::interrupt::interrupt;
use crate::harness::outcome::{BenchError, Outcome};
use crate::harness::receiver::Receiver;

/// How long the steady sessions may take to open at the start.
const STEADY_DEADLINE: Duration = Duration::from_secs(120);
/// After the traffic stops: how long what is still due may take to arrive.
const DRAIN: Duration = Duration::from_secs(60);
/// How long the sessions may take to close.
const CLOSE_DEADLINE: Duration = Duration::from_secs(15);

/// What the callbacks did.
#[derive(Debug, Clone, Default, Serialize)]
struct Callbacks {
    published: u64,
    received: u64,
    lost: u64,
    /// Calls of a notification already called (at-least-once: reported, not a failure).
    repeated: u64,
    unparsed: u64,
}

/// The whole report, as JSON.
#[derive(Debug, Serialize)]
struct Report {
    name: String,
    command: String,
    date: String,
    minutes: u64,
    sample_secs: u64,
    warmup_secs: f64,
    bin_dir: String,
    plan: Plan,
    router_toml: &'static str,
    edge_toml: &'static str,
    processes: Vec<String>,
    delivery: Totals,
    callbacks: Callbacks,
    counters: CountersSnapshot,
    notes: Vec<String>,
    fits: BTreeMap<String, Fit>,
    failures: Vec<String>,
    growth: Vec<String>,
    checked: bool,
    samples: Vec<Sample>,
}

pub(crate) async fn run(args: SoakArgs) -> Result<Outcome, BenchError> {
    for (name, v) in [
        ("--rate", args.rate),
        ("--delayed-rate", args.delayed_rate),
        ("--callback-rate", args.callback_rate),
        ("--presence-rate", args.presence_rate),
    ] {
        if !(0.0..=10_000.0).contains(&v) {
            return Err(BenchError::Usage(format!(
                "{name}: 0 to 10000 per second, got {v}"
            )));
        }
    }
    let bin_dir = match &args.bin_dir {
        Some(d) => d.clone(),
        None => std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .ok_or_else(|| {
                BenchError::Usage("--bin-dir: cannot tell where this binary is".into())
            })?,
    };
    for bin in ["herald-router", "herald-gateway"] {
        if !bin_dir.join(bin).is_file() {
            return Err(BenchError::Usage(format!(
                "{}: no {bin} (build it, or give --bin-dir)",
                bin_dir.display()
            )));
        }
    }
    if !args.deploy_dir.join("up").is_file() {
        return Err(BenchError::Usage(format!(
            "--deploy-dir {}: no deploy/up there (run from the repository's root)",
            args.deploy_dir.display()
        )));
    }
    let work = args.work_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("herald-soak-{}", std::process::id()))
    });
    if work.exists() {
        return Err(BenchError::Usage(format!(
            "--work-dir {}: exists already",
            work.display()
        )));
    }
    std::fs::create_dir_all(&work)
        .and_then(|()| std::fs::create_dir_all(&args.out_dir))
        .map_err(|e| BenchError::Failed(format!("{}: {e}", work.display())))?;
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| format!("soak-{}", utc_date()));
    let interrupted = interrupt();

    let callbacks_max = (args.callback_rate * args.minutes as f64 * 60.0 * 1.2) as u64 + 100;
    let receiver = Receiver::start(callbacks_max, Duration::ZERO)
        .await
        .map_err(|e| BenchError::Failed(format!("the callback receiver: {e}")))?;

    let state = work.join("state");
    let up_log = work.join("deploy.log");
    eprintln!(
        "herald-bench soak: deploy/up --state-dir {} --port-offset {} (output: {})",
        state.display(),
        args.port_offset,
        up_log.display()
    );
    let dep = Deployment::up(&UpOptions {
        deploy_dir: &args.deploy_dir,
        bin_dir: &bin_dir,
        state: &state,
        port_offset: args.port_offset,
        log: &up_log,
    })
    .await;
    let dep = match dep {
        Ok(d) => d,
        Err(e) => {
            // Whatever deploy/up did start goes.
            if state.join("deployment.env").is_file()
                && let Ok(d) = Deployment::read(&args.deploy_dir, &state)
            {
                let _ = d.down(!args.keep, &up_log).await;
            }
            return Err(e);
        }
    };
    let plan = Plan {
        steady: args.steady as usize,
        churn: args.churn as usize,
        companies: args.companies as usize,
        rate: args.rate,
        delayed_rate: args.delayed_rate,
        callback_rate: args.callback_rate,
        presence_rate: args.presence_rate,
    };
    let shared = Arc::new(Shared::new(
        plan.clone(),
        dep.proxy,
        &dep.jwt_secret,
        &dep.api_key,
        receiver.url(),
    ));
    let processes = dep.processes();
    eprintln!(
        "herald-bench soak: up; watching {}",
        processes
            .iter()
            .map(|p| format!("{} ({})", p.name, p.pid))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let outcome = drive(&args, &dep, &shared, &processes, &receiver, &interrupted).await;
    // The processes' logs are kept when anything went wrong (a note is anything unusual).
    let clean = outcome.is_ok()
        && shared.ledger().outstanding() == 0
        && shared.notes.lock().map(|n| n.is_empty()).unwrap_or(false);
    let keep = args.keep || !clean;
    let down = dep.down(!keep, &up_log).await;
    if let Err(e) = &down {
        eprintln!("herald-bench soak: {e}");
    }
    if keep {
        eprintln!(
            "herald-bench soak: the deployment's state and logs are kept in {}",
            work.display()
        );
    } else {
        let _ = std::fs::remove_dir_all(&work);
    }
    let samples = outcome?;

    // What arrived, and the figures.
    let totals = std::mem::take(&mut *shared.ledger()).finish();
    let published: Vec<u64> =
        std::mem::take(&mut *shared.callbacks.lock().unwrap_or_else(|e| e.into_inner()));
    let arrived = receiver.stop();
    let seen: BTreeSet<u64> = arrived.arrivals.iter().map(|a| a.0).collect();
    let callbacks = Callbacks {
        published: published.len() as u64,
        received: seen.len() as u64,
        lost: published.iter().filter(|s| !seen.contains(s)).count() as u64,
        repeated: arrived.arrivals.len() as u64 - seen.len() as u64,
        unparsed: arrived.unparsed,
    };
    let counters = shared.counters.snapshot();
    let notes = shared
        .notes
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let warmup_secs = args.minutes as f64 * 60.0 * args.warmup_percent as f64 / 100.0;
    let fits: BTreeMap<String, Fit> = series(&samples)
        .into_iter()
        .filter_map(|(name, points)| fit(&points, warmup_secs).map(|f| (name, f)))
        .collect();
    let failures = failures(&totals, &callbacks, &counters, &processes, &samples);
    let growth: Vec<String> = fits
        .iter()
        .filter_map(|(name, f)| beyond(name, f, limit(name)?))
        .collect();

    let report = Report {
        name: name.clone(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        date: utc_date(),
        minutes: args.minutes,
        sample_secs: args.sample_secs,
        warmup_secs,
        bin_dir: bin_dir.display().to_string(),
        plan,
        router_toml: deployment::ROUTER_TOML,
        edge_toml: deployment::EDGE_TOML,
        processes: processes.iter().map(|p| p.name.clone()).collect(),
        delivery: totals,
        callbacks,
        counters,
        notes,
        fits,
        failures,
        growth,
        checked: args.check,
        samples,
    };
    let written = write(&args.out_dir, &report)?;
    println!("{}", summary(&report));
    eprintln!("herald-bench soak: report {written}");
    let failed = !report.failures.is_empty() || !report.growth.is_empty();
    if args.check && failed {
        Ok(Outcome::SomeFailed)
    } else {
        Ok(Outcome::AllOpened)
    }
}

/// The traffic and the samples, until the end of the run (or an interrupt); the samples.
async fn drive(
    args: &SoakArgs,
    dep: &Deployment,
    shared: &Arc<Shared>,
    processes: &[Process],
    receiver: &Receiver,
    interrupted: &CancellationToken,
) -> Result<Vec<Sample>, BenchError> {
    let tracker = TaskTracker::new();
    let stop = CancellationToken::new();
    let close = CancellationToken::new();
    let roots: Vec<String> = dep.roots.iter().map(|r| r.2.clone()).collect();
    let result = async {
        traffic::start(shared, &roots, &tracker, &stop, &close)
            .await
            .map_err(BenchError::Failed)?;
        if !traffic::steady_ready(shared, STEADY_DEADLINE).await {
            return Err(BenchError::Failed(format!(
                "only {} of {} steady sessions opened in {STEADY_DEADLINE:?}",
                shared.steady_live(),
                shared.plan.steady
            )));
        }
        let mut samples = Vec::new();
        let every = Duration::from_secs(args.sample_secs);
        let end = Duration::from_secs(args.minutes * 60);
        let begin = tokio::time::Instant::now();
        let mut next = begin;
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(next) => {}
                () = interrupted.cancelled() => return Err(BenchError::Failed("interrupted".into())),
            }
            let at = begin.elapsed().as_secs_f64();
            let values = take_sample(dep, processes, shared).await;
            let overdue = shared.ledger().check(shared.now(), args.grace_secs as f64);
            progress(shared, at, overdue, receiver, &values);
            samples.push(Sample { at_secs: at, values });
            if begin.elapsed() + Duration::from_millis(500) >= end {
                break;
            }
            next = (next + every).min(begin + end);
        }
        stop.cancel();
        // What is still due: delayed notifications up to 15 s out, callbacks up to 5 s.
        let deadline = tokio::time::Instant::now() + DRAIN;
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        loop {
            tick.tick().await;
            let outstanding = shared.ledger().outstanding();
            let calls = shared.callbacks.lock().map(|c| c.len() as u64).unwrap_or(0);
            if (outstanding == 0 && receiver.distinct() >= calls)
                || tokio::time::Instant::now() >= deadline
                || interrupted.is_cancelled()
            {
                break;
            }
        }
        Ok(samples)
    }
    .await;
    stop.cancel();
    close.cancel();
    tracker.close();
    if tokio::time::timeout(CLOSE_DEADLINE, tracker.wait())
        .await
        .is_err()
    {
        eprintln!("herald-bench soak: some sessions did not close in {CLOSE_DEADLINE:?}");
    }
    result
}

async fn take_sample(dep: &Deployment, processes: &[Process], shared: &Shared) -> Values {
    let mut values = Values::new();
    for p in processes {
        if !sample::sample_process(p, &mut values) {
            shared.note(format!("{} (pid {}) is gone", p.name, p.pid));
        }
    }
    for (role, members) in [
        ("gauges_routers", &dep.routers),
        ("gauges_edges", &dep.edges),
    ] {
        for (name, addr) in members.iter() {
            match sample::metrics(*addr, &dep.api_key).await {
                Ok(g) => {
                    for (k, v) in g {
                        *values.entry(format!("{role}/{k}")).or_insert(0.0) += v;
                    }
                }
                Err(e) => eprintln!("herald-bench soak: {name}: {e}"),
            }
        }
    }
    if let Err(e) = sample::redis(&dep.redis_url, &mut values).await {
        eprintln!("herald-bench soak: {e}");
    }
    let home = dep.rabbit_home();
    let queues = futures_util::future::join_all(
        dep.roots
            .iter()
            .map(|(_, node, _)| sample::rabbit_queues(&home, node)),
    )
    .await;
    for ((root, _, _), q) in dep.roots.iter().zip(queues) {
        match q {
            Ok(q) => {
                values.insert(
                    format!("rabbitmq_messages/{root}"),
                    q.iter().map(|x| x.1 as f64).sum(),
                );
                values.insert(format!("rabbitmq_queues/{root}"), q.len() as f64);
            }
            Err(e) => eprintln!("herald-bench soak: {root}: {e}"),
        }
    }
    values.insert("bench/steady_live".into(), shared.steady_live() as f64);
    values
}

fn progress(shared: &Shared, at: f64, overdue: u64, receiver: &Receiver, values: &Values) {
    let c = shared.counters.snapshot();
    let ledger = shared.ledger();
    let t = ledger.totals();
    let rss: f64 = values
        .iter()
        .filter(|(k, _)| k.starts_with("rss_mib/edge") || k.starts_with("rss_mib/router"))
        .map(|(_, v)| v)
        .sum();
    eprintln!(
        "herald-bench soak: {:>5.1} min  steady {}/{}  churn opened {}  published {} HTTP + {} AMQP  \
         delivered {}/{} (overdue {overdue})  callbacks {}/{}  Herald RSS {rss:.1} MiB",
        at / 60.0,
        shared.steady_live(),
        shared.plan.steady,
        c.churn_opened,
        c.http_published,
        c.amqp_published,
        t.delivered(),
        t.expected(),
        receiver.distinct(),
        c.callbacks_published,
    );
}

fn failures(
    t: &Totals,
    cb: &Callbacks,
    c: &CountersSnapshot,
    processes: &[Process],
    samples: &[Sample],
) -> Vec<String> {
    let mut out = Vec::new();
    let mut check = |bad: bool, what: String| {
        if bad {
            out.push(what);
        }
    };
    check(
        t.lost() > 0,
        format!("{} deliveries to steady sessions lost", t.lost()),
    );
    check(
        t.duplicates > 0,
        format!("{} deliveries came twice", t.duplicates),
    );
    check(
        t.unexpected > 0,
        format!(
            "{} deliveries reached a session they were not for",
            t.unexpected
        ),
    );
    check(
        cb.lost > 0,
        format!("{} of {} callbacks never came", cb.lost, cb.published),
    );
    check(
        c.steady_dropped > 0,
        format!(
            "{} steady sessions were ended by the server",
            c.steady_dropped
        ),
    );
    check(
        c.churn_ended_by_server > 0,
        format!(
            "{} churn sessions were ended by the server",
            c.churn_ended_by_server
        ),
    );
    check(
        c.open_failures > 0,
        format!("{} sessions failed to open", c.open_failures),
    );
    check(
        c.http_refused > 0,
        format!("{} HTTP publications refused or failed", c.http_refused),
    );
    check(
        c.amqp_refused > 0,
        format!("{} AMQP publications not confirmed", c.amqp_refused),
    );
    check(
        c.presence_wrong > 0,
        format!("{} presence answers wrong or failed", c.presence_wrong),
    );
    if let Some(last) = samples.last() {
        for p in processes {
            check(
                !last.values.contains_key(&format!("rss_mib/{}", p.name)),
                format!("{} (pid {}) was gone at the end", p.name, p.pid),
            );
        }
    }
    out
}

fn write(dir: &Path, r: &Report) -> Result<String, BenchError> {
    let base: PathBuf = dir.join(&r.name);
    let json = serde_json::to_string_pretty(r).map_err(|e| BenchError::Failed(e.to_string()))?;
    let md = markdown(r);
    let plot = svg(&r.samples, r.warmup_secs);
    for (ext, text) in [("json", json), ("md", md), ("svg", plot)] {
        let path = base.with_extension(ext);
        std::fs::write(&path, text)
            .map_err(|e| BenchError::Failed(format!("{}: {e}", path.display())))?;
    }
    Ok(base.with_extension("md").display().to_string())
}

fn summary(r: &Report) -> String {
    let mut s = format!(
        "soak {}: {} min, {} samples; delivered {}/{} to steady sessions, lost {}, duplicates {}; \
         callbacks {}/{}",
        r.name,
        r.minutes,
        r.samples.len(),
        r.delivery.delivered(),
        r.delivery.expected(),
        r.delivery.lost(),
        r.delivery.duplicates,
        r.callbacks.received,
        r.callbacks.published,
    );
    for f in r.failures.iter().chain(&r.growth) {
        let _ = write!(s, "\n  FAIL {f}");
    }
    if r.failures.is_empty() && r.growth.is_empty() {
        s.push_str("\n  nothing lost, nothing grew beyond its limit");
    }
    s
}

fn markdown(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Soak: {} ({} minutes)\n", r.date, r.minutes);
    let _ = writeln!(
        s,
        "`{}`\n\nThe distributed deployment of `deploy/up` (two RabbitMQ roots, Redis, two \
         routers, three edges, HAProxy, Varnish) from `{}`, under the traffic below for {} \
         minutes, sampled every {} s. The slopes leave out the first {:.0} s (warm-up). How the \
         bench works and what the limits mean: [bench/README.md](../README.md#soak).\n",
        r.command, r.bin_dir, r.minutes, r.sample_secs, r.warmup_secs
    );
    let p = &r.plan;
    let _ = writeln!(
        s,
        "Traffic: {} steady sessions (one per user, {} companies), {} churn slots (sessions \
         held 2 to 20 s, half closed politely, half dropped); {} immediate publications/s \
         (60 % per-user, 25 % client-scoped, 15 % global; HTTP and AMQP alternately, AMQP to \
         both roots), {} delayed/s (1 to 15 s), {} callbacks/s (0 to 5 s, to a receiver on \
         127.0.0.1), {} presence queries/s.\n",
        p.steady, p.companies, p.churn, p.rate, p.delayed_rate, p.callback_rate, p.presence_rate
    );
    let verdict = if r.failures.is_empty() && r.growth.is_empty() {
        "**Nothing lost, nothing grew beyond its limit.**".to_owned()
    } else {
        let mut v = String::from("**Failures:**\n");
        for f in r.failures.iter().chain(&r.growth) {
            let _ = writeln!(v, "- {f}");
        }
        v
    };
    let _ = writeln!(s, "{verdict}\n");
    let _ = writeln!(s, "## Delivery\n");
    let _ = writeln!(
        s,
        "Every publication aimed at steady sessions, written down before it was published, \
         against what each session received.\n"
    );
    let _ = writeln!(
        s,
        "| publications | count | deliveries expected | delivered | lost |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|");
    for (kind, k) in &r.delivery.by_kind {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} |",
            kind.name(),
            k.publications,
            k.expected,
            k.delivered,
            k.lost
        );
    }
    let d = &r.delivery;
    let c = &r.counters;
    let cb = &r.callbacks;
    let _ = writeln!(
        s,
        "\nDuplicates {}, unexpected {}, abandoned by a dropped session {}, most overdue at one \
         sample {}. Callbacks: {} published, {} received, {} lost, {} repeated calls. \
         Sessions: steady opened {} (dropped by the server {}), churn opened {} ({} closed \
         politely, {} sockets dropped, {} ended by the server, {} messages received), {} \
         failed to open. Publications: {} HTTP ({} refused), {} AMQP ({} not confirmed). \
         Presence: {} queries, {} wrong.\n",
        d.duplicates,
        d.unexpected,
        d.abandoned,
        d.most_overdue,
        cb.published,
        cb.received,
        cb.lost,
        cb.repeated,
        c.steady_opened,
        c.steady_dropped,
        c.churn_opened,
        c.churn_closed_politely,
        c.churn_dropped_socket,
        c.churn_ended_by_server,
        c.churn_messages,
        c.open_failures,
        c.http_published,
        c.http_refused,
        c.amqp_published,
        c.amqp_refused,
        c.presence_queries,
        c.presence_wrong
    );
    if !d.examples.is_empty() || !r.notes.is_empty() {
        let _ = writeln!(s, "Notes:\n");
        for n in d.examples.iter().chain(&r.notes) {
            let _ = writeln!(s, "- {n}");
        }
        s.push('\n');
    }
    let _ = writeln!(s, "## Slopes after the warm-up\n");
    let _ = writeln!(
        s,
        "Least-squares slope of each series over the samples after the warm-up, per hour and \
         as a percentage of the series' mean over those samples. Goal: flat.\n"
    );
    s.push_str(&slopes_table(&r.fits, true));
    let _ = writeln!(s, "\n![every series over time]({}.svg)\n", r.name);
    let _ = writeln!(
        s,
        "The Herald processes' own gauges (summed over the routers, over the edges):\n"
    );
    s.push_str(&slopes_table(&r.fits, false));
    let _ = writeln!(
        s,
        "\nThe deployment's configuration beside deploy/up's defaults (what Herald keeps on \
         purpose for a while is kept for less, so the steady state comes within the warm-up):\n\n\
         ```toml\n{}```\n\n```toml\n{}```",
        r.router_toml, r.edge_toml
    );
    s
}

/// Today's date in UTC, `YYYY-MM-DD`.
fn utc_date() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    civil_date(secs / 86_400)
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_date(days: u64) -> String {
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(civil_date(0), "1970-01-01");
        assert_eq!(civil_date(20_454), "2026-01-01");
        assert_eq!(civil_date(11_016), "2000-02-29");
    }
}
