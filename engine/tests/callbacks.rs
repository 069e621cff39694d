//! Callbacks end to end inside the engine: the firer over the embedded
//! store, the sender, and a receiver on loopback (a real HTTP server) that
//! answers as each test scripts it. The call is signed and made once when
//! due, failures follow the topic's schedule (never early) until one
//! succeeds, a recheck that says no declines it, the last failure makes a
//! dead letter that a replay sends again, and a callback-only notification
//! never reaches the browsers.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{RawQuery, State as AxState};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use herald_engine::callback::alert::Alerts;
use herald_engine::callback::alert::config::AlertsConfig;
use herald_engine::callback::alert::metrics::AlertMetrics;
use herald_engine::callback::attempt::{Kind, Verdict};
use herald_engine::callback::destination::Class;
use herald_engine::callback::exchange::webhook_id;
use herald_engine::callback::signature::{Secret, SignatureHeaders, verify};
use herald_engine::callback::topic::Topic;
use herald_engine::link::{Link, LinkError, LinkFuture, SendFuture, Taken};
use herald_engine::presence::{Asked, Presence, PresenceFuture};
use herald_engine::schedule::config::ScheduleConfig;
use herald_engine::schedule::entry::{Entry, Phase, State, Target};
use herald_engine::schedule::metrics::DelayedMetrics;
use herald_engine::schedule::service::Delayed;
use herald_engine::schedule::store::Replay;
use herald_engine::schedule::store::embedded::EmbeddedStore;
use herald_engine::schedule::topics::Topics;
use herald_engine::task::Task;
use herald_protocol::envelope::{Notification, Scope};
use parking_lot::Mutex;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// How long a test waits for what it expects.
const WAIT: Duration = Duration::from_secs(10);

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// One request the receiver saw.
#[derive(Debug, Clone)]
struct Seen {
    at_ms: u64,
    headers: HeaderMap,
    body: Bytes,
    query: String,
}

/// A receiver that answers from a script (then with its default) and
/// keeps what it saw.
#[derive(Default)]
struct Receiver {
    calls_script: Mutex<VecDeque<(u16, &'static str)>>,
    call_default: Mutex<(u16, &'static str)>,
    recheck_answer: Mutex<(u16, &'static str)>,
    calls: Mutex<Vec<Seen>>,
    rechecks: Mutex<Vec<Seen>>,
}

async fn on_call(AxState(r): AxState<Arc<Receiver>>, headers: HeaderMap, body: Bytes) -> Response {
    r.calls.lock().push(Seen {
        at_ms: now_ms(),
        headers,
        body,
        query: String::new(),
    });
    let (status, body) = r
        .calls_script
        .lock()
        .pop_front()
        .unwrap_or(*r.call_default.lock());
    (StatusCode::from_u16(status).unwrap(), body).into_response()
}

async fn on_recheck(
    AxState(r): AxState<Arc<Receiver>>,
    headers: HeaderMap,
    RawQuery(q): RawQuery,
) -> Response {
    r.rechecks.lock().push(Seen {
        at_ms: now_ms(),
        headers,
        body: Bytes::new(),
        query: q.unwrap_or_default(),
    });
    let (status, body) = *r.recheck_answer.lock();
    (StatusCode::from_u16(status).unwrap(), body).into_response()
}

async fn receiver() -> (SocketAddr, Arc<Receiver>) {
    let r = Arc::new(Receiver::default());
    *r.call_default.lock() = (200, "");
    *r.recheck_answer.lock() = (200, "OK");
    let app = Router::new()
        .route("/call", post(on_call))
        .route("/recheck", get(on_recheck))
        .with_state(Arc::clone(&r));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, r)
}

/// A link that takes every batch at once and keeps the ids.
#[derive(Default)]
struct Taking {
    ids: Mutex<Vec<String>>,
}

impl Link for Taking {
    fn publish(&self, _batch: Vec<Arc<Notification>>) -> LinkFuture<'_> {
        Box::pin(async { Err(LinkError("the firer sends, it does not publish".into())) })
    }

    fn send(&self, batch: Vec<Arc<Notification>>) -> SendFuture<'_> {
        self.ids
            .lock()
            .extend(batch.iter().map(|n| n.id.to_string()));
        Box::pin(async { Ok(Box::pin(async { Ok(()) }) as Taken) })
    }
}

struct Everyone;

impl Presence for Everyone {
    fn online<'a>(&'a self, who: &'a [Asked]) -> PresenceFuture<'a> {
        Box::pin(async move { vec![true; who.len()] })
    }
}

/// Nobody has a browser session (a user online on another channel only).
struct Nobody;

impl Presence for Nobody {
    fn online<'a>(&'a self, who: &'a [Asked]) -> PresenceFuture<'a> {
        Box::pin(async move { vec![false; who.len()] })
    }
}

struct Running {
    delayed: Delayed,
    link: Arc<Taking>,
    metrics: DelayedMetrics,
    alert_metrics: AlertMetrics,
    addr: SocketAddr,
    receiver: Arc<Receiver>,
    shutdown: CancellationToken,
    _dir: tempfile::TempDir,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn start() -> Running {
    start_with(Arc::new(Everyone)).await
}

async fn start_with(presence: Arc<dyn Presence>) -> Running {
    let (addr, receiver) = receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    let config = ScheduleConfig {
        retry_after_ms: 100,
        claim_ahead_ms: 50,
        ..ScheduleConfig::default()
    };
    let topics = Topics::new(&config, vec![Class::Loopback]);
    let metrics = DelayedMetrics::default();
    let alert_metrics = AlertMetrics::default();
    let alerts = Alerts::new(&AlertsConfig::default(), alert_metrics.clone());
    let delayed = Delayed::with_topics(config, store, topics, metrics.clone(), alerts);
    let link = Arc::new(Taking::default());
    let shutdown = CancellationToken::new();
    let scheduling = delayed
        .scheduling(link.clone(), presence)
        .expect("started once");
    tokio::spawn(Box::new(scheduling).run(shutdown.clone()));
    Running {
        delayed,
        link,
        metrics,
        alert_metrics,
        addr,
        receiver,
        shutdown,
        _dir: dir,
    }
}

impl Running {
    /// Register `name` calling this receiver, with `extra` settings.
    async fn topic(&self, name: &str, extra: serde_json::Value) {
        let mut body = json!({
            "callback_url": format!("http://{}/call", self.addr),
            "signing_secrets": [SECRET],
        });
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let topic = Topic::from_json(&body, &[Class::Loopback]).unwrap();
        self.delayed.put_topic(name, topic, now_ms()).await.unwrap();
    }

    async fn accept(&self, e: Entry) {
        self.delayed.accept(vec![e]).await.unwrap();
    }

    async fn until_state(&self, id: &str, state: State) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let s = self.delayed.status(id).await.unwrap().expect("stored");
            if s.state == state {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{id} stayed {} waiting for {state}",
                s.state
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn calls(&self) -> Vec<Seen> {
        self.receiver.calls.lock().clone()
    }

    fn outcomes(&self, outcome: &'static str) -> u64 {
        self.metrics
            .callbacks
            .outcomes
            .get_or_create(&herald_engine::callback::metrics::OutcomeLabels { outcome })
            .get()
    }
}

fn entry(id: &str, topic: Option<&str>, due_ms: u64) -> Entry {
    Entry {
        notification: Notification {
            id: id.into(),
            scope: Scope::User,
            users: vec!["u7".into()],
            clients: vec![],
            sites: vec![],
            event: "reminder".into(),
            topic: topic.map(str::to_owned),
            content_type: "application/json".into(),
            payload: Bytes::from_static(b"{\"order\":42}"),
            payload_is_utf8: true,
            ttl: None,
            encodings: Default::default(),
            accepted: Default::default(),
        },
        due_ms,
        accepted_ms: now_ms(),
        when_online: false,
        attempts: 0,
        phase: Phase::Deliver,
        fire_ms: 0,
        calls: 0,
        target: Target::default(),
    }
}

fn header<'a>(seen: &'a Seen, name: &str) -> &'a str {
    seen.headers
        .get(name)
        .unwrap_or_else(|| panic!("no {name} header"))
        .to_str()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_due_callback_is_signed_made_once_and_delivered() {
    let h = start().await;
    h.topic("billing", json!({})).await;
    let due = now_ms() + 200;
    h.accept(entry("pay.check-1", Some("billing"), due)).await;
    h.until_state("pay.check-1", State::Delivered).await;

    let calls = h.calls();
    assert_eq!(calls.len(), 1, "made once");
    let call = &calls[0];
    assert!(call.at_ms >= due, "called at {}, due {due}", call.at_ms);
    assert_eq!(&call.body[..], b"{\"order\":42}");
    assert_eq!(header(call, "content-type"), "application/json");
    assert_eq!(header(call, "herald-topic"), "billing");
    assert_eq!(header(call, "herald-attempt"), "1");
    assert_eq!(header(call, "herald-user"), "u7");
    assert_eq!(header(call, "herald-notification-id"), "pay.check-1");
    assert_eq!(header(call, "webhook-id"), webhook_id("pay.check-1"));
    let sig = SignatureHeaders {
        id: header(call, "webhook-id").to_owned(),
        timestamp: header(call, "webhook-timestamp").to_owned(),
        signature: header(call, "webhook-signature").to_owned(),
    };
    let secret = Secret::parse(SECRET).unwrap();
    verify(&sig, &call.body, &[secret], now_ms() / 1000, 300).expect("a valid signature");

    assert_eq!(
        *h.link.ids.lock(),
        ["pay.check-1"],
        "the browsers had it too"
    );
    let log = h.delayed.attempts("pay.check-1").await.unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(
        (log[0].kind, log[0].verdict),
        (Kind::Call, Verdict::Delivered)
    );
    assert_eq!(log[0].status, Some(200));
    assert_eq!(h.outcomes("delivered"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_follow_the_schedule_never_early_then_one_succeeds() {
    let h = start().await;
    h.topic("billing", json!({"retry": {"delays_ms": [300, 600, 600]}}))
        .await;
    h.receiver
        .calls_script
        .lock()
        .extend([(500, "down"), (503, "busy")]);
    h.accept(entry("pay.check-2", Some("billing"), now_ms() + 50))
        .await;
    h.until_state("pay.check-2", State::Delivered).await;

    let calls = h.calls();
    assert_eq!(calls.len(), 3);
    let attempts: Vec<&str> = calls.iter().map(|c| header(c, "herald-attempt")).collect();
    assert_eq!(attempts, ["1", "2", "3"]);
    assert!(
        calls
            .iter()
            .all(|c| header(c, "webhook-id") == webhook_id("pay.check-2")),
        "every attempt carries the same webhook-id"
    );
    assert!(
        calls[1].at_ms - calls[0].at_ms >= 300,
        "second attempt {} ms after the first",
        calls[1].at_ms - calls[0].at_ms
    );
    assert!(
        calls[2].at_ms - calls[1].at_ms >= 600,
        "third attempt {} ms after the second",
        calls[2].at_ms - calls[1].at_ms
    );
    assert_eq!(
        *h.link.ids.lock(),
        ["pay.check-2"],
        "the browsers had it once: retries call only"
    );
    let log = h.delayed.attempts("pay.check-2").await.unwrap();
    let verdicts: Vec<(u32, Option<u16>, Verdict)> = log
        .iter()
        .map(|a| (a.attempt, a.status, a.verdict))
        .collect();
    assert_eq!(
        verdicts,
        [
            (1, Some(500), Verdict::Failed),
            (2, Some(503), Verdict::Failed),
            (3, Some(200), Verdict::Delivered)
        ]
    );
    assert_eq!(h.outcomes("retry"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recheck_that_says_no_declines_it_without_a_call() {
    let h = start().await;
    let recheck = format!("http://{}/recheck", h.addr);
    h.topic("billing", json!({"recheck_url": recheck})).await;
    *h.receiver.recheck_answer.lock() = (200, "ERROR");
    h.accept(entry("pay.check-3", Some("billing"), now_ms()))
        .await;
    h.until_state("pay.check-3", State::Declined).await;
    assert!(h.calls().is_empty(), "no call after a recheck that says no");
    let rechecks = h.receiver.rechecks.lock().clone();
    assert_eq!(rechecks.len(), 1);
    assert_eq!(rechecks[0].query, "id=pay.check-3&topic=billing&user=u7");
    assert!(rechecks[0].headers.contains_key("webhook-signature"));

    // The same topic rechecked `OK`: the call goes ahead.
    *h.receiver.recheck_answer.lock() = (200, " ok \n");
    h.accept(entry("pay.check-4", Some("billing"), now_ms()))
        .await;
    h.until_state("pay.check-4", State::Delivered).await;
    assert_eq!(h.calls().len(), 1);
    let log = h.delayed.attempts("pay.check-4").await.unwrap();
    let kinds: Vec<(Kind, Verdict)> = log.iter().map(|a| (a.kind, a.verdict)).collect();
    assert_eq!(
        kinds,
        [
            (Kind::Recheck, Verdict::Proceed),
            (Kind::Call, Verdict::Delivered)
        ],
        "the recheck that let the call go is kept before it"
    );
    let declined = h.delayed.attempts("pay.check-3").await.unwrap();
    assert_eq!(declined.len(), 1);
    assert_eq!(
        (
            declined[0].kind,
            declined[0].verdict,
            declined[0].excerpt.as_str()
        ),
        (Kind::Recheck, Verdict::Declined, ""),
        "the recheck answered from loopback (allowed, not public): its body is not kept"
    );
    let reason = declined[0].error.as_deref().unwrap_or_default();
    assert!(
        reason.contains("HTTP 200") && !reason.contains("ERROR"),
        "status only: {reason}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_failure_is_a_dead_letter_and_a_replay_sends_it_again() {
    let h = start().await;
    h.topic("billing", json!({"retry": {"delays_ms": [100]}}))
        .await;
    *h.receiver.call_default.lock() = (500, "no");
    h.accept(entry("pay.check-5", Some("billing"), now_ms()))
        .await;
    h.until_state("pay.check-5", State::Dead).await;
    assert_eq!(h.calls().len(), 2, "two attempts: one delay");
    assert_eq!(h.outcomes("dead"), 1);
    let mut registry = prometheus_client::registry::Registry::default();
    h.alert_metrics.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains(
            r#"herald_callback_alerts_total{kind="dead_letter",channel="log",outcome="sent"} 1"#
        ),
        "the dead letter raised an alert:\n{text}"
    );

    *h.receiver.call_default.lock() = (200, "");
    match h.delayed.replay("pay.check-5").await.unwrap() {
        Replay::Replayed(_) => {}
        other => panic!("{other:?}"),
    }
    h.until_state("pay.check-5", State::Delivered).await;
    let calls = h.calls();
    assert_eq!(calls.len(), 3);
    assert_eq!(
        header(&calls[2], "herald-attempt"),
        "1",
        "a replay starts over"
    );
    assert_eq!(h.link.ids.lock().len(), 1, "a replay calls only");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callback_only_notification_never_reaches_the_browsers() {
    let h = start().await;
    let mut e = entry("remind-1", None, now_ms() + 20);
    e.target = Target {
        callback_url: Some(format!("http://{}/call", h.addr)),
        recheck_url: None,
        browsers: false,
    };
    h.accept(e).await;
    h.until_state("remind-1", State::Delivered).await;
    let calls = h.calls();
    assert_eq!(calls.len(), 1);
    assert!(
        !calls[0].headers.contains_key("herald-topic"),
        "no topic, no header"
    );
    assert!(
        !calls[0].headers.contains_key("webhook-signature"),
        "no topic, no secret: unsigned"
    );
    assert!(h.link.ids.lock().is_empty(), "the browsers never had it");
}

/// The first field report's flow: the backend knows the user is online on
/// another channel and says so (`POST /v1/users/{uid}/online`, which is
/// `Delayed::user_online`); a callback-only `when_online` notification
/// held for them goes to its callback, though no browser session exists.
/// One that goes to browsers stays held (nobody would receive it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_online_api_releases_a_callback_only_when_online_notification() {
    let h = start_with(Arc::new(Nobody)).await;
    let mut callback_only = entry("online-cb", None, now_ms());
    callback_only.when_online = true;
    callback_only.target = Target {
        callback_url: Some(format!("http://{}/call", h.addr)),
        recheck_url: None,
        browsers: false,
    };
    let mut to_browsers = entry("online-br", None, now_ms());
    to_browsers.when_online = true;
    h.accept(callback_only).await;
    h.accept(to_browsers).await;
    h.until_state("online-cb", State::Held).await;
    h.until_state("online-br", State::Held).await;
    assert!(
        h.calls().is_empty(),
        "held: no call before the user is online"
    );

    h.delayed.user_online("u7");
    h.until_state("online-cb", State::Delivered).await;
    let calls = h.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(header(&calls[0], "herald-notification-id"), "online-cb");
    assert!(h.link.ids.lock().is_empty(), "the browsers never had it");
    // The one for browsers was released, found nobody and is held again.
    let deadline = tokio::time::Instant::now() + WAIT;
    while h.metrics.rehold.get() < 1 {
        assert!(tokio::time::Instant::now() < deadline, "never held again");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    h.until_state("online-br", State::Held).await;
}
