//! The delayed benchmark's clock: epoch milliseconds, the clock Herald fixes due times with. The
//! sessions stamp arrivals on the same wall clock, in nanoseconds
//! ([`crate::harness::events::unix_nanos`]).

/// Epoch ms now.
pub(crate) fn now_ms() -> u64 {
    crate::harness::events::unix_nanos() / 1_000_000
}
