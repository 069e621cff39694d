//! The gateway's configuration against the table of keys
//! ([`super::keys::TABLE`]): every key has a row and a working
//! `HERALD_*` variable, docs/configuration.md is current, the environment
//! lies between the file and the flags, and `--print-config` shows no
//! secret.

use std::collections::HashMap;
use std::path::Path;

use clap::Parser;
use herald_engine::config::{coverage, page};

use super::keys::TABLE;

use super::*;

fn defaults() -> serde_json::Value {
    serde_json::to_value(Config::default()).unwrap()
}

fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name: &str| vars.get(name).cloned()
}

const SECRET: &str = "jwt-secret-from-env-0123456789abcdef";

#[test]
fn every_key_of_the_configuration_has_a_row() {
    let problems = coverage::problems(TABLE, &defaults());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_key_has_a_variable_that_sets_it() {
    let problems = coverage::env_problems::<Config>(TABLE);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn docs_configuration_md_is_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/configuration.md");
    if let Err(e) = page::check_current(&path, TABLE, &defaults()) {
        panic!("{e}");
    }
}

#[test]
fn the_environment_lies_between_the_file_and_the_flags() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gateway.toml");
    std::fs::write(
        &file,
        "api_keys = [\"file-key\"]\n[session]\nmax_per_user = 3\nmax_sessions = 10\n[callbacks]\nmax_per_host = 5\n",
    )
    .unwrap();
    let cli = Cli::try_parse_from([
        "herald-gateway",
        "--config",
        file.to_str().unwrap(),
        "--max-sessions",
        "30",
    ])
    .unwrap();
    let c = Config::load_with(
        &cli,
        &env(&[
            ("HERALD_AUTH__JWT_SECRET", SECRET),
            ("HERALD_SESSION__MAX_PER_USER", "4"),
            ("HERALD_SESSION__MAX_SESSIONS", "20"),
            ("HERALD_CALLBACKS__MAX_PER_HOST", "6"),
            (
                "HERALD_SCHEDULE__TOPICS",
                "{ coupon = { jitter_ms = 5000 } }",
            ),
        ]),
    )
    .unwrap();
    assert_eq!(c.auth.jwt_secret.as_deref(), Some(SECRET));
    assert_eq!(c.api_keys, ["file-key"], "the file's value stays");
    assert_eq!(c.session.max_per_user, 4, "the environment over the file");
    assert_eq!(c.session.max_sessions, 30, "the flag over the environment");
    assert_eq!(c.callbacks.max_per_host, 6);
    assert_eq!(c.schedule.policy(Some("coupon")).jitter_ms, 5000);
}

#[test]
fn the_older_variable_names_still_work() {
    let cli = Cli::default();
    let c = Config::load_with(
        &cli,
        &env(&[
            ("HERALD_JWT_SECRET", SECRET),
            ("HERALD_API_KEYS", "a,b"),
            ("HERALD_MAILBOX_TTL_SECS", "9"),
            ("HERALD_MAX_SESSIONS", "8"),
            ("HERALD_WHEN_FULL", "drop-oldest"),
            ("HERALD_SOCKJS_TEST_ENDPOINTS", "true"),
        ]),
    )
    .unwrap();
    assert_eq!(c.auth.jwt_secret.as_deref(), Some(SECRET));
    assert_eq!(c.api_keys, ["a", "b"]);
    assert_eq!(c.mailbox.ttl_secs, 9);
    assert_eq!(c.session.max_sessions, 8);
    assert_eq!(c.session.when_full, WhenFull::DropOldest);
    assert!(c.sockjs.test_endpoints);
}

#[test]
fn a_bad_variable_is_named_with_its_key_and_a_secret_is_not_shown() {
    let err = Config::load_with(
        &Cli::default(),
        &env(&[
            ("HERALD_SESSION__MAX_SESSIONS", "lots"),
            ("HERALD_SESSION__WHEN_FULL", "explode"),
            (
                "HERALD_NAMED_API_KEYS",
                "[{ name = \"x\", key = \"named-secret\", nope = 1 }]",
            ),
        ]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains(
            "HERALD_SESSION__MAX_SESSIONS (session.max_sessions): \"lots\": not a whole number"
        ),
        "{err}"
    );
    assert!(
        err.contains("HERALD_SESSION__WHEN_FULL (session.when_full): \"explode\": must be one of disconnect, drop-oldest"),
        "{err}"
    );
    assert!(err.contains("HERALD_NAMED_API_KEYS (api_key): "), "{err}");
    assert!(err.contains("nope"), "{err}");
    assert!(!err.contains("named-secret"), "{err}");
}

#[test]
fn print_config_redacts_every_secret() {
    let c = Config::load_with(
        &Cli::default(),
        &env(&[
            ("HERALD_AUTH__JWT_SECRET", SECRET),
            ("HERALD_API_KEYS", "plain-key-from-env"),
            (
                "HERALD_NAMED_API_KEYS",
                "[{ name = \"billing\", key = \"named-key-from-env\" }]",
            ),
            (
                "HERALD_AUTH__KEYS",
                "[{ kid = \"k2\", algorithm = \"HS512\", secret = \"kid-secret-from-env-0123456789abcdef\" }]",
            ),
            ("HERALD_EDGE__ID", "edge-1"),
            ("HERALD_EDGE__ROOTS", "amqp://herald:root-password@10.0.0.1:5672/%2f"),
            (
                "HERALD_CALLBACKS__ALERTS__WEBHOOK_URL",
                "https://hooks.example/services/webhook-token",
            ),
            ("HERALD_SESSION__MAX_PER_USER", "7"),
        ]),
    )
    .unwrap();
    let text = c.to_redacted_toml().unwrap();
    for secret in [
        SECRET,
        "plain-key-from-env",
        "named-key-from-env",
        "kid-secret-from-env",
        "root-password",
        "webhook-token",
    ] {
        assert!(!text.contains(secret), "{secret} shown:\n{text}");
    }
    for shown in [
        "max_per_user = 7",
        "jwt_secret = \"<redacted>\"",
        "name = \"billing\"",
        "amqp://herald:<redacted>@10.0.0.1:5672/%2f",
    ] {
        assert!(text.contains(shown), "{shown} not in:\n{text}");
    }
    let back = Config::from_toml(&text, Path::new("printed")).unwrap();
    assert_eq!(
        back.session.max_per_user, 7,
        "the output is a configuration"
    );
}
