//! What the sessions received, against what was due (pure).
//!
//! Lateness of a notification = its arrival on a session (wall clock, stamped by the worker)
//! minus its `due_at_ms` (the due time Herald answered when it accepted it); the same machine's
//! clock on both sides. Herald promises never early, so a negative lateness is counted apart
//! (`early`) and shows as 0 in the distribution. Percentiles are exact (every sample, nearest
//! rank, [`crate::stats`]).

use serde::Serialize;

use super::plan::Plan;
use crate::stats::Summary;

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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delayed::plan::Dues;

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
