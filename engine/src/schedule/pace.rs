//! How long claims take per entry, as the firer measures them: what
//! [`Scheduler::pile`](super::scheduler::Scheduler::pile) needs to start a
//! herd's claims early enough for them to be done when it falls due.
//!
//! Pure: fed the size and duration of each claim, no clock of its own.

use std::time::Duration;

/// The estimate before any claim was measured, µs per entry: a Redis
/// store under load takes about 13 µs of its CPU per claimed entry, plus
/// the round trip and the decoding.
pub(crate) const PRIOR_US: f64 = 25.0;
/// Claims of fewer entries are not measured: their fixed cost (round
/// trips, a commit, waiting for a busy CPU) would dominate. A steady
/// stream's claims (1,250 entries at 10,000 a second) measured several
/// times the cost per entry of a herd's, and made the stream look like a
/// pile.
pub(crate) const MIN_SAMPLE: usize = 5_000;
/// Weight of the newest measure in the running estimate.
const WEIGHT: f64 = 0.3;
/// Claims are planned this much slower than measured: the store may be
/// busier when the herd's claims run than when the last one was measured.
const SLACK: f64 = 1.5;

/// The smallest claim of a pile, whatever its time budget: smaller claims
/// cost more per entry than they save in waiting.
pub(crate) const PILE_CLAIM_MIN: usize = 2_000;

/// A running estimate of a claim's cost per entry.
#[derive(Debug, Clone)]
pub(crate) struct ClaimPace {
    us_per_entry: f64,
}

impl Default for ClaimPace {
    fn default() -> Self {
        ClaimPace {
            us_per_entry: PRIOR_US,
        }
    }
}

impl ClaimPace {
    /// A claim of `entries` took `took`, from its call to its result.
    pub(crate) fn observe(&mut self, entries: usize, took: Duration) {
        if entries < MIN_SAMPLE {
            return;
        }
        let measured = took.as_secs_f64() * 1e6 / entries as f64;
        self.us_per_entry = (1.0 - WEIGHT) * self.us_per_entry + WEIGHT * measured;
    }

    /// The size of a pile's next claim when the first entry it takes is
    /// due in `budget_ms`: what falls due while a claim runs waits for it,
    /// so no more than it is planned to do by then, at least
    /// [`PILE_CLAIM_MIN`], at most `claim_batch`.
    pub(crate) fn pile_claim(&self, budget_ms: u64, claim_batch: usize) -> usize {
        let fits = budget_ms.saturating_mul(1_000) / self.planned_us().max(1);
        usize::try_from(fits)
            .unwrap_or(usize::MAX)
            .clamp(PILE_CLAIM_MIN.min(claim_batch), claim_batch)
    }

    /// µs per entry to plan claims with (the estimate and its slack).
    pub(crate) fn planned_us(&self) -> u64 {
        (self.us_per_entry * SLACK).round() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_from_the_prior_and_follows_large_claims_only() {
        let mut p = ClaimPace::default();
        assert_eq!(p.planned_us(), 38, "25 µs and half again");
        p.observe(4_000, Duration::from_secs(1));
        assert_eq!(p.planned_us(), 38, "a small claim is not measured");
        for _ in 0..50 {
            p.observe(10_000, Duration::from_millis(100));
        }
        assert_eq!(p.planned_us(), 15, "10 µs measured, planned at 15");
        p.observe(10_000, Duration::from_millis(400));
        assert_eq!(
            p.planned_us(),
            29,
            "a slow claim moves it at once: 0.7 × 10 + 0.3 × 40 = 19 µs, planned at 28.5"
        );
    }

    #[test]
    fn a_pile_claim_fits_before_its_first_entry_is_due() {
        let p = ClaimPace::default();
        // 38 µs planned: 400 ms fit 10,526 entries.
        assert_eq!(p.pile_claim(400, 20_000), 10_526);
        assert_eq!(p.pile_claim(4_000, 20_000), 20_000, "at most claim_batch");
        assert_eq!(
            p.pile_claim(0, 20_000),
            PILE_CLAIM_MIN,
            "overdue: the least"
        );
        assert_eq!(p.pile_claim(0, 500), 500, "claim_batch below the least");
    }
}
