//! One step of a callback's life: given what an attempt's answer meant,
//! what happens next. Pure: the time, the jitter and the answer are
//! arguments, and the caller records the result through the store.
//!
//! ```text
//! due --recheck_url?--> rechecking --Proceed--> calling --Delivered--> delivered
//!   \--no recheck-----------------------------/    |  \--Failed--+
//!                          |--Decline--> declined  |             |
//!                          \--Retry-----------------+------------+
//!                                                   v
//!                      attempts left? --yes--> retry_wait (at now + delay) --due--> ...
//!                                     \--no---> dead
//! ```
//!
//! One *attempt* is one pass through that path: a recheck that says go and
//! the call after it are the same attempt. The policy counts attempts, so
//! a recheck that keeps failing uses them up as failed calls do.

use std::time::Duration;

use super::answer::{Outcome, Recheck};
use super::retry::{Policy, clamp_retry_after, retry_after};

/// The longest wait a `Retry-After` header may impose beyond the policy's
/// own delay: one hour.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// What happens after an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// The recheck said go: make the call now, as part of the same attempt.
    Call,
    /// Done: the receiver has it.
    Delivered,
    /// Done: the recheck said not to send.
    Declined {
        /// Why, from the answer.
        reason: String,
    },
    /// Try again at `at_ms`.
    RetryAt {
        /// When, epoch ms.
        at_ms: u64,
        /// Why this attempt failed.
        reason: String,
    },
    /// No attempt left: the notification is a dead letter.
    Dead {
        /// Why the last attempt failed.
        reason: String,
    },
}

/// What the step needs to know besides the answer.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The topic's retry policy.
    pub policy: &'a Policy,
    /// Attempts made, the one just answered included (1 after the first).
    pub attempts_done: u32,
    /// Now, epoch ms.
    pub now_ms: u64,
    /// A random number in `[0, 1)` for jittered policies.
    pub jitter: f64,
    /// The answer's HTTP status, if one came.
    pub status: Option<u16>,
    /// The answer's `Retry-After` header, if any.
    pub retry_after: Option<&'a str>,
}

impl Context<'_> {
    /// Retry if the policy has an attempt left, else dead. `Retry-After`
    /// counts only on a 429 or 503, and within [`MAX_RETRY_AFTER`].
    fn retry(&self, reason: String) -> Next {
        let Some(delay) = self.policy.next_delay(self.attempts_done, self.jitter) else {
            return Next::Dead { reason };
        };
        let asked = match self.status {
            Some(429 | 503) => self
                .retry_after
                .and_then(|header| retry_after(header, self.now_ms)),
            _ => None,
        };
        let wait = clamp_retry_after(delay, asked, MAX_RETRY_AFTER);
        let wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        Next::RetryAt {
            at_ms: self.now_ms.saturating_add(wait_ms),
            reason,
        }
    }
}

/// After a recheck's answer.
pub fn after_recheck(recheck: Recheck, cx: &Context<'_>) -> Next {
    match recheck {
        Recheck::Proceed => Next::Call,
        Recheck::Decline { reason } => Next::Declined { reason },
        Recheck::Retry { reason } => cx.retry(reason),
    }
}

/// After a call's answer.
pub fn after_call(outcome: Outcome, cx: &Context<'_>) -> Next {
    match outcome {
        Outcome::Delivered => Next::Delivered,
        Outcome::Failed { reason } => cx.retry(reason),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_700_000_000_000;
    const MINUTE: u64 = 60_000;

    fn cx(policy: &Policy, attempts_done: u32) -> Context<'_> {
        Context {
            policy,
            attempts_done,
            now_ms: NOW,
            jitter: 0.5,
            status: Some(500),
            retry_after: None,
        }
    }

    fn failed() -> Outcome {
        Outcome::Failed {
            reason: "HTTP 500".into(),
        }
    }

    #[test]
    fn the_two_n_plus_one_schedule_then_dead() {
        let policy = Policy::TwoNPlusOne;
        let mut waits = Vec::new();
        for done in 1.. {
            match after_call(failed(), &cx(&policy, done)) {
                Next::RetryAt { at_ms, .. } => waits.push((at_ms - NOW) / MINUTE),
                Next::Dead { reason } => {
                    assert_eq!(reason, "HTTP 500");
                    break;
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            waits,
            [1, 3, 5, 7, 9, 11, 13, 15, 17],
            "10 attempts, 9 waits"
        );
    }

    #[test]
    fn a_recheck_goes_ahead_declines_or_retries() {
        let policy = Policy::Delays(vec![1000]);
        assert_eq!(after_recheck(Recheck::Proceed, &cx(&policy, 1)), Next::Call);
        assert_eq!(
            after_recheck(
                Recheck::Decline {
                    reason: "HTTP 200: ERROR".into()
                },
                &cx(&policy, 1)
            ),
            Next::Declined {
                reason: "HTTP 200: ERROR".into()
            }
        );
        let retry = Recheck::Retry {
            reason: "timed out".into(),
        };
        assert_eq!(
            after_recheck(retry.clone(), &cx(&policy, 1)),
            Next::RetryAt {
                at_ms: NOW + 1000,
                reason: "timed out".into()
            }
        );
        assert_eq!(
            after_recheck(retry, &cx(&policy, 2)),
            Next::Dead {
                reason: "timed out".into()
            }
        );
    }

    #[test]
    fn delivered_is_final_whatever_is_left() {
        assert_eq!(
            after_call(Outcome::Delivered, &cx(&Policy::TwoNPlusOne, 1)),
            Next::Delivered
        );
    }

    #[test]
    fn retry_after_counts_on_429_and_503_only_and_within_bounds() {
        let policy = Policy::Delays(vec![1000, 1000]);
        let at = |status, header| {
            let cx = Context {
                status: Some(status),
                retry_after: Some(header),
                ..cx(&policy, 1)
            };
            match after_call(failed(), &cx) {
                Next::RetryAt { at_ms, .. } => at_ms - NOW,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(at(429, "30"), 30_000);
        assert_eq!(at(503, "30"), 30_000);
        assert_eq!(at(500, "30"), 1000, "not on a 500");
        assert_eq!(at(429, "0"), 1000, "never sooner than the policy");
        assert_eq!(at(429, "999999999"), 3_600_000, "bounded");
        assert_eq!(at(429, "soon"), 1000, "unreadable: ignored");
    }

    #[test]
    fn exponential_uses_the_jitter_given() {
        let policy = Policy::Exponential {
            initial_ms: 1000,
            max_ms: 8000,
            attempts: 5,
        };
        let waits: Vec<u64> = (1..5)
            .map(|done| match after_call(failed(), &cx(&policy, done)) {
                Next::RetryAt { at_ms, .. } => at_ms - NOW,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(waits, [500, 1000, 2000, 4000]);
        assert!(matches!(
            after_call(failed(), &cx(&policy, 5)),
            Next::Dead { .. }
        ));
    }
}
