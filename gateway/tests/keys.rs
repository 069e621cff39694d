//! Key rotation without a restart: the binary reloads its JWT keys and its
//! API keys on SIGHUP, and a reload that fails keeps the keys it had.
//! And `/metrics` behind an API key (`metrics_require_key`), standalone and
//! on an edge, which then loads and reloads API keys of its own.

mod common;

use std::sync::mpsc::Receiver;
use std::time::Instant;

use common::*;
use herald_protocol::stomp::Command;
use jsonwebtoken::{Algorithm, EncodingKey, Header};

const OLD: &str = "rotation-old-secret-rotation-old-secret";
const NEW: &str = "rotation-new-secret-rotation-new-secret";

fn jwks(kid: &str, secret: &str) -> String {
    use base64::Engine;
    let k = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret);
    format!(r#"{{"keys":[{{"kty":"oct","kid":"{kid}","alg":"HS256","k":"{k}"}}]}}"#)
}

fn token(kid: &str, secret: &str) -> String {
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some(kid.into());
    let claims = serde_json::json!({"sub": "rotated", "exp": now_secs() + 600});
    jsonwebtoken::encode(
        &header,
        &claims,
        &EncodingKey::from_secret(secret.as_bytes()),
    )
    .unwrap()
}

fn hangup(child: &std::process::Child) {
    let status = std::process::Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// The next log line whose message starts with `prefix`, within [`WAIT`].
fn logged(log: &Receiver<serde_json::Value>, prefix: &str) -> serde_json::Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = log
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no log line {prefix:?} within {WAIT:?}"));
        let message = line["fields"]["message"].as_str().unwrap_or_default();
        if message.starts_with(prefix) {
            return line;
        }
    }
}

async fn answer(gw: &TestGateway, token: &str) -> (Command, String) {
    let (_, frame) = gw.connect_with(&[("passcode", token)]).await;
    let message = frame.header("message").unwrap_or_default().to_owned();
    (frame.command, message)
}

#[tokio::test]
async fn sighup_reloads_the_jwks_file_and_a_broken_one_keeps_the_keys() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jwks.json");
    std::fs::write(&path, jwks("old", OLD)).unwrap();
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!("[auth]\njwks_file = {:?}\n", path.display().to_string()),
    )
    .unwrap();
    let (mut child, addr, log) = spawn_gateway_binary_logged(&[
        "--data-dir".as_ref(),
        dir.path().as_ref(),
        "--config".as_ref(),
        config.as_ref(),
    ]);
    let gw = TestGateway::remote(addr);
    assert_eq!(answer(&gw, &token("old", OLD)).await.0, Command::Connected);
    let (command, message) = answer(&gw, &token("new", NEW)).await;
    assert_eq!(command, Command::Error);
    assert!(message.contains("\"new\" is not known"), "{message}");

    // Rotate: the new key in, the old one out, no restart.
    std::fs::write(&path, jwks("new", NEW)).unwrap();
    hangup(&child);
    assert_eq!(
        logged(&log, "keys reloaded")["fields"]["keys"],
        2,
        "the jwt_secret default and the new key"
    );
    assert_eq!(answer(&gw, &token("new", NEW)).await.0, Command::Connected);
    assert_eq!(answer(&gw, &token("old", OLD)).await.0, Command::Error);

    // A broken file: logged, and the keys stay.
    std::fs::write(&path, "{ not json").unwrap();
    hangup(&child);
    let line = logged(&log, "key reload failed");
    assert!(
        line["fields"]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("not a JWK set"),
        "{line}"
    );
    assert_eq!(answer(&gw, &token("new", NEW)).await.0, Command::Connected);
    assert!(
        child.try_wait().unwrap().is_none(),
        "SIGHUP does not stop the gateway"
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

async fn publish_with(gw: &TestGateway, key: &str) -> u16 {
    reqwest::Client::new()
        .post(format!("http://{}/v1/notifications", gw.addr))
        .bearer_auth(key)
        .json(&serde_json::json!({"users": ["u1"], "event": "e"}))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn sighup_reloads_the_api_keys_and_a_missing_key_file_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("billing.key");
    std::fs::write(&key_file, "first-billing-key\n").unwrap();
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "[[api_key]]\nname = \"billing\"\nkey_file = {:?}\nops = [\"publish\"]\n",
            key_file.display().to_string()
        ),
    )
    .unwrap();
    let (mut child, addr, log) = spawn_gateway_binary_logged(&[
        "--data-dir".as_ref(),
        dir.path().as_ref(),
        "--config".as_ref(),
        config.as_ref(),
    ]);
    let gw = TestGateway::remote(addr);
    assert_eq!(publish_with(&gw, "first-billing-key").await, 202);
    let accepted = logged(&log, "publication accepted");
    assert_eq!(accepted["fields"]["api_key"], "billing");
    assert!(!accepted.to_string().contains("first-billing-key"));

    // Rotate the key file: the new key in, the old one out, no restart.
    std::fs::write(&key_file, "second-billing-key\n").unwrap();
    hangup(&child);
    let reloaded = logged(&log, "API keys reloaded");
    assert_eq!(reloaded["fields"]["api_keys"], 2, "{reloaded}");
    assert_eq!(reloaded["fields"]["names"], "key-1,billing");
    assert_eq!(publish_with(&gw, "second-billing-key").await, 202);
    assert_eq!(publish_with(&gw, "first-billing-key").await, 401);

    // The file goes away: the reload fails, is logged and counted, and the
    // keys stay.
    std::fs::remove_file(&key_file).unwrap();
    hangup(&child);
    let failed = logged(&log, "key reload failed");
    assert!(
        failed["fields"]["problems"]
            .as_str()
            .unwrap_or_default()
            .contains("api_key \"billing\": key_file"),
        "{failed}"
    );
    assert_eq!(publish_with(&gw, "second-billing-key").await, 202);
    assert_eq!(publish_with(&gw, API_KEY).await, 202);
    let m = gw.metrics().await;
    for (series, value) in [
        (r#"herald_api_key_reloads_total{result="ok"}"#, 1.0),
        (r#"herald_api_key_reloads_total{result="failed"}"#, 1.0),
        ("herald_api_keys", 2.0),
    ] {
        assert_eq!(sample(&m, series), Some(value), "{series}\n{m}");
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "SIGHUP does not stop the gateway"
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

// ---- /metrics behind a key (metrics_require_key) ----

const METRICS_KEYS: &str = r#"
[[api_key]]
name = "prometheus"
key = "scrape-secret"
ops = ["metrics"]
[[api_key]]
name = "billing"
key = "billing-secret"
ops = ["publish"]
"#;

fn named_keys(text: &str) -> Vec<herald_engine::api_key::ApiKeyConfig> {
    herald_gateway::config::Config::from_toml(text, std::path::Path::new("keys.toml"))
        .unwrap()
        .api_key
}

/// `GET path` with `headers`: the status and the body.
async fn get_with(gw: &TestGateway, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut req = reqwest::Client::new().get(format!("http://{}{path}", gw.addr));
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let r = req.send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// Every refusal the API makes, on `/metrics`: no key or a wrong one 401,
/// a key without `metrics` 403 naming its ops; a key allowed `metrics`
/// reads them (either header), the probes stay open, and the refusals are
/// counted under `operation="metrics"`.
async fn metrics_need_a_key(gw: &TestGateway) {
    let bearer = |key: &'static str| ("authorization", format!("Bearer {key}"));
    for headers in [vec![], vec![bearer("wrong")]] {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let (status, body) = get_with(gw, "/metrics", &headers).await;
        assert_eq!(status, 401, "{body}");
        assert!(body.contains(r#""code":"unauthorized""#), "{body}");
    }
    let (status, body) = get_with(
        gw,
        "/metrics",
        &[("authorization", "Bearer billing-secret")],
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains(
            r#"API key \"billing\" is not allowed the operation \"metrics\" (its ops: publish)"#
        ),
        "{body}"
    );
    for path in ["/healthz", "/readyz"] {
        let (status, _) = get_with(gw, path, &[]).await;
        assert_ne!(status, 401, "{path} takes no key");
    }
    let (status, _) = get_with(gw, "/metrics", &[("x-api-key", "scrape-secret")]).await;
    assert_eq!(status, 200);
    let (status, m) = get_with(gw, "/metrics", &[("authorization", "Bearer scrape-secret")]).await;
    assert_eq!(status, 200, "{m}");
    for (series, value) in [
        (
            r#"herald_api_key_refused_total{api_key="",operation="metrics",reason="unauthorized"}"#,
            2.0,
        ),
        (
            r#"herald_api_key_refused_total{api_key="billing",operation="metrics",reason="forbidden"}"#,
            1.0,
        ),
    ] {
        assert_eq!(sample(&m, series), Some(value), "{series}\n{m}");
    }
}

#[tokio::test]
async fn a_standalone_gateway_serves_metrics_to_a_key_allowed_them_when_asked() {
    // By default /metrics takes no key.
    let open = start(|c| c.api_key = named_keys(METRICS_KEYS)).await;
    assert_eq!(get_with(&open, "/metrics", &[]).await.0, 200);

    let gw = start(|c| {
        c.api_key = named_keys(METRICS_KEYS);
        c.metrics_require_key = true;
    })
    .await;
    metrics_need_a_key(&gw).await;
    // The harness's plain key has every operation, `metrics` too.
    let (status, _) = get_with(&gw, "/metrics", &[("x-api-key", API_KEY)]).await;
    assert_eq!(status, 200);
    // The publish API is unchanged.
    assert_eq!(publish_with(&gw, "billing-secret").await, 202);
}

#[tokio::test]
async fn an_edge_loads_api_keys_for_its_metrics_when_asked() {
    let edge = |require: bool| {
        move |c: &mut herald_gateway::config::Config| {
            c.api_keys.clear();
            c.api_key = named_keys(METRICS_KEYS);
            c.metrics_require_key = require;
            c.edge.id = Some("edge-metrics".into());
            // No broker answers there: the edge serves its HTTP side
            // while its uplink retries.
            c.edge.roots = vec!["amqp://127.0.0.1:1/%2f".into()];
        }
    };
    let open = start(edge(false)).await;
    let (status, m) = get_with(&open, "/metrics", &[]).await;
    assert_eq!(status, 200);
    assert!(
        !m.contains("herald_api_keys"),
        "an edge without the option loads no keys\n{m}"
    );

    let gw = start(edge(true)).await;
    metrics_need_a_key(&gw).await;
    let (_, m) = get_with(&gw, "/metrics", &[("x-api-key", "scrape-secret")]).await;
    assert_eq!(sample(&m, "herald_api_keys"), Some(2.0), "{m}");
    // Still no publish API on an edge.
    assert_eq!(publish_with(&gw, "billing-secret").await, 404);
}

#[tokio::test]
async fn sighup_reloads_an_edges_metrics_keys() {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("prometheus.key");
    std::fs::write(&key_file, "first-scrape-key\n").unwrap();
    let config = dir.path().join("edge.toml");
    std::fs::write(
        &config,
        format!(
            "metrics_require_key = true\n[[api_key]]\nname = \"prometheus\"\nkey_file = {:?}\n\
             ops = [\"metrics\"]\n[edge]\nid = \"edge-reload\"\nroots = [\"amqp://127.0.0.1:1/%2f\"]\n",
            key_file.display().to_string()
        ),
    )
    .unwrap();
    let (mut child, addr, log) = spawn_gateway_binary_logged(&[
        "--data-dir".as_ref(),
        dir.path().as_ref(),
        "--config".as_ref(),
        config.as_ref(),
    ]);
    let gw = TestGateway::remote(addr);
    let scrape = |key: &'static str| {
        let gw = &gw;
        async move { get_with(gw, "/metrics", &[("x-api-key", key)]).await.0 }
    };
    assert_eq!(get_with(&gw, "/metrics", &[]).await.0, 401);
    assert_eq!(scrape("first-scrape-key").await, 200);

    std::fs::write(&key_file, "second-scrape-key\n").unwrap();
    hangup(&child);
    let reloaded = logged(&log, "API keys reloaded");
    assert_eq!(
        reloaded["fields"]["names"], "key-1,prometheus",
        "{reloaded}"
    );
    assert_eq!(scrape("second-scrape-key").await, 200);
    assert_eq!(scrape("first-scrape-key").await, 401);
    child.kill().unwrap();
    child.wait().unwrap();
}
