//! The HTTP API against named API keys, in process (tower, no sockets):
//! each endpoint (the topics API included) needs its operation (403
//! naming it), a site-limited key
//! publishes only to its sites (403 naming `sites`), a key over its publish
//! rate gets 429 with `Retry-After`, a batch over its burst 413, every
//! refusal is counted, and an accepted publication is logged with the
//! key's name and never the key.

use std::sync::Arc;

use axum::body::Body;
use herald_engine::api_key::{ApiKeyConfig, ApiKeys, KeySet};
use herald_engine::link::{Link, LinkFuture};
use herald_engine::metrics::PublishMetrics;
use herald_engine::publish::{PublishApi, PublishConfig};
use herald_engine::schedule::config::ScheduleConfig;
use herald_engine::schedule::metrics::DelayedMetrics;
use herald_engine::schedule::service::Delayed;
use herald_engine::schedule::store::embedded::EmbeddedStore;
use herald_protocol::envelope::Notification;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use parking_lot::Mutex;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tower::ServiceExt;

const KEYS: &str = r#"
[[api_key]]
name = "publisher"
key = "publisher-secret"
ops = ["publish"]

[[api_key]]
name = "reader"
key = "reader-secret"
ops = ["status"]

[[api_key]]
name = "canceller"
key = "canceller-secret"
ops = ["cancel"]

[[api_key]]
name = "operator"
key = "operator-secret"
ops = ["admin"]

[[api_key]]
name = "eu-app"
key = "eu-secret"
ops = ["publish"]
sites = ["eu", "uk"]

[[api_key]]
name = "slow"
key = "slow-secret"
rate_per_sec = 0.01
burst = 2
"#;

/// A link that keeps what it is given.
#[derive(Default)]
struct Kept(Mutex<Vec<Arc<Notification>>>);

impl Link for Kept {
    fn publish(&self, batch: Vec<Arc<Notification>>) -> LinkFuture<'_> {
        self.0.lock().extend(batch);
        Box::pin(async { Ok(()) })
    }
}

struct Api {
    api: PublishApi,
    link: Arc<Kept>,
    metrics: PublishMetrics,
    store: Arc<EmbeddedStore>,
    _dir: tempfile::TempDir,
}

fn api() -> Api {
    api_with(KEYS)
}

/// The API with the keys of `keys`.
fn api_with(keys: &str) -> Api {
    #[derive(serde::Deserialize)]
    struct Doc {
        api_key: Vec<ApiKeyConfig>,
    }
    let named = toml::from_str::<Doc>(keys).unwrap().api_key;
    let keys = ApiKeys::from_set(KeySet::load(&["plain-secret".into()], &named).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    let delayed = Delayed::new(
        ScheduleConfig::default(),
        store.clone(),
        DelayedMetrics::default(),
    );
    let link = Arc::new(Kept::default());
    let metrics = PublishMetrics::default();
    let api = PublishApi::with_delayed(
        PublishConfig {
            api_keys: keys,
            ..PublishConfig::default()
        },
        link.clone(),
        metrics.clone(),
        Some(delayed),
    );
    Api {
        api,
        link,
        metrics,
        store,
        _dir: dir,
    }
}

struct Answer {
    status: StatusCode,
    retry_after: Option<String>,
    body: Value,
}

impl Api {
    async fn call(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> Answer {
        let mut req = Request::builder().method(method).uri(path);
        if let Some(k) = key {
            req = req.header("authorization", format!("Bearer {k}"));
        }
        let req = match body {
            Some(b) => req
                .header("content-type", "application/json")
                .body(Body::from(b.to_string())),
            None => req.body(Body::empty()),
        }
        .unwrap();
        let res = self.api.routes().oneshot(req).await.unwrap();
        let status = res.status();
        let retry_after = res
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_owned());
        let bytes = res.into_body().collect().await.unwrap().to_bytes();
        Answer {
            status,
            retry_after,
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        }
    }

    async fn publish(&self, key: &str, body: Value) -> Answer {
        self.call("POST", "/v1/notifications", Some(key), Some(body))
            .await
    }

    fn metrics_text(&self) -> String {
        let mut registry = Registry::default();
        self.metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    }

    fn published(&self) -> usize {
        self.link.0.lock().len()
    }
}

fn note(sites: &[&str]) -> Value {
    json!({"users": ["u1"], "event": "e", "sites": sites, "payload": "hi"})
}

#[tokio::test]
async fn each_endpoint_needs_its_operation_and_a_refusal_names_it() {
    let a = api();
    // (method, path, body, the operation it needs)
    let endpoints = [
        ("POST", "/v1/notifications", Some(note(&[])), "publish"),
        ("POST", "/v1/users/u1/online", None, "publish"),
        ("GET", "/v1/notifications/some-id", None, "status"),
        ("DELETE", "/v1/notifications/some-id", None, "cancel"),
        ("GET", "/v1/notifications", None, "admin"),
        ("POST", "/v1/notifications/some-id/retry", None, "admin"),
        ("GET", "/v1/topics", None, "admin"),
        ("PUT", "/v1/topics/chat", Some(json!({})), "admin"),
        ("GET", "/v1/topics/chat", None, "admin"),
        ("DELETE", "/v1/topics/chat", None, "admin"),
    ];
    let keys = [
        ("publisher-secret", "publish"),
        ("reader-secret", "status"),
        ("canceller-secret", "cancel"),
        ("operator-secret", "admin"),
    ];
    for (method, path, body, needs) in &endpoints {
        for (key, may) in keys {
            let got = a.call(method, path, Some(key), body.clone()).await;
            if may == *needs {
                assert!(
                    !matches!(got.status.as_u16(), 401 | 403),
                    "{key} on {method} {path}: {} {}",
                    got.status,
                    got.body
                );
            } else {
                assert_eq!(got.status, 403, "{key} on {method} {path}: {}", got.body);
                assert_eq!(got.body["error"]["code"], "forbidden");
                let message = got.body["error"]["message"].as_str().unwrap();
                assert!(
                    message.contains(&format!("the operation \"{needs}\""))
                        && message.contains(&format!("its ops: {may}")),
                    "{message}"
                );
            }
        }
        // A plain key may do everything; no key or a wrong one is 401.
        let got = a
            .call(method, path, Some("plain-secret"), body.clone())
            .await;
        assert!(!matches!(got.status.as_u16(), 401 | 403), "{}", got.body);
        for key in [None, Some("nobody-secret")] {
            let got = a.call(method, path, key, body.clone()).await;
            assert_eq!(got.status, 401, "{method} {path}");
            assert_eq!(got.body["error"]["code"], "unauthorized");
        }
    }
    let m = a.metrics_text();
    for line in [
        r#"herald_api_key_refused_total{api_key="reader",operation="publish",reason="forbidden"} 2"#,
        r#"herald_api_key_refused_total{api_key="publisher",operation="cancel",reason="forbidden"} 1"#,
        r#"herald_api_key_refused_total{api_key="canceller",operation="admin",reason="forbidden"} 6"#,
        r#"herald_api_key_refused_total{api_key="",operation="status",reason="unauthorized"} 2"#,
        r#"herald_notifications_rejected_total{source="http",reason="forbidden"} 3"#,
        r#"herald_api_key_notifications_total{api_key="publisher"} 1"#,
    ] {
        assert!(m.contains(line), "{line}\n{m}");
    }
}

#[tokio::test]
async fn a_site_limited_key_publishes_only_to_its_sites() {
    let a = api();
    let ok = a.publish("eu-secret", note(&["eu", "uk"])).await;
    assert_eq!(ok.status, 202, "{}", ok.body);
    assert_eq!(a.published(), 1);

    let other = a.publish("eu-secret", note(&["eu", "us"])).await;
    assert_eq!(other.status, 403, "{}", other.body);
    assert_eq!(other.body["error"]["field"], "sites");
    let message = other.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("may publish only to sites eu, uk") && message.contains("\"us\""),
        "{message}"
    );

    let everywhere = a.publish("eu-secret", note(&[])).await;
    assert_eq!(everywhere.status, 403, "{}", everywhere.body);
    assert_eq!(everywhere.body["error"]["field"], "sites");
    assert!(
        everywhere.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("without sites goes to every site"),
        "{}",
        everywhere.body
    );

    // One bad notification refuses the whole batch, naming it.
    let batch = a
        .publish("eu-secret", json!([note(&["eu"]), note(&["fr"])]))
        .await;
    assert_eq!(batch.status, 403);
    assert_eq!(batch.body["error"]["field"], "[1].sites");
    assert_eq!(a.published(), 1, "nothing of a refused batch went out");

    // A key without sites publishes anywhere.
    assert_eq!(a.publish("publisher-secret", note(&[])).await.status, 202);
    let m = a.metrics_text();
    assert!(
        m.contains(r#"herald_api_key_refused_total{api_key="eu-app",operation="publish",reason="forbidden"} 3"#),
        "{m}"
    );
}

#[tokio::test]
async fn a_key_over_its_rate_gets_429_with_retry_after() {
    let a = api();
    // Burst 2 at 0.01/s: two go at once, the third waits 100 s (less
    // what the test took, so allow a few seconds of a slow machine).
    assert_eq!(a.publish("slow-secret", note(&[])).await.status, 202);
    assert_eq!(a.publish("slow-secret", note(&[])).await.status, 202);
    let refused = a.publish("slow-secret", note(&[])).await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    let retry: u64 = refused.retry_after.as_deref().unwrap().parse().unwrap();
    assert!((90..=100).contains(&retry), "Retry-After {retry}");
    assert_eq!(refused.body["error"]["code"], "rate_limited");
    let message = refused.body["error"]["message"].as_str().unwrap();
    assert!(
        message
            .contains("API key \"slow\" is over its publish rate (0.01 notifications/s, burst 2)"),
        "{message}"
    );
    assert_eq!(a.published(), 2);
    // Other keys have their own rate (none here).
    for _ in 0..5 {
        assert_eq!(a.publish("publisher-secret", note(&[])).await.status, 202);
    }
    // A batch larger than the burst can never pass: 413, not a retry.
    let big = a
        .publish("slow-secret", json!([note(&[]), note(&[]), note(&[])]))
        .await;
    assert_eq!(big.status, 413, "{}", big.body);
    assert!(big.retry_after.is_none());
    assert!(
        big.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("its burst, 2"),
        "{}",
        big.body
    );
    // A refused request costs no tokens: an invalid one neither.
    let invalid = a
        .publish("slow-secret", json!({"users": [], "event": "e"}))
        .await;
    assert_eq!(invalid.status, 422, "{}", invalid.body);
    let m = a.metrics_text();
    for line in [
        r#"herald_api_key_refused_total{api_key="slow",operation="publish",reason="rate_limited"} 1"#,
        r#"herald_notifications_rejected_total{source="http",reason="rate_limited"} 1"#,
        r#"herald_api_key_notifications_total{api_key="slow"} 2"#,
    ] {
        assert!(m.contains(line), "{line}\n{m}");
    }
}

/// Log lines, captured.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn an_accepted_publication_is_logged_with_the_keys_name_never_the_key() {
    let a = api();
    let log = Captured::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    assert_eq!(a.publish("publisher-secret", note(&[])).await.status, 202);
    assert_eq!(
        a.call(
            "DELETE",
            "/v1/notifications/nope",
            Some("plain-secret"),
            None
        )
        .await
        .status,
        404
    );
    let text = String::from_utf8(log.0.lock().clone()).unwrap();
    let accepted: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["fields"]["message"] == "publication accepted")
        .collect();
    assert_eq!(accepted.len(), 1, "{text}");
    assert_eq!(accepted[0]["fields"]["api_key"], "publisher");
    assert_eq!(accepted[0]["fields"]["notifications"], 1);
    assert!(!text.contains("publisher-secret"), "{text}");
    assert!(!text.contains("plain-secret"), "{text}");
}

const TENANT_KEYS: &str = r#"
[[api_key]]
name = "a-app"
key = "a-secret"
sites = ["a"]

[[api_key]]
name = "a-next"
key = "a-next-secret"
sites = ["a", "a2"]
tenant = "a"

[[api_key]]
name = "b-app"
key = "b-secret"
sites = ["b"]
"#;

fn for_site(site: &str, id: &str, delay_ms: Option<u64>) -> Value {
    let mut n = json!({"id": id, "users": ["u1"], "event": "e", "sites": [site], "payload": "hi"});
    if let Some(d) = delay_ms {
        n["delay_ms"] = json!(d);
    }
    n
}

#[tokio::test]
async fn each_tenant_has_ids_of_its_own() {
    let t = api_with(TENANT_KEYS);
    // Immediate: the same id from two tenants is two notifications, each
    // kept in its tenant's namespace (what the duplicate window sees).
    for (key, site) in [("a-secret", "a"), ("b-secret", "b")] {
        let r = t.publish(key, for_site(site, "invoice-77", None)).await;
        assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.body);
        assert_eq!(
            r.body["ids"],
            json!(["invoice-77"]),
            "answered by the id as given"
        );
    }
    let kept: Vec<String> = t.link.0.lock().iter().map(|n| n.id.clone()).collect();
    assert_eq!(kept, ["invoice-77:a", "invoice-77:b"]);

    // Delayed: neither is a duplicate of the other, each has its own due time.
    let a = t
        .publish("a-secret", for_site("a", "later-1", Some(600_000)))
        .await;
    let b = t
        .publish("b-secret", for_site("b", "later-1", Some(1_200_000)))
        .await;
    for r in [&a, &b] {
        assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.body);
        assert_eq!(r.body["scheduled"][0]["id"], "later-1");
        assert_eq!(r.body["scheduled"][0]["duplicate"], false, "{}", r.body);
    }
    let due = |r: &Answer| r.body["scheduled"][0]["due_at_ms"].as_u64().unwrap();
    let status = |key: &'static str, id: &'static str| {
        let t = &t;
        async move {
            t.call("GET", &format!("/v1/notifications/{id}"), Some(key), None)
                .await
        }
    };
    let seen_by_a = status("a-secret", "later-1").await;
    assert_eq!(seen_by_a.status, StatusCode::OK, "{}", seen_by_a.body);
    assert_eq!(seen_by_a.body["id"], "later-1");
    assert_eq!(seen_by_a.body["due_at_ms"].as_u64(), Some(due(&a)));
    let seen_by_b = status("b-secret", "later-1").await;
    assert_eq!(seen_by_b.body["due_at_ms"].as_u64(), Some(due(&b)));
    // Another key of tenant `a` (named, with other sites) is the same tenant.
    let next = status("a-next-secret", "later-1").await;
    assert_eq!(next.body["due_at_ms"].as_u64(), Some(due(&a)));

    // b's cancel is b's alone.
    let cancel = t
        .call(
            "DELETE",
            "/v1/notifications/later-1",
            Some("b-secret"),
            None,
        )
        .await;
    assert_eq!(cancel.body["state"], "cancelled", "{}", cancel.body);
    assert_eq!(
        status("a-secret", "later-1").await.body["state"],
        "scheduled"
    );

    // A tenant cannot see another's id, nor name a kept id.
    t.publish("b-secret", for_site("b", "only-b", Some(600_000)))
        .await;
    let other = status("a-secret", "only-b").await;
    assert_eq!(other.status, StatusCode::NOT_FOUND, "{}", other.body);
    let kept_form = status("a-secret", "only-b:b").await;
    assert_eq!(kept_form.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(kept_form.body["error"]["field"], "id");

    // A key of every site sees the store as it is kept.
    let plain = status("plain-secret", "later-1:a").await;
    assert_eq!(plain.status, StatusCode::OK, "{}", plain.body);
    assert_eq!(plain.body["id"], "later-1:a");
    assert_eq!(
        status("plain-secret", "later-1").await.status,
        StatusCode::NOT_FOUND
    );
    // And cannot publish into a tenant's namespace: ids hold no colon.
    let forged = t
        .publish(
            "plain-secret",
            json!({"id": "x:a", "users": ["u1"], "event": "e"}),
        )
        .await;
    assert_eq!(forged.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(forged.body["error"]["field"], "id");
}

#[tokio::test]
async fn a_notification_stored_before_tenants_is_still_found_by_its_id() {
    use bytes::Bytes;
    use herald_engine::schedule::entry::{Entry, Phase, Target};
    use herald_engine::schedule::store::Store;
    use herald_protocol::envelope::Scope;

    let entry = |id: &str, accepted_ms: u64| Entry {
        notification: Notification {
            id: id.into(),
            scope: Scope::User,
            users: vec!["u1".into()],
            clients: vec![],
            sites: vec!["a".into()],
            event: "e".into(),
            topic: None,
            content_type: "text/plain".into(),
            payload: Bytes::from_static(b"hi"),
            payload_is_utf8: true,
            ttl: None,
            encodings: Default::default(),
            accepted: Default::default(),
        },
        due_ms: u64::MAX / 4,
        accepted_ms,
        when_online: false,
        attempts: 0,
        phase: Phase::Deliver,
        fire_ms: 0,
        calls: 0,
        target: Target::default(),
    };
    let t = api_with(TENANT_KEYS);
    let since = t.store.tenants_since();
    assert!(since > 0);
    // As an older Herald kept a's id (bare), and as a key of every site
    // keeps one now.
    let entries = vec![entry("legacy-1", since - 60_000), entry("plain-1", since)];
    assert_eq!(t.store.insert(entries, since).await.unwrap().len(), 2);
    let get = |key: &'static str, id: &'static str| {
        let t = &t;
        async move {
            t.call("GET", &format!("/v1/notifications/{id}"), Some(key), None)
                .await
        }
    };
    let legacy = get("a-secret", "legacy-1").await;
    assert_eq!(legacy.status, StatusCode::OK, "{}", legacy.body);
    assert_eq!(legacy.body["id"], "legacy-1");
    let cancel = t
        .call(
            "DELETE",
            "/v1/notifications/legacy-1",
            Some("a-secret"),
            None,
        )
        .await;
    assert_eq!(cancel.body["state"], "cancelled", "{}", cancel.body);
    // What a key of every site published since is not a tenant's.
    assert_eq!(
        get("a-secret", "plain-1").await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(get("plain-secret", "plain-1").await.status, StatusCode::OK);
}
