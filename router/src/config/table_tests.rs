//! The router's configuration against the table of keys
//! ([`super::keys::TABLE`]): every key has a row and a working
//! `HERALD_ROUTER_*` variable, docs/configuration.md is current, the
//! environment lies between the file and the flags, and `--print-config`
//! shows no secret.

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
    let file = dir.path().join("router.toml");
    std::fs::write(
        &file,
        "api_keys = [\"file-key\"]\n[amqp]\nprefetch = 16\nbundle_max = 8\n[amqp.topology]\nexchange = \"from-file\"\n",
    )
    .unwrap();
    let cli = Cli::try_parse_from([
        "herald-router",
        "--config",
        file.to_str().unwrap(),
        "--prefetch",
        "64",
    ])
    .unwrap();
    let c = Config::load_with(
        &cli,
        &env(&[
            ("HERALD_ROUTER_AMQP__PREFETCH", "32"),
            ("HERALD_ROUTER_AMQP__BUNDLE_MAX", "4"),
            ("HERALD_ROUTER_AMQP__TOPOLOGY__QUEUE", "from-env"),
            ("HERALD_ROUTER_REDIS__PREFIX", "env-prefix"),
            ("HERALD_ROUTER_AMQP_URL", "amqp://u:p@broker:5672/%2f"),
        ]),
    )
    .unwrap();
    assert_eq!(c.api_keys, ["file-key"]);
    assert_eq!(c.amqp.prefetch, 64, "the flag over the environment");
    assert_eq!(c.amqp.bundle_max, 4, "the environment over the file");
    assert_eq!(c.amqp.topology.exchange, "from-file");
    assert_eq!(c.amqp.topology.queue, "from-env");
    assert_eq!(c.redis.prefix, "env-prefix");
    assert_eq!(c.amqp.url, "amqp://u:p@broker:5672/%2f", "the older name");
}

#[test]
fn a_bad_variable_is_named_with_its_key() {
    let err = Config::load_with(
        &Cli::default(),
        &env(&[
            ("HERALD_ROUTER_API_KEYS", "k"),
            ("HERALD_ROUTER_AMQP__PREFETCH", "70000"),
        ]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.starts_with("HERALD_ROUTER_AMQP__PREFETCH (amqp.prefetch): \"70000\": "),
        "{err}"
    );
}

#[test]
fn print_config_redacts_every_secret() {
    let c = Config::load_with(
        &Cli::default(),
        &env(&[
            ("HERALD_ROUTER_API_KEYS", "plain-key-from-env"),
            (
                "HERALD_ROUTER_NAMED_API_KEYS",
                "[{ name = \"billing\", key = \"named-key-from-env\" }]",
            ),
            (
                "HERALD_ROUTER_AMQP__URL",
                "amqp://herald:amqp-password@10.0.0.1:5672/%2f",
            ),
            (
                "HERALD_ROUTER_REDIS__URL",
                "redis://:redis-password@10.0.0.2:6379/0",
            ),
            (
                "HERALD_ROUTER_CALLBACKS__ALERTS__WEBHOOK_URL",
                "https://hooks.example/services/webhook-token",
            ),
        ]),
    )
    .unwrap();
    let text = c.to_redacted_toml().unwrap();
    for secret in [
        "plain-key-from-env",
        "named-key-from-env",
        "amqp-password",
        "redis-password",
        "webhook-token",
    ] {
        assert!(!text.contains(secret), "{secret} shown:\n{text}");
    }
    for shown in [
        "amqp://herald:<redacted>@10.0.0.1:5672/%2f",
        "redis://:<redacted>@10.0.0.2:6379/0",
        "name = \"billing\"",
        "api_keys = [\"<redacted>\"]",
    ] {
        assert!(text.contains(shown), "{shown} not in:\n{text}");
    }
    let back = Config::from_toml(&text, Path::new("printed")).unwrap();
    assert_eq!(
        back.redis.prefix, c.redis.prefix,
        "the output is a configuration"
    );
}
