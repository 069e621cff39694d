//! The report of `herald-bench callbacks` (pure): every run's figures, each side's median and
//! spread, the ratio of Herald to BullMQ round by round (each round ran both, one after the
//! other), and issue 17's goals, met or not.

use std::fmt::Write as _;

use serde::Serialize;

use super::args::Scenario;
use super::outcome::RunOutcome;
use super::settings::{
    HERD_GOAL_MS, LATENESS_GOAL_P99_MS, LATENESS_RATIO_GOAL, Settings, Side, THROUGHPUT_GOAL,
    THROUGHPUT_RATIO_GOAL,
};
use crate::harness::report::{grouped, maybe};
use crate::harness::stats::human_ms;

/// A goal of the issue, and whether the runs met it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Goal {
    pub(crate) goal: String,
    pub(crate) met: bool,
}

/// Values of one figure: every run's, their median and spread.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Spread {
    pub(crate) values: Vec<f64>,
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
}

impl Spread {
    pub(crate) fn of(values: Vec<f64>) -> Option<Self> {
        let mut sorted = values.clone();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = match n {
            0 => return None,
            _ if n % 2 == 1 => sorted[n / 2],
            _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
        };
        Some(Self {
            median,
            min: sorted[0],
            max: sorted[n - 1],
            values,
        })
    }

    fn human(&self, format: impl Fn(f64) -> String) -> String {
        let all: Vec<String> = self.values.iter().map(|&v| format(v)).collect();
        format!(
            "median {} (min {}, max {}; runs: {})",
            format(self.median),
            format(self.min),
            format(self.max),
            all.join(", ")
        )
    }
}

/// The scenario's main figure of one side.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct SideSummary {
    pub(crate) side: Side,
    /// The main figure ([`figure_name`]).
    pub(crate) figure: Option<Spread>,
    /// Firing CPU-seconds of the system under test per 1,000 callbacks.
    pub(crate) cpu_per_1000: Option<Spread>,
}

/// Herald against BullMQ, round by round: above 1 when Herald does better.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Ratios {
    /// On the main figure (throughput: Herald / BullMQ; lateness and herd: BullMQ / Herald).
    pub(crate) figure: Option<Spread>,
    /// On CPU per callback (BullMQ / Herald).
    pub(crate) cpu: Option<Spread>,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CallbacksReport {
    pub(crate) command: &'static str,
    pub(crate) scenario: &'static str,
    pub(crate) target: &'static str,
    pub(crate) plan: String,
    pub(crate) count: u64,
    pub(crate) receiver_delay_ms: u64,
    pub(crate) payload_bytes: usize,
    pub(crate) herald_per_host_concurrency: usize,
    /// Whether Herald also delivered each to the browsers (`--with-browsers`).
    pub(crate) herald_browsers: bool,
    pub(crate) bullmq_concurrency: usize,
    pub(crate) bullmq_version: Option<String>,
    pub(crate) figure: &'static str,
    pub(crate) runs: Vec<RunOutcome>,
    pub(crate) summary: Vec<SideSummary>,
    pub(crate) ratios: Option<Ratios>,
    pub(crate) goals: Vec<Goal>,
    pub(crate) cores: usize,
    pub(crate) reference_ms: f64,
    pub(crate) load_before: Option<f64>,
    pub(crate) load_after: Option<f64>,
    pub(crate) complete: bool,
    pub(crate) problems: Vec<String>,
}

/// The main figure of a scenario, in words.
pub(crate) fn figure_name(scenario: Scenario) -> &'static str {
    match scenario {
        Scenario::Throughput => "callbacks per second, first arrival to last",
        Scenario::Lateness => "p99 lateness, ms (arrival minus due time)",
        Scenario::Herd => "last arrival after the due time, ms",
    }
}

/// The main figure of one run.
pub(crate) fn figure(scenario: Scenario, run: &RunOutcome) -> Option<f64> {
    match scenario {
        Scenario::Throughput => run.callbacks_per_second,
        Scenario::Lateness => run.p99_ms(),
        Scenario::Herd => run.last_after_due_ms(),
    }
}

/// How much better Herald did than BullMQ on the figure (above 1: better).
fn advantage(scenario: Scenario, herald: f64, bullmq: f64) -> Option<f64> {
    let (num, den) = match scenario {
        Scenario::Throughput => (herald, bullmq),
        Scenario::Lateness | Scenario::Herd => (bullmq, herald),
    };
    (den > 0.0 && num.is_finite()).then(|| num / den)
}

/// The summaries, the ratios and the goals of `runs`.
pub(crate) fn summarize(
    s: &Settings,
    runs: &[RunOutcome],
) -> (Vec<SideSummary>, Option<Ratios>, Vec<Goal>) {
    let sc = s.scenario;
    let of = |side: Side| runs.iter().filter(move |r| r.side == side);
    let summary: Vec<SideSummary> = [Side::Herald, Side::Bullmq]
        .into_iter()
        .filter(|&side| of(side).next().is_some())
        .map(|side| SideSummary {
            side,
            figure: Spread::of(of(side).filter_map(|r| figure(sc, r)).collect()),
            cpu_per_1000: Spread::of(of(side).map(|r| r.cpu.system_per_1000).collect()),
        })
        .collect();
    let pairs: Vec<(&RunOutcome, &RunOutcome)> = of(Side::Herald)
        .filter_map(|h| {
            of(Side::Bullmq)
                .find(|b| b.round == h.round)
                .map(|b| (h, b))
        })
        .collect();
    let ratios = (!pairs.is_empty()).then(|| Ratios {
        figure: Spread::of(
            pairs
                .iter()
                .filter_map(|(h, b)| advantage(sc, figure(sc, h)?, figure(sc, b)?))
                .collect(),
        ),
        cpu: Spread::of(
            pairs
                .iter()
                .filter(|(h, _)| h.cpu.system_per_1000 > 0.0)
                .map(|(h, b)| b.cpu.system_per_1000 / h.cpu.system_per_1000)
                .collect(),
        ),
    });
    let mut goals = Vec::new();
    let herald: Vec<&RunOutcome> = of(Side::Herald).collect();
    if !herald.is_empty() {
        let all_arrived = herald.iter().all(|r| r.delivery.missing == 0);
        let goal = match sc {
            Scenario::Throughput => {
                let median = summary[0].figure.as_ref().map_or(0.0, |f| f.median);
                Goal {
                    goal: format!(
                        ">= {}/s (median of Herald's runs), nothing lost",
                        grouped(THROUGHPUT_GOAL)
                    ),
                    met: median >= THROUGHPUT_GOAL && all_arrived,
                }
            }
            Scenario::Lateness => Goal {
                goal: format!(
                    "p99 <= {LATENESS_GOAL_P99_MS} ms at {}/s in every run, nothing lost",
                    grouped(s.rate as f64)
                ),
                met: all_arrived
                    && herald
                        .iter()
                        .all(|r| r.p99_ms().is_some_and(|p| p <= LATENESS_GOAL_P99_MS)),
            },
            Scenario::Herd => Goal {
                goal: format!(
                    "all {} made within {} s of their due time, in every run",
                    grouped(s.count as f64),
                    HERD_GOAL_MS / 1000
                ),
                met: all_arrived
                    && herald
                        .iter()
                        .all(|r| r.delivery.within_goal == Some(r.delivery.expected)),
            },
        };
        goals.push(goal);
    }
    let ratio_goal = match sc {
        Scenario::Throughput => Some(THROUGHPUT_RATIO_GOAL),
        Scenario::Lateness => Some(LATENESS_RATIO_GOAL),
        Scenario::Herd => None,
    };
    if let (Some(want), Some(r)) = (ratio_goal, &ratios) {
        goals.push(Goal {
            goal: format!("Herald at least {want}x better than BullMQ (median of the rounds)"),
            met: r.figure.as_ref().is_some_and(|f| f.median >= want),
        });
    }
    (summary, ratios, goals)
}

impl CallbacksReport {
    pub(crate) fn human(&self) -> String {
        let sc = match self.scenario {
            "throughput" => Scenario::Throughput,
            "lateness" => Scenario::Lateness,
            _ => Scenario::Herd,
        };
        let mut s = String::new();
        let _ = writeln!(
            s,
            "callbacks     {} on {}: {}",
            self.scenario, self.target, self.plan
        );
        let _ = writeln!(
            s,
            "receiver      hyper on 127.0.0.1, answers 200 after {} ms; {} B JSON bodies, signed",
            self.receiver_delay_ms, self.payload_bytes
        );
        let _ = writeln!(
            s,
            "peers         Herald ({} calls at once per host, {}); BullMQ {} (Worker concurrency {}), same Redis",
            self.herald_per_host_concurrency,
            if self.herald_browsers {
                "browsers too"
            } else {
                "callback-only"
            },
            self.bullmq_version.as_deref().unwrap_or("-"),
            self.bullmq_concurrency
        );
        for r in &self.runs {
            let _ = writeln!(s, "{}", run_line(r));
        }
        let fmt = |v: f64| match sc {
            Scenario::Throughput => format!("{}/s", grouped(v)),
            Scenario::Lateness | Scenario::Herd => human_ms(v * 1e6),
        };
        let _ = writeln!(s, "figure        {}", self.figure);
        for side in &self.summary {
            if let Some(f) = &side.figure {
                let _ = writeln!(s, "{:<13} {}", side.side.name(), f.human(fmt));
            }
            if let Some(c) = &side.cpu_per_1000 {
                let _ = writeln!(
                    s,
                    "{:<13} CPU per 1,000 callbacks (firing, bench excluded): {}",
                    "",
                    c.human(|v| format!("{v:.3} s"))
                );
            }
        }
        if let Some(r) = &self.ratios {
            if let Some(f) = &r.figure {
                let _ = writeln!(
                    s,
                    "ratio         Herald vs BullMQ round by round (above 1: Herald better): {}",
                    f.human(|v| format!("{v:.2}x"))
                );
            }
            if let Some(c) = &r.cpu {
                let _ = writeln!(
                    s,
                    "cpu ratio     BullMQ / Herald CPU per callback: {}",
                    c.human(|v| format!("{v:.2}x"))
                );
            }
        }
        for g in &self.goals {
            let _ = writeln!(
                s,
                "goal          {}: {}",
                g.goal,
                if g.met { "met" } else { "NOT met" }
            );
        }
        let _ = writeln!(
            s,
            "machine       {} cores, load {} before, {} after; reference sort {:.0} ms",
            self.cores,
            maybe(self.load_before, 2),
            maybe(self.load_after, 2),
            self.reference_ms
        );
        if !self.problems.is_empty() {
            let _ = writeln!(s, "problems      {}", self.problems.join("; "));
        }
        s
    }
}

/// One run in one line (two when it had problems).
fn run_line(r: &RunOutcome) -> String {
    let d = &r.delivery;
    let mut line = format!(
        "run {} {:<7} published {} in {:.1} s; received {} of {}, {} dup",
        r.round,
        r.side.name(),
        grouped(r.published.accepted as f64),
        r.published.seconds,
        d.received,
        d.expected,
        d.duplicates
    );
    if let (Some(span), Some(rate)) = (r.arrival_span_seconds, r.callbacks_per_second) {
        let _ = write!(line, "; first to last {span:.2} s: {}/s", grouped(rate));
    }
    if let Some(last) = r.last_after_due_ms() {
        let _ = write!(line, "; last {} after due", human_ms(last * 1e6));
    }
    if let Some(l) = &d.lateness {
        let _ = write!(
            line,
            "; lateness p50 {} p99 {} max {}",
            human_ms(l.p50_ns as f64),
            human_ms(l.p99_ns as f64),
            human_ms(l.max_ns as f64)
        );
    }
    let cpu: Vec<String> = r
        .cpu
        .firing_per_1000
        .iter()
        .map(|(n, v)| format!("{n} {v:.3}"))
        .collect();
    let _ = write!(line, "; CPU s/1,000: {}", cpu.join(", "));
    if !r.problems.is_empty() {
        let _ = write!(line, "\n              problems: {}", r.problems.join("; "));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_have_a_median() {
        let s = Spread::of(vec![3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        assert_eq!(s.values, [3.0, 1.0, 2.0], "in run order");
        assert_eq!(Spread::of(vec![1.0, 4.0]).unwrap().median, 2.5);
        assert_eq!(Spread::of(vec![]), None);
    }

    #[test]
    fn advantage_is_above_one_when_herald_does_better() {
        assert_eq!(advantage(Scenario::Throughput, 20.0, 10.0), Some(2.0));
        assert_eq!(advantage(Scenario::Lateness, 2.0, 30.0), Some(15.0));
        assert_eq!(advantage(Scenario::Herd, 1000.0, 500.0), Some(0.5));
        assert_eq!(advantage(Scenario::Lateness, 0.0, 30.0), None);
    }
}
