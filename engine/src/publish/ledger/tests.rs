use super::*;

fn ledger(window_secs: u64, max: usize) -> (IdLedger, LedgerMetrics) {
    let metrics = LedgerMetrics::default();
    let config = LedgerConfig {
        window: Duration::from_secs(window_secs),
        max,
    };
    (IdLedger::local(config, metrics.clone()), metrics)
}

async fn one(l: &IdLedger, claim: IdClaim, now: Millis) -> Claimed {
    l.claim(vec![claim], now).await.unwrap()[0]
}

#[tokio::test]
async fn an_immediate_id_is_taken_for_the_window_on_every_path() {
    let (l, _) = ledger(120, 100);
    let t = 1_000_000;
    assert_eq!(one(&l, l.immediate("a", t), t).await, Claimed::New);
    // Again immediate, or delayed, within the window: taken, due when the
    // first was accepted.
    assert_eq!(
        one(&l, l.immediate("a", t + 5), t + 5).await,
        Claimed::Taken { due_ms: t }
    );
    assert_eq!(
        one(&l, l.delayed("a", t + 60_000, t + 10), t + 10).await,
        Claimed::Taken { due_ms: t }
    );
    assert_eq!(
        l.claim_here(l.immediate("a", t + 20), t + 20),
        Claimed::Taken { due_ms: t }
    );
    // After the window it is free again.
    let later = t + 120_000;
    assert_eq!(one(&l, l.immediate("a", later), later).await, Claimed::New);
}

#[tokio::test]
async fn a_delayed_id_is_taken_until_its_due_time_and_the_window() {
    let (l, _) = ledger(120, 100);
    let t = 1_000_000;
    let due = t + 3_600_000;
    assert_eq!(one(&l, l.delayed("d", due, t), t).await, Claimed::New);
    // An immediate one an hour later (past the window after acceptance,
    // before the due time) is a duplicate of it.
    let hour = t + 3_599_000;
    assert_eq!(
        one(&l, l.immediate("d", hour), hour).await,
        Claimed::Taken { due_ms: due }
    );
    let end = due + 120_000;
    assert_eq!(
        one(&l, l.immediate("d", end - 1), end - 1).await,
        Claimed::Taken { due_ms: due }
    );
    assert_eq!(one(&l, l.immediate("d", end), end).await, Claimed::New);
}

#[tokio::test]
async fn the_same_id_twice_in_one_claim_is_taken_by_the_first() {
    let (l, _) = ledger(120, 100);
    let t = 5;
    let out = l
        .claim(vec![l.immediate("x", t), l.delayed("x", t + 50, t)], t)
        .await
        .unwrap();
    assert_eq!(out, vec![Claimed::New, Claimed::Taken { due_ms: t }]);
}

#[tokio::test]
async fn a_released_id_is_free_for_the_retry() {
    let (l, metrics) = ledger(120, 100);
    let t = 7;
    assert_eq!(one(&l, l.immediate("r", t), t).await, Claimed::New);
    assert_eq!(metrics.held.get(), 1);
    l.release(vec!["r".into()]).await;
    assert_eq!(metrics.held.get(), 0);
    assert_eq!(one(&l, l.immediate("r", t + 1), t + 1).await, Claimed::New);
    // Its first hold's place in the queue passes without forgetting the
    // second one early.
    let at = t + 120_000;
    assert_eq!(
        one(&l, l.immediate("r", at), at).await,
        Claimed::Taken { due_ms: t + 1 }
    );
}

#[tokio::test]
async fn off_nothing_is_taken() {
    let (l, metrics) = ledger(0, 100);
    assert!(!l.enabled());
    assert_eq!(one(&l, l.immediate("z", 1), 1).await, Claimed::New);
    assert_eq!(one(&l, l.immediate("z", 2), 2).await, Claimed::New);
    assert_eq!(l.claim_here(l.immediate("z", 3), 3), Claimed::New);
    assert_eq!(metrics.held.get(), 0);
}

/// The bound, at its default's scale and far past it: 100 times as many
/// ids as it holds are claimed; it never holds more than its bound, it
/// forgets the oldest immediate ids first and delayed ones last, and
/// counts each it forgot early.
#[tokio::test]
async fn past_its_bound_it_forgets_the_oldest_immediate_ids_first() {
    let max = 1_000;
    let (l, metrics) = ledger(120, max);
    let t = 1_000;
    // Two delayed ones, held far longer.
    for id in ["late-1", "late-2"] {
        assert_eq!(
            one(&l, l.delayed(id, t + 86_400_000, t), t).await,
            Claimed::New
        );
    }
    let claims: Vec<IdClaim> = (0..100 * max)
        .map(|i| l.immediate(&format!("i{i}"), t))
        .collect();
    let out = l.claim(claims, t).await.unwrap();
    assert!(out.iter().all(|c| *c == Claimed::New));
    assert_eq!(metrics.held.get(), max as i64);
    assert_eq!(metrics.evicted.get(), (100 * max + 2 - max) as u64);
    // The newest immediate ids and both delayed ones are still held.
    let last = format!("i{}", 100 * max - 1);
    assert!(matches!(
        one(&l, l.immediate(&last, t), t).await,
        Claimed::Taken { .. }
    ));
    for id in ["late-1", "late-2"] {
        assert!(matches!(
            one(&l, l.immediate(id, t), t).await,
            Claimed::Taken { .. }
        ));
    }
    // The oldest immediate one was forgotten: free again.
    assert_eq!(one(&l, l.immediate("i0", t), t).await, Claimed::New);
}

/// Holds that ended are forgotten as time passes, whatever their number.
#[tokio::test]
async fn ended_holds_are_forgotten() {
    let (l, metrics) = ledger(1, 1_000_000);
    let t = 10;
    let claims: Vec<IdClaim> = (0..10_000)
        .map(|i| l.immediate(&i.to_string(), t))
        .collect();
    l.claim(claims, t).await.unwrap();
    assert_eq!(metrics.held.get(), 10_000);
    assert_eq!(
        one(&l, l.immediate("new", t + 1_000), t + 1_000).await,
        Claimed::New
    );
    assert_eq!(metrics.held.get(), 1);
    assert_eq!(metrics.evicted.get(), 0);
}
