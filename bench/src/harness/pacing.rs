//! Pacing a fixed publication rate (pure).
//!
//! Message `k` (from 0) is due `k / rate` seconds after the start. The publisher asks how many
//! are due at the time it wakes up ([`Pacer::due`]), sends every one not sent yet, and sleeps
//! until the next one is due ([`Pacer::due_at`]). The schedule is absolute, so a late wake-up is
//! made good by a larger burst and the rate does not drift; tokio's timer has millisecond
//! granularity, so at 25,000/s messages leave in bursts of about 25 per millisecond.

use std::time::Duration;

/// A fixed-rate schedule of `total` messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pacer {
    /// Messages per second (> 0).
    rate: u64,
    total: u64,
}

impl Pacer {
    /// `rate` messages per second, `total` in all. `None` if `rate` is 0.
    pub(crate) fn new(rate: u64, total: u64) -> Option<Self> {
        (rate > 0).then_some(Self { rate, total })
    }

    /// The number of messages in `rate` messages per second for `seconds`.
    pub(crate) fn total_for(rate: u64, seconds: u64) -> u64 {
        rate.saturating_mul(seconds)
    }

    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// How long after the start message `k` is due: the first nanosecond at which
    /// [`Pacer::due`] counts it (rounded up, so the two agree exactly).
    pub(crate) fn due_at(&self, k: u64) -> Duration {
        let nanos = (u128::from(k) * 1_000_000_000).div_ceil(u128::from(self.rate));
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// How many messages are due `elapsed` after the start (message 0 is due at once), at most
    /// `total`.
    pub(crate) fn due(&self, elapsed: Duration) -> u64 {
        let due = elapsed.as_nanos() * u128::from(self.rate) / 1_000_000_000 + 1;
        u64::try_from(due).unwrap_or(u64::MAX).min(self.total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_rate_is_refused() {
        assert_eq!(Pacer::new(0, 10), None);
    }

    #[test]
    fn schedule_at_25k() {
        let p = Pacer::new(25_000, Pacer::total_for(25_000, 10)).unwrap();
        assert_eq!(p.total(), 250_000);
        assert_eq!(p.due(Duration::ZERO), 1);
        assert_eq!(p.due_at(0), Duration::ZERO);
        assert_eq!(p.due_at(1), Duration::from_micros(40));
        assert_eq!(p.due_at(25_000), Duration::from_secs(1));
        // Just before message 25 (1 ms) only 0..=24 are due.
        assert_eq!(p.due(Duration::from_nanos(999_999)), 25);
        assert_eq!(p.due(Duration::from_millis(1)), 26);
        assert_eq!(p.due(Duration::from_secs(1)), 25_001);
        // Capped at the total, however late.
        assert_eq!(p.due(Duration::from_secs(60)), 250_000);
    }

    #[test]
    fn due_and_due_at_agree() {
        for rate in [1, 3, 7, 1000, 25_000, 999_983] {
            let p = Pacer::new(rate, u64::MAX).unwrap();
            for k in [0, 1, 2, 10, 12_345, 1_000_000] {
                // At the moment message k is due, it is due (k + 1 messages in all)...
                assert!(p.due(p.due_at(k)) > k, "rate {rate}, k {k}");
                // ... and a nanosecond earlier it was not.
                if k > 0 {
                    assert!(
                        p.due(p.due_at(k) - Duration::from_nanos(1)) <= k,
                        "rate {rate}, k {k}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_rate_holds_over_time() {
        let p = Pacer::new(7, 1_000).unwrap();
        assert_eq!(p.due(Duration::from_secs(10)), 71);
        let p = Pacer::new(3, 1_000).unwrap();
        assert_eq!(p.due_at(3), Duration::from_secs(1));
        assert_eq!(p.due_at(1), Duration::from_nanos(333_333_334));
    }
}
