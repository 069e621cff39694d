//! The callback side of [`Delayed`] over a real (embedded) store: what the
//! callback sender will call to record its outcomes, and what it counts.

#[macro_use]
mod store_suite;

use std::sync::Arc;

use herald_engine::schedule::config::ScheduleConfig;
use herald_engine::schedule::entry::{Phase, State};
use herald_engine::schedule::metrics::DelayedMetrics;
use herald_engine::schedule::service::Delayed;
use herald_engine::schedule::store::embedded::EmbeddedStore;
use herald_engine::schedule::store::{
    Ending, Finish, MAX_ATTEMPTS_KEPT, Replay, RetryWait, Settled, Store,
};
use herald_engine::schedule::timing::now_ms;

/// An entry's attempt log past its bound: each record dropped is counted
/// in `herald_delayed_attempt_log_trimmed_total`; the end of a callback
/// and the replay of its dead letter are counted too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_attempt_log_is_counted_and_a_dead_letter_replays() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    let metrics = DelayedMetrics::default();
    let delayed = Delayed::new(ScheduleConfig::default(), store.clone(), metrics.clone());
    // Due in a day: claimed here with a clock of the test's own, as the
    // sender will claim it (no firer runs).
    let due = now_ms() + 86_400_000;
    let e = store_suite::entry("cb", due, Some("billing"), "u");
    delayed.accept(vec![e]).await.unwrap();
    let extra = 3;
    let total = MAX_ATTEMPTS_KEPT as u32 + extra;
    for n in 1..=total {
        let at = due + u64::from(n) * 1000;
        let claimed = store.claim_due(at, 10, 60_000).await.unwrap();
        assert_eq!(claimed.len(), 1, "attempt {n}");
        let phase = if n == 1 {
            Phase::Deliver
        } else {
            Phase::Callback
        };
        assert_eq!(claimed[0].phase, phase);
        let wait = RetryWait {
            id: "cb".into(),
            // The next claim's clock; `now` for the store is the wall
            // clock's, which is earlier.
            at_ms: at + 1000,
            recheck: None,
            attempt: Some(store_suite::attempt(n, at)),
            counted: true,
        };
        let settled = delayed.retry_wait(vec![wait]).await.unwrap();
        assert_eq!(settled.moved, 1);
    }
    assert_eq!(metrics.attempt_log_trimmed.get(), u64::from(extra));
    assert_eq!(
        delayed.attempts("cb").await.unwrap().len(),
        MAX_ATTEMPTS_KEPT
    );
    let at = due + u64::from(total + 1) * 1000;
    store.claim_due(at, 10, 60_000).await.unwrap();
    let dead = Finish {
        id: "cb".into(),
        ending: Ending::Dead,
        recheck: None,
        attempt: Some(store_suite::attempt(total + 1, at)),
    };
    let settled = delayed.finish(vec![dead]).await.unwrap();
    assert_eq!(
        settled,
        Settled {
            moved: 1,
            trimmed: 1
        }
    );
    assert_eq!(metrics.attempt_log_trimmed.get(), u64::from(extra) + 1);
    let s = delayed.status("cb").await.unwrap().unwrap();
    assert_eq!(s.state, State::Dead);
    match delayed.replay("cb").await.unwrap() {
        Replay::Replayed(s) => assert_eq!((s.state, s.attempts), (State::RetryWait, 0)),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        delayed.replay("cb").await.unwrap(),
        Replay::NotDead(_)
    ));
    assert_eq!(delayed.replay("nope").await.unwrap(), Replay::NotFound);
    assert_eq!(
        (metrics.replayed.get(), metrics.replay_not_dead.get()),
        (1, 1)
    );
}
