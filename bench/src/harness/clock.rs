//! The clock a latency sample is read on: publisher and sessions in one process share it.

use std::time::Instant;

/// Nanoseconds on a monotonic clock since a common start, read by the publisher and by every
/// session (they share the process, so `Instant` is the same clock for all).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    start: Instant,
}

impl Clock {
    pub(crate) fn new() -> Self {
        Self {
            start: Instant::now(),
        }
    }

    pub(crate) fn now_ns(&self) -> u64 {
        self.ns_at(Instant::now())
    }

    /// `instant` on this clock (0 for an instant before its start).
    pub(crate) fn ns_at(&self, instant: Instant) -> u64 {
        let since = instant.saturating_duration_since(self.start);
        u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_clock_is_monotonic() {
        let clock = Clock::new();
        let a = clock.now_ns();
        std::thread::sleep(Duration::from_millis(2));
        let b = clock.now_ns();
        assert!(b >= a + 2_000_000, "{a} {b}");
        let later = Instant::now() + Duration::from_secs(1);
        assert!(clock.ns_at(later) >= 1_000_000_000);
        assert_eq!(clock.ns_at(clock.start - Duration::from_millis(1)), 0);
    }
}
