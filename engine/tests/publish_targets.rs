//! A publication's own callback settings through the HTTP publish API, in
//! process (tower, no sockets), over the embedded store: `callback_url`,
//! `recheck_url` and `browsers` are checked (422 naming the field), and a
//! publication that calls back (its own URL, or its topic's) is stored with
//! its target, due now when it is immediate, instead of going straight to
//! the link.
//!
//! The store is wrapped to keep what it was asked to insert: the entries as
//! the publish API built them, target included.

use std::sync::Arc;

use axum::body::Body;
use herald_engine::api_key::{ApiKeys, KeySet};
use herald_engine::callback::config::CallbackConfig;
use herald_engine::link::{Link, LinkFuture};
use herald_engine::metrics::PublishMetrics;
use herald_engine::publish::{PublishApi, PublishConfig};
use herald_engine::schedule::config::ScheduleConfig;
use herald_engine::schedule::entry::{Entry, Millis, Status, Step, Target};
use herald_engine::schedule::metrics::DelayedMetrics;
use herald_engine::schedule::service::Delayed;
use herald_engine::schedule::store::embedded::EmbeddedStore;
use herald_engine::schedule::store::{
    Cancel, Counts, Cursor, Finish, Insert, ListFilter, Page, PutTopic, Replay, RetryWait, Settled,
    Store, StoreFuture, StoredTopic,
};
use herald_engine::schedule::timing::now_ms;
use herald_engine::schedule::topics::Topics;
use herald_protocol::envelope::Notification;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use parking_lot::Mutex;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tower::ServiceExt;

const KEY: &str = "plain-secret";

/// A link that keeps what it is given.
#[derive(Default)]
struct Kept(Mutex<Vec<Arc<Notification>>>);

impl Link for Kept {
    fn publish(&self, batch: Vec<Arc<Notification>>) -> LinkFuture<'_> {
        self.0.lock().extend(batch);
        Box::pin(async { Ok(()) })
    }
}

/// The embedded store, keeping a copy of every entry it is asked to
/// insert.
struct Recording {
    store: EmbeddedStore,
    inserted: Mutex<Vec<Entry>>,
}

impl Store for Recording {
    fn tenants_since(&self) -> Millis {
        0
    }

    fn insert(&self, entries: Vec<Entry>, now: Millis) -> StoreFuture<'_, Vec<Insert>> {
        self.inserted.lock().extend(entries.iter().cloned());
        self.store.insert(entries, now)
    }
    fn claim_due(&self, now: Millis, limit: usize, lease_ms: u64) -> StoreFuture<'_, Vec<Entry>> {
        self.store.claim_due(now, limit, lease_ms)
    }
    fn upcoming(
        &self,
        from: Millis,
        until: Millis,
        limit: usize,
    ) -> StoreFuture<'_, Vec<(Millis, String)>> {
        self.store.upcoming(from, until, limit)
    }
    fn delivered(&self, ids: Vec<String>, now: Millis) -> StoreFuture<'_, ()> {
        self.store.delivered(ids, now)
    }
    fn hold(&self, ids: Vec<String>, expires_ms: Millis, now: Millis) -> StoreFuture<'_, ()> {
        self.store.hold(ids, expires_ms, now)
    }
    fn claim_held(
        &self,
        user: &str,
        now: Millis,
        limit: usize,
        lease_ms: u64,
    ) -> StoreFuture<'_, Vec<Entry>> {
        self.store.claim_held(user, now, limit, lease_ms)
    }
    fn release(&self, ids: Vec<String>, retry_ms: Millis, now: Millis) -> StoreFuture<'_, ()> {
        self.store.release(ids, retry_ms, now)
    }
    fn cancel(&self, id: &str, now: Millis) -> StoreFuture<'_, Cancel> {
        self.store.cancel(id, now)
    }
    fn status(&self, id: &str) -> StoreFuture<'_, Option<Status>> {
        self.store.status(id)
    }
    fn list(
        &self,
        filter: ListFilter,
        after: Option<Cursor>,
        limit: usize,
    ) -> StoreFuture<'_, Page> {
        self.store.list(filter, after, limit)
    }
    fn expire(&self, now: Millis, limit: usize) -> StoreFuture<'_, Vec<Option<String>>> {
        self.store.expire(now, limit)
    }
    fn purge(&self, before: Millis, limit: usize) -> StoreFuture<'_, u64> {
        self.store.purge(before, limit)
    }
    fn counts(&self, now: Millis, bounds: Vec<u64>) -> StoreFuture<'_, Counts> {
        self.store.counts(now, bounds)
    }
    fn mark_step(&self, ids: Vec<String>, step: Step, now: Millis) -> StoreFuture<'_, ()> {
        self.store.mark_step(ids, step, now)
    }
    fn retry_wait(&self, items: Vec<RetryWait>, now: Millis) -> StoreFuture<'_, Settled> {
        self.store.retry_wait(items, now)
    }
    fn finish(&self, items: Vec<Finish>, now: Millis) -> StoreFuture<'_, Settled> {
        self.store.finish(items, now)
    }
    fn attempts(
        &self,
        id: &str,
    ) -> StoreFuture<'_, Vec<herald_engine::callback::attempt::Attempt>> {
        self.store.attempts(id)
    }
    fn replay(&self, id: &str, now: Millis) -> StoreFuture<'_, Replay> {
        self.store.replay(id, now)
    }
    fn put_topic(
        &self,
        name: &str,
        settings: bytes::Bytes,
        max_topics: usize,
        now: Millis,
    ) -> StoreFuture<'_, PutTopic> {
        self.store.put_topic(name, settings, max_topics, now)
    }
    fn topic(&self, name: &str) -> StoreFuture<'_, Option<StoredTopic>> {
        self.store.topic(name)
    }
    fn delete_topic(&self, name: &str) -> StoreFuture<'_, bool> {
        self.store.delete_topic(name)
    }
    fn topics(&self, after: Option<String>, limit: usize) -> StoreFuture<'_, Vec<StoredTopic>> {
        self.store.topics(after, limit)
    }
    fn topics_version(&self) -> StoreFuture<'_, u64> {
        self.store.topics_version()
    }
}

struct Api {
    api: PublishApi,
    link: Arc<Kept>,
    store: Option<Arc<Recording>>,
    metrics: PublishMetrics,
    _dir: tempfile::TempDir,
}

/// The API over a recording store; callbacks may reach private networks
/// when `private` (`[callbacks] allow_private_networks`).
fn api(private: bool) -> Api {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Recording {
        store: EmbeddedStore::open(dir.path()).unwrap(),
        inserted: Mutex::default(),
    });
    let config = ScheduleConfig::default();
    let callbacks = CallbackConfig {
        allow_private_networks: private,
        ..CallbackConfig::default()
    };
    let topics = Topics::new(&config, callbacks.allowed());
    let alerts = herald_engine::callback::alert::Alerts::new(
        &Default::default(),
        herald_engine::callback::alert::metrics::AlertMetrics::default(),
    );
    let delayed = Delayed::with_topics(
        config,
        store.clone(),
        topics,
        DelayedMetrics::default(),
        alerts,
    );
    build(Some(delayed), Some(store), dir)
}

/// The API of a server without delayed notifications.
fn api_without_store() -> Api {
    build(None, None, tempfile::tempdir().unwrap())
}

fn build(delayed: Option<Delayed>, store: Option<Arc<Recording>>, dir: tempfile::TempDir) -> Api {
    let keys = ApiKeys::from_set(KeySet::load(&[KEY.into()], &[]).unwrap());
    let link = Arc::new(Kept::default());
    let metrics = PublishMetrics::default();
    let api = PublishApi::with_delayed(
        PublishConfig {
            api_keys: keys,
            ..PublishConfig::default()
        },
        link.clone(),
        metrics.clone(),
        delayed,
    );
    Api {
        api,
        link,
        store,
        metrics,
        _dir: dir,
    }
}

impl Api {
    async fn send(&self, req: Request<Body>) -> (StatusCode, Value) {
        let res = self.api.routes().oneshot(req).await.unwrap();
        let status = res.status();
        let bytes = res.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header("authorization", format!("Bearer {KEY}"));
        let req = match body {
            Some(b) => req
                .header("content-type", "application/json")
                .body(Body::from(b.to_string())),
            None => req.body(Body::empty()),
        }
        .unwrap();
        self.send(req).await
    }

    async fn publish(&self, body: Value) -> (StatusCode, Value) {
        self.call("POST", "/v1/notifications", Some(body)).await
    }

    /// A raw-body publication with its fields in `query`.
    async fn publish_raw(&self, query: &str) -> (StatusCode, Value) {
        let req = Request::builder()
            .method("POST")
            .uri(format!("/v1/notifications?{query}"))
            .header("authorization", format!("Bearer {KEY}"))
            .header("content-type", "text/plain")
            .body(Body::from("hello"))
            .unwrap();
        self.send(req).await
    }

    /// What the link took, by id.
    fn linked(&self) -> Vec<String> {
        self.link.0.lock().iter().map(|n| n.id.clone()).collect()
    }

    /// The entry the store was asked to insert for `id`.
    fn stored(&self, id: &str) -> Entry {
        let store = self.store.as_ref().expect("a store");
        let inserted = store.inserted.lock();
        inserted
            .iter()
            .find(|e| e.id() == id)
            .unwrap_or_else(|| panic!("{id} was not stored"))
            .clone()
    }

    fn stored_count(&self) -> usize {
        self.store.as_ref().map_or(0, |s| s.inserted.lock().len())
    }

    fn rejected_invalid(&self) -> u64 {
        let mut registry = Registry::default();
        self.metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text.lines()
            .find(|l| {
                l.starts_with("herald_notifications_rejected_total")
                    && l.contains("source=\"http\"")
                    && l.contains("reason=\"invalid_field\"")
            })
            .and_then(|l| l.rsplit(' ').next())
            .map_or(0, |n| n.parse().unwrap())
    }
}

fn note(id: &str, extra: Value) -> Value {
    let mut body = json!({"id": id, "users": ["u1"], "event": "billing.due", "payload": {"n": 1}});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

#[tokio::test]
async fn an_immediate_publication_with_a_callback_is_stored_due_now_with_its_target() {
    let a = api(true);
    let before = now_ms();
    let (code, body) = a
        .publish(note(
            "cb-1",
            json!({
                "callback_url": "http://127.0.0.1:9/cb",
                "recheck_url": "http://127.0.0.1:9/check",
                "browsers": false,
            }),
        ))
        .await;
    assert_eq!(code, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["ids"], json!(["cb-1"]));
    assert_eq!(body["scheduled"][0]["id"], "cb-1", "{body}");
    assert_eq!(body["scheduled"][0]["duplicate"], false);
    assert!(a.linked().is_empty(), "not straight to the link");

    let e = a.stored("cb-1");
    assert_eq!(
        e.target,
        Target {
            callback_url: Some("http://127.0.0.1:9/cb".into()),
            recheck_url: Some("http://127.0.0.1:9/check".into()),
            browsers: false,
        }
    );
    assert!(!e.when_online);
    assert_eq!(e.due_ms, e.accepted_ms, "due now, as with delay 0");
    assert!((before..=now_ms()).contains(&e.due_ms));
    assert_eq!(e.notification.event, "billing.due");

    // The store has it: its status is served (an immediate notification
    // without a callback has none).
    let (code, status) = a.call("GET", "/v1/notifications/cb-1", None).await;
    assert_eq!(code, StatusCode::OK, "{status}");
    assert_eq!(status["state"], "scheduled");
    assert_eq!(status["due_at_ms"], json!(e.due_ms));

    let (code, body) = a.publish(note("plain-1", json!({}))).await;
    assert_eq!(code, StatusCode::ACCEPTED, "{body}");
    assert!(body.get("scheduled").is_none(), "{body}");
    assert_eq!(a.linked(), ["plain-1"]);
    let (code, _) = a.call("GET", "/v1/notifications/plain-1", None).await;
    assert_eq!(code, StatusCode::NOT_FOUND);

    // `browsers: true` on its own changes nothing.
    let (code, _) = a.publish(note("plain-2", json!({"browsers": true}))).await;
    assert_eq!(code, StatusCode::ACCEPTED);
    assert_eq!(a.linked(), ["plain-1", "plain-2"]);
    assert_eq!(a.stored_count(), 1);
}

#[tokio::test]
async fn delayed_when_online_raw_and_batched_publications_keep_their_target() {
    let a = api(true);
    let (code, body) = a
        .publish(json!([
            note(
                "later",
                json!({"delay_ms": 60000, "callback_url": "http://127.0.0.1:9/a"})
            ),
            note(
                "online",
                json!({"when_online": true, "callback_url": "http://127.0.0.1:9/b"})
            ),
            note("now", json!({})),
        ]))
        .await;
    assert_eq!(code, StatusCode::ACCEPTED, "{body}");
    assert_eq!(a.linked(), ["now"]);
    let later = a.stored("later");
    assert!(later.due_ms >= later.accepted_ms + 60000);
    assert_eq!(
        later.target.callback_url.as_deref(),
        Some("http://127.0.0.1:9/a")
    );
    assert!(later.target.browsers);
    let online = a.stored("online");
    assert!(online.when_online);
    assert_eq!(
        online.target.callback_url.as_deref(),
        Some("http://127.0.0.1:9/b")
    );

    let (code, body) = a
        .publish_raw("id=raw-1&users=u1&event=e&callback_url=http%3A%2F%2F127.0.0.1%3A9%2Fraw&browsers=false")
        .await;
    assert_eq!(code, StatusCode::ACCEPTED, "{body}");
    let raw = a.stored("raw-1");
    assert_eq!(
        raw.target.callback_url.as_deref(),
        Some("http://127.0.0.1:9/raw")
    );
    assert!(!raw.target.browsers);
    assert_eq!(&raw.notification.payload[..], b"hello");
}

#[tokio::test]
async fn a_topic_with_a_callback_url_makes_its_notifications_durable() {
    let a = api(true);
    let (code, body) = a
        .call(
            "PUT",
            "/v1/topics/billing",
            Some(json!({"callback_url": "http://127.0.0.1:9/topic"})),
        )
        .await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
    let (code, body) = a
        .call("PUT", "/v1/topics/quiet", Some(json!({"jitter_ms": 0})))
        .await;
    assert_eq!(code, StatusCode::CREATED, "{body}");

    // Immediate, under the topic: stored, the topic's URL not copied (the
    // sender resolves it when due, so a topic change still applies).
    let (code, body) = a.publish(note("t-1", json!({"topic": "billing"}))).await;
    assert_eq!(code, StatusCode::ACCEPTED, "{body}");
    assert_eq!(a.stored("t-1").target, Target::default());
    // Callback only, and a recheck of its own: allowed by the topic's URL.
    let (code, body) = a
        .publish(note(
            "t-2",
            json!({"topic": "billing", "browsers": false, "recheck_url": "http://127.0.0.1:9/check"}),
        ))
        .await;
    assert_eq!(code, StatusCode::ACCEPTED, "{body}");
    assert_eq!(
        a.stored("t-2").target,
        Target {
            callback_url: None,
            recheck_url: Some("http://127.0.0.1:9/check".into()),
            browsers: false,
        }
    );
    // A topic without a callback: immediate as ever, and no callback only.
    let (code, _) = a.publish(note("q-1", json!({"topic": "quiet"}))).await;
    assert_eq!(code, StatusCode::ACCEPTED);
    assert_eq!(a.linked(), ["q-1"]);
    let (code, body) = a
        .publish(note("q-2", json!({"topic": "quiet", "browsers": false})))
        .await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["field"], "browsers");

    // The topic loses its callback: its notifications go straight out.
    let (code, _) = a.call("DELETE", "/v1/topics/billing", None).await;
    assert_eq!(code, StatusCode::NO_CONTENT);
    let (code, _) = a.publish(note("t-3", json!({"topic": "billing"}))).await;
    assert_eq!(code, StatusCode::ACCEPTED);
    assert_eq!(a.linked(), ["q-1", "t-3"]);
}

#[tokio::test]
async fn bad_callback_fields_are_422_naming_the_field() {
    let a = api(false);
    let long = format!("https://push.example.com/{}", "a".repeat(2048));
    let cases = [
        (
            note("b", json!({"callback_url": "ftp://push.example.com/x"})),
            "callback_url",
            "scheme",
        ),
        (
            note("b", json!({"callback_url": long})),
            "callback_url",
            "the limit is 2048",
        ),
        (
            note("b", json!({"callback_url": "push.example.com/x"})),
            "callback_url",
            "not a URL",
        ),
        (
            note("b", json!({"callback_url": "http://10.0.0.7/x"})),
            "callback_url",
            "private",
        ),
        (
            note("b", json!({"callback_url": "http://127.0.0.1:9/x"})),
            "callback_url",
            "loopback",
        ),
        (
            note("b", json!({"callback_url": 7})),
            "callback_url",
            "string",
        ),
        (
            note(
                "b",
                json!({"callback_url": "https://push.example.com/x", "recheck_url": "http://[::1]/c"}),
            ),
            "recheck_url",
            "loopback",
        ),
        (
            note("b", json!({"recheck_url": "https://billing.example.com/c"})),
            "recheck_url",
            "guards a callback",
        ),
        (
            note("b", json!({"browsers": false})),
            "browsers",
            "no callback",
        ),
        (note("b", json!({"browsers": "no"})), "browsers", "boolean"),
        (
            json!([
                note("ok", json!({})),
                note("b", json!({"recheck_url": "https://billing.example.com/c"}))
            ]),
            "[1].recheck_url",
            "guards a callback",
        ),
        (
            json!([
                note("ok", json!({})),
                note("b", json!({"callback_url": "gopher://x"}))
            ]),
            "[1].callback_url",
            "scheme",
        ),
    ];
    for (body, field, words) in &cases {
        let (code, answer) = a.publish(body.clone()).await;
        assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{field}: {answer}");
        let error = &answer["error"];
        assert_eq!(error["code"], "invalid_field", "{answer}");
        assert_eq!(error["field"], *field, "{answer}");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(words), "{field}: {message}");
    }
    for (query, field) in [
        (
            "users=u1&event=e&callback_url=ftp%3A%2F%2Fx",
            "callback_url",
        ),
        (
            "users=u1&event=e&recheck_url=https%3A%2F%2Fa.example%2F",
            "recheck_url",
        ),
        ("users=u1&event=e&browsers=false", "browsers"),
        ("users=u1&event=e&browsers=maybe", "browsers"),
    ] {
        let (code, answer) = a.publish_raw(query).await;
        assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{query}: {answer}");
        assert_eq!(answer["error"]["field"], field, "{answer}");
    }
    assert!(a.linked().is_empty(), "a refused batch reaches no one");
    assert_eq!(a.stored_count(), 0);
    assert_eq!(a.rejected_invalid(), (cases.len() + 4) as u64);
}

#[tokio::test]
async fn without_a_delayed_store_there_are_no_callbacks() {
    let a = api_without_store();
    let (code, body) = a
        .publish(note(
            "n",
            json!({"callback_url": "https://push.example.com/x"}),
        ))
        .await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["field"], "callback_url");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not enabled"),
        "{body}"
    );
    let (code, body) = a.publish(note("n", json!({"browsers": false}))).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["field"], "browsers");
    let (code, _) = a.publish(note("n", json!({"browsers": true}))).await;
    assert_eq!(code, StatusCode::ACCEPTED);
    assert_eq!(a.linked(), ["n"]);
}
