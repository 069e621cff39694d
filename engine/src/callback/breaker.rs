//! The circuit breaker of callback destinations: a host that keeps failing
//! is paused, so calls to it wait in `retry_wait` instead of piling up
//! connections and timeouts (the Go field report's "melt-down" strategy),
//! and it resumes by itself.
//!
//! Per host: `threshold` failures in a row open the breaker for `cooldown`;
//! then one trial request goes through (half-open): success closes it,
//! failure opens it again for twice as long, up to `max_cooldown`.
//!
//! Pure: every method takes `now` (ms). Bounded: at most `max_hosts` hosts
//! are tracked; when full, the closed host used longest ago is forgotten
//! (it has nothing to remember but a failure count), and if every tracked
//! host is open or on trial, a new host is not tracked (policy: let its
//! calls through, counted by the caller as `untracked`).

use std::collections::HashMap;

/// Settings of the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Failures in a row that open it.
    pub threshold: u32,
    /// How long it stays open the first time, in ms.
    pub cooldown_ms: u64,
    /// The longest it stays open, in ms.
    pub max_cooldown_ms: u64,
    /// Hosts tracked at most.
    pub max_hosts: usize,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            threshold: 5,
            cooldown_ms: 30_000,
            max_cooldown_ms: 5 * 60_000,
            max_hosts: 10_000,
        }
    }
}

/// Whether a call may go to a host now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Closed: go.
    Go,
    /// Half-open: this call is the trial; report its outcome.
    Trial,
    /// Open, or a trial is out: wait until `until_ms`.
    Paused {
        /// When a call may try again.
        until_ms: u64,
    },
    /// Not tracked (the table is full of open hosts): go.
    Untracked,
}

/// A change of a host's breaker, for metrics and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// It opened (after `threshold` failures, or a failed trial).
    Opened {
        /// Until when.
        until_ms: u64,
    },
    /// A trial succeeded: closed again.
    Closed,
}

#[derive(Debug, Clone, Copy)]
enum State {
    Closed { failures: u32 },
    Open { until_ms: u64, cooldown_ms: u64 },
    Trial { cooldown_ms: u64, since_ms: u64 },
}

#[derive(Debug, Clone, Copy)]
struct Host {
    state: State,
    last_used_ms: u64,
}

/// The breakers of every host.
#[derive(Debug)]
pub struct Breakers {
    config: BreakerConfig,
    hosts: HashMap<String, Host>,
}

impl Breakers {
    /// An empty table.
    pub fn new(config: BreakerConfig) -> Breakers {
        Breakers {
            config,
            hosts: HashMap::new(),
        }
    }

    /// How many hosts are open or on trial.
    pub fn open(&self) -> usize {
        self.hosts
            .values()
            .filter(|h| !matches!(h.state, State::Closed { .. }))
            .count()
    }

    /// Whether a call to `host` may go at `now`.
    pub fn admit(&mut self, host: &str, now: u64) -> Admit {
        let Some(h) = self.hosts.get_mut(host) else {
            return if self.make_room() {
                self.hosts.insert(
                    host.to_owned(),
                    Host {
                        state: State::Closed { failures: 0 },
                        last_used_ms: now,
                    },
                );
                Admit::Go
            } else {
                Admit::Untracked
            };
        };
        h.last_used_ms = now;
        match h.state {
            State::Closed { .. } => Admit::Go,
            State::Open {
                until_ms,
                cooldown_ms,
            } if now >= until_ms => {
                h.state = State::Trial {
                    cooldown_ms,
                    since_ms: now,
                };
                Admit::Trial
            }
            State::Open { until_ms, .. } => Admit::Paused { until_ms },
            // A trial that never reported (its caller died) is given up
            // after one cooldown, and another goes.
            State::Trial {
                cooldown_ms,
                since_ms,
            } if now >= since_ms.saturating_add(cooldown_ms) => {
                h.state = State::Trial {
                    cooldown_ms,
                    since_ms: now,
                };
                Admit::Trial
            }
            State::Trial {
                cooldown_ms,
                since_ms,
            } => Admit::Paused {
                until_ms: since_ms.saturating_add(cooldown_ms),
            },
        }
    }

    /// A call to `host` succeeded (any answer the host gave on time
    /// counts: a 4xx is the receiver's verdict, not a sign it is down).
    pub fn success(&mut self, host: &str) -> Option<Transition> {
        let h = self.hosts.get_mut(host)?;
        let was_trial = matches!(h.state, State::Trial { .. });
        h.state = State::Closed { failures: 0 };
        was_trial.then_some(Transition::Closed)
    }

    /// A call to `host` failed (timeout, network error, 5xx).
    pub fn failure(&mut self, host: &str, now: u64) -> Option<Transition> {
        let config = self.config;
        let h = self.hosts.get_mut(host)?;
        let (open, cooldown_ms) = match h.state {
            State::Closed { failures } => {
                let failures = failures.saturating_add(1);
                if failures >= config.threshold {
                    (true, config.cooldown_ms)
                } else {
                    h.state = State::Closed { failures };
                    (false, 0)
                }
            }
            State::Trial { cooldown_ms, .. } => (
                true,
                cooldown_ms.saturating_mul(2).min(config.max_cooldown_ms),
            ),
            // A call admitted before the breaker opened: already open.
            State::Open { .. } => (false, 0),
        };
        if !open {
            return None;
        }
        let until_ms = now.saturating_add(cooldown_ms);
        h.state = State::Open {
            until_ms,
            cooldown_ms,
        };
        Some(Transition::Opened { until_ms })
    }

    /// Room for one more host: whether there is (after forgetting the
    /// closed host used longest ago, if the table is full).
    fn make_room(&mut self) -> bool {
        if self.hosts.len() < self.config.max_hosts {
            return true;
        }
        let oldest = self
            .hosts
            .iter()
            .filter(|(_, h)| matches!(h.state, State::Closed { .. }))
            .min_by_key(|(_, h)| h.last_used_ms)
            .map(|(k, _)| k.clone());
        match oldest {
            Some(k) => {
                self.hosts.remove(&k);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breakers(max_hosts: usize) -> Breakers {
        Breakers::new(BreakerConfig {
            threshold: 3,
            cooldown_ms: 1_000,
            max_cooldown_ms: 3_000,
            max_hosts,
        })
    }

    #[test]
    fn failures_in_a_row_open_it_and_a_success_resets_the_count() {
        let mut b = breakers(10);
        assert_eq!(b.admit("h", 0), Admit::Go);
        assert_eq!(b.failure("h", 0), None);
        assert_eq!(b.failure("h", 0), None);
        assert_eq!(b.success("h"), None);
        assert_eq!(b.failure("h", 0), None);
        assert_eq!(b.failure("h", 0), None);
        assert_eq!(
            b.failure("h", 10),
            Some(Transition::Opened { until_ms: 1_010 })
        );
        assert_eq!(b.open(), 1);
        assert_eq!(b.admit("h", 500), Admit::Paused { until_ms: 1_010 });
        assert_eq!(b.admit("other", 500), Admit::Go, "per host");
    }

    #[test]
    fn one_trial_after_the_cooldown_closes_or_reopens_for_longer() {
        let mut b = breakers(10);
        b.admit("h", 0);
        for _ in 0..3 {
            b.failure("h", 0);
        }
        assert_eq!(b.admit("h", 1_000), Admit::Trial);
        assert_eq!(
            b.admit("h", 1_001),
            Admit::Paused { until_ms: 2_000 },
            "one trial at a time"
        );
        assert_eq!(
            b.failure("h", 1_100),
            Some(Transition::Opened { until_ms: 3_100 })
        );
        assert_eq!(b.admit("h", 3_100), Admit::Trial);
        assert_eq!(
            b.failure("h", 3_100),
            Some(Transition::Opened { until_ms: 6_100 }),
            "doubling, up to the most"
        );
        assert_eq!(b.admit("h", 6_100), Admit::Trial);
        assert_eq!(b.success("h"), Some(Transition::Closed));
        assert_eq!(b.admit("h", 6_101), Admit::Go);
        assert_eq!(b.open(), 0);
    }

    #[test]
    fn a_trial_that_never_reports_is_given_up() {
        let mut b = breakers(10);
        b.admit("h", 0);
        for _ in 0..3 {
            b.failure("h", 0);
        }
        assert_eq!(b.admit("h", 1_000), Admit::Trial);
        assert_eq!(
            b.admit("h", 2_000),
            Admit::Trial,
            "the first trial's caller is gone"
        );
    }

    #[test]
    fn the_table_is_bounded() {
        let mut b = breakers(2);
        b.admit("a", 0);
        b.admit("b", 1);
        assert_eq!(
            b.admit("c", 2),
            Admit::Go,
            "a, the oldest closed, is forgotten"
        );
        for host in ["b", "c"] {
            for _ in 0..3 {
                b.failure(host, 3);
            }
        }
        assert_eq!(
            b.admit("d", 4),
            Admit::Untracked,
            "every tracked host is open"
        );
        assert_eq!(b.failure("d", 4), None);
        assert_eq!(b.open(), 2);
    }
}
