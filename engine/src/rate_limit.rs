//! Token buckets: the publish rate of an API key, and (in the gateway) the
//! connection rate of a source address. Pure: every call takes `now`, so
//! tests drive time by hand.
//!
//! A bucket holds up to `burst` tokens and gains `per_sec` of them a
//! second; taking `n` tokens needs `n` in the bucket, and a refusal says
//! how long until there will be ([`Refusal::Wait`]), which the HTTP layer
//! rounds up to whole seconds for `Retry-After` ([`retry_after_secs`]).
//!
//! [`KeyedBuckets`] keeps one bucket per key (an address, a user) in a
//! bounded map. Policy when full (`max_keys`): first forget buckets that
//! have refilled (they carry no debt, so nothing is lost), oldest first;
//! if the oldest still owes tokens, forget it anyway (**evict-oldest**: that
//! key starts again with a full burst) and report it, for a metric.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::time::{Duration, Instant};

/// A refill rate and a burst size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    per_sec: f64,
    burst: u32,
}

impl Rate {
    /// `per_sec` tokens a second (a fraction is fine: 0.5 is one every two
    /// seconds), at most `burst` saved up. Both must be positive.
    pub fn new(per_sec: f64, burst: u32) -> Result<Rate, String> {
        if !per_sec.is_finite() || per_sec <= 0.0 {
            return Err(format!("a rate must be a positive number, not {per_sec}"));
        }
        if burst == 0 {
            return Err("a burst must be at least 1".to_owned());
        }
        Ok(Rate { per_sec, burst })
    }

    /// Tokens gained per second.
    pub fn per_sec(&self) -> f64 {
        self.per_sec
    }

    /// Most tokens saved up.
    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// The default burst for a rate: one second's worth, at least 1.
    pub fn default_burst(per_sec: f64) -> u32 {
        (per_sec.ceil() as u32).max(1)
    }
}

/// Why tokens could not be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not enough tokens now; enough after this long.
    Wait(Duration),
    /// More tokens asked at once than the burst: never possible.
    OverBurst,
}

/// One bucket. It does not hold its [`Rate`], so a map of them stays small
/// and a reload can change the rate without losing the state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenBucket {
    tokens: f64,
    updated: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn full(rate: &Rate, now: Instant) -> Self {
        TokenBucket {
            tokens: f64::from(rate.burst),
            updated: now,
        }
    }

    fn refill(&mut self, rate: &Rate, now: Instant) {
        // A `now` before the last update (clocks handed in out of order)
        // adds nothing rather than panicking.
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate.per_sec).min(f64::from(rate.burst));
        self.updated = self.updated.max(now);
    }

    /// Take `n` tokens, or say how long until there are `n`.
    pub fn take(&mut self, rate: &Rate, n: u32, now: Instant) -> Result<(), Refusal> {
        if n > rate.burst {
            return Err(Refusal::OverBurst);
        }
        self.refill(rate, now);
        let need = f64::from(n);
        if self.tokens >= need {
            self.tokens -= need;
            return Ok(());
        }
        let wait = (need - self.tokens) / rate.per_sec;
        Err(Refusal::Wait(Duration::from_secs_f64(wait)))
    }

    /// Whether the bucket has refilled to its burst by `now` (it owes
    /// nothing: forgetting it loses nothing).
    pub fn is_full(&self, rate: &Rate, now: Instant) -> bool {
        let mut probe = *self;
        probe.refill(rate, now);
        probe.tokens >= f64::from(rate.burst)
    }

    /// The same bucket under a new rate (a reload): tokens refilled under
    /// the old one up to `now`, then capped at the new burst.
    pub fn retuned(mut self, old: &Rate, new: &Rate, now: Instant) -> Self {
        self.refill(old, now);
        self.tokens = self.tokens.min(f64::from(new.burst));
        self
    }
}

/// `wait` as a `Retry-After` value: whole seconds, rounded up, at least 1.
pub fn retry_after_secs(wait: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.max(1)
}

/// What [`KeyedBuckets::take`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taken {
    /// Allowed, or how long the key must wait.
    pub verdict: Result<(), Duration>,
    /// Keys forgotten while they still owed tokens, to make room (policy
    /// evict-oldest).
    pub evicted: usize,
}

/// One bucket per key, at most `max_keys` of them (see the module docs for
/// the policy when full).
#[derive(Debug)]
pub struct KeyedBuckets<K> {
    rate: Rate,
    max_keys: usize,
    buckets: HashMap<K, TokenBucket>,
    /// Keys in the order their buckets were made; each key of `buckets`
    /// is here exactly once.
    order: VecDeque<K>,
}

impl<K: Hash + Eq + Clone> KeyedBuckets<K> {
    /// An empty map: buckets of `rate`, at most `max_keys` (at least 1).
    pub fn new(rate: Rate, max_keys: usize) -> Self {
        KeyedBuckets {
            rate,
            max_keys: max_keys.max(1),
            buckets: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Keys tracked now.
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Take one token for `key`.
    pub fn take(&mut self, key: K, now: Instant) -> Taken {
        let rate = self.rate;
        let mut evicted = 0;
        if !self.buckets.contains_key(&key) {
            if self.buckets.len() >= self.max_keys {
                evicted = self.make_room(now);
            }
            self.buckets
                .insert(key.clone(), TokenBucket::full(&rate, now));
            self.order.push_back(key.clone());
        }
        let verdict = match self.buckets.get_mut(&key) {
            Some(bucket) => bucket.take(&rate, 1, now).map_err(|r| match r {
                Refusal::Wait(d) => d,
                // burst >= 1: one token is never over it.
                Refusal::OverBurst => Duration::MAX,
            }),
            None => Ok(()),
        };
        Taken { verdict, evicted }
    }

    /// Free one slot: drop refilled buckets from the oldest end; if the map
    /// is still full, drop the oldest bucket anyway. Returns how many
    /// buckets that still owed tokens were dropped (0 or 1).
    fn make_room(&mut self, now: Instant) -> usize {
        while self.buckets.len() >= self.max_keys {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            let owed = self
                .buckets
                .remove(&oldest)
                .is_some_and(|b| !b.is_full(&self.rate, now));
            if owed {
                return 1;
            }
        }
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_bucket_allows_its_burst_then_refills_at_its_rate() {
        let rate = Rate::new(2.0, 3).unwrap();
        let t0 = Instant::now();
        let mut b = TokenBucket::full(&rate, t0);
        for _ in 0..3 {
            assert_eq!(b.take(&rate, 1, t0), Ok(()));
        }
        // Empty: the next token comes after 1/2 s.
        assert_eq!(b.take(&rate, 1, t0), Err(Refusal::Wait(ms(500))));
        assert_eq!(b.take(&rate, 1, t0 + ms(250)), Err(Refusal::Wait(ms(250))));
        assert_eq!(b.take(&rate, 1, t0 + ms(500)), Ok(()));
        // Long idle: refills to the burst, not beyond.
        let later = t0 + Duration::from_secs(60);
        assert!(b.is_full(&rate, later));
        assert_eq!(b.take(&rate, 3, later), Ok(()));
        assert_eq!(
            b.take(&rate, 2, later),
            Err(Refusal::Wait(Duration::from_secs(1)))
        );
    }

    #[test]
    fn more_than_the_burst_at_once_is_never_possible() {
        let rate = Rate::new(100.0, 10).unwrap();
        let t0 = Instant::now();
        let mut b = TokenBucket::full(&rate, t0);
        assert_eq!(b.take(&rate, 11, t0), Err(Refusal::OverBurst));
        assert_eq!(b.take(&rate, 10, t0), Ok(()), "a refusal takes nothing");
    }

    #[test]
    fn fractional_rates_and_time_going_backwards() {
        let rate = Rate::new(0.5, 1).unwrap();
        let t0 = Instant::now() + Duration::from_secs(10);
        let mut b = TokenBucket::full(&rate, t0);
        assert_eq!(b.take(&rate, 1, t0), Ok(()));
        assert_eq!(
            b.take(&rate, 1, t0 + Duration::from_secs(1)),
            Err(Refusal::Wait(Duration::from_secs(1)))
        );
        // An earlier `now` adds nothing and does not panic.
        assert!(matches!(
            b.take(&rate, 1, t0 - Duration::from_secs(5)),
            Err(Refusal::Wait(_))
        ));
        assert_eq!(b.take(&rate, 1, t0 + Duration::from_secs(2)), Ok(()));
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(ms(1)), 1);
        assert_eq!(retry_after_secs(ms(1000)), 1);
        assert_eq!(retry_after_secs(ms(1001)), 2);
        assert_eq!(retry_after_secs(Duration::from_secs(30)), 30);
    }

    #[test]
    fn rates_are_validated() {
        assert!(Rate::new(0.0, 1).is_err());
        assert!(Rate::new(-1.0, 1).is_err());
        assert!(Rate::new(f64::NAN, 1).is_err());
        assert!(Rate::new(f64::INFINITY, 1).is_err());
        assert!(Rate::new(1.0, 0).is_err());
        assert_eq!(Rate::default_burst(0.2), 1);
        assert_eq!(Rate::default_burst(7.5), 8);
    }

    #[test]
    fn a_retuned_bucket_keeps_its_debt_within_the_new_burst() {
        let old = Rate::new(1.0, 10).unwrap();
        let new = Rate::new(1.0, 4).unwrap();
        let t0 = Instant::now();
        let mut b = TokenBucket::full(&old, t0);
        b.take(&old, 8, t0).unwrap();
        let mut b = b.retuned(&old, &new, t0);
        assert_eq!(b.take(&new, 2, t0), Ok(()));
        assert!(b.take(&new, 1, t0).is_err(), "the debt carried over");
        let full = TokenBucket::full(&old, t0).retuned(&old, &new, t0);
        assert!(full.is_full(&new, t0), "capped at the new burst");
    }

    #[test]
    fn keys_have_their_own_buckets() {
        let mut m = KeyedBuckets::new(Rate::new(1.0, 1).unwrap(), 10);
        let t0 = Instant::now();
        assert_eq!(m.take("a", t0).verdict, Ok(()));
        assert_eq!(m.take("a", t0).verdict, Err(Duration::from_secs(1)));
        assert_eq!(m.take("b", t0).verdict, Ok(()));
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn a_full_map_forgets_refilled_buckets_first_then_the_oldest() {
        let rate = Rate::new(1.0, 1).unwrap();
        let mut m = KeyedBuckets::new(rate, 2);
        let t0 = Instant::now();
        m.take("a", t0);
        m.take("b", t0 + ms(900));
        // At 1.5 s "a" has refilled (it owes nothing), "b" has not: a new
        // key takes the place of "a" without an eviction.
        let t1 = t0 + ms(1500);
        let taken = m.take("c", t1);
        assert_eq!((taken.verdict, taken.evicted), (Ok(()), 0));
        assert_eq!(m.len(), 2);
        // Now "b" and "c" both owe tokens: the oldest ("b") is evicted and
        // counted, and comes back with a full burst.
        let taken = m.take("d", t1);
        assert_eq!((taken.verdict, taken.evicted), (Ok(()), 1));
        assert_eq!(m.len(), 2);
        assert_eq!(m.take("c", t1).verdict, Err(Duration::from_secs(1)));
        let taken = m.take("b", t1);
        assert_eq!(taken.verdict, Ok(()), "an evicted key starts again full");
        assert_eq!(taken.evicted, 1, "and took the place of the oldest, c");
        assert_eq!(m.len(), 2);
    }
}
