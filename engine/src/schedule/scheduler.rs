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
mod tests;
