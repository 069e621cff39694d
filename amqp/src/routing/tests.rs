//! The routing view, the catch-up log and the plan, on values.

use std::sync::Arc;

use bytes::Bytes;
use herald_engine::presence::view::{MailboxSessions, UserSessions};
use herald_engine::presence::{PresenceReport, SyncPart};
use herald_protocol::envelope::{Notification, Scope};

use super::recent::{Recent, RecentConfig};
use super::view::{Arrival, Every, Fallback, Key, Route, View, ViewConfig};
use super::{Message, Routing, RoutingMetrics};

const STALE: u64 = 20_000;
const TTL: u64 = 300_000;
const T0: u64 = 1_000_000;

fn config() -> ViewConfig {
    ViewConfig {
        stale_ms: STALE,
        forget_ms: 600_000,
    }
}

fn note(scope: Scope, users: &[&str], clients: &[&str]) -> Arc<Notification> {
    Arc::new(Notification {
        id: format!("n-{}-{}", users.join(","), clients.join(",")),
        scope,
        users: users.iter().map(|u| (*u).to_owned()).collect(),
        clients: clients.iter().map(|c| (*c).to_owned()).collect(),
        sites: vec![],
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

fn user(u: &str) -> Arc<Notification> {
    note(Scope::User, &[u], &[])
}

fn mailbox(client: Option<&str>, since_ms: u64, sessions: u32) -> MailboxSessions {
    MailboxSessions {
        site: String::new(),
        client: client.map(str::to_owned),
        since_ms,
        by_transport: if sessions > 0 {
            [("websocket".to_owned(), sessions)].into()
        } else {
            Default::default()
        },
    }
}

/// A report of `edge` (boot b1) numbered `seq`, with users' mailboxes.
fn report(edge: &str, seq: u64, users: &[(&str, Vec<MailboxSessions>)]) -> PresenceReport {
    PresenceReport {
        edge: edge.into(),
        boot: "b1".into(),
        seq,
        detail: users
            .iter()
            .map(|(u, m)| UserSessions {
                user: (*u).to_owned(),
                mailboxes: m.clone(),
                missed_since_ms: 0,
            })
            .collect(),
        mailbox_ttl_ms: TTL,
        ..PresenceReport::default()
    }
}

fn online(edge: &str, seq: u64, u: &str, client: Option<&str>, since: u64) -> PresenceReport {
    report(edge, seq, &[(u, vec![mailbox(client, since, 1)])])
}

fn offline(edge: &str, seq: u64, u: &str) -> PresenceReport {
    report(edge, seq, &[(u, vec![])])
}

/// A ready view knowing edges a, b and c from their first report.
fn ready() -> View {
    let mut v = View::new(config());
    v.start(T0);
    for e in ["a", "b", "c"] {
        v.apply(&report(e, 1, &[]), T0);
    }
    v
}

fn edges(route: Route) -> Vec<String> {
    match route {
        Route::Edges { edges, .. } => {
            let mut e: Vec<String> = edges.iter().map(|e| e.to_string()).collect();
            e.sort();
            e
        }
        Route::Every(r) => panic!("to every edge ({r:?})"),
    }
}

#[test]
fn a_view_routes_to_every_edge_until_it_has_listened_for_the_liveness_window() {
    let mut v = View::new(config());
    assert_eq!(v.route(&user("u"), T0), Route::Every(Every::Down));
    v.start(T0);
    v.apply(&report("a", 1, &[]), T0);
    v.apply(&report("b", 1, &[]), T0);
    v.apply(&online("a", 2, "u", None, T0), T0);
    assert_eq!(
        v.route(&user("u"), T0 + STALE - 1),
        Route::Every(Every::Warming)
    );
    let now = T0 + STALE;
    v.apply(&report("a", 3, &[]), now);
    v.apply(&report("b", 2, &[]), now);
    assert_eq!(edges(v.route(&user("u"), now)), ["a"]);
    v.stop();
    assert_eq!(v.route(&user("u"), now), Route::Every(Every::Down));
}

#[test]
fn user_scope_goes_to_the_edges_holding_the_user_and_nowhere_for_an_unknown_user() {
    let mut v = ready();
    let now = T0 + STALE;
    v.apply(&online("a", 2, "alice", None, now), now);
    v.apply(&online("b", 2, "bob", None, now), now);
    assert_eq!(edges(v.route(&user("alice"), now)), ["a"]);
    assert_eq!(
        edges(v.route(&note(Scope::User, &["alice", "bob"], &[]), now)),
        ["a", "b"]
    );
    assert!(
        edges(v.route(&user("nobody"), now)).is_empty(),
        "a fresh, complete view knows nobody holds them"
    );
}

#[test]
fn client_scope_goes_to_the_edges_holding_a_user_of_the_company() {
    let mut v = ready();
    let now = T0 + STALE;
    v.apply(&online("a", 2, "alice", Some("acme"), now), now);
    v.apply(&online("b", 2, "bob", Some("initech"), now), now);
    v.apply(&online("c", 2, "carol", Some("acme"), now), now);
    let acme = note(Scope::Client, &[], &["acme"]);
    assert_eq!(edges(v.route(&acme, now)), ["a", "c"]);
    assert_eq!(
        edges(v.route(&note(Scope::Client, &[], &["umbrella"]), now)),
        Vec::<String>::new()
    );
    // Carol leaves c: her mailbox (and with it acme) lingers for the TTL.
    v.apply(&offline("c", 3, "carol"), now + 1);
    assert_eq!(edges(v.route(&acme, now + 2)), ["a", "c"]);
    // Refresh a and b so they stay fresh past the TTL; c too.
    let later = now + TTL + 10;
    v.apply(&report("a", 3, &[]), later);
    v.apply(&report("b", 3, &[]), later);
    v.apply(&report("c", 4, &[]), later);
    assert_eq!(edges(v.route(&acme, later)), ["a"]);
    assert!(edges(v.route(&user("carol"), later)).is_empty());
}

#[test]
fn global_scope_and_a_route_to_every_known_edge_use_the_every_edge_key() {
    let mut v = ready();
    let now = T0 + STALE;
    assert_eq!(
        v.route(&note(Scope::Global, &[], &[]), now),
        Route::Every(Every::Global)
    );
    for (e, u) in [("a", "x"), ("b", "y"), ("c", "z")] {
        v.apply(&online(e, 2, u, None, now), now);
    }
    assert_eq!(
        v.route(&note(Scope::User, &["x", "y", "z"], &[]), now),
        Route::Every(Every::AllEdges)
    );
}

#[test]
fn a_stale_edge_gets_everything_until_it_is_forgotten() {
    let mut v = ready();
    let now = T0 + STALE;
    v.apply(&online("a", 2, "alice", None, now), now);
    v.apply(&report("b", 2, &[]), now);
    // c says nothing more.
    let later = now + STALE / 2 + 1;
    v.apply(&report("a", 3, &[]), later);
    v.apply(&report("b", 3, &[]), later);
    let stale_at = T0 + STALE + 1;
    match v.route(&user("alice"), stale_at.max(later)) {
        Route::Edges { edges, fallbacks } => {
            let mut e: Vec<&str> = edges.iter().map(|e| &**e).collect();
            e.sort();
            assert_eq!(e, ["a", "c"]);
            assert_eq!(fallbacks[0], (Fallback::Stale, 1));
        }
        other => panic!("{other:?}"),
    }
    // Past forget_ms, c is gone (its queue on the root has expired).
    let much_later = T0 + 600_001;
    v.apply(&report("a", 4, &[]), much_later);
    v.apply(&report("b", 4, &[]), much_later);
    assert_eq!(edges(v.route(&user("alice"), much_later)), ["a"]);
}

#[test]
fn a_gap_or_a_late_start_makes_the_edge_incomplete_until_a_snapshot() {
    let mut v = ready();
    let now = T0 + STALE;
    v.apply(&online("a", 2, "alice", None, now), now);
    // b's report 2 was lost.
    let applied = v.apply(&report("b", 3, &[]), now);
    assert!(applied.gap);
    // d came in late: its first report seen is number 7.
    v.apply(&report("d", 7, &[]), now);
    let mut got = edges(v.route(&user("alice"), now));
    got.sort();
    assert_eq!(got, ["a", "b", "d"]);
    // b's snapshot in two parts: bob is there, the view trusts b again.
    let mut p1 = report("b", 4, &[("bob", vec![mailbox(None, now, 1)])]);
    p1.sync = Some(SyncPart { part: 1, parts: 2 });
    let mut p2 = report("b", 5, &[("idle", vec![mailbox(None, 0, 0)])]);
    p2.sync = Some(SyncPart { part: 2, parts: 2 });
    assert!(!v.apply(&p1, now).synced);
    let done = v.apply(&p2, now);
    assert!(done.synced);
    assert_eq!(edges(v.route(&user("alice"), now)), ["a", "d"]);
    assert_eq!(edges(v.route(&user("bob"), now)), ["b", "d"]);
    assert_eq!(
        edges(v.route(&user("idle"), now)),
        ["b", "d"],
        "an idle mailbox is held for its TTL"
    );
}

#[test]
fn a_snapshot_interrupted_by_a_gap_is_dropped() {
    let mut v = ready();
    let now = T0 + STALE;
    v.apply(&report("b", 3, &[]), now);
    let mut p1 = report("b", 4, &[]);
    p1.sync = Some(SyncPart { part: 1, parts: 2 });
    let mut p2 = report("b", 6, &[]);
    p2.sync = Some(SyncPart { part: 2, parts: 2 });
    v.apply(&p1, now);
    let r = v.apply(&p2, now);
    assert!(r.gap && !r.synced);
    assert_eq!(v.counts(now).incomplete, 1);
}

#[test]
fn an_edge_restart_forgets_its_mailboxes_and_an_older_edge_is_never_trusted() {
    let mut v = ready();
    let now = T0 + STALE;
    v.apply(&online("a", 2, "alice", None, now), now);
    let mut restarted = report("a", 1, &[]);
    restarted.boot = "b2".into();
    v.apply(&restarted, now);
    assert!(edges(v.route(&user("alice"), now)).is_empty());
    let old = PresenceReport {
        edge: "old".into(),
        boot: "x".into(),
        online: vec!["u".into()],
        ..PresenceReport::default()
    };
    v.apply(&old, now);
    assert_eq!(edges(v.route(&user("someone"), now)), ["old"]);
}

#[test]
fn a_moving_user_is_held_by_both_edges_and_arrives_on_the_new_one() {
    let mut v = ready();
    let now = T0 + STALE;
    v.apply(&online("a", 2, "u", None, now), now);
    v.apply(&report("c", 2, &[]), now);
    // u's session on a ends, u reconnects to b.
    v.apply(&offline("a", 3, "u"), now + 100);
    let applied = v.apply(&online("b", 2, "u", Some("acme"), now + 50), now + 200);
    assert_eq!(
        applied.arrivals,
        vec![
            Arrival {
                edge: "b".into(),
                key: Key::User("u".into()),
                since_ms: now + 50
            },
            Arrival {
                edge: "b".into(),
                key: Key::Client("acme".into()),
                since_ms: now + 50
            },
        ]
    );
    // Until a's mailbox expires, both get u's notifications.
    assert_eq!(edges(v.route(&user("u"), now + 300)), ["a", "b"]);
    // A second session on b is not an arrival.
    let again = v.apply(
        &report("b", 3, &[("u", vec![mailbox(Some("acme"), now + 50, 2)])]),
        now + 400,
    );
    assert!(again.arrivals.is_empty());
}

#[test]
fn the_catch_up_gives_what_went_elsewhere_since_the_arrival_once() {
    let mut r = Recent::new(RecentConfig {
        window_ms: 5_000,
        max: 100,
        max_bytes: 1 << 20,
    });
    let a: Arc<str> = "a".into();
    let b: Arc<str> = "b".into();
    let early = user("u");
    r.record(&early, vec![a.clone()], T0);
    let mid = Arc::new(Notification {
        id: "mid".into(),
        ..(*user("u")).clone()
    });
    r.record(&mid, vec![], T0 + 3_000);
    let to_b = Arc::new(Notification {
        id: "to-b".into(),
        ..(*user("u")).clone()
    });
    r.record(&to_b, vec![b.clone()], T0 + 3_500);
    r.record(&user("other"), vec![a.clone()], T0 + 3_600);
    // u's sessions on b began at T0 + 4,000: what went since then less the
    // clock skew (T0 + 3,000), not to b.
    let got = r.catch_up(&b, &Key::User("u".into()), T0 + 4_000, T0 + 4_100);
    assert_eq!(
        got.iter().map(|n| n.id.as_str()).collect::<Vec<_>>(),
        ["mid"]
    );
    assert!(
        r.catch_up(&b, &Key::User("u".into()), T0 + 4_000, T0 + 4_200)
            .is_empty(),
        "once"
    );
    // Since unknown: everything kept.
    let got = r.catch_up(&"c".into(), &Key::User("u".into()), 0, T0 + 4_300);
    assert_eq!(got.len(), 3);
    // Past the window, forgotten.
    assert!(
        r.catch_up(&"d".into(), &Key::User("u".into()), 0, T0 + 20_000)
            .is_empty()
    );
    assert!(r.is_empty());
}

#[test]
fn the_catch_up_log_is_bounded_and_counts_what_it_forgets_early() {
    let mut r = Recent::new(RecentConfig {
        window_ms: 60_000,
        max: 2,
        max_bytes: 1 << 20,
    });
    for i in 0..5 {
        r.record(&note(Scope::User, &["u", "u"], &[]), vec![], T0 + i);
    }
    assert_eq!(r.len(), 2);
    assert_eq!(r.evicted, 3);
    assert_eq!(
        r.catch_up(&"a".into(), &Key::User("u".into()), 0, T0 + 10)
            .len(),
        2
    );
}

#[test]
fn a_plan_keeps_each_edges_order_and_sends_global_ones_once() {
    let routing = Routing::new(
        config(),
        RecentConfig {
            window_ms: 5_000,
            max: 100,
            max_bytes: 1 << 20,
        },
        RoutingMetrics::default(),
    );
    routing.start(T0);
    let now = T0 + STALE;
    for e in ["a", "b", "c"] {
        routing.apply(&report(e, 1, &[]), now);
    }
    routing.apply(&online("a", 2, "x", None, now), now);
    routing.apply(&online("b", 2, "y", None, now), now);
    let batch = vec![
        user("x"),
        user("y"),
        user("x"),
        note(Scope::Global, &[], &[]),
        user("y"),
        user("nobody"),
    ];
    let plan = routing.plan(&batch, now);
    let m = |key: &str, items: &[usize]| Message {
        key: key.into(),
        items: items.to_vec(),
    };
    assert_eq!(
        plan,
        vec![m("a", &[0, 2]), m("b", &[1]), m("", &[3]), m("b", &[4])]
    );
    assert_eq!(routing.metrics().unheld.get(), 1);
    // "nobody" connects to c a moment later: the catch-up gives it to c.
    let catch_up = routing.apply(&online("c", 2, "nobody", None, now), now + 10);
    assert_eq!(catch_up.len(), 1);
    assert_eq!(&*catch_up[0].0, "c");
    assert_eq!(catch_up[0].1[0].id, batch[5].id);
}

/// Edges a and b; x on a, then a dies and x's notifications n0..n4 go to
/// it one a second from `now`. The routing and `now`.
fn x_away_from_a_dead_edge() -> (Routing, u64) {
    let routing = Routing::new(
        config(),
        RecentConfig {
            window_ms: 10_000,
            max: 100,
            max_bytes: 1 << 20,
        },
        RoutingMetrics::default(),
    );
    routing.start(T0);
    let now = T0 + STALE;
    for e in ["a", "b"] {
        routing.apply(&report(e, 1, &[]), now);
    }
    routing.apply(&online("a", 2, "x", None, now), now);
    for i in 0..5 {
        let n = Arc::new(Notification {
            id: format!("n{i}"),
            ..(*user("x")).clone()
        });
        let plan = routing.plan(std::slice::from_ref(&n), now + 1_000 * (i + 1));
        assert_eq!(
            plan,
            vec![Message {
                key: "a".into(),
                items: vec![0]
            }]
        );
    }
    (routing, now)
}

fn ids(c: Vec<(Arc<str>, Vec<Arc<Notification>>)>) -> Vec<String> {
    c.into_iter()
        .flat_map(|(_, l)| l.into_iter().map(|n| n.id.clone()))
        .collect()
}

#[test]
fn a_user_coming_from_a_dead_edge_is_caught_up_from_when_they_last_heard_from_it() {
    let (routing, now) = x_away_from_a_dead_edge();
    let arrived = now + 5_500;
    // x's session on b began at `arrived` and said it last heard from its
    // old one 4 s before that: the catch-up starts there (less the skew).
    let mut r = online("b", 2, "x", None, arrived);
    r.detail[0].missed_since_ms = arrived - 4_000;
    assert_eq!(
        ids(routing.apply(&r, arrived + 50)),
        ["n0", "n1", "n2", "n3", "n4"][..]
    );
    // A later report saying the same re-sends nothing: b has them now.
    let mut again = online("b", 3, "x", None, arrived);
    again.detail[0].missed_since_ms = arrived - 4_000;
    assert!(routing.apply(&again, arrived + 100).is_empty());
}

#[test]
fn without_missed_since_the_catch_up_starts_at_the_session_then_at_a_later_report_saying_it() {
    let (routing, now) = x_away_from_a_dead_edge();
    let arrived = now + 5_500;
    // Only from the session's start (less the skew).
    assert_eq!(
        ids(routing.apply(&online("b", 2, "x", None, arrived), arrived + 50)),
        ["n4"][..]
    );
    // A position restored after a page reload says it on the SUBSCRIBE, so
    // a later report of the held user says it: the rest comes then.
    let mut later = online("b", 3, "x", None, arrived);
    later.detail[0].missed_since_ms = arrived - 4_000;
    assert_eq!(
        ids(routing.apply(&later, arrived + 80)),
        ["n0", "n1", "n2", "n3"][..]
    );
}
