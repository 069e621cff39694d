//! The report of `herald-bench publish`: each binary's figures round by round, their medians
//! and ranges, and the ratios of --gateway-bin to --baseline-gateway-bin per round.

use serde::Serialize;

use super::args::Body;
use crate::harness::report::grouped;
use crate::harness::stats::spread;

/// What was asked.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Settings {
    pub(crate) body: Body,
    pub(crate) batch: usize,
    pub(crate) notifications: usize,
    pub(crate) warmup: usize,
    pub(crate) connections: usize,
    pub(crate) depth: usize,
    pub(crate) payload: usize,
    pub(crate) users: usize,
    pub(crate) rounds: usize,
}

/// One binary in one round.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Run {
    /// `herald` (--gateway-bin) or `baseline`.
    pub(crate) label: &'static str,
    pub(crate) round: usize,
    /// How the gateway was started.
    pub(crate) command: String,
    /// The 1-minute load average before the run.
    pub(crate) load_before: Option<f64>,
    pub(crate) seconds: f64,
    pub(crate) requests: u64,
    pub(crate) notifications: u64,
    /// Requests answered other than `202` (then the run is incomplete).
    pub(crate) refused: u64,
    pub(crate) first_refusal: Option<String>,
    /// The gateway's CPU (user + system) over the measured requests.
    pub(crate) server_cpu_seconds: f64,
    pub(crate) cpu_us_per_notification: f64,
    pub(crate) cpu_us_per_request: f64,
    pub(crate) notifications_per_second: f64,
    /// How the gateway ended.
    pub(crate) gateway_stopped: String,
}

/// Median and range of one figure over the rounds.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Spread {
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
}

impl Spread {
    pub(crate) fn of(values: &[f64]) -> Option<Self> {
        let (median, min, max) = spread(values)?;
        Some(Spread { median, min, max })
    }

    fn human(&self, decimals: usize) -> String {
        format!(
            "{:.decimals$} ({:.decimals$}-{:.decimals$})",
            self.median, self.min, self.max
        )
    }
}

/// One binary over the rounds.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Summary {
    pub(crate) label: &'static str,
    pub(crate) cpu_us_per_notification: Option<Spread>,
    pub(crate) notifications_per_second: Option<Spread>,
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Report {
    pub(crate) settings: Settings,
    pub(crate) runs: Vec<Run>,
    pub(crate) summaries: Vec<Summary>,
    /// Per round, herald's CPU per notification over the baseline's (with a baseline).
    pub(crate) cpu_ratios: Vec<f64>,
    pub(crate) cpu_ratio: Option<Spread>,
    /// Every run finished with every request accepted.
    pub(crate) complete: bool,
    /// Why a run is missing or incomplete.
    pub(crate) problems: Vec<String>,
}

impl Report {
    /// Fills in the summaries and ratios from the runs.
    pub(crate) fn new(settings: Settings, runs: Vec<Run>, problems: Vec<String>) -> Self {
        let mut labels: Vec<&'static str> = runs.iter().map(|r| r.label).collect();
        labels.sort_unstable();
        labels.dedup();
        let summaries = labels
            .iter()
            .map(|&label| {
                let of = |f: fn(&Run) -> f64| {
                    let v: Vec<f64> = runs.iter().filter(|r| r.label == label).map(f).collect();
                    Spread::of(&v)
                };
                Summary {
                    label,
                    cpu_us_per_notification: of(|r| r.cpu_us_per_notification),
                    notifications_per_second: of(|r| r.notifications_per_second),
                }
            })
            .collect();
        let cpu_ratios: Vec<f64> = (1..=settings.rounds)
            .filter_map(|round| {
                let of = |label| {
                    runs.iter()
                        .find(|r| r.round == round && r.label == label)
                        .map(|r| r.cpu_us_per_notification)
                };
                Some(of("herald")? / of("baseline")?)
            })
            .collect();
        let complete = problems.is_empty() && runs.iter().all(|r| r.refused == 0);
        Report {
            cpu_ratio: Spread::of(&cpu_ratios),
            settings,
            runs,
            summaries,
            cpu_ratios,
            complete,
            problems,
        }
    }

    pub(crate) fn human(&self) -> String {
        let s = &self.settings;
        let mut out = format!(
            "herald-bench publish: {} body, {} notification(s) per request, {} connection(s), {} in flight each, {} B payloads, to {} users nobody holds\n\n",
            match s.body {
                Body::Raw => "raw",
                Body::Json => "JSON",
            },
            s.batch,
            s.connections,
            s.depth,
            s.payload,
            s.users
        );
        out.push_str("| binary | round | notifications/s | server CPU per notification | per request | load before |\n|---|---|---|---|---|---|\n");
        for r in &self.runs {
            out.push_str(&format!(
                "| {} | {} | {}/s | {:.2} µs | {:.2} µs | {} |\n",
                r.label,
                r.round,
                grouped(r.notifications_per_second),
                r.cpu_us_per_notification,
                r.cpu_us_per_request,
                r.load_before.map_or("?".into(), |l| format!("{l:.2}"))
            ));
        }
        out.push('\n');
        for sum in &self.summaries {
            out.push_str(&format!(
                "{}: CPU per notification {} µs, {} notifications/s (median, range)\n",
                sum.label,
                sum.cpu_us_per_notification
                    .map_or("?".into(), |x| x.human(2)),
                sum.notifications_per_second
                    .map_or("?".into(), |x| x.human(0)),
            ));
        }
        if let Some(ratio) = self.cpu_ratio {
            out.push_str(&format!(
                "herald / baseline, CPU per notification: {} over {} round(s)\n",
                ratio.human(3),
                self.cpu_ratios.len()
            ));
        }
        for r in self.runs.iter().filter(|r| r.refused > 0) {
            out.push_str(&format!(
                "{} round {}: {} request(s) refused, the first: {}\n",
                r.label,
                r.round,
                r.refused,
                r.first_refusal.as_deref().unwrap_or("?")
            ));
        }
        for p in &self.problems {
            out.push_str(&format!("problem: {p}\n"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(label: &'static str, round: usize, cpu: f64) -> Run {
        Run {
            label,
            round,
            command: String::new(),
            load_before: None,
            seconds: 1.0,
            requests: 10,
            notifications: 10,
            refused: 0,
            first_refusal: None,
            server_cpu_seconds: cpu * 10e-6,
            cpu_us_per_notification: cpu,
            cpu_us_per_request: cpu,
            notifications_per_second: 10.0,
            gateway_stopped: String::new(),
        }
    }

    fn settings(rounds: usize) -> Settings {
        Settings {
            body: Body::Raw,
            batch: 1,
            notifications: 10,
            warmup: 0,
            connections: 1,
            depth: 1,
            payload: 1,
            users: 1,
            rounds,
        }
    }

    #[test]
    fn ratios_pair_the_binaries_round_by_round() {
        let runs = vec![
            run("herald", 1, 9.0),
            run("baseline", 1, 10.0),
            run("baseline", 2, 20.0),
            run("herald", 2, 10.0),
        ];
        let r = Report::new(settings(2), runs, Vec::new());
        assert_eq!(r.cpu_ratios, [0.9, 0.5]);
        let spread = r.cpu_ratio.unwrap();
        assert_eq!((spread.min, spread.median, spread.max), (0.5, 0.7, 0.9));
        assert_eq!(r.summaries.len(), 2);
        assert!(r.complete);
    }

    #[test]
    fn a_refusal_or_a_problem_makes_the_run_incomplete() {
        let mut refused = run("herald", 1, 1.0);
        refused.refused = 1;
        assert!(!Report::new(settings(1), vec![refused], Vec::new()).complete);
        let r = Report::new(settings(1), vec![run("herald", 1, 1.0)], vec!["x".into()]);
        assert!(!r.complete);
        assert!(r.cpu_ratios.is_empty(), "no baseline, no ratio");
    }
}
