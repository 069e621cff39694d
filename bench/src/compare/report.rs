//! The comparison's result: every run as measured (JSON), and a Markdown table per scenario
//! with each system's figures (median and range over the rounds) and Herald's ratio to each
//! peer, computed round by round (the two runs of a round were measured one after the other,
//! so the machine's drift between hours cancels out of the ratio).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::audience::Audience;
use super::chart::{Chart, series_of};
use super::idle::IdleRun;
use super::large::LargeRun;
use super::ramp::RampStep;
use super::system::System;
use crate::harness::report::grouped;
use crate::harness::stats::spread;

/// The whole comparison.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct CompareReport {
    pub(crate) command: String,
    /// Seconds since the epoch when the run began.
    pub(crate) started_unix: u64,
    pub(crate) cores: usize,
    pub(crate) load_before: Option<f64>,
    pub(crate) load_after: Option<f64>,
    pub(crate) rounds: usize,
    pub(crate) systems: Vec<SystemInfo>,
    #[serde(default)]
    pub(crate) idle: Vec<IdleRun>,
    /// Every step of every ramp (broadcast, per user).
    #[serde(default)]
    pub(crate) ramps: Vec<RampStep>,
    /// Every large-message run.
    #[serde(default)]
    pub(crate) large: Vec<LargeRun>,
    /// Runs that could not be measured, with why.
    pub(crate) errors: Vec<String>,
    /// Every way the comparison is not like for like.
    pub(crate) unfairness: Vec<String>,
}

/// One system as run.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct SystemInfo {
    pub(crate) system: System,
    pub(crate) version: String,
    pub(crate) notes: String,
}

/// Which way a figure is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Better {
    Lower,
    Higher,
}

/// How a figure's values read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    Bytes,
    PerSecond,
    Micros,
    Seconds,
    NanosAsMillis,
    Count,
    /// CPU-seconds per second.
    Cores,
}

impl Unit {
    pub(crate) fn format(self, v: f64) -> String {
        match self {
            Unit::Bytes => format!("{} B", grouped(v)),
            Unit::PerSecond => format!("{}/s", grouped(v)),
            Unit::Micros => format!("{} µs", grouped(v)),
            Unit::Seconds => format!("{v:.2} s"),
            Unit::NanosAsMillis => format!("{:.1} ms", v / 1e6),
            Unit::Count => grouped(v),
            Unit::Cores => format!("{v:.2}"),
        }
    }
}

/// One line of a table: a figure's value per system and round.
#[derive(Debug, Clone)]
pub(crate) struct Figure {
    pub(crate) name: String,
    pub(crate) unit: Unit,
    pub(crate) better: Better,
    pub(crate) values: BTreeMap<System, BTreeMap<usize, f64>>,
}

impl Figure {
    fn new(name: String, unit: Unit, better: Better) -> Self {
        Self {
            name,
            unit,
            better,
            values: BTreeMap::new(),
        }
    }

    fn add(&mut self, system: System, round: usize, value: f64) {
        self.values.entry(system).or_default().insert(round, value);
    }

    /// Herald's value over `peer`'s, per round both have (pure).
    pub(crate) fn ratios(&self, peer: System) -> Vec<f64> {
        let (Some(herald), Some(other)) =
            (self.values.get(&System::Herald), self.values.get(&peer))
        else {
            return Vec::new();
        };
        herald
            .iter()
            .filter_map(|(round, h)| other.get(round).map(|p| (h, p)))
            .filter(|&(_, &p)| p != 0.0)
            .map(|(h, p)| h / p)
            .collect()
    }
}

fn cell(values: &[f64], format: impl Fn(f64) -> String) -> String {
    match spread(values) {
        None => "-".to_owned(),
        Some((median, lo, hi)) if values.len() == 1 || lo == hi => format(median),
        Some((median, lo, hi)) => format!("{} ({}–{})", format(median), format(lo), format(hi)),
    }
}

/// The two parts of a server's CPU figure `what` ("per session opened, ..."): its own code
/// (`utime`) and the kernel on its behalf (`stime`). On loopback the kernel's part holds the
/// receiving socket's TCP input too, so it is what any server pays for the same writes.
fn split_figures(what: String, unit: Unit) -> (Figure, Figure) {
    (
        Figure::new(
            format!("server CPU in its own code (user) {what}"),
            unit,
            Better::Lower,
        ),
        Figure::new(
            format!("server CPU in the kernel (system) {what}"),
            unit,
            Better::Lower,
        ),
    )
}

/// The idle scenario's figures, one set per session count.
pub(crate) fn idle_figures(runs: &[IdleRun]) -> Vec<Figure> {
    let mut counts: Vec<usize> = runs.iter().map(|r| r.sessions).collect();
    counts.sort_unstable();
    counts.dedup();
    let mut figures = Vec::new();
    for n in counts {
        let of_n = || runs.iter().filter(move |r| r.sessions == n);
        let n_text = grouped(n as f64);
        let mut memory = Figure::new(
            format!("memory per idle session, {n_text} sessions (PSS)"),
            Unit::Bytes,
            Better::Lower,
        );
        let mut rate = Figure::new(
            format!("connect rate, {n_text} sessions"),
            Unit::PerSecond,
            Better::Higher,
        );
        let mut cpu = Figure::new(
            format!("server CPU per session opened, {n_text} sessions"),
            Unit::Micros,
            Better::Lower,
        );
        let (mut own, mut kernel) = split_figures(
            format!("per session opened, {n_text} sessions"),
            Unit::Micros,
        );
        let mut failed = Figure::new(
            format!("sessions failed, {n_text} sessions"),
            Unit::Count,
            Better::Lower,
        );
        for r in of_n() {
            memory.add(r.system, r.round, r.bytes_per_session);
            rate.add(r.system, r.round, r.connect_rate);
            cpu.add(r.system, r.round, r.cpu_per_session_us);
            // Runs from before the bench split the CPU have no kernel part.
            if let Some(k) = r.kernel_cpu_per_session_us {
                own.add(r.system, r.round, r.cpu_per_session_us - k);
                kernel.add(r.system, r.round, k);
            }
            failed.add(r.system, r.round, r.failed as f64);
        }
        figures.extend([memory, rate, cpu]);
        figures.extend([own, kernel].into_iter().filter(|f| !f.values.is_empty()));
        figures.push(failed);
    }
    figures
}

/// A ramp's figures (the steps of one audience), one set per rate, then the highest rate
/// each run delivered with nothing lost.
pub(crate) fn ramp_figures(steps: &[RampStep]) -> Vec<Figure> {
    let mut rates: Vec<u64> = steps.iter().map(|s| s.rate).collect();
    rates.sort_unstable();
    rates.dedup();
    let mut figures = Vec::new();
    for rate in rates {
        let at = format!("at {} deliveries/s", grouped(rate as f64));
        let mut cpu = Figure::new(
            format!("server CPU per 100,000 deliveries {at}"),
            Unit::Seconds,
            Better::Lower,
        );
        let mut p50 = Figure::new(
            format!("latency p50 {at}"),
            Unit::NanosAsMillis,
            Better::Lower,
        );
        let mut p99 = Figure::new(
            format!("latency p99 {at}"),
            Unit::NanosAsMillis,
            Better::Lower,
        );
        let mut max = Figure::new(
            format!("latency max {at}"),
            Unit::NanosAsMillis,
            Better::Lower,
        );
        let mut delivered = Figure::new(
            format!("deliveries/s reached {at}"),
            Unit::PerSecond,
            Better::Higher,
        );
        let mut lost = Figure::new(format!("deliveries lost {at}"), Unit::Count, Better::Lower);
        let (mut own, mut kernel) =
            split_figures(format!("per 100,000 deliveries {at}"), Unit::Seconds);
        let mut busy = Figure::new(
            format!("cores busy, server and bench together, {at}"),
            Unit::Cores,
            Better::Lower,
        );
        for s in steps.iter().filter(|s| s.rate == rate) {
            // Nothing delivered: no cost per delivery to speak of.
            if s.delivered > 0 {
                cpu.add(s.system, s.round, s.cpu_per_100k_deliveries);
                if let Some(k) = s.server_kernel_cpu_seconds {
                    let per_100k = 100_000.0 / s.delivered as f64;
                    own.add(s.system, s.round, (s.server_cpu_seconds - k) * per_100k);
                    kernel.add(s.system, s.round, k * per_100k);
                }
            }
            if let Some(l) = s.latency {
                p50.add(s.system, s.round, l.p50_ns as f64);
                p99.add(s.system, s.round, l.p99_ns as f64);
                max.add(s.system, s.round, l.max_ns as f64);
            }
            delivered.add(s.system, s.round, s.delivered_rate);
            lost.add(s.system, s.round, s.lost as f64);
            // Runs from before the bench read its own CPU have none.
            if s.bench_cpu_seconds > 0.0 && s.seconds > 0.0 {
                busy.add(
                    s.system,
                    s.round,
                    (s.server_cpu_seconds + s.bench_cpu_seconds) / s.seconds,
                );
            }
        }
        figures.push(cpu);
        figures.extend([own, kernel].into_iter().filter(|f| !f.values.is_empty()));
        figures.extend([p50, p99, max, delivered, lost]);
        if !busy.values.is_empty() {
            figures.push(busy);
        }
    }
    let mut best = Figure::new(
        "highest deliveries/s with nothing lost (over the ramp)".to_owned(),
        Unit::PerSecond,
        Better::Higher,
    );
    for s in steps.iter().filter(|s| s.lost == 0 && s.refused == 0) {
        let entry = best
            .values
            .entry(s.system)
            .or_default()
            .entry(s.round)
            .or_insert(0.0);
        *entry = entry.max(s.delivered_rate);
    }
    figures.push(best);
    figures
}

/// The large-message scenario's figures.
pub(crate) fn large_figures(runs: &[LargeRun]) -> Vec<Figure> {
    let mut growth = Figure::new(
        "peak memory growth while delivering it (PSS)".to_owned(),
        Unit::Bytes,
        Better::Lower,
    );
    let mut time = Figure::new(
        "time until every session has it intact".to_owned(),
        Unit::Seconds,
        Better::Lower,
    );
    let mut missing = Figure::new(
        "sessions without it intact (lost or damaged)".to_owned(),
        Unit::Count,
        Better::Lower,
    );
    for r in runs {
        growth.add(r.system, r.round, r.peak_growth_bytes as f64);
        time.add(r.system, r.round, r.seconds_until_all);
        missing.add(r.system, r.round, (r.lost + r.damaged) as f64);
    }
    vec![growth, time, missing]
}

/// One Markdown table: a row per figure, a column per system, then Herald's ratio to each peer.
pub(crate) fn table(figures: &[Figure], systems: &[System]) -> String {
    let peers: Vec<System> = systems
        .iter()
        .copied()
        .filter(|&s| s != System::Herald)
        .collect();
    let mut out = String::from("| figure |");
    for s in systems {
        let _ = write!(out, " {} |", s.name());
    }
    for p in &peers {
        let _ = write!(out, " herald / {} |", p.name());
    }
    out.push_str("\n|---|");
    for _ in systems.iter().chain(&peers) {
        out.push_str("---|");
    }
    out.push('\n');
    for f in figures {
        let better = match f.better {
            Better::Lower => "lower is better",
            Better::Higher => "higher is better",
        };
        let _ = write!(out, "| {} ({better}) |", f.name);
        for s in systems {
            let values: Vec<f64> = f
                .values
                .get(s)
                .map(|v| v.values().copied().collect())
                .unwrap_or_default();
            let _ = write!(out, " {} |", cell(&values, |v| f.unit.format(v)));
        }
        for &p in &peers {
            let ratios = f.ratios(p);
            let _ = write!(out, " {} |", cell(&ratios, |v| format!("{v:.2}")));
        }
        out.push('\n');
    }
    out
}

impl CompareReport {
    /// The charts: `(file name, SVG)` for each that has points: latency p50 and p99 and CPU
    /// per delivery against the rate, per ramp; memory and CPU per session against the count.
    pub(crate) fn charts(&self) -> Vec<(String, String)> {
        let mut charts = Vec::new();
        for audience in [Audience::Broadcast, Audience::PerUser] {
            let steps = || self.ramps.iter().filter(move |s| s.audience == audience);
            let name = audience.name();
            let x_label = "deliveries per second asked for".to_owned();
            let latency = |pick: fn(&crate::harness::stats::Summary) -> u64| {
                series_of(steps().filter_map(move |s| {
                    s.latency
                        .map(|l| (s.system, s.rate as f64, pick(&l) as f64 / 1e6))
                }))
            };
            charts.push((
                format!("{name}-latency-p50.svg"),
                Chart {
                    title: format!("{name}: latency p50, publish to receipt"),
                    x_label: x_label.clone(),
                    y_label: "ms".into(),
                    series: latency(|l| l.p50_ns),
                },
            ));
            charts.push((
                format!("{name}-latency-p99.svg"),
                Chart {
                    title: format!("{name}: latency p99, publish to receipt"),
                    x_label: x_label.clone(),
                    y_label: "ms".into(),
                    series: latency(|l| l.p99_ns),
                },
            ));
            charts.push((
                format!("{name}-cpu.svg"),
                Chart {
                    title: format!("{name}: server CPU per 100,000 deliveries"),
                    x_label,
                    y_label: "CPU seconds".into(),
                    series: series_of(
                        steps()
                            .filter(|s| s.delivered > 0)
                            .map(|s| (s.system, s.rate as f64, s.cpu_per_100k_deliveries)),
                    ),
                },
            ));
        }
        charts.push((
            "idle-memory.svg".into(),
            Chart {
                title: "memory per idle session (PSS)".into(),
                x_label: "sessions".into(),
                y_label: "bytes".into(),
                series: series_of(
                    self.idle
                        .iter()
                        .map(|r| (r.system, r.sessions as f64, r.bytes_per_session)),
                ),
            },
        ));
        charts.push((
            "idle-cpu.svg".into(),
            Chart {
                title: "server CPU per session opened".into(),
                x_label: "sessions".into(),
                y_label: "µs".into(),
                series: series_of(
                    self.idle
                        .iter()
                        .map(|r| (r.system, r.sessions as f64, r.cpu_per_session_us)),
                ),
            },
        ));
        charts
            .into_iter()
            .filter_map(|(file, chart)| chart.svg().map(|svg| (file, svg)))
            .collect()
    }

    /// The systems in the report's order (Herald first).
    fn system_list(&self) -> Vec<System> {
        self.systems.iter().map(|s| s.system).collect()
    }

    /// The Markdown report.
    pub(crate) fn markdown(&self) -> String {
        let systems = self.system_list();
        let mut out = String::from("# herald-bench compare\n\n");
        let _ = writeln!(
            out,
            "{} round(s), each system once per round, one after another; {} cores; load average \
             {} before, {} after. Each cell: the median over the rounds (the range in \
             brackets); a ratio is Herald's figure over the peer's, per round.\n",
            self.rounds,
            self.cores,
            self.load_before.map_or("?".into(), |l| format!("{l:.2}")),
            self.load_after.map_or("?".into(), |l| format!("{l:.2}")),
        );
        out.push_str("| system | version | how it ran |\n|---|---|---|\n");
        for s in &self.systems {
            let _ = writeln!(out, "| {} | {} | {} |", s.system.name(), s.version, s.notes);
        }
        if !self.idle.is_empty() {
            out.push_str("\n## Idle sessions\n\n");
            out.push_str(&table(&idle_figures(&self.idle), &systems));
        }
        for audience in [Audience::Broadcast, Audience::PerUser] {
            let steps: Vec<RampStep> = self
                .ramps
                .iter()
                .filter(|s| s.audience == audience)
                .cloned()
                .collect();
            let Some(first) = steps.first() else {
                continue;
            };
            let title = match audience {
                Audience::Broadcast => "Broadcast to",
                Audience::PerUser => "One user at a time, over",
            };
            let _ = write!(
                out,
                "\n## {title} {} sessions\n\n",
                grouped(first.sessions as f64)
            );
            out.push_str(&table(&ramp_figures(&steps), &systems));
        }
        if let Some(first) = self.large.first() {
            let _ = write!(
                out,
                "\n## One message of {} to {} sessions\n\n",
                Unit::Bytes.format(first.bytes as f64),
                grouped(first.sessions as f64)
            );
            out.push_str(&table(&large_figures(&self.large), &systems));
        }
        let charts = self.charts();
        if !charts.is_empty() {
            out.push_str(
                "\n## Charts\n\nMedians over the rounds (files beside this one with `--out`).\n\n",
            );
            for (file, _) in &charts {
                let _ = writeln!(out, "![{file}]({file})");
            }
        }
        if !self.errors.is_empty() {
            out.push_str("\n## Runs that failed\n\n");
            for e in &self.errors {
                let _ = writeln!(out, "- {e}");
            }
        }
        out.push_str("\n## Not like for like\n\n");
        for u in &self.unfairness {
            let _ = writeln!(out, "- {u}");
        }
        out.push_str("\n## Commands\n\n");
        let mut commands: BTreeMap<System, &str> = BTreeMap::new();
        for r in &self.idle {
            commands.insert(r.system, &r.server_command);
        }
        for s in &self.ramps {
            commands.insert(s.system, &s.server_command);
        }
        for r in &self.large {
            commands.insert(r.system, &r.server_command);
        }
        for (system, command) in commands {
            let _ = writeln!(out, "- {}: `{command}`", system.name());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_pair_runs_of_the_same_round() {
        let mut f = Figure::new("x".into(), Unit::Bytes, Better::Lower);
        f.add(System::Herald, 0, 100.0);
        f.add(System::Herald, 1, 300.0);
        f.add(System::Herald, 2, 50.0);
        f.add(System::Nchan, 0, 200.0);
        f.add(System::Nchan, 1, 300.0);
        // Round 2 has no Nchan figure; a zero divisor is left out.
        assert_eq!(f.ratios(System::Nchan), vec![0.5, 1.0]);
        let table = table(&[f], &[System::Herald, System::Nchan]);
        assert!(
            table.contains("| x (lower is better) | 100 B (50 B–300 B) | 250 B (200 B–300 B) | 0.75 (0.50–1.00) |"),
            "{table}"
        );
        assert!(
            table.starts_with("| figure | herald | nchan | herald / nchan |\n|---|---|---|---|\n")
        );
    }

    #[test]
    fn units_read_as_people_write_them() {
        assert_eq!(Unit::Bytes.format(3551.4), "3,551 B");
        assert_eq!(Unit::PerSecond.format(6415.0), "6,415/s");
        assert_eq!(Unit::Micros.format(154.2), "154 µs");
        assert_eq!(Unit::Micros.format(3400.0), "3,400 µs");
        assert_eq!(Unit::Seconds.format(2.041), "2.04 s");
        assert_eq!(Unit::NanosAsMillis.format(45_120_000.0), "45.1 ms");
        assert_eq!(Unit::Cores.format(1.957), "1.96");
    }

    fn step(system: System, bench_cpu_seconds: f64) -> RampStep {
        RampStep {
            audience: Audience::PerUser,
            system,
            round: 0,
            sessions: 10,
            rate: 1000,
            publications: 1000,
            refused: 0,
            expected: 1000,
            delivered: 1000,
            lost: 0,
            seconds: 2.0,
            delivered_rate: 500.0,
            max_publish_lag_ms: 0.0,
            server_cpu_seconds: 1.5,
            server_kernel_cpu_seconds: None,
            bench_cpu_seconds,
            cpu_per_100k_deliveries: 150.0,
            latency: None,
            load_before: None,
            server_command: String::new(),
        }
    }

    #[test]
    fn cores_busy_adds_the_bench_to_the_server_when_it_was_read() {
        let figures = ramp_figures(&[step(System::Herald, 2.0), step(System::Nchan, 1.0)]);
        let busy = figures
            .iter()
            .find(|f| f.name.starts_with("cores busy"))
            .expect("a cores-busy figure");
        assert_eq!(busy.values[&System::Herald][&0], 1.75);
        assert_eq!(busy.values[&System::Nchan][&0], 1.25);
        // A run recorded before the bench read its own CPU has no such figure.
        let old = ramp_figures(&[step(System::Herald, 0.0)]);
        assert!(!old.iter().any(|f| f.name.starts_with("cores busy")));
    }

    fn idle_run(system: System, kernel_cpu_per_session_us: Option<f64>) -> IdleRun {
        IdleRun {
            system,
            round: 0,
            sessions: 2000,
            opened: 2000,
            failed: 0,
            failures: Default::default(),
            connect_seconds: 0.2,
            connect_rate: 10_000.0,
            server_cpu_seconds: 0.1,
            cpu_per_session_us: 50.0,
            kernel_cpu_per_session_us,
            pss_before_bytes: 0,
            pss_after_bytes: 0,
            pss_settled: true,
            bytes_per_session: 4000.0,
            server_processes: 1,
            load_before: None,
            server_command: String::new(),
        }
    }

    #[test]
    fn a_session_s_cpu_is_split_when_it_was_read_even_as_zero() {
        let figures = idle_figures(&[
            idle_run(System::Herald, Some(30.0)),
            idle_run(System::Nchan, Some(0.0)),
        ]);
        let value = |part: &str, system: System| {
            figures
                .iter()
                .find(|f| f.name.starts_with(&format!("server CPU in {part}")))
                .unwrap_or_else(|| panic!("a figure for {part}"))
                .values[&system][&0]
        };
        assert_eq!(value("its own code", System::Herald), 20.0);
        assert_eq!(value("the kernel", System::Herald), 30.0);
        assert_eq!(value("its own code", System::Nchan), 50.0);
        assert_eq!(value("the kernel", System::Nchan), 0.0);
        // Runs from before the split: the total only.
        let old = idle_figures(&[idle_run(System::Herald, None)]);
        assert!(!old.iter().any(|f| f.name.contains("in the kernel")));
        assert!(
            old.iter()
                .any(|f| f.name.starts_with("server CPU per session"))
        );
    }

    #[test]
    fn server_cpu_is_split_into_its_own_code_and_the_kernel_when_it_was_read() {
        let mut herald = step(System::Herald, 1.0);
        herald.server_kernel_cpu_seconds = Some(1.0);
        let mut nchan = step(System::Nchan, 1.0);
        nchan.server_kernel_cpu_seconds = Some(1.2);
        let figures = ramp_figures(&[herald, nchan]);
        let value = |prefix: &str, system: System| {
            figures
                .iter()
                .find(|f| f.name.starts_with(prefix))
                .unwrap_or_else(|| panic!("a figure named {prefix}..."))
                .values[&system][&0]
        };
        // 1.5 s of CPU over 1,000 deliveries: 150 s per 100,000, of it 100 s in the kernel.
        let own = "server CPU in its own code (user) per 100,000 deliveries at 1,000";
        let kernel = "server CPU in the kernel (system) per 100,000 deliveries at 1,000";
        assert!((value(own, System::Herald) - 50.0).abs() < 1e-9);
        assert!((value(kernel, System::Herald) - 100.0).abs() < 1e-9);
        assert!((value(own, System::Nchan) - 30.0).abs() < 1e-9);
        assert!((value(kernel, System::Nchan) - 120.0).abs() < 1e-9);
        // A run whose kernel part was read as zero (10 ms ticks) still counts.
        let mut none_in_kernel = step(System::Herald, 1.0);
        none_in_kernel.server_kernel_cpu_seconds = Some(0.0);
        let zero = ramp_figures(&[none_in_kernel]);
        let kernel_figure = zero
            .iter()
            .find(|f| f.name.contains("in the kernel"))
            .expect("a kernel figure");
        assert_eq!(kernel_figure.values[&System::Herald][&0], 0.0);
        // Runs from before the split: the total only.
        let old = ramp_figures(&[step(System::Herald, 1.0)]);
        assert!(!old.iter().any(|f| f.name.contains("in the kernel")));
        assert!(
            old.iter()
                .any(|f| f.name.starts_with("server CPU per 100,000"))
        );
    }
}
