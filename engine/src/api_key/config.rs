//! The configuration forms of API keys and their loading: secrets read from
//! `key`, `key_file` or `key_env`, every rule checked, every problem named
//! (by the key's name, never by the key).

use std::collections::HashSet;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use serde::Deserialize;

use super::{Key, KeySet, Limit, Operation, digest};
use crate::rate_limit::{Rate, TokenBucket};

/// One `[[api_key]]` table.
///
/// ```toml
/// [[api_key]]
/// name = "billing"                 # in logs and metrics
/// key_file = "/etc/herald/billing.key"   # or key = "...", or key_env = "VAR"
/// ops = ["publish", "status"]      # default: every operation
/// sites = ["eu"]                   # default: every site
/// tenant = "acme"                  # default: the sites, "eu" here
/// rate_per_sec = 50                # default: no limit
/// burst = 100                      # default: one second's worth
/// ```
#[derive(Clone, Default, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKeyConfig {
    /// The key's name: 1 to 200 of `A-Z a-z 0-9 . _ ~ @ / + = -`, unique.
    pub name: String,
    /// The key itself.
    #[serde(default)]
    pub key: Option<String>,
    /// A file holding the key (surrounding whitespace is ignored); read
    /// again on every reload.
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// An environment variable holding the key.
    #[serde(default)]
    pub key_env: Option<String>,
    /// What the key may do; every operation when absent.
    #[serde(default)]
    pub ops: Option<Vec<Operation>>,
    /// The sites the key may publish to; every site when absent.
    #[serde(default)]
    pub sites: Option<Vec<String>>,
    /// The namespace of the key's notification ids
    /// ([`herald_protocol::tenant`]): keys of one tenant share ids, keys of
    /// two never see each other's. By default a key limited to sites is
    /// the tenant of its sites (sorted, comma-separated), and a key of
    /// every site has none (the ids as written). Naming it keeps a
    /// tenant's ids across a change of its sites or a new key.
    #[serde(default)]
    pub tenant: Option<String>,
    /// Most notifications a second, on average; no limit when absent.
    #[serde(default)]
    pub rate_per_sec: Option<f64>,
    /// Most notifications at once (default: one second's worth, at least 1).
    #[serde(default)]
    pub burst: Option<u32>,
}

impl fmt::Debug for ApiKeyConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiKeyConfig")
            .field("name", &self.name)
            .field("key", &self.key.as_ref().map(|_| "***"))
            .field("key_file", &self.key_file)
            .field("key_env", &self.key_env)
            .field("ops", &self.ops)
            .field("sites", &self.sites)
            .field("tenant", &self.tenant)
            .field("rate_per_sec", &self.rate_per_sec)
            .field("burst", &self.burst)
            .finish()
    }
}

/// A key must travel in an HTTP header: visible ASCII, no spaces.
fn key_problem(key: &str) -> Option<&'static str> {
    if key.is_empty() {
        Some("the key is empty")
    } else if !key.bytes().all(|b| b.is_ascii_graphic()) {
        Some("the key must be visible ASCII without spaces (it travels in an HTTP header)")
    } else {
        None
    }
}

/// The key of `c`, from wherever it says.
fn secret(c: &ApiKeyConfig) -> Result<String, String> {
    match (&c.key, &c.key_file, &c.key_env) {
        (Some(k), None, None) => Ok(k.trim().to_owned()),
        (None, Some(path), None) => std::fs::read_to_string(path)
            .map(|s| s.trim().to_owned())
            .map_err(|e| format!("key_file {}: cannot read it: {e}", path.display())),
        (None, None, Some(var)) => std::env::var(var)
            .map(|s| s.trim().to_owned())
            .map_err(|e| format!("key_env {var}: {e}")),
        (None, None, None) => Err("set one of key, key_file or key_env".to_owned()),
        _ => Err("set only one of key, key_file or key_env".to_owned()),
    }
}

fn all_ops() -> u8 {
    Operation::ALL.iter().fold(0, |acc, op| acc | op.bit())
}

/// [`KeySet::load`] at `now` (the buckets start full then).
pub(super) fn load(
    plain: &[String],
    named: &[ApiKeyConfig],
    now: Instant,
) -> Result<KeySet, Vec<String>> {
    let mut problems = Vec::new();
    let mut keys: Vec<Key> = Vec::new();
    for (i, key) in plain.iter().enumerate() {
        let key = key.trim();
        if key.is_empty() {
            continue;
        }
        let name = format!("key-{}", i + 1);
        if let Some(p) = key_problem(key) {
            problems.push(format!("api_keys[{i}] ({name}): {p}"));
            continue;
        }
        keys.push(Key {
            name: name.into(),
            digest: digest(key.as_bytes()),
            ops: all_ops(),
            sites: None,
            tenant: None,
            limit: None,
        });
    }
    for (i, c) in named.iter().enumerate() {
        let label = if c.name.is_empty() {
            format!("api_key[{i}]")
        } else {
            format!("api_key {:?}", c.name)
        };
        let before = problems.len();
        let mut say = |p: String| problems.push(format!("{label}: {p}"));
        if !herald_protocol::envelope::is_valid_name(&c.name) {
            say("name must be 1 to 200 characters of A-Z a-z 0-9 . _ ~ @ / + = -".to_owned());
        }
        let key = match secret(c) {
            Ok(k) => {
                if let Some(p) = key_problem(&k) {
                    say(p.to_owned());
                }
                k
            }
            Err(p) => {
                say(p);
                String::new()
            }
        };
        let ops = match &c.ops {
            None => all_ops(),
            Some(ops) if ops.is_empty() => {
                say(
                    "ops is empty: the key could do nothing (omit ops to allow every operation)"
                        .to_owned(),
                );
                0
            }
            Some(ops) => ops.iter().fold(0, |acc, op| acc | op.bit()),
        };
        let sites = match &c.sites {
            None => None,
            Some(s) if s.is_empty() => {
                say("sites is empty: omit it to allow every site".to_owned());
                None
            }
            Some(s) => {
                if s.iter()
                    .any(|site| site.is_empty() || site.chars().any(char::is_control))
                {
                    say(
                        "sites: every site must be non-empty, without control characters"
                            .to_owned(),
                    );
                }
                Some(s.clone().into_boxed_slice())
            }
        };
        let tenant = match (&c.tenant, &sites) {
            (Some(t), _) => {
                if !herald_protocol::tenant::is_valid_tenant(t) {
                    say(format!(
                        "tenant: must be 1 to {} bytes without control characters",
                        herald_protocol::tenant::MAX_TENANT_BYTES
                    ));
                }
                Some(Arc::from(t.as_str()))
            }
            (None, Some(sites)) => {
                let mut sorted: Vec<&str> = sites.iter().map(String::as_str).collect();
                sorted.sort_unstable();
                sorted.dedup();
                let joined = sorted.join(",");
                if !herald_protocol::tenant::is_valid_tenant(&joined) {
                    say(format!(
                        "sites: together longer than a tenant may be ({} bytes): name the key's tenant",
                        herald_protocol::tenant::MAX_TENANT_BYTES
                    ));
                }
                Some(Arc::from(joined))
            }
            (None, None) => None,
        };
        let limit = match (c.rate_per_sec, c.burst) {
            (None, None) => None,
            (None, Some(_)) => {
                say("burst needs rate_per_sec".to_owned());
                None
            }
            (Some(per_sec), burst) => {
                match Rate::new(
                    per_sec,
                    burst.unwrap_or_else(|| Rate::default_burst(per_sec)),
                ) {
                    Ok(rate) => Some(Limit {
                        rate,
                        bucket: Mutex::new(TokenBucket::full(&rate, now)),
                    }),
                    Err(e) => {
                        say(format!("rate_per_sec / burst: {e}"));
                        None
                    }
                }
            }
        };
        if problems.len() == before {
            keys.push(Key {
                name: Arc::from(c.name.as_str()),
                digest: digest(key.as_bytes()),
                ops,
                sites,
                tenant,
                limit,
            });
        }
    }
    let mut seen = HashSet::new();
    for key in &keys {
        if !seen.insert(&*key.name) {
            problems.push(format!(
                "api key names must be unique: {:?} is used twice (plain api_keys are named key-1, key-2, ... by position)",
                key.name
            ));
        }
    }
    for (i, a) in keys.iter().enumerate() {
        for b in &keys[i + 1..] {
            if a.digest == b.digest {
                problems.push(format!(
                    "api keys {:?} and {:?} are the same key: give each caller its own",
                    a.name, b.name
                ));
            }
        }
    }
    if problems.is_empty() {
        Ok(KeySet { keys })
    } else {
        Err(problems)
    }
}
