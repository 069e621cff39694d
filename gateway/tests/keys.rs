//! Key rotation without a restart: the binary reloads its keys on SIGHUP,
//! and a reload that fails keeps the keys it had.

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
