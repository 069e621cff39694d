//! The result of `herald-bench router-throughput`, as one JSON object (`--json`) or as text,
//! and the router's context switches it reports.

use serde::Serialize;

use crate::harness::cpu::CpuTime;
use crate::harness::report::{grouped, maybe};
use crate::harness::rss::human_bytes;
use crate::harness::run::Cleanup;

/// The result, as one JSON object (`--json`) or as text.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ThroughputReport {
    pub(super) command: &'static str,
    pub(super) run_id: String,
    pub(super) router_pid: u32,
    pub(super) router_prefetch: u16,
    /// Published before the router started (the clock starts with the router).
    pub(super) prefill: bool,
    /// Transient publications and a non-durable edges queue.
    pub(super) transient: bool,
    pub(super) messages: u64,
    pub(super) payload_bytes: usize,
    pub(super) publishers: usize,
    pub(super) batch: usize,
    pub(super) confirm_window: usize,
    /// Publications handed to the broker.
    pub(super) published: u64,
    /// Of which the broker confirmed (acked).
    pub(super) confirmed: u64,
    pub(super) nacked: u64,
    pub(super) confirm_failures: u64,
    /// From the first publish to the last confirm.
    pub(super) publish_seconds: Option<f64>,
    /// `confirmed / publish_seconds`.
    pub(super) publish_rate: Option<f64>,
    /// Distinct publications that reached the edges queue.
    pub(super) forwarded: u64,
    pub(super) duplicates: u64,
    pub(super) foreign: u64,
    /// From the first publish (with --prefill: the router's start) to the last forward.
    pub(super) forward_seconds: Option<f64>,
    /// `messages / forward_seconds`, when all were forwarded.
    pub(super) forward_rate: Option<f64>,
    /// The router's CPU time over the same window.
    pub(super) router_cpu: CpuTime,
    pub(super) router_cpu_seconds: f64,
    /// `messages / router_cpu_seconds`: publications per CPU-second (one core for one second).
    pub(super) per_cpu_second: Option<f64>,
    /// The router's context switches over the window (its threads alive at the end).
    pub(super) router_context_switches: ContextSwitches,
    /// `router_context_switches / messages`, when all were forwarded.
    pub(super) context_switches_per_publication: Option<f64>,
    pub(super) router_rss_bytes: u64,
    pub(super) router_peak_rss_bytes: u64,
    /// CPU the bench itself used over the window (publishers and consumer).
    pub(super) bench_cpu_seconds: f64,
    /// CPU the broker used over the window (with --broker-pid).
    pub(super) broker_cpu_seconds: Option<f64>,
    /// Publications waiting in the dead-letter queue at the end (should be 0).
    pub(super) dead_letters: Option<u32>,
    pub(super) cores: usize,
    pub(super) load_before: Option<f64>,
    pub(super) load_after: Option<f64>,
    pub(super) complete: bool,
    pub(super) problems: Vec<String>,
    pub(super) cleanup: Cleanup,
}

/// Context switches of a process's threads: the sums of `voluntary_ctxt_switches` (the thread
/// waited: a lock, a channel, the socket) and `nonvoluntary_ctxt_switches` (it was preempted)
/// over `/proc/PID/task/*/status`. Threads that ended are not counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub(crate) struct ContextSwitches {
    pub(super) voluntary: u64,
    pub(super) involuntary: u64,
}

impl ContextSwitches {
    pub(super) fn total(&self) -> u64 {
        self.voluntary + self.involuntary
    }

    /// The switches between `earlier` and `self` (0 for a count that went down: a thread
    /// ended).
    pub(super) fn since(&self, earlier: &ContextSwitches) -> ContextSwitches {
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
pub(super) fn read_context_switches(pid: u32) -> std::io::Result<ContextSwitches> {
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
    /// The text report: the traffic (published, forwarded), then what it cost the router and
    /// the machine, and what went wrong.
    pub(super) fn human(&self) -> String {
        let mut s = String::new();
        self.traffic_lines(&mut s);
        self.cost_lines(&mut s);
        s
    }

    /// `router`, `published`, `forwarded`.
    fn traffic_lines(&self, s: &mut String) {
        use std::fmt::Write as _;
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
    }

    /// `router CPU`, `router ctxsw`, `router RSS`, `machine`, `dead letters`, `problem`,
    /// `cleanup`.
    fn cost_lines(&self, s: &mut String) {
        use std::fmt::Write as _;
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
}
