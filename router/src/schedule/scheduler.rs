//! The scheduler: when to claim, as a state machine that takes `now`.
//!
//! It holds the near window of the firing queue in memory, `(fire time,
//! id)` ordered (ties broken by id, so runs are deterministic), fed from
//! the store ([`Store::upcoming`](super::store::Store::upcoming)) and from
//! what this process accepts. It never touches the store itself: the shell
//! (the firer) asks [`Scheduler::poll`] what to do, does it, and
//! reports back. The window is a wake-up index, not the truth: a claim
//! takes whatever the store says is due, so an entry cancelled or claimed
//! by another router meanwhile costs nothing but a wake-up.
//!
//! Bounds: at most `max_window` items. Full, it keeps the earliest and
//! forgets the rest (policy *keep-earliest*), and refills from the store no
//! later than the earliest fire time it forgot, so nothing fires late
//! because of the bound. Entries accepted by other processes reach the
//! window at the next refill (every `refill_every_ms`): that is their
//! lateness bound if the process that accepted them dies first.
//!
//! Piles: beside the window it counts items per [`PILE_BUCKET_MS`] of fire
//! time, so [`Scheduler::pile`] can say when a claim must start for the
//! claims to be done by each item's due time, at a given cost per entry.
//! A steady stream needs no more than the firer's usual claim-ahead; a
//! herd (200,000 due in one second) needs its claims to start seconds
//! earlier.

use std::collections::{BTreeMap, BTreeSet};

use super::entry::Millis;

/// Settings of the [`Scheduler`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// How far ahead a refill looks (ms).
    pub horizon_ms: u64,
    /// Longest time between two refills (ms).
    pub refill_every_ms: u64,
    /// Most items in the window.
    pub max_window: usize,
    /// Most entries one claim takes.
    pub claim_batch: usize,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            horizon_ms: 5_000,
            refill_every_ms: 1_000,
            max_window: 250_000,
            claim_batch: 20_000,
        }
    }
}

/// What the shell should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Read the store's upcoming items up to `until`, at most `limit`, and
    /// hand them to [`Scheduler::refilled`].
    Refill {
        /// Horizon of the read.
        until: Millis,
        /// Most items to read.
        limit: usize,
    },
    /// Something is due: claim up to `limit` entries and report with
    /// [`Scheduler::claimed`].
    Claim {
        /// Most entries to claim.
        limit: usize,
    },
    /// Nothing to do before this time (or before a new entry arrives).
    SleepUntil(Millis),
}

/// Width of the fire-time buckets the window's items are counted in.
pub const PILE_BUCKET_MS: Millis = 10;

/// When a claim must start for the window's items to be claimed by their
/// due time ([`Scheduler::pile`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pile {
    /// The latest time the claims may start.
    pub start: Millis,
    /// How far the claims must reach: every item due by then.
    pub until: Millis,
    /// Items in the window due by `until`.
    pub items: usize,
}

/// The window: `(fire time, id)` items in order, and their count per
/// bucket of [`PILE_BUCKET_MS`] (keyed by the bucket's first millisecond),
/// kept together. A refill's is built off the firer's loop
/// ([`Window::indexed`]) and swapped in ([`Scheduler::install`]).
#[derive(Debug, Clone, Default)]
pub struct Window {
    items: BTreeSet<(Millis, String)>,
    buckets: BTreeMap<Millis, usize>,
    /// The refill it came from read as many as it asked for: the store
    /// may hold more.
    truncated: bool,
}

fn bucket(t: Millis) -> Millis {
    t - t % PILE_BUCKET_MS
}

impl Window {
    /// The items a refill for `limit` read, at most `max_window` of them.
    pub fn indexed(items: Vec<(Millis, String)>, limit: usize, max_window: usize) -> Window {
        let truncated = items.len() >= limit;
        let items: BTreeSet<_> = items.into_iter().take(max_window).collect();
        Window {
            buckets: counted(&items),
            items,
            truncated,
        }
    }

    fn insert(&mut self, item: (Millis, String)) {
        let b = bucket(item.0);
        if self.items.insert(item) {
            *self.buckets.entry(b).or_default() += 1;
        }
    }

    fn pop_last(&mut self) -> Option<(Millis, String)> {
        let last = self.items.pop_last()?;
        let b = bucket(last.0);
        if let Some(n) = self.buckets.get_mut(&b) {
            *n -= 1;
            if *n == 0 {
                self.buckets.remove(&b);
            }
        }
        Some(last)
    }

    /// Drop every item due before `from`.
    fn forget_before(&mut self, from: Millis) {
        self.items = self.items.split_off(&(from, String::new()));
        // Whole buckets before `from` go; the one `from` falls in is
        // counted again.
        let first = bucket(from);
        self.buckets = self.buckets.split_off(&first);
        if self.buckets.contains_key(&first) {
            let end = first.saturating_add(PILE_BUCKET_MS);
            let n = self
                .items
                .range((first, String::new())..(end, String::new()))
                .count();
            if n == 0 {
                self.buckets.remove(&first);
            } else {
                self.buckets.insert(first, n);
            }
        }
    }
}

/// Items per bucket of [`PILE_BUCKET_MS`].
fn counted(items: &BTreeSet<(Millis, String)>) -> BTreeMap<Millis, usize> {
    let mut buckets = BTreeMap::new();
    for (t, _) in items {
        *buckets.entry(bucket(*t)).or_default() += 1;
    }
    buckets
}

/// The in-memory window and the refill clock.
#[derive(Debug, Clone)]
pub struct Scheduler {
    config: SchedulerConfig,
    window: Window,
    next_refill: Millis,
}

impl Scheduler {
    /// An empty scheduler that refills at its first poll.
    pub fn new(config: SchedulerConfig) -> Self {
        Scheduler {
            config,
            window: Window::default(),
            next_refill: 0,
        }
    }

    /// The settings.
    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// Items in the window.
    pub fn len(&self) -> usize {
        self.window.items.len()
    }

    /// Whether the window is empty.
    pub fn is_empty(&self) -> bool {
        self.window.items.is_empty()
    }

    /// The earliest fire time in the window.
    pub fn next_fire(&self) -> Option<Millis> {
        self.window.items.first().map(|(t, _)| *t)
    }

    /// What to do at `now`.
    pub fn poll(&self, now: Millis) -> Action {
        // Claim before refilling: a claim always makes progress (it takes
        // entries out of the queue), so a truncated refill whose window is
        // all due cannot loop.
        match self.next_fire() {
            Some(t) if t <= now => Action::Claim {
                limit: self.config.claim_batch,
            },
            _ if now >= self.next_refill => Action::Refill {
                until: now.saturating_add(self.config.horizon_ms),
                limit: self.config.max_window,
            },
            Some(t) => Action::SleepUntil(t.min(self.next_refill)),
            None => Action::SleepUntil(self.next_refill),
        }
    }

    /// When claims taking `per_entry_us` per entry must start so that
    /// every item of the window due by `within` is claimed by its due
    /// time, and how far they must reach. `None` when nothing is due by
    /// `within`. Items count from the start of their bucket (up to
    /// [`PILE_BUCKET_MS`] early), and claims reach the end of the bucket
    /// that needs the earliest start.
    pub fn pile(&self, within: Millis, per_entry_us: u64) -> Option<Pile> {
        let mut items = 0usize;
        let mut best: Option<Pile> = None;
        for (&bucket, &n) in self.window.buckets.range(..=within) {
            items += n;
            let work_ms = (items as u64).saturating_mul(per_entry_us) / 1_000;
            let start = bucket.saturating_sub(work_ms);
            if best.is_none_or(|b| start <= b.start) {
                best = Some(Pile {
                    start,
                    until: bucket + (PILE_BUCKET_MS - 1),
                    items,
                });
            }
        }
        best
    }

    /// Whether the bucket counts are those of the window (tests).
    #[cfg(test)]
    fn buckets_match(&self) -> bool {
        counted(&self.window.items) == self.window.buckets
    }

    /// The store's upcoming items, read at `now` for an
    /// [`Action::Refill`] with `limit`: they replace the window.
    pub fn refilled(&mut self, now: Millis, items: Vec<(Millis, String)>, limit: usize) {
        let window = Window::indexed(items, limit, self.config.max_window);
        self.install(now, window);
    }

    /// [`Scheduler::refilled`] with the window indexed beforehand
    /// ([`Window::indexed`], off the caller's loop: indexing a quarter of
    /// a million ids takes milliseconds). Answers the window it replaced,
    /// for the caller to drop where that costs nothing.
    pub fn install(&mut self, now: Millis, window: Window) -> Window {
        let old = std::mem::replace(&mut self.window, window);
        self.next_refill = now.saturating_add(self.config.refill_every_ms);
        if self.window.truncated
            && let Some((last, _)) = self.window.items.last()
        {
            // The store has more than the window holds: read again by the
            // time the window runs out.
            self.next_refill = self.next_refill.min(*last);
        }
        old
    }

    /// An entry this process accepted (or released for a retry) fires at
    /// `fire_at`.
    pub fn scheduled(&mut self, fire_at: Millis, id: String) {
        if self.len() < self.config.max_window {
            self.window.insert((fire_at, id));
            return;
        }
        let later_than_all = self.window.items.last().is_some_and(|(t, _)| fire_at >= *t);
        if later_than_all {
            // keep-earliest: forget the newcomer, refill before it is due.
            self.next_refill = self.next_refill.min(fire_at);
            return;
        }
        self.window.insert((fire_at, id));
        if let Some((forgotten, _)) = self.window.pop_last() {
            self.next_refill = self.next_refill.min(forgotten);
        }
    }

    /// A claim at `now` for `limit` returned `got` entries. Fewer than
    /// asked means nothing else is due: everything up to `now` leaves the
    /// window (claimed here, by another router, or cancelled). A full batch
    /// means more may be due: the window stays, and the next poll claims
    /// again.
    pub fn claimed(&mut self, now: Millis, got: usize, limit: usize) {
        if got < limit {
            self.window.forget_before(now.saturating_add(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn config(max_window: usize) -> SchedulerConfig {
        SchedulerConfig {
            horizon_ms: 1_000,
            refill_every_ms: 500,
            max_window,
            claim_batch: 3,
        }
    }

    #[test]
    fn first_poll_refills_then_sleeps_until_the_first_item() {
        let mut s = Scheduler::new(config(10));
        assert_eq!(
            s.poll(100),
            Action::Refill {
                until: 1_100,
                limit: 10
            }
        );
        s.refilled(100, vec![(300, "a".into())], 10);
        assert_eq!(s.poll(100), Action::SleepUntil(300));
        assert_eq!(s.poll(300), Action::Claim { limit: 3 });
        s.claimed(300, 1, 3);
        assert_eq!(s.poll(300), Action::SleepUntil(600), "next refill");
    }

    #[test]
    fn ties_are_ordered_by_id_and_a_full_claim_claims_again() {
        let mut s = Scheduler::new(config(10));
        s.refilled(0, vec![], 10);
        for id in ["c", "a", "b", "d"] {
            s.scheduled(50, id.into());
        }
        assert_eq!(s.poll(50), Action::Claim { limit: 3 });
        s.claimed(50, 3, 3);
        assert_eq!(
            s.poll(50),
            Action::Claim { limit: 3 },
            "a full batch: more may be due"
        );
        s.claimed(50, 1, 3);
        assert!(s.is_empty());
    }

    #[test]
    fn a_full_window_keeps_the_earliest_and_refills_before_the_forgotten() {
        let mut s = Scheduler::new(config(2));
        s.refilled(0, vec![], 2);
        s.scheduled(100, "a".into());
        s.scheduled(300, "c".into());
        s.scheduled(200, "b".into());
        assert_eq!(s.len(), 2);
        assert_eq!(s.next_fire(), Some(100));
        s.scheduled(400, "d".into());
        assert_eq!(s.len(), 2);
        s.claimed(200, 0, 3);
        assert!(s.is_empty());
        assert_eq!(
            s.poll(200),
            Action::SleepUntil(300),
            "refill before c was due"
        );
        assert_eq!(
            s.poll(300),
            Action::Refill {
                until: 1_300,
                limit: 2
            }
        );
    }

    #[test]
    fn a_pile_starts_its_claims_early_enough_to_be_done_when_due() {
        let mut s = Scheduler::new(config(10_000));
        s.refilled(0, vec![], 10_000);
        assert_eq!(s.pile(100_000, 1_000), None, "nothing in the window");
        // A stream of one every 10 ms: no claim needs to start before its
        // first item is due.
        for i in 0..100u64 {
            s.scheduled(5_000 + 10 * i, format!("s{i:03}"));
        }
        let p = s.pile(100_000, 1_000).unwrap();
        assert_eq!((p.start, p.until, p.items), (4_999, 5_009, 1));
        // 3,000 more due at 6,005, at 1 ms each: claims must start 3.1 s
        // before (the stream's 100 items and the pile), reaching the
        // pile's bucket.
        for i in 0..3_000u64 {
            s.scheduled(6_005, format!("h{i:04}"));
        }
        let p = s.pile(100_000, 1_000).unwrap();
        assert_eq!((p.start, p.until, p.items), (6_000 - 3_100, 6_009, 3_100));
        // Looking no further than the stream, the pile is not seen.
        assert_eq!(s.pile(5_999, 1_000).unwrap().until, 5_009);
        // Once claimed up to the pile's end, only the stream's tail is left.
        s.claimed(6_009, 10, 3_000);
        assert_eq!(s.len(), 0);
        assert_eq!(s.pile(100_000, 1_000), None);
    }

    #[test]
    fn a_truncated_refill_reads_again_when_the_window_runs_out() {
        let mut s = Scheduler::new(config(2));
        s.refilled(0, vec![(10, "a".into()), (20, "b".into())], 2);
        assert_eq!(s.poll(0), Action::SleepUntil(10));
        s.claimed(20, 0, 3);
        assert!(matches!(s.poll(20), Action::Refill { .. }));
    }

    /// The shell, simulated: a store of (fire time, id), one scheduler,
    /// time moving from wake-up to wake-up.
    struct Sim {
        sched: Scheduler,
        store: BTreeMap<(Millis, String), ()>,
        now: Millis,
        fired: Vec<(Millis, Millis, String)>,
    }

    impl Sim {
        /// Do what the scheduler says until it sleeps past `now`.
        fn settle(&mut self) {
            for _ in 0..10_000 {
                match self.sched.poll(self.now) {
                    Action::Refill { until, limit } => {
                        let items: Vec<_> = self
                            .store
                            .keys()
                            .filter(|(t, _)| *t <= until)
                            .take(limit)
                            .cloned()
                            .collect();
                        self.sched.refilled(self.now, items, limit);
                    }
                    Action::Claim { limit } => {
                        let due: Vec<_> = self
                            .store
                            .keys()
                            .filter(|(t, _)| *t <= self.now)
                            .take(limit)
                            .cloned()
                            .collect();
                        for key in &due {
                            self.store.remove(key);
                            self.fired.push((key.0, self.now, key.1.clone()));
                        }
                        self.sched.claimed(self.now, due.len(), limit);
                    }
                    Action::SleepUntil(t) => {
                        assert!(t > self.now, "sleep until {t} at {}", self.now);
                        return;
                    }
                }
            }
            panic!("the scheduler never slept");
        }

        fn advance_to(&mut self, target: Millis) {
            loop {
                self.settle();
                let Action::SleepUntil(t) = self.sched.poll(self.now) else {
                    unreachable!("settled")
                };
                if t > target {
                    self.now = target;
                    self.settle();
                    return;
                }
                self.now = t;
            }
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// Accepted here, firing `delay` after now.
        Local(u64),
        /// Accepted by another router (store only).
        Remote(u64),
        /// Time passes.
        Advance(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u64..3_000).prop_map(Op::Local),
            (0u64..3_000).prop_map(Op::Remote),
            (1u64..800).prop_map(Op::Advance),
        ]
    }

    proptest! {
        /// Against a model of the store: nothing fires early; everything
        /// accepted here fires exactly at its time; everything accepted
        /// elsewhere fires within one refill period; the window stays
        /// within its bound.
        #[test]
        fn fires_on_time_never_early(ops in proptest::collection::vec(op(), 1..60), max_window in 1usize..6) {
            let cfg = config(max_window);
            let mut sim = Sim { sched: Scheduler::new(cfg), store: BTreeMap::new(), now: 1_000, fired: vec![] };
            let mut remote = std::collections::HashSet::new();
            for (i, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Local(d) => {
                        let key = (sim.now + d, format!("l{i}"));
                        sim.store.insert(key.clone(), ());
                        sim.sched.scheduled(key.0, key.1);
                        sim.settle();
                    }
                    Op::Remote(d) => {
                        let key = (sim.now + d, format!("r{i}"));
                        remote.insert(key.1.clone());
                        sim.store.insert(key, ());
                    }
                    Op::Advance(d) => sim.advance_to(sim.now + d),
                }
                prop_assert!(sim.sched.len() <= max_window);
                prop_assert!(sim.sched.buckets_match(), "bucket counts drifted from the window");
            }
            let end = sim.now + 5_000;
            sim.advance_to(end);
            prop_assert!(sim.store.is_empty(), "left over: {:?}", sim.store);
            for (due, at, id) in &sim.fired {
                prop_assert!(at >= due, "{id} fired early: due {due}, at {at}");
                let bound = if remote.contains(id) { cfg.refill_every_ms } else { 0 };
                prop_assert!(at - due <= bound, "{id} late: due {due}, at {at}");
            }
        }
    }
}
