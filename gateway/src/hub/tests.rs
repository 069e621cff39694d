use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use herald_protocol::envelope::{Notification, Scope};
use tokio::time::Instant;

use super::*;
use crate::config::{MailboxConfig, WhenFull};
use crate::filter::EventFilter;
use crate::outbox::{GapReason, Item, QueueLimits};

fn hub(ttl_secs: u64) -> Hub {
    let config = MailboxConfig {
        ttl_secs,
        buffer_messages: 3,
        ..MailboxConfig::default()
    };
    Hub::new(&config, Arc::new(Metrics::default()))
}

fn who(user: &str, client: Option<&str>, site: &str) -> Identity {
    Identity {
        user: user.into(),
        client: client.map(Into::into),
        site: site.into(),
    }
}

fn outbox() -> Arc<Outbox> {
    Arc::new(Outbox::new(QueueLimits {
        messages: 100,
        bytes: 1 << 20,
        when_full: WhenFull::Disconnect,
    }))
}

fn sub(key: u32) -> Subscription {
    Subscription {
        key,
        id: format!("sub-{key}").into(),
        filter: EventFilter::default(),
    }
}

fn note(scope: Scope, users: &[&str], clients: &[&str], sites: &[&str]) -> Arc<Notification> {
    Arc::new(Notification {
        id: "n".into(),
        scope,
        users: users.iter().map(|s| s.to_string()).collect(),
        clients: clients.iter().map(|s| s.to_string()).collect(),
        sites: sites.iter().map(|s| s.to_string()).collect(),
        event: "e".into(),
        topic: None,
        content_type: "text/plain".into(),
        payload: Bytes::from_static(b"hi"),
        payload_is_utf8: true,
        ttl: None,
        encodings: Default::default(),
        accepted: Default::default(),
    })
}

/// A subscribed session of `identity`.
fn session(h: &Hub, identity: &Identity) -> Arc<Outbox> {
    session_with_epoch(h, identity).0
}

fn session_with_epoch(h: &Hub, identity: &Identity) -> (Arc<Outbox>, u64) {
    let o = outbox();
    let attached = h.attach(identity, &o, usize::MAX, None).unwrap();
    h.subscribe(identity, &o, sub(0), None, Instant::now());
    (o, attached.epoch)
}

#[tokio::test]
async fn scopes_reach_exactly_their_recipients() {
    let h = hub(300);
    let alice = who("alice", Some("acme"), "s1");
    let alice_s2 = who("alice", Some("acme"), "s2");
    let bob = who("bob", Some("acme"), "s1");
    let carol = who("carol", Some("globex"), "s1");
    let a = session(&h, &alice);
    let a2 = session(&h, &alice_s2);
    let b = session(&h, &bob);
    let c = session(&h, &carol);
    let now = Instant::now();

    let d = h.deliver(&note(Scope::User, &["alice"], &[], &[]), now);
    assert_eq!(d.sessions, 2);
    assert_eq!((a.len(), a2.len(), b.len(), c.len()), (1, 1, 0, 0));

    let d = h.deliver(&note(Scope::User, &["alice", "bob"], &[], &["s2"]), now);
    assert_eq!(d.sessions, 1);
    assert_eq!((a.len(), a2.len(), b.len(), c.len()), (1, 2, 0, 0));

    let d = h.deliver(&note(Scope::Client, &[], &["acme"], &["s1"]), now);
    assert_eq!(d.sessions, 2);
    assert_eq!((a.len(), a2.len(), b.len(), c.len()), (2, 2, 1, 0));

    let d = h.deliver(&note(Scope::Client, &[], &["acme", "globex"], &[]), now);
    assert_eq!(d.sessions, 4);

    let d = h.deliver(&note(Scope::Global, &[], &[], &[]), now);
    assert_eq!(d.sessions, 4);
    assert_eq!((a.len(), a2.len(), b.len(), c.len()), (4, 4, 3, 2));
}

#[tokio::test]
async fn sessions_of_one_mailbox_share_the_sequence() {
    let h = hub(300);
    let alice = who("alice", None, "");
    let one = session(&h, &alice);
    let two = session(&h, &alice);
    h.deliver(&note(Scope::User, &["alice"], &[], &[]), Instant::now());
    for o in [one, two] {
        match o.pop().unwrap().item {
            Item::Deliver { seq, .. } => assert_eq!(seq, 1),
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn resume_replays_then_live_continues_without_duplicates() {
    let h = hub(300);
    let alice = who("alice", None, "");
    let (first, epoch) = session_with_epoch(&h, &alice);
    let now = Instant::now();
    for _ in 0..3 {
        h.deliver(&note(Scope::User, &["alice"], &[], &[]), now);
    }
    h.detach(&alice, &first, now);

    let again = outbox();
    let attached = h.attach(&alice, &again, usize::MAX, None).unwrap();
    assert_eq!(attached.head, 3);
    let replay = h.subscribe(
        &alice,
        &again,
        sub(0),
        Some(&Resume { epoch, last_seq: 1 }),
        now,
    );
    assert_eq!(replay, Replay::Replayed(2));
    h.deliver(&note(Scope::User, &["alice"], &[], &[]), now);
    let seqs: Vec<u64> = std::iter::from_fn(|| again.pop())
        .map(|p| match p.item {
            Item::Deliver { seq, .. } => seq,
            Item::Gap { .. } => 0,
        })
        .collect();
    assert_eq!(seqs, vec![2, 3, 4]);
}

#[tokio::test]
async fn resume_past_the_buffer_gets_a_gap() {
    let h = hub(300);
    let alice = who("alice", None, "");
    let (o, epoch) = session_with_epoch(&h, &alice);
    let now = Instant::now();
    for _ in 0..5 {
        h.deliver(&note(Scope::User, &["alice"], &[], &[]), now);
    }
    h.detach(&alice, &o, now);
    let again = outbox();
    h.attach(&alice, &again, usize::MAX, None).unwrap();
    let replay = h.subscribe(
        &alice,
        &again,
        sub(0),
        Some(&Resume { epoch, last_seq: 0 }),
        now,
    );
    assert_eq!(replay, Replay::Gap);
    assert!(matches!(
        again.pop().unwrap().item,
        Item::Gap {
            seq: 5,
            reason: GapReason::BufferExceeded,
            ..
        }
    ));
}

#[tokio::test]
async fn upstream_loss_gaps_live_sessions_and_resumes_from_before() {
    let h = hub(300);
    let alice = who("alice", None, "");
    let bob = who("bob", None, "");
    let now = Instant::now();
    let (live, _) = session_with_epoch(&h, &alice);
    let (gone, epoch) = session_with_epoch(&h, &bob);
    h.deliver(&note(Scope::User, &["alice", "bob"], &[], &[]), now);
    h.detach(&bob, &gone, now);

    // A root deleted this edge's queue while the link was down.
    assert_eq!(h.upstream_lost(), 2);

    // The live session: what it had, then the gap marker, then what comes.
    h.deliver(&note(Scope::User, &["alice"], &[], &[]), now);
    let items: Vec<(u64, Option<GapReason>)> = std::iter::from_fn(|| live.pop())
        .map(|p| match p.item {
            Item::Deliver { seq, .. } => (seq, None),
            Item::Gap { seq, reason, .. } => (seq, Some(reason)),
        })
        .collect();
    assert_eq!(
        items,
        vec![(1, None), (1, Some(GapReason::EpochChanged)), (2, None)]
    );

    // A session resuming from before the loss, even from the head: a gap,
    // not a replay that looks whole.
    let again = outbox();
    let attached = h.attach(&bob, &again, usize::MAX, None).unwrap();
    assert_ne!(attached.epoch, epoch);
    let replay = h.subscribe(
        &bob,
        &again,
        sub(0),
        Some(&Resume { epoch, last_seq: 1 }),
        now,
    );
    assert_eq!(replay, Replay::Gap);
    assert!(matches!(
        again.pop().unwrap().item,
        Item::Gap {
            reason: GapReason::EpochChanged,
            ..
        }
    ));
}

#[tokio::test(start_paused = true)]
async fn idle_mailbox_expires_after_ttl() {
    let h = Arc::new(hub(300));
    let token = CancellationToken::new();
    tokio::spawn(Arc::clone(&h).run_expiry(Duration::from_millis(100), 1000, token.clone()));
    let alice = who("alice", Some("acme"), "");
    let (o, epoch) = session_with_epoch(&h, &alice);
    h.detach(&alice, &o, Instant::now());
    assert_eq!(h.mailbox_count(), 1);

    tokio::time::sleep(Duration::from_secs(299)).await;
    assert_eq!(h.mailbox_count(), 1, "still within the TTL");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(h.mailbox_count(), 0, "expired after the TTL");
    // The client index forgot alice too: client fan-out reaches nobody.
    let d = h.deliver(&note(Scope::Client, &[], &["acme"], &[]), Instant::now());
    assert_eq!(d.mailboxes, 0);

    // Coming back makes a new mailbox: the old resume point is a gap.
    let again = outbox();
    let attached = h.attach(&alice, &again, usize::MAX, None).unwrap();
    assert_ne!(attached.epoch, epoch);
    let replay = h.subscribe(
        &alice,
        &again,
        sub(0),
        Some(&Resume { epoch, last_seq: 0 }),
        Instant::now(),
    );
    assert_eq!(replay, Replay::Gap);
    token.cancel();
}

#[tokio::test(start_paused = true)]
async fn returning_within_ttl_cancels_expiry() {
    let h = Arc::new(hub(10));
    let alice = who("alice", None, "");
    let o = session(&h, &alice);
    h.detach(&alice, &o, Instant::now());
    tokio::time::sleep(Duration::from_secs(5)).await;
    let back = session(&h, &alice);
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(h.expire(Instant::now(), 100), 0);
    assert_eq!(h.mailbox_count(), 1);
    h.detach(&alice, &back, Instant::now());
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert_eq!(h.expire(Instant::now(), 100), 1);
}

#[tokio::test]
async fn expiry_is_rate_limited_per_call() {
    let h = hub(1);
    let now = Instant::now();
    for i in 0..50 {
        let id = who(&format!("u{i}"), None, "");
        let o = session(&h, &id);
        h.detach(&id, &o, now);
    }
    let later = now + Duration::from_secs(2);
    assert_eq!(h.expire(later, 20), 20);
    assert_eq!(h.expire(later, 20), 20);
    assert_eq!(h.expire(later, 20), 10);
    assert_eq!(h.mailbox_count(), 0);
}

#[test]
fn presence_follows_the_first_and_last_session_of_a_user_across_sites() {
    let h = hub(60);
    let eu = who("alice", None, "eu");
    let us = who("alice", None, "us");
    let (a, b, c) = (outbox(), outbox(), outbox());
    assert!(!h.is_online("alice", &[]));
    assert!(
        h.attach(&eu, &a, usize::MAX, None).unwrap().came_online,
        "first session"
    );
    assert!(
        !h.attach(&eu, &b, usize::MAX, None).unwrap().came_online,
        "second session, same site"
    );
    assert!(
        !h.attach(&us, &c, usize::MAX, None).unwrap().came_online,
        "another site, still online"
    );
    assert!(h.is_online("alice", &[]));
    assert!(h.is_online("alice", &["us".into()]));
    assert!(!h.is_online("alice", &["asia".into()]));
    let now = Instant::now();
    assert!(!h.detach(&eu, &a, now));
    assert!(!h.detach(&eu, &b, now), "the us session is still live");
    assert!(!h.is_online("alice", &["eu".into()]));
    assert!(h.detach(&us, &c, now), "the last session left");
    assert!(!h.is_online("alice", &[]));
    assert!(
        h.attach(&us, &outbox(), usize::MAX, None)
            .unwrap()
            .came_online,
        "back online"
    );
}

#[test]
fn a_user_gets_at_most_max_sessions_per_site_and_a_freed_one_comes_back() {
    let h = hub(60);
    let eu = who("alice", None, "eu");
    let us = who("alice", None, "us");
    let (a, b, c) = (outbox(), outbox(), outbox());
    h.attach(&eu, &a, 2, None).unwrap();
    h.attach(&eu, &b, 2, None).unwrap();
    assert_eq!(
        h.attach(&eu, &c, 2, None),
        Err(crate::hub::TooManySessions { max: 2 })
    );
    // Another site is another mailbox, another user as far as limits go;
    // another user has limits of their own.
    h.attach(&us, &c, 2, None).unwrap();
    h.attach(&who("bob", None, "eu"), &outbox(), 2, None)
        .unwrap();
    h.detach(&eu, &a, Instant::now());
    h.attach(&eu, &outbox(), 2, None)
        .expect("a freed slot is taken again");
}

#[tokio::test]
async fn mailboxes_keep_no_hold_on_the_routed_notification() {
    let h = hub(300);
    let alice = who("alice", Some("acme"), "s1");
    let bob = who("bob", Some("acme"), "s1");
    let (a, epoch) = session_with_epoch(&h, &alice);
    let b = session(&h, &bob);
    // A payload sharing a larger buffer, as a request's or a bundle's does.
    let buffer = Bytes::from(vec![b'x'; 8192]);
    let mut n = note(Scope::Client, &[], &["acme"], &[]);
    Arc::get_mut(&mut n).unwrap().payload = buffer.slice(100..200);
    let now = Instant::now();
    assert_eq!(h.deliver(&n, now).sessions, 2);
    // The sessions write it (the SockJS encoding would be cached on it).
    for o in [&a, &b] {
        assert!(matches!(o.pop().unwrap().item, Item::Deliver { .. }));
    }
    // Both mailboxes still hold it for replay, yet neither the routed
    // notification nor the buffer its payload shared is kept.
    assert_eq!(Arc::strong_count(&n), 1, "a mailbox kept the routed Arc");
    drop(n);
    assert!(buffer.is_unique(), "a mailbox kept the payload's buffer");
    h.detach(&alice, &a, now);
    let again = outbox();
    h.attach(&alice, &again, usize::MAX, None).unwrap();
    let replay = h.subscribe(
        &alice,
        &again,
        sub(0),
        Some(&Resume { epoch, last_seq: 0 }),
        now,
    );
    assert_eq!(replay, Replay::Replayed(1));
    match again.pop().unwrap().item {
        Item::Deliver { seq, n, .. } => {
            assert_eq!(seq, 1);
            assert_eq!(&n.payload[..], &[b'x'; 100][..]);
            assert_eq!((n.id.as_str(), n.event.as_str()), ("n", "e"));
            assert_eq!(n.scope, Scope::Client);
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn sessions_by_transport_and_companies_count_live_sessions_only() {
    use crate::metrics::Transport;
    let h = hub(60);
    let a_eu = who("alice", Some("acme"), "eu");
    let a_us = who("alice", Some("acme"), "us");
    let bob = who("bob", Some("bolt"), "eu");
    let ws = outbox();
    let xs = Arc::new(
        Outbox::new(QueueLimits {
            messages: 100,
            bytes: 1 << 20,
            when_full: WhenFull::Disconnect,
        })
        .over(Transport::XhrStreaming),
    );
    let us = outbox();
    let b = outbox();
    h.attach(&a_eu, &ws, usize::MAX, None).unwrap();
    h.attach(&a_eu, &xs, usize::MAX, None).unwrap();
    h.attach(&a_us, &us, usize::MAX, None).unwrap();
    h.attach(&bob, &b, usize::MAX, None).unwrap();
    let mut alice = h.sessions_of("alice");
    alice.sort_by(|x, y| x.site.cmp(&y.site));
    assert_eq!(alice.len(), 2);
    assert_eq!(alice[0].site, "eu");
    assert_eq!(alice[0].by_transport["websocket"], 1);
    assert_eq!(alice[0].by_transport["xhr_streaming"], 1);
    assert!(alice[0].since_ms > 0);
    assert_eq!(alice[0].client.as_deref(), Some("acme"));
    let acme = h.client_count("acme");
    assert_eq!((acme.users, acme.sessions), (1, 3));
    let page = h.client_page(None, 1);
    assert_eq!(page.items[0].client, "acme");
    assert_eq!(page.next.as_deref(), Some("acme"));
    let rest = h.client_page(page.next.as_deref(), 1);
    assert_eq!(rest.items[0].client, "bolt");
    assert_eq!(rest.next, None);
    // Bob leaves: his mailbox waits out its TTL and counts for nothing.
    let now = Instant::now();
    assert!(h.detach(&bob, &b, now));
    assert_eq!(h.mailbox_count(), 3);
    assert!(h.sessions_of("bob").is_empty());
    assert_eq!(h.client_count("bolt").users, 0);
    assert_eq!(h.client_page(None, 10).items.len(), 1);
    // One of alice's sessions leaves: the rest still count, since unchanged.
    let since = alice[0].since_ms;
    h.detach(&a_eu, &xs, now);
    let eu = h
        .sessions_of("alice")
        .into_iter()
        .find(|m| m.site == "eu")
        .unwrap();
    assert_eq!((eu.total(), eu.since_ms), (1, since));
}

#[tokio::test]
async fn a_session_from_another_mailbox_says_since_when_it_may_have_missed_notifications() {
    let h = hub(300);
    let alice = who("alice", None, "eu");
    let before = herald_engine::schedule::timing::now_ms();
    // Alice comes from another edge's mailbox (epoch 1, not this one's),
    // last heard from it 4 s ago.
    let o = outbox();
    let epoch = h
        .attach(
            &alice,
            &o,
            usize::MAX,
            Some(&Missed {
                epoch: 1,
                offline_ms: 4_000,
            }),
        )
        .unwrap()
        .epoch;
    assert_ne!(epoch, 1);
    let after = herald_engine::schedule::timing::now_ms();
    let missed = h.user_sessions("alice").missed_since_ms;
    assert!(
        (before - 4_000..=after - 4_000).contains(&missed),
        "{missed} not 4 s before {before}..{after}"
    );
    // A second session resuming this very mailbox missed nothing: unchanged.
    let same = outbox();
    h.attach(
        &alice,
        &same,
        usize::MAX,
        Some(&Missed {
            epoch,
            offline_ms: 60_000,
        }),
    )
    .unwrap();
    assert_eq!(h.user_sessions("alice").missed_since_ms, missed);
    assert_eq!(h.held()[0].missed_since_ms, 0, "snapshots do not say it");
    // An absurd absence counts as an hour.
    let bob = who("bob", None, "eu");
    h.attach(
        &bob,
        &outbox(),
        usize::MAX,
        Some(&Missed {
            epoch: 1,
            offline_ms: u64::MAX,
        }),
    )
    .unwrap();
    let bob_missed = h.user_sessions("bob").missed_since_ms;
    assert!(
        bob_missed >= before - mailbox::MAX_OFFLINE_MS,
        "{bob_missed}"
    );
    // Once every session left, the mailbox says nothing more of it.
    let now = Instant::now();
    h.detach(&alice, &o, now);
    assert!(h.detach(&alice, &same, now));
    assert_eq!(h.user_sessions("alice").missed_since_ms, 0);
    // Without offline-ms: nothing.
    let carol = who("carol", None, "eu");
    h.attach(&carol, &outbox(), usize::MAX, None).unwrap();
    assert_eq!(h.user_sessions("carol").missed_since_ms, 0);
}
