//! The `herald-gateway` binary as an operator runs it: `--version`,
//! `--check-config`, and text logs without colour codes when they go to a
//! file or a pipe.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_herald-gateway");
const SECRET: &str = "0123456789abcdef0123456789abcdef";

#[test]
fn version_names_the_commit() {
    let out = Command::new(BIN).arg("--version").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with(concat!(
            "herald-gateway ",
            env!("CARGO_PKG_VERSION"),
            " (commit "
        )),
        "{text}"
    );
}

#[test]
fn check_config_says_ok_or_lists_every_problem() {
    let ok = Command::new(BIN)
        .args(["--check-config", "--jwt-secret", SECRET, "--api-key", "k"])
        .output()
        .unwrap();
    assert_eq!(ok.status.code(), Some(0), "{ok:?}");
    let said = String::from_utf8_lossy(&ok.stdout);
    assert!(said.contains("configuration OK (standalone"), "{said}");
    let bad = Command::new(BIN)
        .args(["--check-config", "--jwt-secret", "short"])
        .env_remove("HERALD_API_KEYS")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(78), "{bad:?}");
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("jwt_secret") && err.contains("api_keys"),
        "{err}"
    );
}

/// An edge asked to keep `/metrics` behind a key, given none allowed
/// `metrics`, refuses to start: exit 78, saying so.
#[test]
fn metrics_behind_a_key_that_nobody_has_is_a_configuration_error() {
    let out = Command::new(BIN)
        .args(["--check-config", "--jwt-secret", SECRET])
        .env_remove("HERALD_API_KEYS")
        .env("HERALD_METRICS_REQUIRE_KEY", "true")
        .env("HERALD_EDGE__ID", "edge-1")
        .env("HERALD_EDGE__ROOTS", "amqp://127.0.0.1/%2f")
        .env(
            "HERALD_NAMED_API_KEYS",
            r#"[{ name = "billing", key = "billing-key", ops = ["publish"] }]"#,
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("metrics_require_key is on but no API key allows the operation \"metrics\""),
        "{err}"
    );
}

#[test]
fn text_logs_to_a_pipe_carry_no_colour_codes() {
    let data = tempfile::tempdir().unwrap();
    let mut child = Command::new(BIN)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--jwt-secret",
            SECRET,
            "--api-key",
            "k",
        ])
        .args(["--log-format", "text", "--data-dir"])
        .arg(data.path())
        .env("RUST_LOG", "info")
        .env_remove("NO_COLOR")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    loop {
        let line = lines
            .next()
            .expect("the gateway exited before listening")
            .unwrap();
        let listening = line.contains("listening");
        seen.push(line);
        if listening {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let text = seen.join("\n");
    assert!(text.contains("herald-gateway starting"), "{text}");
    assert!(!text.contains('\u{1b}'), "escape codes in: {text:?}");
}

#[test]
fn print_config_shows_the_environment_without_its_secrets() {
    let out = Command::new(BIN)
        .arg("--print-config")
        .env_clear()
        .env(
            "HERALD_AUTH__JWT_SECRET",
            "jwt-secret-from-the-environment-0123",
        )
        .env("HERALD_API_KEYS", "api-key-from-the-environment")
        .env("HERALD_SESSION__MAX_PER_USER", "7")
        .env("HERALD_SESION__MAX_SESSIONS", "9")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("max_per_user = 7"), "{text}");
    let warned = String::from_utf8_lossy(&out.stderr);
    assert!(
        warned.contains("HERALD_SESION__MAX_SESSIONS is not a setting"),
        "a misspelt variable is not silently ignored: {warned}"
    );
    assert!(text.contains("jwt_secret = \"<redacted>\""), "{text}");
    assert!(!text.contains("from-the-environment"), "{text}");
    let bad = Command::new(BIN)
        .arg("--print-config")
        .env_clear()
        .env("HERALD_SESSION__MAX_PER_USER", "many")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(78), "{bad:?}");
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("HERALD_SESSION__MAX_PER_USER (session.max_per_user)"),
        "{err}"
    );
}
