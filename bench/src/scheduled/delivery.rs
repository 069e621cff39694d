//! What the sessions received, against what was due (pure).
//!
//! Lateness of a notification = its arrival on a session (wall clock, stamped by the worker)
//! minus its `due_at_ms` (the due time Herald answered when it accepted it); the same machine's
//! clock on both sides. Herald promises never early, so a negative lateness is counted apart
//! (`early`) and shows as 0 in the distribution. Percentiles are exact (every sample, nearest
//! rank, [`crate::harness::stats`]).

use serde::Serialize;

use super::plan::Plan;
use crate::harness::stats::Summary;

/// The client's view of a delivery phase.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Delivery {
    /// Notifications accepted for this phase (what should arrive).
    pub(crate) expected: u64,
    /// Distinct notifications that arrived.
    pub(crate) received: u64,
    pub(crate) duplicates: u64,
    /// Expected but not received.
    pub(crate) missing: u64,
    /// Bench ids that are not in this phase's plan.
    pub(crate) strays: u64,
    pub(crate) first_due_ms: u64,
    pub(crate) last_due_ms: u64,
    /// Arrivals before their due time, and the earliest of them (ns before due).
    pub(crate) early: u64,
    pub(crate) most_early_ns: Option<u64>,
    /// Arrival minus due time, ns, first arrival of each notification.
    pub(crate) lateness: Option<Summary>,
    /// The last arrival, ms after the last due time.
    pub(crate) last_arrival_after_last_due_ms: Option<f64>,
    /// Arrivals within `goal_ms` of their due time (when a goal is given).
    pub(crate) goal_ms: Option<u64>,
    pub(crate) within_goal: Option<u64>,
    /// When the slowest 1% were due: the [`SLOW_BINS`] bins of [`SLOW_BIN_MS`] (by due time,
    /// from the first due time) holding most of them. Periodic work inside Herald (claims,
    /// refills, marking delivered) shows as bins a period apart.
    pub(crate) slowest: Vec<SlowBin>,
}

/// Width of the due-time bins of [`Delivery::slowest`], ms.
pub(crate) const SLOW_BIN_MS: u64 = 100;
/// Bins reported in [`Delivery::slowest`].
pub(crate) const SLOW_BINS: usize = 8;

/// Arrivals among the slowest 1% that were due in one bin.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct SlowBin {
    /// The bin's start, ms after the first due time.
    pub(crate) due_offset_ms: u64,
    /// Slowest-1% arrivals due in it.
    pub(crate) count: u64,
    /// The latest of them, ns.
    pub(crate) max_late_ns: u64,
}

/// The bins holding most of the slowest 1% of `(due ms, lateness ns)`, most first.
fn slowest(mut late: Vec<(u64, u64)>, first_due_ms: u64) -> Vec<SlowBin> {
    if late.is_empty() {
        return Vec::new();
    }
    let n = late.len().div_ceil(100);
    late.select_nth_unstable_by(n - 1, |a, b| b.1.cmp(&a.1));
    let mut bins: std::collections::BTreeMap<u64, SlowBin> = Default::default();
    for &(due, ns) in &late[..n] {
        let offset = due.saturating_sub(first_due_ms) / SLOW_BIN_MS * SLOW_BIN_MS;
        let bin = bins.entry(offset).or_insert(SlowBin {
            due_offset_ms: offset,
            count: 0,
            max_late_ns: 0,
        });
        bin.count += 1;
        bin.max_late_ns = bin.max_late_ns.max(ns);
    }
    let mut bins: Vec<SlowBin> = bins.into_values().collect();
    bins.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then(a.due_offset_ms.cmp(&b.due_offset_ms))
    });
    bins.truncate(SLOW_BINS);
    bins
}

/// Due times of `plan` by position: Herald's answers (`(seq, due_at_ms)`) where given, else
/// the plan's own.
pub(crate) fn due_table(plan: &Plan, answered: &[(u64, u64)]) -> Vec<u64> {
    let mut dues: Vec<u64> = plan.seqs().map(|seq| plan.due_ms(seq)).collect();
    for &(seq, due) in answered {
        if plan.contains(seq) {
            dues[(seq - plan.first) as usize] = due;
        }
    }
    dues
}

/// Summarizes `arrivals` (`(seq, unix ns)`, any order, duplicates included) against `plan`,
/// whose notification `plan.first + k` is due at `dues[k]` (epoch ms) and of which `expected`
/// were accepted.
pub(crate) fn summarize(
    plan: &Plan,
    dues: &[u64],
    expected: u64,
    arrivals: &[(u64, u64)],
    goal_ms: Option<u64>,
) -> Delivery {
    let mut first_arrival: Vec<Option<u64>> = vec![None; plan.count as usize];
    let (mut duplicates, mut strays) = (0u64, 0u64);
    for &(seq, at) in arrivals {
        if !plan.contains(seq) {
            strays += 1;
            continue;
        }
        let slot = &mut first_arrival[(seq - plan.first) as usize];
        match slot {
            Some(earlier) => {
                duplicates += 1;
                *earlier = (*earlier).min(at);
            }
            None => *slot = Some(at),
        }
    }
    let due_ns = |k: usize| {
        dues.get(k)
            .copied()
            .unwrap_or_else(|| plan.due_ms(plan.first + k as u64))
            .saturating_mul(1_000_000)
    };
    let mut lateness = Vec::with_capacity(arrivals.len());
    let mut by_due = Vec::with_capacity(arrivals.len());
    let (mut early, mut most_early) = (0u64, None::<u64>);
    let mut within = 0u64;
    let mut last_arrival = None::<u64>;
    for (k, at) in first_arrival.iter().enumerate() {
        let Some(at) = *at else { continue };
        last_arrival = Some(last_arrival.map_or(at, |l: u64| l.max(at)));
        let due = due_ns(k);
        if at < due {
            early += 1;
            most_early = Some(most_early.map_or(due - at, |m: u64| m.max(due - at)));
        }
        let late = at.saturating_sub(due);
        if goal_ms.is_some_and(|g| late <= g.saturating_mul(1_000_000)) {
            within += 1;
        }
        lateness.push(late);
        by_due.push((due / 1_000_000, late));
    }
    let received = lateness.len() as u64;
    let last_due_ms = dues
        .iter()
        .copied()
        .max()
        .unwrap_or_else(|| plan.last_due_ms());
    let first_due_ms = dues
        .iter()
        .copied()
        .min()
        .unwrap_or_else(|| plan.first_due_ms());
    Delivery {
        expected,
        received,
        duplicates,
        missing: expected.saturating_sub(received),
        strays,
        first_due_ms,
        last_due_ms,
        early,
        most_early_ns: most_early,
        lateness: Summary::of(&mut lateness),
        // In integers first: epoch ns need 61 bits, more than an f64 holds exactly.
        last_arrival_after_last_due_ms: last_arrival
            .map(|at| (i128::from(at) - i128::from(last_due_ms) * 1_000_000) as f64 / 1e6),
        goal_ms,
        within_goal: goal_ms.map(|_| within),
        slowest: slowest(by_due, first_due_ms),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slowest_percent_is_binned_by_due_time() {
        // 1,000 due one per ms from 5,000; those due at 5,200 - 5,209 are 50 ms late, the rest
        // 1 ms: the slowest 1% (10) all fall in the bin at +200 ms.
        let late: Vec<(u64, u64)> = (0..1_000u64)
            .map(|k| {
                let due = 5_000 + k;
                let ns = if (200..210).contains(&k) {
                    50_000_000
                } else {
                    1_000_000
                };
                (due, ns)
            })
            .collect();
        assert_eq!(
            slowest(late, 5_000),
            vec![SlowBin {
                due_offset_ms: 200,
                count: 10,
                max_late_ns: 50_000_000
            }]
        );
        assert_eq!(slowest(Vec::new(), 0), vec![]);
    }
    use crate::scheduled::plan::Dues;

    const T: u64 = 1_800_000_000_000;

    #[test]
    fn lateness_is_arrival_minus_due() {
        let plan = Plan {
            first: 100,
            count: 4,
            dues: Dues::Steady {
                start_ms: T,
                rate: 1000,
            },
        };
        let dues: Vec<u64> = (100..104).map(|s| plan.due_ms(s)).collect();
        let ms = 1_000_000u64;
        let arrivals = [
            (100, T * ms + 2 * ms),       // 2 ms late
            (101, (T + 1) * ms + 5 * ms), // 5 ms late
            (101, (T + 1) * ms + 9 * ms), // a duplicate
            (102, (T + 2) * ms - 3),      // 3 ns early
            (7, T * ms),                  // not this plan's
        ];
        let d = summarize(&plan, &dues, 4, &arrivals, Some(3));
        assert_eq!(
            (d.received, d.duplicates, d.missing, d.strays),
            (3, 1, 1, 1)
        );
        assert_eq!((d.early, d.most_early_ns), (1, Some(3)));
        let l = d.lateness.unwrap();
        assert_eq!((l.min_ns, l.p50_ns, l.max_ns), (0, 2 * ms, 5 * ms));
        assert_eq!(
            d.within_goal,
            Some(2),
            "0 and 2 ms are within 3 ms, 5 ms is not"
        );
        assert_eq!((d.first_due_ms, d.last_due_ms), (T, T + 3));
        // The last arrival (101 at T+6 ms) is 3 ms after the last due time (T+3).
        assert!((d.last_arrival_after_last_due_ms.unwrap() - 3.0).abs() < 1e-6);
    }

    #[test]
    fn due_tables_take_herald_s_answers() {
        let p = Plan {
            first: 5,
            count: 3,
            dues: Dues::Herd { at_ms: 100 },
        };
        assert_eq!(due_table(&p, &[(6, 107), (99, 1)]), [100, 107, 100]);
    }

    #[test]
    fn the_herd_counts_from_its_one_due_time() {
        let plan = Plan {
            first: 0,
            count: 3,
            dues: Dues::Herd { at_ms: T },
        };
        let ms = 1_000_000u64;
        let arrivals = [(0, T * ms + 10 * ms), (1, T * ms + 2_500 * ms), (2, T * ms)];
        let d = summarize(&plan, &[T, T, T], 3, &arrivals, Some(2_000));
        assert_eq!(d.missing, 0);
        assert_eq!(d.within_goal, Some(2));
        assert!((d.last_arrival_after_last_due_ms.unwrap() - 2_500.0).abs() < 1e-6);
        let none = summarize(&plan, &[], 3, &[], None);
        assert_eq!((none.received, none.missing, none.lateness), (0, 3, None));
        assert_eq!(none.within_goal, None);
        assert_eq!(
            none.last_due_ms, T,
            "due times from the plan when none were answered"
        );
    }
}
