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
//! Refills: every `refill_every_ms` it reads what came into its horizon
//! since the last read (fire times after the last read's end), and every
//! `full_refill_every_ms` the whole horizon, which replaces the window.
//! Reading only the new slice keeps the store's and this process's work
//! per refill to a refill period's worth of entries, not a horizon's.
//! Entries accepted by this process go straight into the window; entries
//! accepted by other processes with a fire time past the last read's end
//! arrive with the next slice, those before it at the next whole read:
//! `full_refill_every_ms` is their lateness bound if the process that
//! accepted them dies first (that process fires them itself otherwise).
//!
//! Bounds: at most `max_window` items. Full, it keeps the earliest and
//! forgets the rest (policy *keep-earliest*), and reads the store again
//! from the earliest fire time it forgot, no later than that time, so
//! nothing fires late because of the bound.
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
    /// Longest time between two refills that read the whole horizon (ms).
    pub full_refill_every_ms: u64,
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
            full_refill_every_ms: 10_000,
            max_window: 250_000,
            claim_batch: 20_000,
        }
    }
}

/// A read of the store's upcoming items: fire times in `from..=until`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Read {
    /// The earliest fire time read; 0 for the whole horizon.
    pub from: Millis,
    /// Horizon of the read.
    pub until: Millis,
    /// Most items to read.
    pub limit: usize,
}

impl Read {
    /// Whether it reads the whole horizon (its items replace the window)
    /// rather than a slice (its items join the window).
    pub fn is_whole(&self) -> bool {
        self.from == 0
    }
}

/// What the shell should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Read the store's upcoming items as the [`Read`] says and hand them
    /// to [`Scheduler::refilled`].
    Refill(Read),
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

    /// Items held.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    fn insert(&mut self, item: (Millis, String)) {
        let b = bucket(item.0);
        if self.items.insert(item) {
            *self.buckets.entry(b).or_default() += 1;
        }
    }

    /// Add `other`'s items: a bulk merge (a herd's slice of 200,000 ids
    /// inserted one by one held the firer's loop for a tenth of a second),
    /// then the buckets it touched counted again, since items both held
    /// count once.
    fn merge(&mut self, mut other: Window) {
        self.items.append(&mut other.items);
        for (b, _) in other.buckets {
            self.recount(b);
        }
    }

    /// Count bucket `b` (its first millisecond) again from the items.
    fn recount(&mut self, b: Millis) {
        let end = b.saturating_add(PILE_BUCKET_MS);
        let n = self
            .items
            .range((b, String::new())..(end, String::new()))
            .count();
        if n == 0 {
            self.buckets.remove(&b);
        } else {
            self.buckets.insert(b, n);
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
            self.recount(first);
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
    /// When the next refill reads the whole horizon.
    next_whole: Millis,
    /// The window holds every entry the store had (as of its read) with a
    /// fire time up to this (until the first whole read, `next_whole` is 0
    /// and this is not used).
    covered: Millis,
    /// What happened while a read was under way ([`Scheduler::reading`]).
    during_read: Option<Aside>,
}

/// Kept aside while a read is under way, for [`Scheduler::install`]: a
/// whole read replaces the window and may have missed items scheduled
/// meanwhile, and a read sets what the window covers, which forgetting
/// meanwhile must lower.
#[derive(Debug, Clone, Default)]
struct Aside {
    /// Whether the read is whole: only then are `items` kept (a slice
    /// joins the window, which holds them already).
    whole: bool,
    /// Items scheduled; at most `max_window` (beyond, keep-earliest).
    items: Vec<(Millis, String)>,
    /// The earliest fire time forgotten.
    forgot: Option<Millis>,
}

impl Scheduler {
    /// An empty scheduler that reads the whole horizon at its first poll.
    pub fn new(config: SchedulerConfig) -> Self {
        Scheduler {
            config,
            window: Window::default(),
            next_refill: 0,
            next_whole: 0,
            covered: 0,
            during_read: None,
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
            _ if now >= self.next_refill => {
                let from = if now < self.next_whole {
                    self.covered.saturating_add(1)
                } else {
                    0
                };
                Action::Refill(Read {
                    from,
                    until: now.saturating_add(self.config.horizon_ms),
                    limit: self.config.max_window,
                })
            }
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

    /// The first bucket (its first millisecond) of items due after `t`:
    /// where [`Scheduler::pile`] looking no further than `t` stops seeing.
    pub fn next_bucket_after(&self, t: Millis) -> Option<Millis> {
        use std::ops::Bound::{Excluded, Unbounded};
        self.window
            .buckets
            .range((Excluded(t), Unbounded))
            .next()
            .map(|(b, _)| *b)
    }

    /// Whether the bucket counts are those of the window (tests).
    #[cfg(test)]
    fn buckets_match(&self) -> bool {
        counted(&self.window.items) == self.window.buckets
    }

    /// The store's upcoming items, read at `now` for an
    /// [`Action::Refill`]: a whole read replaces the window, a slice joins
    /// it.
    pub fn refilled(&mut self, now: Millis, read: Read, items: Vec<(Millis, String)>) {
        let window = Window::indexed(items, read.limit, self.config.max_window);
        self.install(now, read, window);
    }

    /// [`Scheduler::refilled`] with the items indexed beforehand
    /// ([`Window::indexed`], off the caller's loop: indexing a quarter of
    /// a million ids takes milliseconds). Answers what is left to drop
    /// (the replaced window), for the caller to drop where that costs
    /// nothing.
    pub fn install(&mut self, now: Millis, read: Read, window: Window) -> Window {
        // A read that came back full may have left more from its last
        // item on: read again from there, by the time it is due.
        let cut = window
            .truncated
            .then(|| window.items.last().map(|(t, _)| *t))
            .flatten();
        self.next_refill = now.saturating_add(self.config.refill_every_ms);
        let rest = if read.is_whole() {
            self.next_whole = now.saturating_add(self.config.full_refill_every_ms);
            std::mem::replace(&mut self.window, window)
        } else {
            self.window.merge(window);
            Window::default()
        };
        self.next_refill = self.next_refill.min(self.next_whole);
        self.covered = read.until;
        let aside = self.during_read.take().unwrap_or_default();
        for t in cut.into_iter().chain(aside.forgot) {
            self.forgot(t);
        }
        for item in aside.items {
            self.window.insert(item);
        }
        while self.window.items.len() > self.config.max_window {
            let (forgotten, _) = self.window.pop_last().expect("over the bound");
            self.forgot(forgotten);
        }
        rest
    }

    /// The shell started `read`, as [`Scheduler::poll`] asked; for a whole
    /// read, items scheduled from now until [`Scheduler::install`] are
    /// kept aside too, since the read may not see them.
    pub fn reading(&mut self, read: Read) {
        self.during_read = Some(Aside {
            whole: read.is_whole(),
            ..Aside::default()
        });
    }

    /// The read under way failed: nothing to install (what was scheduled
    /// meanwhile is in the window already).
    pub fn read_failed(&mut self) {
        self.during_read = None;
    }

    /// keep-earliest: an item firing at `t` was forgotten (or never
    /// taken in); read the store again from `t`, by `t`.
    fn forgot(&mut self, t: Millis) {
        self.next_refill = self.next_refill.min(t);
        self.covered = self.covered.min(t.saturating_sub(1));
        if let Some(a) = &mut self.during_read {
            a.forgot = Some(a.forgot.map_or(t, |f| f.min(t)));
        }
    }

    /// An entry this process accepted (or released for a retry) fires at
    /// `fire_at`.
    pub fn scheduled(&mut self, fire_at: Millis, id: String) {
        if let Some(aside) = &mut self.during_read
            && aside.whole
        {
            if aside.items.len() < self.config.max_window {
                aside.items.push((fire_at, id.clone()));
            } else {
                self.forgot(fire_at);
            }
        }
        if self.len() < self.config.max_window {
            self.window.insert((fire_at, id));
            return;
        }
        let later_than_all = self.window.items.last().is_some_and(|(t, _)| fire_at >= *t);
        if later_than_all {
            // keep-earliest: forget the newcomer, refill before it is due.
            self.forgot(fire_at);
            return;
        }
        self.window.insert((fire_at, id));
        if let Some((forgotten, _)) = self.window.pop_last() {
            self.forgot(forgotten);
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
            full_refill_every_ms: 1_500,
            max_window,
            claim_batch: 3,
        }
    }

    #[test]
    fn first_poll_refills_then_sleeps_until_the_first_item() {
        let mut s = Scheduler::new(config(10));
        let read = Read {
            from: 0,
            until: 1_100,
            limit: 10,
        };
        assert_eq!(s.poll(100), Action::Refill(read));
        s.refilled(100, read, vec![(300, "a".into())]);
        assert_eq!(s.poll(100), Action::SleepUntil(300));
        assert_eq!(s.poll(300), Action::Claim { limit: 3 });
        s.claimed(300, 1, 3);
        assert_eq!(s.poll(300), Action::SleepUntil(600), "next refill");
    }

    fn whole(until: Millis, limit: usize) -> Read {
        Read {
            from: 0,
            until,
            limit,
        }
    }

    #[test]
    fn ties_are_ordered_by_id_and_a_full_claim_claims_again() {
        let mut s = Scheduler::new(config(10));
        s.refilled(0, whole(1_000, 10), vec![]);
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
        s.refilled(0, whole(1_000, 2), vec![]);
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
            Action::Refill(Read {
                from: 300,
                until: 1_300,
                limit: 2
            }),
            "from the earliest forgotten on"
        );
    }

    #[test]
    fn a_pile_starts_its_claims_early_enough_to_be_done_when_due() {
        let mut s = Scheduler::new(config(10_000));
        s.refilled(0, whole(1_000, 10_000), vec![]);
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
        // Looking no further than the stream, the pile is not seen; it
        // comes into view with its bucket.
        assert_eq!(s.pile(5_999, 1_000).unwrap().until, 5_009);
        assert_eq!(s.next_bucket_after(5_999), Some(6_000));
        assert_eq!(s.next_bucket_after(6_000), None);
        // Once claimed up to the pile's end, only the stream's tail is left.
        s.claimed(6_009, 10, 3_000);
        assert_eq!(s.len(), 0);
        assert_eq!(s.pile(100_000, 1_000), None);
    }

    #[test]
    fn a_truncated_refill_reads_again_when_the_window_runs_out() {
        let mut s = Scheduler::new(config(2));
        s.refilled(0, whole(1_000, 2), vec![(10, "a".into()), (20, "b".into())]);
        assert_eq!(s.poll(0), Action::SleepUntil(10));
        s.claimed(20, 0, 3);
        assert_eq!(
            s.poll(20),
            Action::Refill(Read {
                from: 20,
                until: 1_020,
                limit: 2
            }),
            "from the last item read on: the store may hold more at 20"
        );
    }

    #[test]
    fn refills_read_the_new_slice_and_the_whole_horizon_now_and_then() {
        let mut s = Scheduler::new(config(10));
        s.refilled(0, whole(1_000, 10), vec![(800, "a".into())]);
        // A refill period later: only what came into the horizon.
        let slice = Read {
            from: 1_001,
            until: 1_500,
            limit: 10,
        };
        assert_eq!(s.poll(500), Action::Refill(slice));
        s.refilled(500, slice, vec![(1_200, "b".into())]);
        assert_eq!(s.len(), 2, "a slice joins the window");
        assert_eq!(s.poll(500), Action::SleepUntil(800));
        s.claimed(800, 1, 3);
        let slice = Read {
            from: 1_501,
            until: 2_000,
            limit: 10,
        };
        assert_eq!(s.poll(1_000), Action::Refill(slice));
        s.refilled(1_000, slice, vec![]);
        // The whole horizon, full_refill_every_ms after the last whole read,
        // replaces the window: an entry cancelled meanwhile leaves it.
        assert_eq!(s.poll(1_200), Action::Claim { limit: 3 });
        s.claimed(1_200, 1, 3);
        assert_eq!(s.poll(1_200), Action::SleepUntil(1_500));
        s.scheduled(2_400, "c".into());
        assert_eq!(s.poll(1_500), Action::Refill(whole(2_500, 10)));
        s.refilled(1_500, whole(2_500, 10), vec![(1_900, "d".into())]);
        assert_eq!(s.next_fire(), Some(1_900));
        assert_eq!(s.len(), 1, "c was not in the store after all");
    }

    #[test]
    fn what_is_scheduled_during_a_whole_read_survives_it() {
        let mut s = Scheduler::new(config(10));
        let Action::Refill(read) = s.poll(0) else {
            panic!("a first read")
        };
        s.reading(read);
        s.scheduled(300, "late".into());
        // The read did not see it (committed after the read).
        s.refilled(0, read, vec![(500, "a".into())]);
        assert_eq!(s.next_fire(), Some(300));
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn forgetting_during_a_read_is_read_again() {
        let mut s = Scheduler::new(config(1));
        s.refilled(0, whole(1_000, 1), vec![]);
        s.scheduled(900, "a".into());
        let Action::Refill(read) = s.poll(500) else {
            panic!("a slice")
        };
        assert_eq!(read.from, 1_001);
        s.reading(read);
        // The window is full: b pushes a out while the slice is read.
        s.scheduled(700, "b".into());
        s.refilled(500, read, vec![]);
        assert_eq!(s.len(), 1);
        assert_eq!(
            s.poll(700),
            Action::Claim { limit: 3 },
            "b fires at its time"
        );
        s.claimed(700, 1, 3);
        let Action::Refill(read) = s.poll(900) else {
            panic!("a read by the time a is due")
        };
        assert_eq!(read.from, 900, "a is read again");
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
                    Action::Refill(read) => {
                        let items: Vec<_> = self
                            .store
                            .keys()
                            .filter(|(t, _)| (read.from..=read.until).contains(t))
                            .take(read.limit)
                            .cloned()
                            .collect();
                        self.sched.refilled(self.now, read, items);
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
        /// elsewhere fires within one period of whole reads; the window
        /// stays within its bound.
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
                let bound = if remote.contains(id) { cfg.full_refill_every_ms } else { 0 };
                prop_assert!(at - due <= bound, "{id} late: due {due}, at {at}");
            }
        }
    }
}
