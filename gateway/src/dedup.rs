//! Duplicate suppression by notification id within a time window: a
//! notification's `id` is its idempotency key, in both modes alike.
//!
//! The same notification can arrive twice. Standalone: a backend that
//! retries a publish whose answer it did not get, or the delayed firer
//! firing an entry again after its lease ran out. Edge: a backend that
//! publishes to two roots for redundancy, or a router that forwarded a
//! publication and crashed before acking it, so the broker redelivered it.
//! Whatever feeds the hub asks the gateway's one [`DuplicateFilter`]
//! before routing (standalone: [`crate::link::LocalLink`]; edge:
//! [`crate::uplink`]); a repeat within the window reaches no mailbox.
//!
//! Bounded: at most `edge.dedup_max` ids are remembered (the settings keep
//! their `edge.` names from when only edges deduplicated); when full, the
//! oldest is forgotten early (policy `evict-oldest`), which only narrows
//! the window for the oldest ids. Both outcomes are counted:
//! `herald_duplicates_total` and `herald_dedup_evicted_total`.
//!
//! Compact: an id is remembered as a 128-bit keyed hash of it
//! ([`herald_engine::ids`]), with the time it was seen as 8 bytes: about
//! 50 bytes an id with the tables' slack, where keeping the id itself (an
//! `Arc<str>` in both tables) cost about 130.
//!
//! The publish API answers a repeated id as a duplicate before it gets
//! here ([`herald_engine::publish::ledger`]); this filter is what catches
//! the repeats that come the other ways: a root redelivering to an edge,
//! the delayed firer firing an entry again after its lease ran out.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use herald_engine::ids::{IdHasher, IdHashing, IdKey as Key};

use crate::metrics::Metrics;

/// The gateway's one duplicate filter, shared by everything that feeds the
/// hub, counting what it drops and what its bound forgets early.
#[derive(Debug)]
pub struct DuplicateFilter {
    seen: Mutex<Dedup>,
    metrics: Arc<Metrics>,
}

impl DuplicateFilter {
    /// Remember ids for `window`, at most `max` at once; count into
    /// `metrics`.
    pub fn new(window: Duration, max: usize, metrics: Arc<Metrics>) -> Self {
        DuplicateFilter {
            seen: Mutex::new(Dedup::new(window, max)),
            metrics,
        }
    }

    /// Whether the notification `id` may go on to the hub: not seen within
    /// the window. A repeat is counted (`herald_duplicates_total`) and
    /// logged at debug; so is each id the bound forgot early.
    pub fn admit(&self, id: &str, now: Instant) -> bool {
        let first = {
            let mut seen = self.seen.lock();
            let before = seen.evicted_early();
            let first = seen.first_seen(id, now);
            self.metrics
                .dedup_evicted
                .inc_by(seen.evicted_early() - before);
            first
        };
        if !first {
            self.metrics.duplicates.inc();
            tracing::debug!(id, "duplicate dropped");
        }
        first
    }
}

/// Remembered ids, oldest first.
#[derive(Debug)]
pub struct Dedup {
    window: Duration,
    max: usize,
    /// Makes the [`Key`]s.
    hasher: IdHasher,
    seen: HashSet<Key, IdHashing>,
    /// When each was seen (ns after `origin`), oldest first.
    order: VecDeque<(u64, Key)>,
    /// The first `now` seen: times are kept as ns after it.
    origin: Option<Instant>,
    evicted_early: u64,
}

impl Dedup {
    /// Remember ids for `window`, at most `max` at once.
    pub fn new(window: Duration, max: usize) -> Self {
        Dedup {
            window,
            max: max.max(1),
            hasher: IdHasher::new(),
            seen: HashSet::default(),
            order: VecDeque::new(),
            origin: None,
            evicted_early: 0,
        }
    }

    /// `now` as ns after the origin (the first `now` seen; an earlier one
    /// counts as the origin).
    fn offset(&mut self, now: Instant) -> u64 {
        let origin = *self.origin.get_or_insert(now);
        u64::try_from(now.saturating_duration_since(origin).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Whether `id` was not seen within the window; remembers it. Read
    /// [`Dedup::evicted_early`] to count what the bound forgot.
    pub fn first_seen(&mut self, id: &str, now: Instant) -> bool {
        let now = self.offset(now);
        let window = u64::try_from(self.window.as_nanos()).unwrap_or(u64::MAX);
        while let Some((at, old)) = self.order.front() {
            if now.saturating_sub(*at) < window {
                break;
            }
            self.seen.remove(old);
            self.order.pop_front();
        }
        let key = self.hasher.key(id);
        if self.seen.contains(&key) {
            return false;
        }
        if self.order.len() >= self.max
            && let Some((_, old)) = self.order.pop_front()
        {
            self.seen.remove(&old);
            self.evicted_early += 1;
        }
        self.seen.insert(key);
        self.order.push_back((now, key));
        true
    }

    /// Ids forgotten before their window ended because the set was full.
    pub fn evicted_early(&self) -> u64 {
        self.evicted_early
    }

    /// Ids remembered now.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_within_the_window_are_refused() {
        let t0 = Instant::now();
        let mut d = Dedup::new(Duration::from_secs(10), 100);
        assert!(d.first_seen("a", t0));
        assert!(!d.first_seen("a", t0 + Duration::from_secs(9)));
        assert!(d.first_seen("b", t0 + Duration::from_secs(9)));
        // After the window the id is new again.
        assert!(d.first_seen("a", t0 + Duration::from_secs(10)));
    }

    #[test]
    fn distinct_ids_are_told_apart() {
        let t0 = Instant::now();
        let mut d = Dedup::new(Duration::from_secs(60), 1_000_000);
        let ids: Vec<String> = (0..50_000).map(|i| format!("{i:032x}")).collect();
        assert!(ids.iter().all(|id| d.first_seen(id, t0)));
        assert!(ids.iter().all(|id| !d.first_seen(id, t0)));
        assert_eq!(d.len(), 50_000);
    }

    #[test]
    fn the_bound_evicts_the_oldest_and_counts_it() {
        let t0 = Instant::now();
        let mut d = Dedup::new(Duration::from_secs(60), 2);
        assert!(d.first_seen("a", t0));
        assert!(d.first_seen("b", t0));
        assert!(d.first_seen("c", t0));
        assert_eq!(d.len(), 2);
        assert_eq!(d.evicted_early(), 1);
        // "a" was forgotten early; "b" and "c" are still known.
        assert!(d.first_seen("a", t0));
        assert!(!d.first_seen("c", t0));
    }
}
