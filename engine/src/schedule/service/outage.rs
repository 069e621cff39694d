//! Whether the store is down, from the outcomes of the maintenance rounds
//! (pure; it takes `now`). A round that fails starts a failure; once the
//! rounds have been failing for `after_ms` the store counts as
//! unavailable, and the first round that works after that is its
//! recovery. Each is reported once, so a store that stays down raises one
//! alert, not one per round; a single failed round between good ones
//! raises none.

/// Where the store stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The last round worked.
    Up,
    /// Rounds have failed since `since_ms`, not yet for `after_ms`.
    Failing { since_ms: u64 },
    /// Unavailable (reported), failing since `since_ms`.
    Down { since_ms: u64 },
}

/// What changed, to alert on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// The store has been failing since `since_ms`.
    Unavailable { since_ms: u64 },
    /// The store, failing since `since_ms`, works again.
    Recovered { since_ms: u64 },
}

/// The watch over the store's rounds.
#[derive(Debug)]
pub(crate) struct Outage {
    after_ms: u64,
    state: State,
}

impl Outage {
    /// Unavailable once failing for `after_ms` (0: at the first failure).
    pub(crate) fn new(after_ms: u64) -> Self {
        Outage {
            after_ms,
            state: State::Up,
        }
    }

    /// A round failed at `now`.
    pub(crate) fn failed(&mut self, now: u64) -> Option<Change> {
        let since_ms = match self.state {
            State::Down { .. } => return None,
            State::Up => now,
            State::Failing { since_ms } => since_ms,
        };
        if now.saturating_sub(since_ms) >= self.after_ms {
            self.state = State::Down { since_ms };
            Some(Change::Unavailable { since_ms })
        } else {
            self.state = State::Failing { since_ms };
            None
        }
    }

    /// A round worked.
    pub(crate) fn worked(&mut self) -> Option<Change> {
        let before = std::mem::replace(&mut self.state, State::Up);
        match before {
            State::Down { since_ms } => Some(Change::Recovered { since_ms }),
            State::Up | State::Failing { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unavailable_once_failing_for_long_enough_then_recovered_once() {
        let mut o = Outage::new(10_000);
        assert_eq!(o.worked(), None);
        assert_eq!(o.failed(1_000), None, "one failed round is not an outage");
        assert_eq!(o.failed(6_000), None);
        assert_eq!(
            o.failed(11_000),
            Some(Change::Unavailable { since_ms: 1_000 })
        );
        // Down: more failures say nothing more.
        assert_eq!(o.failed(16_000), None);
        assert_eq!(o.failed(600_000), None);
        assert_eq!(o.worked(), Some(Change::Recovered { since_ms: 1_000 }));
        assert_eq!(o.worked(), None);
    }

    #[test]
    fn a_good_round_in_between_starts_the_count_again() {
        let mut o = Outage::new(10_000);
        assert_eq!(o.failed(0), None);
        assert_eq!(o.failed(9_000), None);
        assert_eq!(o.worked(), None, "never reported down: no recovery either");
        assert_eq!(o.failed(12_000), None);
        assert_eq!(o.failed(21_999), None);
        assert_eq!(
            o.failed(22_000),
            Some(Change::Unavailable { since_ms: 12_000 })
        );
    }

    #[test]
    fn zero_means_the_first_failed_round() {
        let mut o = Outage::new(0);
        assert_eq!(o.failed(5), Some(Change::Unavailable { since_ms: 5 }));
        assert_eq!(o.worked(), Some(Change::Recovered { since_ms: 5 }));
    }

    #[test]
    fn a_clock_going_back_does_not_report_early() {
        let mut o = Outage::new(10_000);
        assert_eq!(o.failed(50_000), None);
        assert_eq!(o.failed(40_000), None);
        assert_eq!(
            o.failed(60_000),
            Some(Change::Unavailable { since_ms: 50_000 })
        );
    }
}
