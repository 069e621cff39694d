//! The result of `herald-bench latency`, as one JSON object (`--json`) or as text.

use serde::Serialize;

use crate::harness::report::{grouped, maybe};
use crate::harness::rss::human_bytes;
use crate::harness::run::Cleanup;
use crate::harness::stats::Summary;

/// The result, as one JSON object (`--json`) or as text.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LatencyReport {
    pub(super) command: &'static str,
    pub(super) run_id: String,
    pub(super) router_pid: u32,
    pub(super) gateway_pid: u32,
    /// Asked rate, publications per second.
    pub(super) rate: u64,
    pub(super) seconds: u64,
    pub(super) sessions: usize,
    pub(super) payload_bytes: usize,
    pub(super) published: u64,
    pub(super) confirmed: u64,
    pub(super) nacked: u64,
    /// From the first publication to the last.
    pub(super) publish_seconds: f64,
    /// `published / publish_seconds`.
    pub(super) achieved_rate: f64,
    /// How far behind its schedule the publisher was at worst.
    pub(super) max_publisher_lag_ms: f64,
    /// Distinct publications received on a session.
    pub(super) received: u64,
    pub(super) duplicates: u64,
    pub(super) foreign: u64,
    /// `published - received`.
    pub(super) missing: u64,
    /// Sessions the gateway closed (or that failed) before the end.
    pub(super) sessions_dropped: u64,
    /// AMQP publish to STOMP MESSAGE, over every received publication.
    pub(super) latency: Option<Summary>,
    /// From the time the schedule meant each publication to go out, to its STOMP MESSAGE: the
    /// same as `latency` plus the publisher's lateness, which a publisher held back by the
    /// broker (flow control) adds.
    pub(super) latency_from_schedule: Option<Summary>,
    /// From the first publication to the end of the drain: the CPU window.
    pub(super) window_seconds: f64,
    pub(super) router_cpu_seconds: Option<f64>,
    pub(super) gateway_cpu_seconds: Option<f64>,
    pub(super) bench_cpu_seconds: Option<f64>,
    pub(super) broker_cpu_seconds: Option<f64>,
    pub(super) router_rss_bytes: Option<u64>,
    pub(super) gateway_rss_bytes: Option<u64>,
    pub(super) gateway_peak_rss_bytes: Option<u64>,
    pub(super) cores: usize,
    pub(super) load_before: Option<f64>,
    pub(super) load_after: Option<f64>,
    pub(super) complete: bool,
    pub(super) problems: Vec<String>,
    pub(super) cleanup: Cleanup,
}

impl LatencyReport {
    pub(super) fn human(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "setup         router pid {}, edge gateway pid {}, {} sessions, run {}",
            self.router_pid, self.gateway_pid, self.sessions, self.run_id
        );
        let confirms = if self.confirmed == self.published && self.nacked == 0 {
            "all confirmed".to_owned()
        } else {
            format!("{} confirmed, {} nacked", self.confirmed, self.nacked)
        };
        let _ = writeln!(
            s,
            "published     {} x {} B at {}/s for {} s: took {:.2} s ({}/s), at most {:.1} ms behind schedule, {confirms}",
            self.published,
            self.payload_bytes,
            grouped(self.rate as f64),
            self.seconds,
            self.publish_seconds,
            grouped(self.achieved_rate),
            self.max_publisher_lag_ms,
        );
        let _ = writeln!(
            s,
            "received      {} of {}: {} missing, {} duplicates, {} sessions dropped",
            self.received, self.published, self.missing, self.duplicates, self.sessions_dropped
        );
        match &self.latency {
            Some(l) => {
                let _ = writeln!(s, "latency       {}", l.human());
            }
            None => {
                let _ = writeln!(s, "latency       no samples");
            }
        }
        if let Some(l) = &self.latency_from_schedule {
            let _ = writeln!(s, "from schedule {}", l.human());
        }
        let _ = writeln!(
            s,
            "CPU           over {:.1} s: router {} s, gateway {} s, bench {} s{} ({} cores)",
            self.window_seconds,
            maybe(self.router_cpu_seconds, 2),
            maybe(self.gateway_cpu_seconds, 2),
            maybe(self.bench_cpu_seconds, 2),
            self.broker_cpu_seconds
                .map_or_else(String::new, |b| format!(", broker {b:.2} s")),
            self.cores,
        );
        let mib = |b: Option<u64>| b.map_or_else(|| "?".into(), |b| human_bytes(b as f64));
        let _ = writeln!(
            s,
            "RSS           router {}, gateway {} ({} peak)",
            mib(self.router_rss_bytes),
            mib(self.gateway_rss_bytes),
            mib(self.gateway_peak_rss_bytes),
        );
        let _ = writeln!(
            s,
            "machine       load {} before, {} after",
            maybe(self.load_before, 2),
            maybe(self.load_after, 2),
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
