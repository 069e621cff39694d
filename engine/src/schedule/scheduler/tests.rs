//! Unit tests of the scheduler: examples, and a proptest against a model
//! of the store (nothing fires early, nor later than its bound).

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
