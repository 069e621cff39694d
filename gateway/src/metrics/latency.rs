//! A latency histogram that takes no lock: one relaxed atomic add per
//! bucket hit and one for the sum. prometheus-client's own `Histogram`
//! takes a lock on every observation, which the delivery path (one
//! observation per frame a session writes, every session of a transport
//! sharing the histogram) cannot afford.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// Upper bounds of the buckets, in microseconds: 0.5 ms to 60 s, roughly
/// 1-2.5-5 per decade (a live delivery takes well under a millisecond on
/// an idle gateway; a slow reader or a backed-up root link, seconds).
pub const BOUNDS_MICROS: [u64; 16] = [
    500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
    2_500_000, 5_000_000, 10_000_000, 30_000_000, 60_000_000,
];

#[derive(Debug)]
struct Inner {
    /// Observations per bucket, not cumulative; the last is `+Inf`.
    buckets: [AtomicU64; BOUNDS_MICROS.len() + 1],
    /// Sum of the observations, in microseconds.
    sum_micros: AtomicU64,
}

impl Default for Inner {
    fn default() -> Self {
        Inner {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_micros: AtomicU64::new(0),
        }
    }
}

/// A histogram of durations with the fixed buckets [`BOUNDS_MICROS`];
/// clones share it.
#[derive(Debug, Clone, Default)]
pub struct LatencyHistogram(Arc<Inner>);

impl LatencyHistogram {
    /// Count one duration of `micros` microseconds.
    pub fn observe_micros(&self, micros: u64) {
        let i = BOUNDS_MICROS.partition_point(|&bound| bound < micros);
        self.0.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.0.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.0
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .sum()
    }
}

impl TypedMetric for LatencyHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for LatencyHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        // Loaded one by one: a scrape racing observations may see a bucket
        // and the sum one observation apart, never a count that disagrees
        // with the buckets (the count is their total).
        let mut buckets = [(0.0, 0u64); BOUNDS_MICROS.len() + 1];
        for (i, slot) in buckets.iter_mut().enumerate() {
            let bound = BOUNDS_MICROS.get(i).map_or(f64::MAX, |&b| b as f64 / 1e6);
            *slot = (bound, self.0.buckets[i].load(Ordering::Relaxed));
        }
        let count = buckets.iter().map(|(_, c)| c).sum();
        let sum = self.0.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::registry::Registry;

    #[test]
    fn observations_land_in_the_first_bucket_that_holds_them() {
        let h = LatencyHistogram::default();
        h.observe_micros(0);
        h.observe_micros(500);
        h.observe_micros(501);
        h.observe_micros(120_000_000);
        assert_eq!(h.count(), 4);
        let mut registry = Registry::default();
        registry.register("t_latency_seconds", "test", h.clone());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "t_latency_seconds_count 4",
            "t_latency_seconds_bucket{le=\"0.0005\"} 2",
            "t_latency_seconds_bucket{le=\"0.001\"} 3",
            "t_latency_seconds_bucket{le=\"60.0\"} 3",
            "t_latency_seconds_bucket{le=\"+Inf\"} 4",
            "# TYPE t_latency_seconds histogram",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        assert!(text.contains("t_latency_seconds_sum 120.001001"), "{text}");
    }
}
