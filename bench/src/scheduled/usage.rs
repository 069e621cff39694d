//! The CPU time every process of a run used over a window: Herald's (router, gateway), the
//! stores' and broker's (Redis, RabbitMQ when its pid is known), and the bench's own (parent and
//! workers), read from `/proc/PID/stat` at both ends. On a 2-core machine these share 2
//! CPU-seconds per second, so the split says who limited a figure.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::Serialize;

use crate::harness::cpu;

/// The processes to watch: a name and its pids (the workers are several).
#[derive(Debug, Clone, Default)]
pub(crate) struct Usage {
    processes: Vec<(String, Vec<u32>)>,
}

/// One reading.
#[derive(Debug, Clone)]
pub(crate) struct Reading {
    at: Instant,
    seconds: BTreeMap<String, f64>,
}

/// CPU seconds per process over a window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Split {
    /// The window's length.
    pub(crate) seconds: f64,
    /// CPU seconds by process (one CPU-second is one core busy for a second).
    pub(crate) cpu_seconds: BTreeMap<String, f64>,
}

impl Usage {
    pub(crate) fn watch(&mut self, name: &str, pids: Vec<u32>) {
        if !pids.is_empty() {
            self.processes.push((name.to_owned(), pids));
        }
    }

    /// Every watched process's CPU time now (a process that cannot be read is left out).
    pub(crate) fn read(&self) -> Reading {
        let seconds = self
            .processes
            .iter()
            .filter_map(|(name, pids)| {
                let times: Vec<f64> = pids
                    .iter()
                    .filter_map(|&p| cpu::read_cpu(p).ok().map(|t| t.total()))
                    .collect();
                (!times.is_empty()).then(|| (name.clone(), times.iter().sum()))
            })
            .collect();
        Reading {
            at: Instant::now(),
            seconds,
        }
    }
}

impl Split {
    /// The CPU used between two readings.
    pub(crate) fn between(before: &Reading, after: &Reading) -> Self {
        let cpu_seconds = after
            .seconds
            .iter()
            .filter_map(|(name, a)| Some((name.clone(), (a - before.seconds.get(name)?).max(0.0))))
            .collect();
        Self {
            seconds: after.at.saturating_duration_since(before.at).as_secs_f64(),
            cpu_seconds,
        }
    }

    /// `router 1.20 s, redis 0.80 s, ...` over the window, busiest first.
    pub(crate) fn human(&self) -> String {
        let mut by_use: Vec<(&String, &f64)> = self.cpu_seconds.iter().collect();
        by_use.sort_by(|a, b| b.1.total_cmp(a.1));
        let parts: Vec<String> = by_use
            .iter()
            .map(|(name, s)| format!("{name} {s:.2} s"))
            .collect();
        format!("over {:.1} s: {}", self.seconds, parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_between_readings() {
        let mut u = Usage::default();
        u.watch("bench", vec![std::process::id()]);
        u.watch("nobody", vec![]);
        u.watch("gone", vec![u32::MAX]);
        let before = u.read();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let after = u.read();
        let split = Split::between(&before, &after);
        assert_eq!(split.cpu_seconds.keys().collect::<Vec<_>>(), ["bench"]);
        assert!(split.cpu_seconds["bench"] >= 0.0);
        assert!(split.seconds >= 0.0);
        let text = Split {
            seconds: 2.0,
            cpu_seconds: BTreeMap::from([("a".to_owned(), 0.5), ("b".to_owned(), 1.5)]),
        }
        .human();
        assert_eq!(text, "over 2.0 s: b 1.50 s, a 0.50 s");
    }
}
