//! Statistics (pure): latency percentiles by the nearest-rank method over every sample, and the
//! median and range of a figure over rounds ([`spread`]).
//!
//! The bench keeps every sample (8 bytes each: 2 MB for 250,000 messages) and sorts once at the
//! end, so percentiles are exact, not histogram buckets.

use serde::{Deserialize, Serialize};

/// The nearest-rank `p`-th percentile (0 < p <= 100) of `sorted` (ascending): the smallest value
/// such that at least p% of the samples are at or below it. `None` when empty.
pub(crate) fn percentile(sorted: &[u64], p: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len();
    // In integers (p in millionths of the whole), so 99.9% of 1,000 is 999, not the 1,000 that
    // 0.999 * 1000.0 rounds up to in floating point.
    let millionths = (p.clamp(0.0, 100.0) * 10_000.0).round() as u128;
    let rank = (millionths * n as u128).div_ceil(1_000_000) as usize;
    Some(sorted[rank.clamp(1, n) - 1])
}

/// A latency distribution, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct Summary {
    pub(crate) count: u64,
    pub(crate) min_ns: u64,
    pub(crate) mean_ns: f64,
    pub(crate) p50_ns: u64,
    pub(crate) p90_ns: u64,
    pub(crate) p99_ns: u64,
    pub(crate) p999_ns: u64,
    pub(crate) max_ns: u64,
}

impl Summary {
    /// Summarizes `samples` (sorted in place). `None` when empty.
    pub(crate) fn of(samples: &mut [u64]) -> Option<Self> {
        samples.sort_unstable();
        let n = samples.len();
        let sum: u128 = samples.iter().map(|&s| u128::from(s)).sum();
        Some(Self {
            count: n as u64,
            min_ns: *samples.first()?,
            mean_ns: sum as f64 / n as f64,
            p50_ns: percentile(samples, 50.0)?,
            p90_ns: percentile(samples, 90.0)?,
            p99_ns: percentile(samples, 99.0)?,
            p999_ns: percentile(samples, 99.9)?,
            max_ns: *samples.last()?,
        })
    }

    /// `p50 1.452 ms  p90 ...  (mean ..., N samples)`.
    pub(crate) fn human(&self) -> String {
        format!(
            "p50 {}  p90 {}  p99 {}  p99.9 {}  max {}  (mean {}, {} samples)",
            human_ms(self.p50_ns as f64),
            human_ms(self.p90_ns as f64),
            human_ms(self.p99_ns as f64),
            human_ms(self.p999_ns as f64),
            human_ms(self.max_ns as f64),
            human_ms(self.mean_ns),
            self.count
        )
    }
}

/// Nanoseconds as milliseconds for people: `0.412 ms`, `12.3 ms`, `1530 ms`.
pub(crate) fn human_ms(ns: f64) -> String {
    let ms = ns / 1e6;
    if ms < 10.0 {
        format!("{ms:.3} ms")
    } else if ms < 1000.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

/// The median and the range of `values` (those that are finite), `None` when there is none.
pub(crate) fn spread(values: &[f64]) -> Option<(f64, f64, f64)> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let median = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    };
    Some((median, sorted[0], sorted[n - 1]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_median_and_range() {
        assert_eq!(spread(&[]), None);
        assert_eq!(spread(&[3.0]), Some((3.0, 3.0, 3.0)));
        assert_eq!(spread(&[5.0, 1.0, 3.0]), Some((3.0, 1.0, 5.0)));
        assert_eq!(spread(&[4.0, 1.0, 3.0, 2.0]), Some((2.5, 1.0, 4.0)));
        assert_eq!(spread(&[f64::NAN, 2.0]), Some((2.0, 2.0, 2.0)));
    }

    #[test]
    fn nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), Some(50));
        assert_eq!(percentile(&v, 90.0), Some(90));
        assert_eq!(percentile(&v, 99.0), Some(99));
        assert_eq!(percentile(&v, 99.9), Some(100));
        assert_eq!(percentile(&v, 100.0), Some(100));
        assert_eq!(percentile(&v, 0.0), Some(1));
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&[7], 99.9), Some(7));
        // 1,000 samples: p99.9 is the 999th, not the maximum.
        let v: Vec<u64> = (1..=1000).collect();
        assert_eq!(percentile(&v, 99.9), Some(999));
        // Four samples: the median is the 2nd (nearest rank does not interpolate).
        assert_eq!(percentile(&[10, 20, 30, 40], 50.0), Some(20));
        assert_eq!(percentile(&[10, 20, 30, 40], 51.0), Some(30));
    }

    #[test]
    fn summary_sorts_and_summarizes() {
        let mut v = vec![5, 1, 4, 2, 3];
        let s = Summary::of(&mut v).unwrap();
        assert_eq!(v, [1, 2, 3, 4, 5]);
        assert_eq!(
            (
                s.count, s.min_ns, s.p50_ns, s.p90_ns, s.p99_ns, s.p999_ns, s.max_ns
            ),
            (5, 1, 3, 5, 5, 5, 5)
        );
        assert!((s.mean_ns - 3.0).abs() < 1e-9);
        assert_eq!(Summary::of(&mut []), None);
    }

    #[test]
    fn a_tail_shows_in_the_high_percentiles_only() {
        let mut v = vec![1_000_000u64; 10_000];
        for x in v.iter_mut().take(5) {
            *x = 50_000_000;
        }
        let s = Summary::of(&mut v).unwrap();
        assert_eq!(s.p50_ns, 1_000_000);
        assert_eq!(s.p99_ns, 1_000_000);
        assert_eq!(s.p999_ns, 1_000_000);
        assert_eq!(s.max_ns, 50_000_000);
        let mut v = vec![1_000_000u64; 10_000];
        for x in v.iter_mut().take(20) {
            *x = 50_000_000;
        }
        assert_eq!(Summary::of(&mut v).unwrap().p999_ns, 50_000_000);
    }

    #[test]
    fn human_milliseconds() {
        assert_eq!(human_ms(412_000.0), "0.412 ms");
        assert_eq!(human_ms(12_340_000.0), "12.3 ms");
        assert_eq!(human_ms(1_530_000_000.0), "1530 ms");
    }
}
