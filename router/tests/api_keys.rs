//! Named API keys on the router's HTTP API, against the real RabbitMQ and
//! Redis: each endpoint needs its operation (403 naming it), a site-limited
//! key publishes only to its sites (403 naming `sites`), a key over its
//! publish rate gets 429 with `Retry-After`, and every refusal is counted.
//! With `metrics_require_key`, `/metrics` takes a key allowed `metrics`
//! like any endpoint. And the binary: SIGHUP reloads the keys; a broken key
//! file keeps them.

mod harness;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use harness::*;
use herald_amqp::Topology;
use herald_engine::api_key::ApiKeyConfig;
use herald_router::config::Config;
use serde_json::{Value, json};

const KEYS: &str = r#"
[[api_key]]
name = "app-eu"
key = "app-eu-secret"
ops = ["publish", "status"]
sites = ["eu"]
rate_per_sec = 0.01
burst = 2

[[api_key]]
name = "ops"
key = "ops-secret"
ops = ["cancel", "admin"]
"#;

fn named(text: &str) -> Vec<ApiKeyConfig> {
    Config::from_toml(text, std::path::Path::new("keys.toml"))
        .unwrap()
        .api_key
}

struct Answer {
    status: u16,
    retry_after: Option<String>,
    body: Value,
}

async fn call(
    router: &Router,
    method: reqwest::Method,
    path: &str,
    key: &str,
    body: Option<Value>,
) -> Answer {
    let mut req = router
        .http
        .request(method, router.url(path))
        .bearer_auth(key);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let retry_after = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    Answer {
        status,
        retry_after,
        body: r.json().await.unwrap_or(Value::Null),
    }
}

async fn publish(router: &Router, key: &str, body: Value) -> Answer {
    call(
        router,
        reqwest::Method::POST,
        "/v1/notifications",
        key,
        Some(body),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_keys_limit_operations_sites_and_rate() {
    let topology = Topology::with_suffix(&suffix());
    let broker = Broker::connect(topology.clone()).await;
    let prefix = format!(
        "herald-test{}",
        topology.exchange.trim_start_matches("herald")
    );
    let _redis = RedisPrefix(prefix.clone());
    let router = Router::start(&topology, |c| {
        c.api_key = named(KEYS);
        c.redis.url = Some(redis_url());
        c.redis.prefix = prefix.clone();
    })
    .await;
    router.wait_ready().await;

    // Its own site: accepted (a delayed one, to have something to cancel).
    let delayed = publish(
        &router,
        "app-eu-secret",
        json!({"users": ["u1"], "event": "e", "sites": ["eu"], "delay_ms": 600_000}),
    )
    .await;
    assert_eq!(delayed.status, 202, "{}", delayed.body);
    let id = delayed.body["ids"][0].as_str().unwrap().to_owned();

    // Another site, or every site: 403 naming the field.
    for sites in [json!(["us"]), json!([])] {
        let refused = publish(
            &router,
            "app-eu-secret",
            json!({"users": ["u1"], "event": "e", "sites": sites}),
        )
        .await;
        assert_eq!(refused.status, 403, "{}", refused.body);
        assert_eq!(refused.body["error"]["code"], "forbidden");
        assert_eq!(refused.body["error"]["field"], "sites");
    }

    // The second of its burst of 2 reaches the edges.
    let now = publish(
        &router,
        "app-eu-secret",
        json!({"users": ["u1"], "event": "now", "sites": ["eu"]}),
    )
    .await;
    assert_eq!(now.status, 202, "{}", now.body);
    let forwarded = broker
        .take_notifications(&broker.edge_queue, 1, Duration::from_secs(10))
        .await;
    assert_eq!(forwarded[0].0.sites, ["eu"]);

    // The third is over its rate (0.01/s): 429, Retry-After ~100 s.
    let limited = publish(
        &router,
        "app-eu-secret",
        json!({"users": ["u1"], "event": "e", "sites": ["eu"]}),
    )
    .await;
    assert_eq!(limited.status, 429, "{}", limited.body);
    assert_eq!(limited.body["error"]["code"], "rate_limited");
    let retry: u64 = limited.retry_after.unwrap().parse().unwrap();
    assert!((90..=100).contains(&retry), "Retry-After {retry}");

    // Operations: status yes, cancel and the list no; the ops key the other way.
    let path = format!("/v1/notifications/{id}");
    assert_eq!(
        call(&router, reqwest::Method::GET, &path, "app-eu-secret", None)
            .await
            .status,
        200
    );
    let cancel = call(
        &router,
        reqwest::Method::DELETE,
        &path,
        "app-eu-secret",
        None,
    )
    .await;
    assert_eq!(cancel.status, 403, "{}", cancel.body);
    assert!(
        cancel.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("the operation \"cancel\" (its ops: publish, status)"),
        "{}",
        cancel.body
    );
    let list = call(
        &router,
        reqwest::Method::GET,
        "/v1/notifications",
        "app-eu-secret",
        None,
    )
    .await;
    assert_eq!(list.status, 403, "{}", list.body);
    assert_eq!(
        call(&router, reqwest::Method::GET, &path, "ops-secret", None)
            .await
            .status,
        403
    );
    // app-eu's ids are its tenant's (`eu`): a key of every site names the
    // id as kept, `id:eu`; by the bare id it finds nothing.
    let bare = call(&router, reqwest::Method::DELETE, &path, "ops-secret", None).await;
    assert_eq!(bare.status, 404, "{}", bare.body);
    let kept = format!("{path}:eu");
    let cancelled = call(&router, reqwest::Method::DELETE, &kept, "ops-secret", None).await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.body);
    assert_eq!(cancelled.body["id"], format!("{id}:eu"));
    assert_eq!(cancelled.body["state"], "cancelled");
    let list = call(
        &router,
        reqwest::Method::GET,
        "/v1/notifications",
        "ops-secret",
        None,
    )
    .await;
    assert_eq!(list.status, 200, "{}", list.body);
    // The plain key of the harness may still do everything.
    assert_eq!(
        call(
            &router,
            reqwest::Method::GET,
            "/v1/notifications",
            API_KEY,
            None
        )
        .await
        .status,
        200
    );

    router
        .metrics_showing(&[
            r#"herald_api_key_refused_total{api_key="app-eu",operation="publish",reason="forbidden"} 2"#,
            r#"herald_api_key_refused_total{api_key="app-eu",operation="publish",reason="rate_limited"} 1"#,
            r#"herald_api_key_refused_total{api_key="app-eu",operation="cancel",reason="forbidden"} 1"#,
            r#"herald_api_key_refused_total{api_key="app-eu",operation="admin",reason="forbidden"} 1"#,
            r#"herald_api_key_refused_total{api_key="ops",operation="status",reason="forbidden"} 1"#,
            r#"herald_api_key_notifications_total{api_key="app-eu"} 2"#,
            r#"herald_notifications_rejected_total{source="http",reason="rate_limited"} 1"#,
            "herald_api_keys 3",
        ])
        .await;
    drop(router);
    broker.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_take_a_key_allowed_metrics_when_asked() {
    let topology = Topology::with_suffix(&suffix());
    let broker = Broker::connect(topology.clone()).await;
    let scraper = r#"
[[api_key]]
name = "prometheus"
key = "scrape-secret"
ops = ["metrics"]
"#;
    // On with no key allowed `metrics`: a configuration problem.
    let nobody = Config {
        api_key: named(KEYS),
        metrics_require_key: true,
        ..Config::default()
    };
    let err = nobody.validate().unwrap_err().to_string();
    assert!(
        err.contains("no API key allows the operation \"metrics\""),
        "{err}"
    );
    // Off (the default): anyone reads /metrics.
    let open = Router::start(&topology, |c| c.api_key = named(KEYS)).await;
    let (status, _) = get(&open, "/metrics", None).await;
    assert_eq!(status, 200);
    open.stop().await;

    let router = Router::start(&topology, |c| {
        c.api_key = named(&format!("{KEYS}{scraper}"));
        c.metrics_require_key = true;
    })
    .await;
    router.wait_ready().await;
    for key in [None, Some("wrong")] {
        let (status, body) = get(&router, "/metrics", key).await;
        assert_eq!(status, 401, "{body}");
        assert!(body.contains(r#""code":"unauthorized""#), "{body}");
    }
    let (status, body) = get(&router, "/metrics", Some("ops-secret")).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains(r#"not allowed the operation \"metrics\" (its ops: cancel, admin)"#),
        "{body}"
    );
    // The probes take no key.
    assert_eq!(get(&router, "/healthz", None).await.0, 200);
    assert_eq!(get(&router, "/readyz", None).await.0, 200);
    // The scraper's key, and a plain key (every operation).
    assert_eq!(get(&router, "/metrics", Some(API_KEY)).await.0, 200);
    let (status, m) = get(&router, "/metrics", Some("scrape-secret")).await;
    assert_eq!(status, 200, "{m}");
    for line in [
        r#"herald_api_key_refused_total{api_key="",operation="metrics",reason="unauthorized"} 2"#,
        r#"herald_api_key_refused_total{api_key="ops",operation="metrics",reason="forbidden"} 1"#,
        "herald_api_keys 4",
    ] {
        assert!(m.contains(line), "{line}\n{m}");
    }
    router.stop().await;
    broker.cleanup().await;
}

/// `GET path`, with `key` as `Authorization: Bearer`: status and body.
async fn get(router: &Router, path: &str, key: Option<&str>) -> (u16, String) {
    let mut req = router.http.get(router.url(path));
    if let Some(key) = key {
        req = req.bearer_auth(key);
    }
    let r = req.send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

// ---- the binary: SIGHUP ----

const BIN: &str = env!("CARGO_BIN_EXE_herald-router");

/// The router binary with `config`, JSON logs on a channel, and its address.
fn spawn(config: &std::path::Path) -> (Child, SocketAddr, Receiver<Value>) {
    let mut child = Command::new(BIN)
        .arg("--config")
        .arg(config)
        // Accepted publications are logged at DEBUG.
        .env("RUST_LOG", "info,herald_engine::publish=debug")
        .env_remove("HERALD_ROUTER_API_KEYS")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let addr = loop {
        let line = lines.next().expect("the router exited early").unwrap();
        let v: Value = serde_json::from_str(&line).unwrap_or_default();
        if let Some(a) = v["fields"]["addr"].as_str() {
            break a.parse().unwrap();
        }
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let _ = tx.send(serde_json::from_str(&line).unwrap_or_default());
        }
    });
    (child, addr, rx)
}

/// The next log line whose message starts with `prefix`, within 10 s.
fn logged(log: &Receiver<Value>, prefix: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = log
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no log line {prefix:?} in time"));
        if line["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with(prefix))
        {
            return line;
        }
    }
}

fn hangup(child: &Child) {
    let status = Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_api_keys_and_a_broken_file_keeps_them() {
    let topology = Topology::with_suffix(&suffix());
    let broker = Broker::connect(topology.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("billing.key");
    std::fs::write(&key_file, "first-billing-key\n").unwrap();
    let config = dir.path().join("router.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\nlog_format = \"json\"\napi_keys = [\"plain-key\"]\n\
             [[api_key]]\nname = \"billing\"\nkey_file = {:?}\nops = [\"publish\"]\n\
             [amqp]\nurl = \"{}\"\n[amqp.topology]\nexchange = \"{}\"\nqueue = \"{}\"\n\
             dead_exchange = \"{}\"\ndead_queue = \"{}\"\nedges_exchange = \"{}\"\n",
            key_file.display().to_string(),
            amqp_url(),
            topology.exchange,
            topology.queue,
            topology.dead_exchange,
            topology.dead_queue,
            topology.edges_exchange
        ),
    )
    .unwrap();
    let (mut child, addr, log) = spawn(&config);
    let http = reqwest::Client::new();
    let publish = |key: &'static str| {
        let http = http.clone();
        async move {
            http.post(format!("http://{addr}/v1/notifications"))
                .bearer_auth(key)
                .json(&json!({"users": ["u1"], "event": "e"}))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    let metrics = || {
        let http = http.clone();
        async move {
            http.get(format!("http://{addr}/metrics"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        }
    };
    // Ready once the broker link is up.
    let deadline = Instant::now() + Duration::from_secs(10);
    while http
        .get(format!("http://{addr}/readyz"))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
        != 200
    {
        assert!(Instant::now() < deadline, "the router never became ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(publish("first-billing-key").await, 202);
    let accepted = logged(&log, "publication accepted");
    assert_eq!(accepted["fields"]["api_key"], "billing");
    assert!(!accepted.to_string().contains("first-billing-key"));

    // Rotate the key file: the new key in, the old one out, no restart.
    std::fs::write(&key_file, "second-billing-key\n").unwrap();
    hangup(&child);
    let reloaded = logged(&log, "API keys reloaded");
    assert_eq!(reloaded["fields"]["api_keys"], 2, "{reloaded}");
    assert_eq!(reloaded["fields"]["names"], "key-1,billing");
    assert_eq!(publish("second-billing-key").await, 202);
    assert_eq!(publish("first-billing-key").await, 401);

    // A broken file: logged, counted, and the keys stay.
    std::fs::remove_file(&key_file).unwrap();
    hangup(&child);
    let failed = logged(&log, "API key reload failed");
    assert!(
        failed["fields"]["problems"]
            .as_str()
            .unwrap()
            .contains("api_key \"billing\": key_file"),
        "{failed}"
    );
    assert_eq!(publish("second-billing-key").await, 202);
    assert_eq!(publish("plain-key").await, 202);
    let m = metrics().await;
    for line in [
        r#"herald_api_key_reloads_total{result="ok"} 1"#,
        r#"herald_api_key_reloads_total{result="failed"} 1"#,
        "herald_api_keys 2",
    ] {
        assert!(m.contains(line), "{line}\n{m}");
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "SIGHUP does not stop the router"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    broker.cleanup().await;
}
