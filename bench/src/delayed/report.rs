//! The result of a `delayed` run: one JSON object (`--json`) or text.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::metrics::{ServerCounters, ServerLateness};
use super::settings::Goal;
use crate::harness::report::{grouped, maybe};
use crate::harness::rss::human_bytes;
use crate::harness::stats::human_ms;
use crate::scheduled::delivery::{Delivery, SLOW_BIN_MS};
use crate::scheduled::ingest::Ingested;
use crate::scheduled::store::RedisInfo;
use crate::scheduled::system::SystemCleanup;
use crate::scheduled::usage::Split;

/// Bytes before and after the store filled, and per notification.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Growth {
    /// What was measured: `redis used_memory`, `embedded store on disk`, `router RSS`, ...
    pub(crate) what: String,
    pub(crate) before_bytes: u64,
    pub(crate) after_bytes: u64,
    /// `(after - before) / notifications`.
    pub(crate) per_notification: f64,
    /// False when an RSS did not settle within its time limit.
    pub(crate) settled: bool,
}

impl Growth {
    pub(crate) fn new(
        what: &str,
        before: u64,
        after: u64,
        notifications: u64,
        settled: bool,
    ) -> Self {
        Self {
            what: what.to_owned(),
            before_bytes: before,
            after_bytes: after,
            per_notification: (after as f64 - before as f64) / notifications.max(1) as f64,
            settled,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct DelayedReport {
    pub(crate) command: &'static str,
    pub(crate) scenario: &'static str,
    pub(crate) target: &'static str,
    pub(crate) run_id: String,
    /// Started processes by name.
    pub(crate) pids: BTreeMap<String, u32>,
    pub(crate) redis: Option<RedisInfo>,
    pub(crate) notifications: u64,
    pub(crate) batch: u64,
    pub(crate) connections: usize,
    pub(crate) payload_bytes: usize,
    pub(crate) sessions: usize,
    pub(crate) processes: usize,
    /// What the plan was, in words (due times, rate).
    pub(crate) plan: String,
    /// `[schedule]` settings given to Herald (`KEY=VALUE`); empty: its defaults.
    pub(crate) schedule: Vec<String>,
    /// Publishing the scenario's notifications.
    pub(crate) ingest: Option<Ingested>,
    /// Footprint: store and RSS growth.
    pub(crate) growth: Vec<Growth>,
    /// Footprint: publishing the probe.
    pub(crate) probe_ingest: Option<Ingested>,
    /// What the sessions received (lateness, herd, the footprint's probe).
    pub(crate) delivery: Option<Delivery>,
    /// Herald's lateness histogram over the run.
    pub(crate) server_lateness: Option<ServerLateness>,
    pub(crate) server_counters: ServerCounters,
    pub(crate) cpu_ingest: Option<Split>,
    pub(crate) cpu_delivery: Option<Split>,
    /// Redis AOF rewrites that ran while publishing, and while firing: each forks Redis and
    /// takes a core, so they explain a slow run.
    pub(crate) aof_rewrites_ingest: Option<u64>,
    pub(crate) aof_rewrites_firing: Option<u64>,
    pub(crate) goal: Option<Goal>,
    pub(crate) sessions_dropped: u64,
    pub(crate) foreign_messages: u64,
    pub(crate) cores: usize,
    /// [`crate::harness::cpu::reference_ms`] before the run: how fast this machine is.
    pub(crate) reference_ms: f64,
    pub(crate) load_before: Option<f64>,
    pub(crate) load_after: Option<f64>,
    pub(crate) complete: bool,
    pub(crate) problems: Vec<String>,
    pub(crate) cleanup: SystemCleanup,
}

fn le(ms: Option<f64>) -> String {
    ms.map_or_else(|| "> 10 s".to_owned(), |m| format!("<= {m} ms"))
}

/// What the CPU line says about Redis's AOF rewrites in its window (nothing without Redis).
fn rewrites_note(rewrites: Option<u64>) -> String {
    match rewrites {
        None => String::new(),
        Some(1) => "; 1 Redis AOF rewrite ran".into(),
        Some(n) => format!("; {n} Redis AOF rewrites ran"),
    }
}

fn ingest_line(s: &mut String, label: &str, i: &Ingested) {
    let refused = if i.refused.is_empty() {
        String::new()
    } else {
        format!(", refused {:?}", i.refused)
    };
    let _ = writeln!(
        s,
        "{label:<13} {} of {} accepted in {:.2} s: {}/s ({} requests, {} duplicates, {} retries, {} due times not as asked{refused})",
        i.accepted,
        i.notifications,
        i.seconds,
        grouped(i.rate),
        i.requests,
        i.duplicates,
        i.retries,
        i.due_mismatches,
    );
    if let Some(l) = &i.request_latency {
        let _ = writeln!(s, "{:<13} {}", "  per request", l.human());
    }
}

impl DelayedReport {
    /// The text report: what ran, publishing and the footprint, what arrived, what Herald
    /// counted, the machine and what went wrong; one section after the other.
    pub(crate) fn human(&self) -> String {
        let mut s = String::new();
        self.setup_lines(&mut s);
        self.ingest_lines(&mut s);
        if let Some(d) = &self.delivery {
            delivery_lines(&mut s, d, self.sessions_dropped);
        }
        self.server_lines(&mut s);
        self.closing_lines(&mut s);
        s
    }

    /// `setup`, `redis`, `plan`, `schedule`: what ran.
    fn setup_lines(&self, s: &mut String) {
        let pids: Vec<String> = self.pids.iter().map(|(n, p)| format!("{n} {p}")).collect();
        let _ = writeln!(
            s,
            "setup         {} {}, run {}: {}; {} sessions over {} processes",
            self.scenario,
            self.target,
            self.run_id,
            pids.join(", "),
            self.sessions,
            self.processes
        );
        if let Some(r) = &self.redis {
            let _ = writeln!(s, "redis         {} ({})", r.version, r.persistence);
        }
        let _ = writeln!(
            s,
            "plan          {} notifications x {} B, batches of {} over {} connections: {}",
            self.notifications, self.payload_bytes, self.batch, self.connections, self.plan
        );
        if !self.schedule.is_empty() {
            let _ = writeln!(s, "schedule      {}", self.schedule.join(", "));
        }
    }

    /// `ingest`, `CPU (ingest)`, `footprint`, `probe`: publishing and what it cost.
    fn ingest_lines(&self, s: &mut String) {
        if let Some(i) = &self.ingest {
            ingest_line(s, "ingest", i);
        }
        if let Some(c) = &self.cpu_ingest {
            let _ = writeln!(
                s,
                "CPU (ingest)  {}{}",
                c.human(),
                rewrites_note(self.aof_rewrites_ingest)
            );
        }
        for g in &self.growth {
            let _ = writeln!(
                s,
                "footprint     {}: {} -> {}: {:.0} B per notification{}",
                g.what,
                human_bytes(g.before_bytes as f64),
                human_bytes(g.after_bytes as f64),
                g.per_notification,
                if g.settled { "" } else { " (not settled)" }
            );
        }
        if let Some(i) = &self.probe_ingest {
            ingest_line(s, "probe", i);
        }
    }

    /// `server`, `counters`, `CPU (firing)`: what Herald measured and counted.
    fn server_lines(&self, s: &mut String) {
        if let Some(l) = &self.server_lateness {
            let _ = writeln!(
                s,
                "server        herald_delayed_lateness_seconds: {} samples, mean {}, p50 {}, p99 {}, max {}",
                l.count,
                l.mean_ms.map_or_else(|| "?".into(), |m| human_ms(m * 1e6)),
                le(l.p50_le_ms),
                le(l.p99_le_ms),
                le(l.max_le_ms),
            );
        }
        let c = &self.server_counters;
        let _ = writeln!(
            s,
            "counters      accepted {}, duplicates {}, fired {}, refired {}, hints dropped {}, store errors {:?}, firing waited for the link {:.3} s",
            c.accepted,
            c.duplicates,
            c.fired,
            c.refired,
            c.hints_dropped,
            c.store_errors,
            c.link_wait_s
        );
        if let Some(c) = &self.cpu_delivery {
            let _ = writeln!(
                s,
                "CPU (firing)  {}{}",
                c.human(),
                rewrites_note(self.aof_rewrites_firing)
            );
        }
    }

    /// `machine`, `goal`, `problem`, `cleanup`: the conditions and the verdict.
    fn closing_lines(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "machine       {} cores, load {} before, {} after; reference workload {:.0} ms (one thread sorting 1,000,000 u64)",
            self.cores,
            maybe(self.load_before, 2),
            maybe(self.load_after, 2),
            self.reference_ms
        );
        if let Some(g) = &self.goal {
            let _ = writeln!(
                s,
                "goal          {}: {}",
                g.goal,
                if g.met { "met" } else { "NOT met" }
            );
        }
        for p in &self.problems {
            let _ = writeln!(s, "problem       {p}");
        }
        for p in &self.cleanup.amqp.problems {
            let _ = writeln!(s, "cleanup       {p}");
        }
        if let Some(n) = self.cleanup.redis_keys_deleted {
            let _ = writeln!(s, "cleanup       {n} Redis keys of the run deleted");
        }
        if let Some(p) = &self.cleanup.redis_problem {
            let _ = writeln!(s, "cleanup       redis: {p}");
        }
    }
}

/// `received`, `lateness`, `last arrival`, `slowest 1%`: what the sessions received.
fn delivery_lines(s: &mut String, d: &Delivery, sessions_dropped: u64) {
    let _ = writeln!(
        s,
        "received      {} of {}: {} missing, {} duplicates, {} early{}, {} sessions dropped",
        d.received,
        d.expected,
        d.missing,
        d.duplicates,
        d.early,
        d.most_early_ns.map_or_else(String::new, |e| format!(
            " (by up to {})",
            human_ms(e as f64)
        )),
        sessions_dropped
    );
    match &d.lateness {
        Some(l) => {
            let _ = writeln!(s, "lateness      {}", l.human());
        }
        None => {
            let _ = writeln!(s, "lateness      no samples");
        }
    }
    if let Some(after) = d.last_arrival_after_last_due_ms {
        let _ = writeln!(
            s,
            "last arrival  {} after the last due time{}",
            human_ms(after * 1e6),
            match (d.goal_ms, d.within_goal) {
                (Some(g), Some(n)) => format!("; {n} of {} within {g} ms of due", d.expected),
                _ => String::new(),
            }
        );
    }
    if !d.slowest.is_empty() {
        let bins: Vec<String> = d
            .slowest
            .iter()
            .map(|b| {
                format!(
                    "+{:.1} s: {} (max {})",
                    b.due_offset_ms as f64 / 1000.0,
                    b.count,
                    human_ms(b.max_late_ns as f64)
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "slowest 1%    due at ({SLOW_BIN_MS} ms bins, from the first due time) {}",
            bins.join(", ")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_per_notification() {
        let g = Growth::new("redis used_memory", 1_000, 501_000, 1_000, true);
        assert!((g.per_notification - 500.0).abs() < 1e-9);
        let shrink = Growth::new("router RSS", 2_000, 1_000, 0, false);
        assert!(
            (shrink.per_notification + 1_000.0).abs() < 1e-9,
            "0 counts as 1"
        );
    }

    #[test]
    fn bucket_bounds_for_people() {
        assert_eq!(le(Some(5.0)), "<= 5 ms");
        assert_eq!(le(None), "> 10 s");
    }
}
