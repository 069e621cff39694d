//! Keys: both configuration forms, every load-time rule, permissions,
//! sites, rates, and reloads.

use std::time::{Duration, Instant};

use super::*;

fn named(toml_text: &str) -> Vec<ApiKeyConfig> {
    #[derive(serde::Deserialize)]
    struct Doc {
        #[serde(default)]
        api_key: Vec<ApiKeyConfig>,
    }
    toml::from_str::<Doc>(toml_text).unwrap().api_key
}

fn keys(plain: &[&str], toml_text: &str) -> ApiKeys {
    let plain: Vec<String> = plain.iter().map(|s| s.to_string()).collect();
    ApiKeys::from_set(KeySet::load(&plain, &named(toml_text)).unwrap())
}

fn problems(plain: &[&str], toml_text: &str) -> String {
    let plain: Vec<String> = plain.iter().map(|s| s.to_string()).collect();
    KeySet::load(&plain, &named(toml_text))
        .unwrap_err()
        .join("\n")
}

#[test]
fn plain_keys_are_named_by_position_and_may_do_everything_everywhere() {
    let k = keys(&["alpha", "", "beta"], "");
    let a = k.authenticate("alpha").unwrap();
    assert_eq!(a.name(), "key-1");
    assert_eq!(k.authenticate("beta").unwrap().name(), "key-3");
    for op in Operation::ALL {
        assert!(a.may(op), "{op}");
    }
    assert_eq!(a.sites(), None);
    assert_eq!(a.rate(), None);
    assert_eq!(a.ops(), "publish, status, cancel, admin, metrics");
    for wrong in ["", "alph", "alphaa", "ALPHA", "beta "] {
        assert!(k.authenticate(wrong).is_none(), "{wrong:?}");
    }
    assert!(KeySet::load(&[String::new()], &[]).unwrap().is_empty());
}

#[test]
fn named_keys_carry_their_ops_sites_and_rate() {
    let k = keys(
        &["plain"],
        r#"
[[api_key]]
name = "billing"
key = "billing-secret"
ops = ["publish", "status"]
sites = ["eu", "uk"]
rate_per_sec = 2.5
[[api_key]]
name = "ops-team"
key = "ops-secret"
ops = ["admin", "cancel"]
"#,
    );
    let billing = k.authenticate("billing-secret").unwrap();
    assert_eq!(billing.name(), "billing");
    assert!(billing.may(Operation::Publish) && billing.may(Operation::Status));
    assert!(!billing.may(Operation::Cancel) && !billing.may(Operation::Admin));
    assert_eq!(billing.ops(), "publish, status");
    assert_eq!(
        billing.sites(),
        Some(&["eu".to_owned(), "uk".to_owned()][..])
    );
    let rate = billing.rate().unwrap();
    assert_eq!((rate.per_sec(), rate.burst()), (2.5, 3), "default burst");
    let ops = k.authenticate("ops-secret").unwrap();
    assert!(!ops.may(Operation::Publish) && ops.may(Operation::Admin));
    assert_eq!(k.authenticate("plain").unwrap().name(), "key-1");
}

/// `metrics` is an operation like the others: every plain key and every
/// named key without `ops` has it (so keys written before it existed may
/// scrape), a named key listing its ops has it only when it lists it.
#[test]
fn the_metrics_operation_is_every_keys_unless_its_ops_leave_it_out() {
    let toml_text = r#"
[[api_key]]
name = "everything"
key = "everything-secret"
[[api_key]]
name = "prometheus"
key = "prometheus-secret"
ops = ["metrics"]
[[api_key]]
name = "billing"
key = "billing-secret"
ops = ["publish", "status", "cancel", "admin"]
"#;
    let k = keys(&["plain"], toml_text);
    for (key, may) in [
        ("plain", true),
        ("everything-secret", true),
        ("prometheus-secret", true),
        ("billing-secret", false),
    ] {
        let caller = k.authenticate(key).unwrap();
        assert_eq!(caller.may(Operation::Metrics), may, "{}", caller.name());
    }
    let prometheus = k.authenticate("prometheus-secret").unwrap();
    assert_eq!(prometheus.ops(), "metrics");
    assert!(!prometheus.may(Operation::Publish));

    let set = |plain: &[&str], text: &str| {
        let plain: Vec<String> = plain.iter().map(|s| s.to_string()).collect();
        KeySet::load(&plain, &named(text)).unwrap()
    };
    assert!(set(&["plain"], "").any_may(Operation::Metrics));
    assert!(set(&[], toml_text).any_may(Operation::Metrics));
    let without = "[[api_key]]\nname = \"b\"\nkey = \"b-secret\"\nops = [\"publish\"]\n";
    assert!(!set(&[], without).any_may(Operation::Metrics));
    assert!(!KeySet::empty().any_may(Operation::Metrics));
}

#[test]
fn secrets_come_from_a_file_or_the_environment_and_stay_out_of_debug() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("k");
    std::fs::write(&file, "from-a-file\n").unwrap();
    // A variable every test process has (setting one would need unsafe).
    let path = std::env::var("PATH").expect("PATH is set");
    let text = format!(
        "[[api_key]]\nname = \"f\"\nkey_file = {:?}\n[[api_key]]\nname = \"e\"\nkey_env = \"PATH\"\n[[api_key]]\nname = \"inline\"\nkey = \"inline-secret\"\n",
        file.display().to_string()
    );
    let k = keys(&[], &text);
    assert_eq!(k.authenticate("from-a-file").unwrap().name(), "f");
    assert_eq!(k.authenticate(path.trim()).unwrap().name(), "e");
    let debug = format!("{:?} {:?}", named(&text), k);
    assert!(!debug.contains("inline-secret"), "{debug}");
    assert!(debug.contains("inline"), "names do show: {debug}");
}

#[test]
fn every_load_problem_is_named_without_the_key() {
    let err = problems(
        &["same-secret", "bad key"],
        r#"
[[api_key]]
name = "a"
key = "same-secret"
[[api_key]]
name = "a"
key = "other-secret"
[[api_key]]
name = "no-secret"
[[api_key]]
name = "two-secrets"
key = "x"
key_env = "Y"
[[api_key]]
name = "empty"
key = "  "
[[api_key]]
name = "no-ops"
key = "k1"
ops = []
[[api_key]]
name = "no-sites"
key = "k2"
sites = []
[[api_key]]
name = "bad-rate"
key = "k3"
rate_per_sec = 0
[[api_key]]
name = "burst-only"
key = "k4"
burst = 5
[[api_key]]
name = "missing-file"
key_file = "/nonexistent/herald.key"
[[api_key]]
name = "bad name!"
key = "k5"
"#,
    );
    for says in [
        "api_keys[1] (key-2): the key must be visible ASCII",
        "\"a\" is used twice",
        "api keys \"key-1\" and \"a\" are the same key",
        "api_key \"no-secret\": set one of key, key_file or key_env",
        "api_key \"two-secrets\": set only one of",
        "api_key \"empty\": the key is empty",
        "api_key \"no-ops\": ops is empty",
        "api_key \"no-sites\": sites is empty",
        "api_key \"bad-rate\": rate_per_sec / burst: a rate must be a positive number",
        "api_key \"burst-only\": burst needs rate_per_sec",
        "api_key \"missing-file\": key_file /nonexistent/herald.key: cannot read it",
        "api_key \"bad name!\": name must be",
    ] {
        assert!(err.contains(says), "{says}\n---\n{err}");
    }
    for secret in ["same-secret", "other-secret", "k1", "k5"] {
        assert!(!err.contains(secret), "{secret} leaked:\n{err}");
    }
}

#[test]
fn an_unknown_operation_is_refused_by_the_parser_with_the_choices() {
    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Doc {
        api_key: Vec<ApiKeyConfig>,
    }
    let err = toml::from_str::<Doc>("[[api_key]]\nname = \"a\"\nkey = \"k\"\nops = [\"delete\"]\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown variant `delete`"), "{err}");
    assert!(
        err.contains("`publish`, `status`, `cancel`, `admin`, `metrics`"),
        "{err}"
    );
    let err = toml::from_str::<Doc>("[[api_key]]\nname = \"a\"\nkey = \"k\"\nrole = \"x\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown field `role`"), "{err}");
}

#[test]
fn a_keys_rate_is_its_own() {
    let k = keys(
        &[],
        "[[api_key]]\nname = \"slow\"\nkey = \"slow-key\"\nrate_per_sec = 1\nburst = 2\n[[api_key]]\nname = \"free\"\nkey = \"free-key\"\n",
    );
    let t0 = Instant::now();
    let slow = k.authenticate("slow-key").unwrap();
    assert_eq!(slow.take(2, t0), Ok(()));
    assert_eq!(slow.take(1, t0), Err(Refusal::Wait(Duration::from_secs(1))));
    // A second authentication of the same key shares its bucket.
    let again = k.authenticate("slow-key").unwrap();
    assert!(again.take(1, t0).is_err());
    assert_eq!(again.take(3, t0), Err(Refusal::OverBurst));
    let free = k.authenticate("free-key").unwrap();
    for _ in 0..1000 {
        assert_eq!(free.take(1000, t0), Ok(()));
    }
}

#[test]
fn a_replacement_reaches_every_clone_and_keeps_the_rate_state_by_name() {
    let k = keys(
        &[],
        "[[api_key]]\nname = \"a\"\nkey = \"old-a\"\nrate_per_sec = 0.001\nburst = 1\n",
    );
    let held = k.clone();
    let t0 = Instant::now();
    assert_eq!(k.authenticate("old-a").unwrap().take(1, t0), Ok(()));
    let fresh = KeySet::load(
        &[],
        &named("[[api_key]]\nname = \"a\"\nkey = \"new-a\"\nrate_per_sec = 0.001\nburst = 1\n[[api_key]]\nname = \"b\"\nkey = \"new-b\"\n"),
    )
    .unwrap();
    assert_eq!(k.replace(fresh), 2);
    assert!(held.authenticate("old-a").is_none(), "the old key is gone");
    let a = held.authenticate("new-a").unwrap();
    assert!(
        matches!(a.take(1, Instant::now()), Err(Refusal::Wait(_))),
        "a renamed secret under the same name keeps its spent bucket"
    );
    assert!(held.authenticate("new-b").is_some());
}
