//! What the firer's loop does next: refill, claim, or wait until when.
//!
//! It looks `claim_ahead_ms` ahead: the [`Scheduler`] runs on a clock
//! three quarters of that ahead (so a claim starts once the earliest entry
//! is due within it), and a claim takes everything due within the whole
//! `claim_ahead_ms`. A pile ([`Scheduler::pile`]) whose claims must start
//! by now reaches as far as it needs, up to `claim_ahead_max_ms`, in claims
//! sized by [`ClaimPace::pile_claim`].
//!
//! Pure: takes `now`, the scheduler, the ready queue and what runs beside
//! the loop ([`Busy`]); no I/O.

use crate::schedule::config::ScheduleConfig;
use crate::schedule::entry::Millis;
use crate::schedule::pace::ClaimPace;
use crate::schedule::ready::Ready;
use crate::schedule::scheduler::{Action, Read, Scheduler};

/// A claim takes everything due within `claim_ahead_ms`, and the next one
/// starts once something is due within all but 1/`CLAIM_SLICES` of it.
const CLAIM_SLICES: u64 = 4;

/// The claim-ahead arithmetic, from the firer's settings.
#[derive(Debug, Clone, Copy)]
pub(super) struct Plan {
    ahead_ms: u64,
    ahead_max_ms: u64,
    /// The scheduler's clock runs this far ahead: a claim starts when
    /// something is due within it, and takes all due within `ahead_ms`.
    trigger_ms: u64,
    claim_batch: usize,
}

/// What runs beside the loop, and when the next call may start after one
/// failed.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Busy {
    pub(super) claiming: bool,
    pub(super) refilling: bool,
    pub(super) claim_after: Millis,
    pub(super) refill_after: Millis,
}

/// The loop's next step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// Start `read`, at `at` on the scheduler's clock.
    Refill { read: Read, at: Millis },
    /// Start a claim of at most `limit` entries due by `reach`.
    Claim { limit: usize, reach: Millis },
    /// Wait for an event, at the latest until `until` (the real clock;
    /// `Millis::MAX` for no deadline of its own).
    Wait { until: Millis },
}

impl Plan {
    pub(super) fn new(config: &ScheduleConfig) -> Plan {
        let ahead_ms = config.claim_ahead_ms;
        Plan {
            ahead_ms,
            ahead_max_ms: config.claim_ahead_max_ms(),
            trigger_ms: ahead_ms - ahead_ms / CLAIM_SLICES,
            claim_batch: config.claim_batch,
        }
    }

    /// `t` on the scheduler's clock, for a wait after a failure until `t`.
    fn on_clock(&self, t: Millis) -> Millis {
        t.saturating_add(self.trigger_ms)
    }

    /// What to do at `now`.
    pub(super) fn next(
        &self,
        now: Millis,
        scheduler: &Scheduler,
        ready: &Ready,
        pace: &ClaimPace,
        busy: Busy,
    ) -> Step {
        let (polled, reach) = self.poll(now, scheduler, ready, pace);
        let clock = self.on_clock(now);
        let action = match polled {
            // Wait for the claim in flight, or for room in `ready`.
            Action::Claim { .. } if busy.claiming || ready.is_full() => None,
            Action::Claim { .. } if now < busy.claim_after => {
                Some(Action::SleepUntil(self.on_clock(busy.claim_after)))
            }
            Action::Refill(_) if busy.refilling => None,
            Action::Refill(_) if now < busy.refill_after => {
                Some(Action::SleepUntil(self.on_clock(busy.refill_after)))
            }
            other => Some(other),
        };
        match action {
            Some(Action::Refill(read)) => Step::Refill { read, at: clock },
            Some(Action::Claim { limit }) => Step::Claim { limit, reach },
            sleep => {
                // On the scheduler's clock, `trigger_ms` early.
                let until = match sleep {
                    Some(Action::SleepUntil(t)) => t.saturating_sub(self.trigger_ms),
                    _ => Millis::MAX,
                };
                Step::Wait {
                    until: until.min(ready.next_at().unwrap_or(Millis::MAX)),
                }
            }
        }
    }

    /// What the scheduler says, with a pile's claims put first: the action
    /// and how far a claim reaches.
    fn poll(
        &self,
        now: Millis,
        scheduler: &Scheduler,
        ready: &Ready,
        pace: &ClaimPace,
    ) -> (Action, Millis) {
        let ahead = now.saturating_add(self.ahead_ms);
        // A pile whose claims must start by now reaches as far as it
        // needs; otherwise the usual claim-ahead, and a wake-up when the
        // pile's claims must start or when the next bucket comes into view
        // (a herd must be seen as soon as it may be claimed, not at the
        // next refill).
        let view = now.saturating_add(self.ahead_max_ms);
        let pile = scheduler.pile(view, pace.planned_us());
        let wake = [
            pile.map(|p| p.start),
            scheduler
                .next_bucket_after(view)
                .map(|b| b - self.ahead_max_ms),
        ]
        .into_iter()
        .flatten()
        .min();
        match (pile, scheduler.poll(self.on_clock(now))) {
            (Some(p), _) if p.start <= now => {
                // What falls due while a claim runs waits for it.
                let first = ready.last_at().or(scheduler.next_fire()).unwrap_or(now);
                let limit = pace.pile_claim(first.saturating_sub(now), self.claim_batch);
                (Action::Claim { limit }, p.until.max(ahead))
            }
            (_, Action::SleepUntil(t)) => (
                Action::SleepUntil(wake.map_or(t, |w| t.min(self.on_clock(w)))),
                ahead,
            ),
            (_, other) => (other, ahead),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::firer::sample::entry;
    use crate::schedule::scheduler::{SchedulerConfig, Window};

    const NOW: Millis = 1_000_000;

    /// The defaults: 500 ms ahead (the scheduler's clock 375 ms ahead), a
    /// pile up to 4 s ahead.
    fn plan() -> Plan {
        Plan::new(&ScheduleConfig::default())
    }

    /// A scheduler that has read the whole horizon at `NOW` and holds
    /// `items` (its next refill 10 s later, out of the way).
    fn scheduler(items: Vec<(Millis, String)>) -> Scheduler {
        let config = SchedulerConfig {
            refill_every_ms: 10_000,
            ..ScheduleConfig::default().scheduler()
        };
        let mut s = Scheduler::new(config);
        let Action::Refill(read) = s.poll(NOW) else {
            panic!("a new scheduler reads first");
        };
        s.install(
            NOW,
            read,
            Window::indexed(items, read.limit, config.max_window),
        );
        s
    }

    fn at(t: Millis, n: usize) -> Vec<(Millis, String)> {
        (0..n).map(|i| (t, format!("{t}-{i}"))).collect()
    }

    #[test]
    fn a_new_scheduler_refills_on_its_clock_first() {
        let s = Scheduler::new(ScheduleConfig::default().scheduler());
        let step = plan().next(
            NOW,
            &s,
            &Ready::new(10),
            &ClaimPace::default(),
            Busy::default(),
        );
        let Step::Refill { read, at } = step else {
            panic!("{step:?}");
        };
        assert_eq!(at, NOW + 375);
        assert!(read.is_whole());
    }

    #[test]
    fn an_entry_is_claimed_three_quarters_of_the_claim_ahead_early() {
        let p = plan();
        let (ready, pace) = (Ready::new(10), ClaimPace::default());
        let s = scheduler(at(NOW + 1_000, 1));
        assert_eq!(
            p.next(NOW, &s, &ready, &pace, Busy::default()),
            Step::Wait { until: NOW + 625 }
        );
        assert_eq!(
            p.next(NOW + 625, &s, &ready, &pace, Busy::default()),
            Step::Claim {
                limit: 20_000,
                reach: NOW + 1_125
            },
            "everything due within 500 ms"
        );
    }

    #[test]
    fn a_claim_waits_for_the_one_in_flight_for_room_and_after_a_failure() {
        let p = plan();
        let pace = ClaimPace::default();
        let s = scheduler(at(NOW + 100, 1));
        let claiming = Busy {
            claiming: true,
            ..Busy::default()
        };
        let mut ready = Ready::new(1);
        assert_eq!(
            p.next(NOW, &s, &ready, &pace, claiming),
            Step::Wait { until: Millis::MAX }
        );
        ready.push(NOW + 50, entry("r", "u", 1), false);
        assert_eq!(
            p.next(NOW, &s, &ready, &pace, Busy::default()),
            Step::Wait { until: NOW + 50 },
            "full: until the next entry leaves"
        );
        let failed = Busy {
            claim_after: NOW + 200,
            ..Busy::default()
        };
        assert_eq!(
            p.next(NOW, &s, &Ready::new(10), &pace, failed),
            Step::Wait { until: NOW + 200 }
        );
    }

    #[test]
    fn a_pile_is_claimed_as_early_as_its_size_needs_and_reaches_as_far() {
        let p = plan();
        let (ready, pace) = (Ready::new(200_000), ClaimPace::default());
        // 100,000 due in 3 s: 3.8 s of claims at the planned 38 µs each.
        let s = scheduler(at(NOW + 3_000, 100_000));
        let step = p.next(NOW, &s, &ready, &pace, Busy::default());
        assert_eq!(
            step,
            Step::Claim {
                limit: 20_000,
                reach: NOW + 3_009
            },
            "overdue already: claims to the end of the pile's bucket"
        );
    }

    #[test]
    fn a_pile_in_view_wakes_the_loop_when_its_claims_must_start() {
        let p = plan();
        let (ready, pace) = (Ready::new(200_000), ClaimPace::default());
        // 10,000 due in 2 s: 380 ms of claims, to start at 1.62 s.
        let s = scheduler(at(NOW + 2_000, 10_000));
        assert_eq!(
            p.next(NOW, &s, &ready, &pace, Busy::default()),
            Step::Wait { until: NOW + 1_620 }
        );
        // Beyond the 4 s view: woken when it comes into view.
        let s = scheduler(at(NOW + 4_500, 10));
        assert_eq!(
            p.next(NOW, &s, &ready, &pace, Busy::default()),
            Step::Wait { until: NOW + 500 }
        );
    }
}
