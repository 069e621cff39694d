//! When to try a callback again: retry policies, `Retry-After`, and their
//! validation at registration.
//!
//! A policy counts *attempts*, the first one included: a policy of 10
//! attempts sends once and retries at most 9 times, then the notification
//! is dead. [`Policy::next_delay`] answers the wait before the next attempt
//! after `attempt_done` attempts, or `None` when none is left. Randomness is
//! an argument (`jitter` in `[0, 1)`), so every answer is exact in tests.

use std::time::Duration;

/// The most attempts a policy may make, the first included.
pub const MAX_ATTEMPTS: u32 = 100;

/// The longest single delay a policy may ask for: 30 days. Longer than any
/// callback target stays broken and then matters again.
pub const MAX_DELAY_MS: u64 = 30 * 24 * 60 * 60 * 1000;

/// How many attempts [`Policy::TwoNPlusOne`] makes.
pub const TWO_N_PLUS_ONE_ATTEMPTS: u32 = 10;

const MINUTE_MS: u64 = 60_000;

/// A retry schedule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Policy {
    /// Explicit delays in milliseconds: after attempt `n` wait `delays[n-1]`.
    /// The list's length + 1 attempts.
    Delays(Vec<u64>),
    /// Field report 3's schedule and the default: 2n+1 minutes after the
    /// n-th retry (1, 3, 5, 7, ... minutes), [`TWO_N_PLUS_ONE_ATTEMPTS`]
    /// attempts.
    #[default]
    TwoNPlusOne,
    /// Exponential backoff with full jitter: after attempt `n` wait
    /// `jitter * min(max_ms, initial_ms * 2^(n-1))`.
    Exponential {
        /// The ceiling of the first delay, in milliseconds.
        initial_ms: u64,
        /// The highest ceiling, in milliseconds.
        max_ms: u64,
        /// Attempts, the first included.
        attempts: u32,
    },
}

impl Policy {
    /// Attempts the policy makes, the first included.
    pub fn attempts(&self) -> u32 {
        match self {
            Policy::Delays(delays) => u32::try_from(delays.len())
                .unwrap_or(u32::MAX)
                .saturating_add(1),
            Policy::TwoNPlusOne => TWO_N_PLUS_ONE_ATTEMPTS,
            Policy::Exponential { attempts, .. } => *attempts,
        }
    }

    /// The wait before the next attempt when `attempt_done` attempts have
    /// been made: `Some(0)` for the first (nothing done yet), `None` when
    /// no attempt is left (the notification is dead). `jitter` is a random
    /// number in `[0, 1)`, used by [`Policy::Exponential`] only; outside
    /// that range it is clamped (NaN counts as 0).
    pub fn next_delay(&self, attempt_done: u32, jitter: f64) -> Option<Duration> {
        if attempt_done >= self.attempts() {
            return None;
        }
        let Some(retry) = attempt_done.checked_sub(1) else {
            return Some(Duration::ZERO);
        };
        // `retry` is 0 before the first retry, 1 before the second, ...
        let ms = match self {
            Policy::Delays(delays) => delays[retry as usize],
            Policy::TwoNPlusOne => (2 * u64::from(retry) + 1) * MINUTE_MS,
            Policy::Exponential {
                initial_ms, max_ms, ..
            } => {
                let factor = 1u64.checked_shl(retry).unwrap_or(u64::MAX);
                let ceiling = initial_ms.saturating_mul(factor).min(*max_ms);
                let jitter = if jitter.is_nan() {
                    0.0
                } else {
                    jitter.clamp(0.0, 1.0)
                };
                // Exact below 2^53 ms (285,000 years); never above `ceiling`.
                ((ceiling as f64 * jitter) as u64).min(ceiling)
            }
        };
        Some(Duration::from_millis(ms))
    }

    /// A [`Policy::Delays`] from registration input, checked.
    pub fn delays(delays_ms: &[i64]) -> Result<Policy, RetryError> {
        let attempts = delays_ms.len().saturating_add(1);
        if attempts > MAX_ATTEMPTS as usize {
            return Err(RetryError::TooManyAttempts {
                field: "retry.delays_ms".into(),
                attempts,
            });
        }
        let delays = delays_ms
            .iter()
            .enumerate()
            .map(|(i, &ms)| checked_delay(format!("retry.delays_ms[{i}]"), ms))
            .collect::<Result<_, _>>()?;
        Ok(Policy::Delays(delays))
    }

    /// A [`Policy::Exponential`] from registration input, checked.
    pub fn exponential(initial_ms: i64, max_ms: i64, attempts: i64) -> Result<Policy, RetryError> {
        let initial_ms = checked_delay("retry.initial_ms".into(), initial_ms)?;
        let max_ms = checked_delay("retry.max_ms".into(), max_ms)?;
        if max_ms < initial_ms {
            return Err(RetryError::MaxBelowInitial { initial_ms, max_ms });
        }
        let attempts = match u32::try_from(attempts) {
            Ok(n @ 1..=MAX_ATTEMPTS) => n,
            _ if attempts < 1 => {
                return Err(RetryError::NoAttempt {
                    field: "retry.attempts".into(),
                    value: attempts,
                });
            }
            _ => {
                return Err(RetryError::TooManyAttempts {
                    field: "retry.attempts".into(),
                    attempts: usize::try_from(attempts).unwrap_or(usize::MAX),
                });
            }
        };
        Ok(Policy::Exponential {
            initial_ms,
            max_ms,
            attempts,
        })
    }

    /// Checks a policy built by hand (or read back from storage) against
    /// the same rules as [`Policy::delays`] and [`Policy::exponential`].
    pub fn validate(&self) -> Result<(), RetryError> {
        match self {
            Policy::Delays(delays) => {
                let signed: Vec<i64> = delays
                    .iter()
                    .map(|&ms| i64::try_from(ms).unwrap_or(i64::MAX))
                    .collect();
                Policy::delays(&signed).map(drop)
            }
            Policy::TwoNPlusOne => Ok(()),
            Policy::Exponential {
                initial_ms,
                max_ms,
                attempts,
            } => Policy::exponential(
                i64::try_from(*initial_ms).unwrap_or(i64::MAX),
                i64::try_from(*max_ms).unwrap_or(i64::MAX),
                i64::from(*attempts),
            )
            .map(drop),
        }
    }
}

fn checked_delay(field: String, ms: i64) -> Result<u64, RetryError> {
    match u64::try_from(ms) {
        Ok(0) | Err(_) => Err(RetryError::NotPositive { field, value: ms }),
        Ok(ms) if ms > MAX_DELAY_MS => Err(RetryError::TooLong { field, value: ms }),
        Ok(ms) => Ok(ms),
    }
}

/// Why a retry policy was refused. [`RetryError::field`] names the JSON
/// field for the API's error body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RetryError {
    /// A delay of zero or less.
    #[error("{field}: must be at least 1 ms, got {value}")]
    NotPositive {
        /// The field, e.g. `retry.delays_ms[2]`.
        field: String,
        /// The refused value.
        value: i64,
    },
    /// A delay longer than [`MAX_DELAY_MS`].
    #[error("{field}: {value} ms is longer than 30 days ({MAX_DELAY_MS} ms)")]
    TooLong {
        /// The field.
        field: String,
        /// The refused value.
        value: u64,
    },
    /// More than [`MAX_ATTEMPTS`] attempts.
    #[error("{field}: makes {attempts} attempts; the limit is {MAX_ATTEMPTS}")]
    TooManyAttempts {
        /// The field.
        field: String,
        /// The attempts asked for.
        attempts: usize,
    },
    /// Fewer than one attempt.
    #[error("{field}: must be at least 1, got {value}")]
    NoAttempt {
        /// The field.
        field: String,
        /// The refused value.
        value: i64,
    },
    /// `max_ms` below `initial_ms`.
    #[error("retry.max_ms: {max_ms} is below retry.initial_ms ({initial_ms})")]
    MaxBelowInitial {
        /// The initial delay.
        initial_ms: u64,
        /// The refused maximum.
        max_ms: u64,
    },
}

impl RetryError {
    /// The offending field, as the registration names it.
    pub fn field(&self) -> &str {
        match self {
            RetryError::NotPositive { field, .. }
            | RetryError::TooLong { field, .. }
            | RetryError::TooManyAttempts { field, .. }
            | RetryError::NoAttempt { field, .. } => field,
            RetryError::MaxBelowInitial { .. } => "retry.max_ms",
        }
    }
}

/// The wait a `Retry-After` header asks for, at `now_epoch_ms`: either
/// delta-seconds (`120`) or an HTTP-date (`Wed, 21 Oct 2015 07:28:00 GMT`,
/// and the obsolete forms `httpdate` reads). A date in the past is a wait
/// of zero. `None` when the value is neither.
pub fn retry_after(header: &str, now_epoch_ms: u64) -> Option<Duration> {
    let value = header.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Too many digits to fit is a very long wait; the clamp bounds it.
        return Some(Duration::from_secs(value.parse().unwrap_or(u64::MAX)));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    let at_ms = at.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis();
    let wait = at_ms.saturating_sub(u128::from(now_epoch_ms));
    Some(Duration::from_millis(
        u64::try_from(wait).unwrap_or(u64::MAX),
    ))
}

/// The wait before the next attempt when the answer carried `Retry-After`:
/// never sooner than the policy's delay, and never later than `max` because
/// of the header (a policy delay above `max` is kept).
pub fn clamp_retry_after(
    policy: Duration,
    retry_after: Option<Duration>,
    max: Duration,
) -> Duration {
    match retry_after {
        Some(asked) => asked.min(max).max(policy),
        None => policy,
    }
}

#[cfg(test)]
mod tests;
