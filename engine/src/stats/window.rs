//! Rolling windows of per-topic counts: pure, every call takes `now`
//! (milliseconds since the epoch), memory fixed at construction.
//!
//! Three rings of buckets, every event recorded into each:
//!
//! | window | buckets | width | granularity of "last ..." |
//! |---|---|---|---|
//! | last minute | 60 | 1 s | the current second and the 59 before |
//! | last hour | 60 | 1 min | the current minute and the 59 before |
//! | last day | 24 | 1 h | the current hour and the 23 before |
//!
//! A bucket remembers which interval it holds (its epoch); one left from an
//! earlier lap of the ring is cleared when written and skipped when read, so
//! a quiet topic costs nothing to keep and never reports old counts. A
//! window is exact to its bucket width: "last hour" read at 10:30:20 covers
//! 09:31:00 to 10:30:20.

use serde::{Deserialize, Serialize};

/// What is counted per topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Event {
    /// A publication accepted (HTTP or AMQP, delayed or not).
    Accepted,
    /// A message queued to a browser session (one per session).
    Delivered,
    /// A callback that succeeded.
    CallbacksSucceeded,
    /// A callback attempt that failed (retried or dead).
    CallbacksFailed,
    /// A failed callback put back to be tried again.
    CallbacksRetried,
    /// A callback given up on (dead letter).
    CallbacksDead,
    /// A callback its recheck declined.
    CallbacksDeclined,
    /// A `when-online` notification held for an offline user.
    Held,
    /// A delayed notification cancelled.
    Cancelled,
    /// A held notification whose limit passed.
    Expired,
}

/// How many [`Event`]s there are.
pub const EVENTS: usize = 10;

impl Event {
    /// Every event, in the order of [`Counts::events`].
    pub const ALL: [Event; EVENTS] = [
        Event::Accepted,
        Event::Delivered,
        Event::CallbacksSucceeded,
        Event::CallbacksFailed,
        Event::CallbacksRetried,
        Event::CallbacksDead,
        Event::CallbacksDeclined,
        Event::Held,
        Event::Cancelled,
        Event::Expired,
    ];

    /// The JSON field and the `event` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Event::Accepted => "accepted",
            Event::Delivered => "delivered",
            Event::CallbacksSucceeded => "callbacks_succeeded",
            Event::CallbacksFailed => "callbacks_failed",
            Event::CallbacksRetried => "callbacks_retried",
            Event::CallbacksDead => "callbacks_dead",
            Event::CallbacksDeclined => "callbacks_declined",
            Event::Held => "held",
            Event::Cancelled => "cancelled",
            Event::Expired => "expired",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Upper bounds (ms, inclusive) of the lateness buckets; a last bucket
/// takes everything above.
pub const LATENESS_BOUNDS_MS: [u64; 15] = [
    1, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000,
];
const LATENESS_BUCKETS: usize = LATENESS_BOUNDS_MS.len() + 1;

/// Firing lateness as a histogram that adds up (so parts of a cluster
/// merge), with the exact largest value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lateness {
    /// Counts per bucket of [`LATENESS_BOUNDS_MS`] (and one above).
    pub buckets: [u64; LATENESS_BUCKETS],
    /// The largest lateness recorded, ms.
    pub max_ms: u64,
}

impl Lateness {
    fn observe(&mut self, ms: u64) {
        let i = LATENESS_BOUNDS_MS
            .iter()
            .position(|&b| ms <= b)
            .unwrap_or(LATENESS_BOUNDS_MS.len());
        self.buckets[i] += 1;
        self.max_ms = self.max_ms.max(ms);
    }

    fn add(&mut self, other: &Lateness) {
        for (a, b) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *a = a.saturating_add(*b);
        }
        self.max_ms = self.max_ms.max(other.max_ms);
    }

    /// How many values were recorded.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The `q` quantile (0 < q <= 1), ms: the upper bound of the bucket it
    /// falls in, never above the largest value; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
        let mut seen = 0;
        for (i, c) in self.buckets.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let bound = LATENESS_BOUNDS_MS.get(i).copied().unwrap_or(self.max_ms);
                return Some(bound.min(self.max_ms) as f64);
            }
        }
        Some(self.max_ms as f64)
    }
}

/// Counts over some span: one per [`Event`] and the lateness.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// By [`Event`], in the order of [`Event::ALL`].
    pub events: [u64; EVENTS],
    /// Firing lateness.
    pub lateness: Lateness,
}

impl Counts {
    /// The count of `event`.
    pub fn get(&self, event: Event) -> u64 {
        self.events[event.index()]
    }

    /// Add `other` in.
    pub fn add(&mut self, other: &Counts) {
        for (a, b) in self.events.iter_mut().zip(other.events.iter()) {
            *a = a.saturating_add(*b);
        }
        self.lateness.add(&other.lateness);
    }

    fn clear(&mut self) {
        *self = Counts::default();
    }
}

/// The three windows at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Windows {
    /// The last minute.
    pub last_minute: Counts,
    /// The last hour.
    pub last_hour: Counts,
    /// The last day.
    pub last_day: Counts,
}

impl Windows {
    /// Add `other` in, window by window.
    pub fn add(&mut self, other: &Windows) {
        self.last_minute.add(&other.last_minute);
        self.last_hour.add(&other.last_hour);
        self.last_day.add(&other.last_day);
    }
}

#[derive(Debug, Clone, Default)]
struct Slot {
    /// 1 + the interval index this bucket holds (0: never written).
    epoch: u64,
    counts: Counts,
}

#[derive(Debug, Clone)]
struct Ring {
    width_ms: u64,
    slots: Vec<Slot>,
}

impl Ring {
    fn new(width_ms: u64, len: usize) -> Ring {
        Ring {
            width_ms,
            slots: vec![Slot::default(); len],
        }
    }

    fn slot(&mut self, now: u64) -> &mut Counts {
        let epoch = now / self.width_ms + 1;
        let len = self.slots.len() as u64;
        let slot = &mut self.slots[(epoch % len) as usize];
        if slot.epoch != epoch {
            slot.epoch = epoch;
            slot.counts.clear();
        }
        &mut slot.counts
    }

    fn sum(&self, now: u64) -> Counts {
        let epoch = now / self.width_ms + 1;
        let len = self.slots.len() as u64;
        let mut total = Counts::default();
        for s in &self.slots {
            // Written in this lap of the ring (not later than now: a clock
            // that stepped back leaves them out until it catches up).
            if s.epoch != 0 && s.epoch <= epoch && epoch - s.epoch < len {
                total.add(&s.counts);
            }
        }
        total
    }
}

/// One topic's rolling counts (about 32 KiB, fixed).
#[derive(Debug, Clone)]
pub struct Rolling {
    minute: Ring,
    hour: Ring,
    day: Ring,
}

impl Default for Rolling {
    fn default() -> Self {
        Rolling::new()
    }
}

impl Rolling {
    /// Empty windows.
    pub fn new() -> Rolling {
        Rolling {
            minute: Ring::new(1_000, 60),
            hour: Ring::new(60_000, 60),
            day: Ring::new(3_600_000, 24),
        }
    }

    fn each(&mut self, now: u64, f: impl Fn(&mut Counts)) {
        f(self.minute.slot(now));
        f(self.hour.slot(now));
        f(self.day.slot(now));
    }

    /// `n` times `event` at `now`.
    pub fn record(&mut self, event: Event, n: u64, now: u64) {
        self.each(now, |c| {
            let e = &mut c.events[event.index()];
            *e = e.saturating_add(n);
        });
    }

    /// A notification fired `ms` after its due time, at `now`.
    pub fn lateness(&mut self, ms: u64, now: u64) {
        self.each(now, |c| c.lateness.observe(ms));
    }

    /// The windows as of `now`.
    pub fn windows(&self, now: u64) -> Windows {
        Windows {
            last_minute: self.minute.sum(now),
            last_hour: self.hour.sum(now),
            last_day: self.day.sum(now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_800_000_000_000; // a whole hour

    #[test]
    fn an_event_stays_in_each_window_for_its_length() {
        let mut r = Rolling::new();
        r.record(Event::Accepted, 3, T0 + 500);
        let w = r.windows(T0 + 500);
        assert_eq!(w.last_minute.get(Event::Accepted), 3);
        assert_eq!(w.last_hour.get(Event::Accepted), 3);
        assert_eq!(w.last_day.get(Event::Accepted), 3);
        // 59.9 s later: still in the minute (its second is the 60th back).
        assert_eq!(r.windows(T0 + 59_999).last_minute.get(Event::Accepted), 3);
        // A minute later it has left the minute, not the hour.
        let w = r.windows(T0 + 60_000);
        assert_eq!(w.last_minute.get(Event::Accepted), 0);
        assert_eq!(w.last_hour.get(Event::Accepted), 3);
        // An hour later it has left the hour, not the day.
        let w = r.windows(T0 + 3_600_000);
        assert_eq!(w.last_hour.get(Event::Accepted), 0);
        assert_eq!(w.last_day.get(Event::Accepted), 3);
        // A day later it is gone.
        assert_eq!(r.windows(T0 + 86_400_000), Windows::default());
    }

    #[test]
    fn a_bucket_from_an_earlier_lap_is_cleared_not_added_to() {
        let mut r = Rolling::new();
        r.record(Event::Delivered, 5, T0);
        // Same second of the ring, one minute on: the old count is gone.
        r.record(Event::Delivered, 2, T0 + 60_000);
        let w = r.windows(T0 + 60_000);
        assert_eq!(w.last_minute.get(Event::Delivered), 2);
        assert_eq!(w.last_hour.get(Event::Delivered), 7);
    }

    #[test]
    fn events_are_counted_apart_and_windows_add_up() {
        let mut r = Rolling::new();
        for s in 0..120 {
            r.record(Event::Held, 1, T0 + s * 1_000);
        }
        r.record(Event::CallbacksDead, 1, T0 + 119_000);
        let w = r.windows(T0 + 119_000);
        assert_eq!(w.last_minute.get(Event::Held), 60);
        assert_eq!(w.last_hour.get(Event::Held), 120);
        assert_eq!(w.last_minute.get(Event::CallbacksDead), 1);
        assert_eq!(w.last_minute.get(Event::Accepted), 0);
        let mut sum = w.clone();
        sum.add(&w);
        assert_eq!(sum.last_hour.get(Event::Held), 240);
    }

    #[test]
    fn a_clock_that_steps_back_does_not_report_the_future() {
        let mut r = Rolling::new();
        r.record(Event::Accepted, 1, T0 + 10_000);
        assert_eq!(r.windows(T0).last_minute.get(Event::Accepted), 0);
        assert_eq!(r.windows(T0 + 10_000).last_minute.get(Event::Accepted), 1);
    }

    #[test]
    fn lateness_quantiles_come_from_buckets_capped_by_the_max() {
        let mut r = Rolling::new();
        assert_eq!(r.windows(T0).last_minute.lateness.quantile(0.5), None);
        for ms in [0, 3, 3, 4, 7, 8, 20, 40, 90, 1_700] {
            r.lateness(ms, T0);
        }
        let l = r.windows(T0).last_minute.lateness;
        assert_eq!(l.count(), 10);
        assert_eq!(
            l.quantile(0.5),
            Some(10.0),
            "the 5th of 10 is in the bucket up to 10 ms"
        );
        assert_eq!(l.quantile(0.99), Some(1_700.0));
        assert_eq!(l.max_ms, 1_700);
        let mut one = Lateness::default();
        one.observe(400_000);
        assert_eq!(
            one.quantile(0.5),
            Some(400_000.0),
            "the open bucket answers the max"
        );
        // Gone after a day.
        assert_eq!(r.windows(T0 + 86_400_000).last_day.lateness.count(), 0);
    }
}
