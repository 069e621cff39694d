use super::*;
use std::time::Duration;

#[test]
fn defaults_are_valid_dev_mode() {
    let c = Config::default();
    c.validate().unwrap();
    assert!(c.dev_mode());
}

#[test]
fn toml_unknown_keys_are_named() {
    let err = Config::from_toml("[mailbox]\nttl = 5\n", Path::new("x.toml")).unwrap_err();
    assert!(err.problems[0].contains("ttl"), "{err}");
}

#[test]
fn toml_sets_nested_values() {
    let c = Config::from_toml(
            "listen = \"127.0.0.1:9000\"\napi_keys = [\"k\"]\n[session]\nwhen_full = \"drop-oldest\"\n[mailbox]\nttl_secs = 5\n",
            Path::new("x.toml"),
        )
        .unwrap();
    assert_eq!(c.listen.port(), 9000);
    assert_eq!(c.session.when_full, WhenFull::DropOldest);
    assert_eq!(c.mailbox.ttl_secs, 5);
}

#[test]
fn the_old_reconnect_key_still_works_with_a_warning() {
    let c = Config::from_toml("[edge]\nreconnect_min_ms = 50\n", Path::new("x.toml")).unwrap();
    assert_eq!(c.edge.reconnect_initial_ms, 50);
    assert_eq!(
        c.edge.reconnect().backoff().initial,
        Duration::from_millis(50)
    );
    assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
    assert!(c.warnings[0].contains("edge.reconnect_initial_ms"));
    let both = "[edge]\nreconnect_min_ms = 50\nreconnect_initial_ms = 60\n";
    assert!(Config::from_toml(both, Path::new("x.toml")).is_err());
    let mut bad = Config::default();
    bad.edge.roots = vec!["amqp://127.0.0.1:5672/%2f".into()];
    bad.edge.reconnect_initial_ms = 20_000;
    let err = bad.validate().unwrap_err().to_string();
    assert!(
        err.contains("edge.reconnect_initial_ms (20000) must not exceed"),
        "{err}"
    );
}

#[test]
fn the_example_file_parses_to_the_defaults() {
    let text = include_str!("../../../deploy/gateway.example.toml");
    let c = Config::from_toml(text, Path::new("gateway.example.toml")).unwrap();
    let d = Config::default();
    assert_eq!(format!("{c:?}"), format!("{d:?}"));
}

#[test]
fn the_example_names_every_auth_key_and_its_commented_keys_parse() {
    let text = include_str!("../../../deploy/gateway.example.toml");
    for key in [
        "jwt_secret",
        "jwt_public_key_file",
        "jwt_algorithm",
        "jwks_file",
        "default_kid",
        "keys",
        "leeway_secs",
        "issuers",
        "audiences",
    ] {
        assert!(
            text.contains(&format!("\n{key} = ")) || text.contains(&format!("\n# {key} = ")),
            "deploy/gateway.example.toml does not name auth.{key}"
        );
    }
    // The [[auth.keys]] example, uncommented in place of `keys = []`.
    let auth = text.split("[auth]\n").nth(1).unwrap();
    let table: String = auth
        .lines()
        .skip_while(|l| !l.starts_with("# [[auth.keys]]"))
        .take_while(|l| l.starts_with("# "))
        .map(|l| format!("{}\n", l.trim_start_matches("# ")))
        .collect();
    let c = Config::from_toml(&table, Path::new("example")).unwrap();
    assert_eq!(c.auth.keys[0].kid, "2025-06");
    assert_eq!(c.auth.keys[0].algorithm, "RS256");
}

#[test]
fn the_commented_api_key_example_and_the_deploy_examples_parse() {
    let text = include_str!("../../../deploy/gateway.example.toml");
    let table: String = text
        .lines()
        .skip_while(|l| !l.starts_with("# [[api_key]]"))
        .take_while(|l| l.starts_with("# "))
        .map(|l| format!("{}\n", l.trim_start_matches("# ")))
        .collect();
    let c = Config::from_toml(&table, Path::new("example")).unwrap();
    assert_eq!(c.api_key[0].name, "billing");
    assert_eq!(c.api_key[0].rate_per_sec, Some(50.0));
    let c = Config::from_toml(
        include_str!("../../../deploy/examples/gateway-standalone.toml"),
        Path::new("gateway-standalone.toml"),
    )
    .unwrap();
    assert_eq!(c.api_key.len(), 2);
    assert!(c.connection_rate.rate().is_some());
    Config::from_toml(
        include_str!("../../../deploy/examples/gateway-edge.toml"),
        Path::new("gateway-edge.toml"),
    )
    .unwrap();
}

#[test]
fn every_problem_is_reported() {
    let mut c = Config::default();
    c.auth.jwt_secret = Some("short".into());
    c.session.queue_messages = 0;
    c.publish.max_batch = 0;
    let err = c.validate().unwrap_err();
    assert_eq!(err.problems.len(), 4, "{err}");
    assert!(err.to_string().contains("at least 32"));
    assert!(err.to_string().contains("api_keys"));
}

#[test]
fn auth_keys_parse_and_their_problems_are_listed() {
    let text = r#"
api_keys = ["k"]
[auth]
default_kid = "b"
issuers = ["https://id.example"]
audiences = ["herald"]
[[auth.keys]]
kid = "a"
algorithm = "HS256"
secret = "0123456789abcdef0123456789abcdef"
[[auth.keys]]
kid = "b"
algorithm = "RS256"
public_key_file = "keys/rsa.pub.pem"
"#;
    let c = Config::from_toml(text, Path::new("x.toml")).unwrap();
    assert!(!c.dev_mode());
    assert_eq!(c.auth.keys.len(), 2);
    assert_eq!(c.auth.keys[1].kid, "b");
    assert_eq!(c.auth.audiences, ["herald"]);
    assert!(
        !format!("{c:?}").contains("0123456789abcdef"),
        "secrets stay out of Debug"
    );
    // Validation wants the key file to exist: point it at a generated one.
    let files = crate::auth::tests::key_files();
    let mut c = c;
    c.auth.keys[1].public_key_file = Some(files.path().join("rsa.pub.pem"));
    c.validate().unwrap();
    c.auth.keys[1].kid = "a".into();
    c.auth.keys[0].secret = Some("short".into());
    c.auth.keys.push(KeyConfig {
        kid: "c".into(),
        algorithm: "none".into(),
        ..KeyConfig::default()
    });
    let err = c.validate().unwrap_err().to_string();
    for says in [
        "used twice",
        "at least 32",
        "\"none\" is not one of",
        "default_kid \"b\"",
    ] {
        assert!(err.contains(says), "{says}: {err}");
    }
}

#[test]
fn named_api_keys_and_the_new_limits_are_validated_with_the_rest() {
    let text = r#"
[[api_key]]
name = "billing"
key = "billing-key"
ops = ["publish"]
[session]
max_per_user = 0
[connection_rate]
per_sec = -1.0
burst = 0
"#;
    let mut c = Config::from_toml(text, Path::new("x.toml")).unwrap();
    assert_eq!(c.api_key[0].name, "billing");
    assert!(
        !format!("{c:?}").contains("billing-key"),
        "the key stays out of Debug"
    );
    let err = c.validate().unwrap_err().to_string();
    for says in [
        "session.max_per_user must be greater than 0",
        "connection_rate.per_sec must be 0 (off) or a positive number",
        "connection_rate.burst and connection_rate.max_addresses",
    ] {
        assert!(err.contains(says), "{says}: {err}");
    }
    assert!(
        !err.contains("api_keys is empty"),
        "a named key is a key: {err}"
    );
    c.session.max_per_user = 1;
    c.connection_rate.per_sec = 5.0;
    c.connection_rate.burst = 10;
    c.api_key.push(c.api_key[0].clone());
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("\"billing\" is used twice"), "{err}");
    assert!(err.contains("are the same key"), "{err}");
    assert!(!err.contains("billing-key"), "{err}");
    c.api_key.pop();
    c.validate().unwrap();
    assert_eq!(c.connection_rate.rate().unwrap().burst(), 10);
    assert!(
        Config::default().connection_rate.rate().is_none(),
        "off by default"
    );
}

/// `metrics_require_key` with no key allowed `metrics` could serve
/// `/metrics` to nobody: a configuration problem, standalone and on an
/// edge (which loads API keys only for it); dev mode's key may do it.
#[test]
fn requiring_a_metrics_key_needs_a_key_allowed_metrics() {
    let text = r#"
metrics_require_key = true
[[api_key]]
name = "billing"
key = "billing-key"
ops = ["publish"]
[auth]
jwt_secret = "0123456789abcdef0123456789abcdef"
"#;
    let mut c = Config::from_toml(text, Path::new("x.toml")).unwrap();
    let says = "metrics_require_key is on but no API key allows the operation \"metrics\"";
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains(says), "{err}");
    c.edge.roots = vec!["amqp://127.0.0.1/%2f".into()];
    c.edge.id = Some("edge-1".into());
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains(says), "an edge too: {err}");
    c.api_key[0].ops = None;
    c.validate().unwrap();
    c.api_key[0].ops = Some(vec![herald_engine::api_key::Operation::Metrics]);
    c.validate().unwrap();
    c.metrics_require_key = false;
    c.api_key.clear();
    c.validate().unwrap();

    let dev = Config {
        metrics_require_key: true,
        ..Config::default()
    };
    assert!(dev.dev_mode());
    dev.validate().unwrap();
}

#[test]
fn the_proxy_section_parses_cidrs_and_needs_trusted_peers() {
    let text =
        "api_keys = [\"k\"]\n[proxy]\nprotocol = true\ntrusted = [\"10.0.0.0/8\", \"::1\"]\n";
    let c = Config::from_toml(text, Path::new("x.toml")).unwrap();
    c.validate().unwrap();
    assert!(c.proxy.is_trusted("10.9.8.7".parse().unwrap()));
    assert!(c.proxy.is_trusted("::1".parse().unwrap()));
    assert!(!c.proxy.is_trusted("192.0.2.1".parse().unwrap()));
    let bad = Config::from_toml(
        "[proxy]\ntrusted = [\"10.0.0.0/40\"]\n",
        Path::new("x.toml"),
    )
    .unwrap_err()
    .to_string();
    assert!(bad.contains("prefix length must be 0 to 32"), "{bad}");
    let mut c = c;
    c.proxy.trusted.clear();
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("proxy.protocol needs proxy.trusted"), "{err}");
}

#[test]
fn public_key_needs_an_algorithm() {
    let mut c = Config {
        api_keys: vec!["k".into()],
        ..Config::default()
    };
    c.auth.jwt_public_key_file = Some(PathBuf::from("/nonexistent.pem"));
    let err = c.validate().unwrap_err();
    assert!(
        err.to_string().contains("jwt_algorithm is required"),
        "{err}"
    );
    assert!(err.to_string().contains("does not exist"), "{err}");
}
