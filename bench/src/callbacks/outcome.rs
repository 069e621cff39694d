//! One run of one peer: what it published, what arrived against the due times, and the CPU
//! each process used, publishing and firing; and waiting for the arrivals ([`await_arrivals`]).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::settings::{Settings, Side};
use crate::harness::progress::Progress as Bar;
use crate::harness::receiver::{Arrived, Receiver};
use crate::scheduled::clock::now_ms;
use crate::scheduled::delivery::{self, Delivery};
use crate::scheduled::plan::Plan;
use crate::scheduled::usage::{Split, Usage};

/// How often progress is shown while waiting.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// The CPU window of firing opens this long before the first due time.
const WINDOW_AHEAD_MS: u64 = 500;

/// What publishing a run's plan gave.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Published {
    pub(crate) accepted: u64,
    /// From the first request (or `addBulk`) to the last answer.
    pub(crate) seconds: f64,
    /// Notifications refused or lost, by reason.
    pub(crate) refused: BTreeMap<String, u64>,
}

/// The CPU one run used.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Cpu {
    /// While publishing.
    pub(crate) publishing: Split,
    /// From just before the first due time to the last arrival.
    pub(crate) firing: Split,
    /// Firing CPU-seconds per 1,000 callbacks received, by process.
    pub(crate) firing_per_1000: BTreeMap<String, f64>,
    /// The same summed over the processes of the system under test (everything but the bench,
    /// whose receiver serves both).
    pub(crate) system_per_1000: f64,
}

impl Cpu {
    pub(crate) fn new(publishing: Split, firing: Split, received: u64) -> Self {
        let per = |s: f64| s * 1000.0 / received.max(1) as f64;
        let firing_per_1000: BTreeMap<String, f64> = firing
            .cpu_seconds
            .iter()
            .map(|(n, s)| (n.clone(), per(*s)))
            .collect();
        let system_per_1000 = firing_per_1000
            .iter()
            .filter(|(n, _)| n.as_str() != BENCH)
            .map(|(_, s)| s)
            .sum();
        Self {
            publishing,
            firing,
            firing_per_1000,
            system_per_1000,
        }
    }
}

/// The bench's own name in the CPU split.
pub(crate) const BENCH: &str = "bench";

/// One run of one peer.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RunOutcome {
    pub(crate) side: Side,
    /// Round, from 1.
    pub(crate) round: usize,
    /// The run's id: Herald's run (its directory, Redis prefix), BullMQ's key prefix.
    pub(crate) run_id: String,
    pub(crate) published: Published,
    pub(crate) delivery: Delivery,
    /// From the first arrival to the last, seconds.
    pub(crate) arrival_span_seconds: Option<f64>,
    /// Distinct callbacks received per second over that span.
    pub(crate) callbacks_per_second: Option<f64>,
    /// Requests to the receiver that named no notification.
    pub(crate) unparsed: u64,
    pub(crate) cpu: Cpu,
    /// How each process ended, what the cleanup did.
    pub(crate) cleanup: Vec<String>,
    pub(crate) problems: Vec<String>,
}

impl RunOutcome {
    /// The run from what arrived, against `dues` (`dues[k]`: notification `plan.first + k`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        s: &Settings,
        side: Side,
        round: usize,
        run_id: String,
        plan: &Plan,
        dues: &[u64],
        published: Published,
        arrived: Arrived,
        publishing: Split,
        firing: Split,
        mut problems: Vec<String>,
    ) -> Self {
        let delivery = delivery::summarize(
            plan,
            dues,
            published.accepted,
            &arrived.arrivals,
            s.herd_goal_ms(),
        );
        let span = arrival_span(&arrived.arrivals);
        let callbacks_per_second = span
            .filter(|&s| s > 0.0)
            .map(|secs| delivery.received.saturating_sub(1) as f64 / secs);
        if !published.refused.is_empty() {
            problems.push(format!("refused: {:?}", published.refused));
        }
        if delivery.missing > 0 {
            problems.push(format!("{} callbacks never arrived", delivery.missing));
        }
        if delivery.early > 0 {
            problems.push(format!(
                "{} callbacks arrived before their due time",
                delivery.early
            ));
        }
        if arrived.unparsed > 0 {
            problems.push(format!(
                "{} requests to the receiver named no notification",
                arrived.unparsed
            ));
        }
        let cpu = Cpu::new(publishing, firing, delivery.received);
        Self {
            side,
            round: round + 1,
            run_id,
            published,
            delivery,
            arrival_span_seconds: span,
            callbacks_per_second,
            unparsed: arrived.unparsed,
            cpu,
            cleanup: Vec::new(),
            problems,
        }
    }

    /// p99 lateness in ms.
    pub(crate) fn p99_ms(&self) -> Option<f64> {
        self.delivery
            .lateness
            .as_ref()
            .map(|l| l.p99_ns as f64 / 1e6)
    }

    /// The last arrival, ms after the (last) due time.
    pub(crate) fn last_after_due_ms(&self) -> Option<f64> {
        self.delivery.last_arrival_after_last_due_ms
    }
}

/// Seconds from the first arrival to the last.
fn arrival_span(arrivals: &[(u64, u64)]) -> Option<f64> {
    let first = arrivals.iter().map(|a| a.1).min()?;
    let last = arrivals.iter().map(|a| a.1).max()?;
    Some((last - first) as f64 / 1e9)
}

/// Waits until `expected` distinct callbacks of `plan` have arrived at `receiver`, or nothing
/// more arrived for the drain timeout after the last due time, or `exited` says a process of
/// the system under test is gone. Returns the CPU split from just before the first due time to
/// the end.
pub(crate) async fn await_arrivals(
    s: &Settings,
    receiver: &Receiver,
    plan: &Plan,
    expected: u64,
    usage: &Usage,
    exited: &mut dyn FnMut() -> Option<String>,
    problems: &mut Vec<String>,
) -> Split {
    let first_due = plan.first_due_ms();
    let until = first_due
        .saturating_sub(now_ms())
        .saturating_sub(WINDOW_AHEAD_MS);
    if until > 0 {
        eprintln!(
            "herald-bench: first due in {:.1} s",
            first_due.saturating_sub(now_ms()) as f64 / 1000.0
        );
        tokio::time::sleep(Duration::from_millis(until)).await;
    }
    let before = usage.read();
    let last_due = plan.last_due_ms();
    let bar = Bar::new(expected);
    let (mut last_count, mut last_move, mut last_print) = (0, Instant::now(), Instant::now());
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let got = receiver.distinct();
        if got != last_count {
            last_count = got;
            last_move = Instant::now();
        }
        if got >= expected {
            break;
        }
        if last_print.elapsed() >= PROGRESS_EVERY {
            last_print = Instant::now();
            bar.update(got, || format!("{got} of {expected} callbacks received"));
        }
        if now_ms() > last_due && last_move.elapsed() >= s.drain_timeout {
            problems.push(format!(
                "{got} of {expected} arrived; nothing more for {} s after the last due time",
                s.drain_timeout.as_secs()
            ));
            break;
        }
        if let Some(gone) = exited() {
            problems.push(gone);
            break;
        }
    }
    Split::between(&before, &usage.read())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_per_thousand_callbacks_leaves_the_bench_out_of_the_system() {
        let split = |pairs: &[(&str, f64)]| Split {
            seconds: 2.0,
            cpu_seconds: pairs.iter().map(|(n, s)| ((*n).to_owned(), *s)).collect(),
        };
        let cpu = Cpu::new(
            split(&[]),
            split(&[("gateway", 1.0), ("redis", 0.5), (BENCH, 2.0)]),
            10_000,
        );
        assert!((cpu.firing_per_1000["gateway"] - 0.1).abs() < 1e-9);
        assert!((cpu.system_per_1000 - 0.15).abs() < 1e-9);
        assert!((cpu.firing_per_1000[BENCH] - 0.2).abs() < 1e-9);
    }

    #[test]
    fn the_span_runs_from_the_first_arrival_to_the_last() {
        assert_eq!(arrival_span(&[]), None);
        let s = arrival_span(&[(1, 3_000_000_000), (0, 1_000_000_000), (1, 2_000_000_000)]);
        assert_eq!(s, Some(2.0));
    }
}
