//! What the delayed benchmark publishes (pure): which notifications, due when, to whom.
//!
//! Notification `seq` has the id [`crate::harness::delayed_ids::message_id`]`(seq)` and goes to user
//! `users[seq % users]`. A [`Plan`] is a run of sequence numbers with their due times
//! ([`Dues`]): a steady rate (the lateness scenario, and the probe of the footprint scenario),
//! one instant for all (the herd), or one per millisecond far in the future (ingest and
//! footprint, so nothing fires while the store fills).

use std::ops::Range;

/// Milliseconds in a day.
pub(crate) const DAY_MS: u64 = 86_400_000;

/// When the notifications of a plan fall due; `k` counts from the plan's first one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dues {
    /// `rate` per second from `start_ms`: `k` is due at `start_ms + floor(k * 1000 / rate)`,
    /// so each millisecond gets `rate / 1000` of them (10 at 10,000/s), evenly.
    Steady { start_ms: u64, rate: u64 },
    /// All at `at_ms` (a herd).
    Herd { at_ms: u64 },
    /// One per millisecond from `start_ms`.
    Spread { start_ms: u64 },
    /// The due times of `Spread` over `span_ms` milliseconds, in scrambled order: `k` is due
    /// at `start_ms + (k * stride) mod span_ms`, a permutation since `stride` and `span_ms`
    /// share no factor ([`Dues::scattered`]).
    Scattered {
        start_ms: u64,
        span_ms: u64,
        stride: u64,
    },
}

/// The order of the due times of the ingest and footprint scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum DueOrder {
    /// Rising with the sequence number ([`Dues::Spread`]).
    Sequential,
    /// The same due times, scrambled ([`Dues::Scattered`]).
    Random,
}

impl DueOrder {
    /// The order in words, for the report.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            DueOrder::Sequential => "one per ms in sequence order",
            DueOrder::Random => "one per ms in scrambled order",
        }
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

impl Dues {
    /// One due time per millisecond of `start_ms .. start_ms + count`, in scrambled order.
    pub(crate) fn scattered(start_ms: u64, count: u64) -> Dues {
        let span_ms = count.max(1);
        // A stride near span / golden ratio, moved to the next one sharing no factor with the
        // span: consecutive notifications land far apart.
        let mut stride = ((span_ms as f64 / 1.618_033_988_75) as u64).max(1);
        while gcd(stride, span_ms) != 1 {
            stride += 1;
        }
        Dues::Scattered {
            start_ms,
            span_ms,
            stride,
        }
    }

    /// The due time of the `k`-th notification, epoch ms.
    pub(crate) fn due_ms(&self, k: u64) -> u64 {
        match *self {
            Dues::Steady { start_ms, rate } => {
                let offset = u128::from(k) * 1000 / u128::from(rate.max(1));
                start_ms.saturating_add(u64::try_from(offset).unwrap_or(u64::MAX))
            }
            Dues::Herd { at_ms } => at_ms,
            Dues::Spread { start_ms } => start_ms.saturating_add(k),
            Dues::Scattered {
                start_ms,
                span_ms,
                stride,
            } => {
                let offset = u128::from(k) * u128::from(stride) % u128::from(span_ms.max(1));
                start_ms.saturating_add(offset as u64)
            }
        }
    }
}

/// `count` notifications from sequence number `first`, due by `dues`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) first: u64,
    pub(crate) count: u64,
    pub(crate) dues: Dues,
}

impl Plan {
    /// The sequence numbers of the plan.
    pub(crate) fn seqs(&self) -> Range<u64> {
        self.first..self.first.saturating_add(self.count)
    }

    /// Whether `seq` is one of the plan's.
    pub(crate) fn contains(&self, seq: u64) -> bool {
        self.seqs().contains(&seq)
    }

    /// The due time of notification `seq` (one of the plan's), epoch ms.
    pub(crate) fn due_ms(&self, seq: u64) -> u64 {
        self.dues.due_ms(seq.saturating_sub(self.first))
    }

    /// The earliest due time (dues never decrease with `seq`).
    pub(crate) fn first_due_ms(&self) -> u64 {
        self.due_ms(self.first)
    }

    /// The latest due time.
    pub(crate) fn last_due_ms(&self) -> u64 {
        self.due_ms(self.first + self.count.saturating_sub(1))
    }

    /// Batch `b` of `size` (the last may be shorter; empty past the end).
    pub(crate) fn batch(&self, b: u64, size: u64) -> Range<u64> {
        let end = self.first.saturating_add(self.count);
        let start = self.first.saturating_add(b.saturating_mul(size)).min(end);
        start..start.saturating_add(size).min(end)
    }

    /// How many batches of `size` the plan takes.
    pub(crate) fn batches(&self, size: u64) -> u64 {
        self.count.div_ceil(size.max(1))
    }
}

/// Who the notifications go to: `seq` goes to `names[seq % len]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Users {
    names: Vec<String>,
}

impl Users {
    /// The users of the bench's sessions: worker `i` holds `sessions[i]` of them,
    /// `bench-{i}-{n}`. Consecutive sequence numbers go to different workers first, so every
    /// worker gets its share of each millisecond.
    pub(crate) fn of_workers(sessions: &[usize]) -> Self {
        let most = sessions.iter().copied().max().unwrap_or(0);
        let mut names = Vec::with_capacity(sessions.iter().sum());
        for n in 0..most {
            for (worker, &count) in sessions.iter().enumerate() {
                if n < count {
                    names.push(crate::harness::token::user_id(worker, n));
                }
            }
        }
        Self { names }
    }

    /// `count` users nobody is connected as (ingest only): `bench-0-0` ... .
    pub(crate) fn offline(count: usize) -> Self {
        Self::of_workers(&[count])
    }

    pub(crate) fn user(&self, seq: u64) -> &str {
        let i = seq % self.names.len().max(1) as u64;
        self.names
            .get(i as usize)
            .map_or("bench-0-0", String::as_str)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.names.len()
    }
}

/// The default time from the start of publishing to the first due time of a delivery
/// scenario: 5 s, plus 1 s per 10,000 notifications (so an ingest of 10,000/s or more is over
/// before the first one is due, and firing is measured alone).
pub(crate) fn default_lead_ms(count: u64) -> u64 {
    5_000u64.saturating_add(count / 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steady_rate_spreads_evenly_over_each_millisecond() {
        let d = Dues::Steady {
            start_ms: 1_000_000,
            rate: 10_000,
        };
        assert_eq!(d.due_ms(0), 1_000_000);
        assert_eq!(d.due_ms(9), 1_000_000);
        assert_eq!(d.due_ms(10), 1_000_001);
        assert_eq!(d.due_ms(10_000), 1_001_000);
        let per_ms = (0..100_000u64).fold(std::collections::BTreeMap::new(), |mut m, k| {
            *m.entry(d.due_ms(k)).or_insert(0u32) += 1;
            m
        });
        assert_eq!(per_ms.len(), 10_000, "10 s of milliseconds");
        assert!(per_ms.values().all(|&n| n == 10));
        // Slower than one per millisecond: gaps, never bunching.
        let d = Dues::Steady {
            start_ms: 0,
            rate: 400,
        };
        assert_eq!(
            (0..5).map(|k| d.due_ms(k)).collect::<Vec<_>>(),
            [0, 2, 5, 7, 10]
        );
        assert_eq!(d.due_ms(400), 1000);
    }

    #[test]
    fn herds_and_spreads() {
        let h = Dues::Herd { at_ms: 77 };
        assert!((0..1000).all(|k| h.due_ms(k) == 77));
        let s = Dues::Spread { start_ms: 10 };
        assert_eq!(s.due_ms(0), 10);
        assert_eq!(s.due_ms(9_999_999), 10_000_009);
    }

    #[test]
    fn scattered_dues_are_the_spread_ones_in_another_order() {
        for count in [1u64, 2, 10, 1_000, 4_096, 500_000] {
            let d = Dues::scattered(100, count);
            let mut got: Vec<u64> = (0..count).map(|k| d.due_ms(k)).collect();
            let rising = got.windows(2).filter(|w| w[0] < w[1]).count() as u64;
            got.sort_unstable();
            let want: Vec<u64> = (100..100 + count).collect();
            assert_eq!(got, want, "count {count}: each millisecond once");
            if count >= 1_000 {
                // Neither rising nor falling: about as many steps up as down.
                assert!(
                    rising > count / 4 && rising < count * 3 / 4,
                    "count {count}: {rising} steps up"
                );
            }
        }
    }

    #[test]
    fn plans_batch_their_sequence_numbers() {
        let p = Plan {
            first: 100,
            count: 2_500,
            dues: Dues::Steady {
                start_ms: 5_000,
                rate: 1_000,
            },
        };
        assert_eq!(p.seqs(), 100..2_600);
        assert_eq!(p.batches(1000), 3);
        assert_eq!(p.batch(0, 1000), 100..1_100);
        assert_eq!(p.batch(2, 1000), 2_100..2_600);
        assert!(p.batch(3, 1000).is_empty());
        assert_eq!(p.first_due_ms(), 5_000);
        assert_eq!(p.due_ms(1_100), 6_000);
        assert_eq!(p.last_due_ms(), 7_499);
        assert!(p.contains(100) && p.contains(2_599));
        assert!(!p.contains(99) && !p.contains(2_600));
        let covered: u64 = (0..p.batches(1000))
            .map(|b| p.batch(b, 1000).count() as u64)
            .sum();
        assert_eq!(covered, p.count);
    }

    #[test]
    fn users_alternate_over_workers() {
        let u = Users::of_workers(&[3, 2]);
        assert_eq!(u.len(), 5);
        let order: Vec<&str> = (0..6).map(|k| u.user(k)).collect();
        assert_eq!(
            order,
            [
                "bench-0-0",
                "bench-1-0",
                "bench-0-1",
                "bench-1-1",
                "bench-0-2",
                "bench-0-0"
            ]
        );
        assert_eq!(Users::offline(2).user(3), "bench-0-1");
    }

    #[test]
    fn the_default_lead_grows_with_the_count() {
        assert_eq!(default_lead_ms(0), 5_000);
        assert_eq!(default_lead_ms(100_000), 15_000);
        assert_eq!(default_lead_ms(200_000), 25_000);
    }
}
