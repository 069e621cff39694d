//! Configuration helpers shared by Herald's binaries: reading TOML, the
//! error that lists every problem at once, and the publication limits both
//! binaries take (`[publish]`).
//!
//! Every key of a binary is a row of its [`Table`]: the rows both binaries
//! share are here ([`table`]), each binary keeps its own. A row is the one
//! description of its key (the configuration structs' fields name the key
//! and point to it): its environment variable, read over the file by
//! [`load`] ([`env`](mod@env)), the redaction of `--print-config` ([`redact`]), the
//! page docs/configuration.md and the defaults `--help` shows ([`page`]),
//! and the check that the table covers the binary's configuration
//! ([`coverage`]) all come from it.

pub mod coverage;
pub mod env;
pub mod key;
pub mod packaged;
pub mod page;
pub mod redact;
pub mod table;

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

pub use key::{Binary, Key, Kind, Secret, key};
pub use table::Table;

/// Publication limits (HTTP and AMQP alike), `[publish]`. Each field is the
/// key of its name, described once in its row of [`table::SECTIONS`].
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PublishConfig {
    /// Key `publish.max_payload_bytes`.
    pub max_payload_bytes: usize,
    /// Key `publish.max_body_bytes`.
    pub max_body_bytes: usize,
    /// Key `publish.max_batch`.
    pub max_batch: usize,
    /// Key `publish.max_users`.
    pub max_users: usize,
    /// Key `publish.max_clients`.
    pub max_clients: usize,
    /// Key `publish.max_sites`.
    pub max_sites: usize,
    /// Key `publish.max_ttl_ms`.
    pub max_ttl_ms: u64,
    /// Key `publish.dedup_window_secs`.
    pub dedup_window_secs: u64,
    /// Key `publish.dedup_max`.
    pub dedup_max: usize,
}

impl PublishConfig {
    /// The idempotency ledger's settings (a window of 0 turns it off).
    pub fn ledger(&self) -> crate::publish::LedgerConfig {
        crate::publish::LedgerConfig {
            window: Duration::from_secs(self.dedup_window_secs),
            max: self.dedup_max,
        }
    }
}

impl Default for PublishConfig {
    fn default() -> Self {
        let limits = herald_protocol::envelope::Limits::default();
        let http = crate::publish::PublishConfig::default();
        PublishConfig {
            max_payload_bytes: limits.max_payload_bytes,
            max_body_bytes: http.max_body_bytes,
            max_batch: http.max_batch,
            max_users: limits.max_users,
            max_clients: limits.max_clients,
            max_sites: limits.max_sites,
            max_ttl_ms: limits.max_ttl.as_millis() as u64,
            dedup_window_secs: http.ledger.window.as_secs(),
            dedup_max: http.ledger.max,
        }
    }
}

/// A configuration that cannot be used, with every reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .problems.join("\n"))]
pub struct ConfigError {
    /// One line per problem.
    pub problems: Vec<String>,
}

impl ConfigError {
    /// An error with one problem.
    pub fn one(problem: String) -> Self {
        ConfigError {
            problems: vec![problem],
        }
    }
}

/// Parse a TOML configuration document; errors name `origin` and the spot.
/// Shared by every Herald binary.
pub fn parse_toml<T: serde::de::DeserializeOwned>(
    text: &str,
    origin: &Path,
) -> Result<T, ConfigError> {
    toml::from_str(text).map_err(|e| {
        ConfigError::one(format!(
            "{}: {}",
            origin.display(),
            e.to_string().trim_end()
        ))
    })
}

/// A configuration key that was renamed. The old name keeps working (the
/// field carries `#[serde(alias = "...")]`); [`load`] warns when a file
/// still uses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Renamed {
    /// The old dotted path, e.g. `edge.reconnect_min_ms`.
    pub old: &'static str,
    /// The new dotted path.
    pub new: &'static str,
}

/// Load a binary's configuration: its defaults, the TOML file at `path`
/// (if any; its errors name the file and the spot), then the variables of
/// its keys (`keys`) from `env` ([`env::overlay`]; each problem names the
/// variable and the key). Returns the configuration, not yet validated, and one
/// warning for each key of `renamed` the file uses under its old name.
pub fn load<T: serde::de::DeserializeOwned + Default>(
    path: Option<&Path>,
    renamed: &[Renamed],
    keys: Table,
    env: env::Env<'_>,
) -> Result<(T, Vec<String>), ConfigError> {
    let (text, origin) = match path {
        Some(path) => (
            std::fs::read_to_string(path)
                .map_err(|e| ConfigError::one(format!("cannot read {}: {e}", path.display())))?,
            path,
        ),
        None => (String::new(), Path::new("(defaults)")),
    };
    let from_file: T = parse_toml(&text, origin)?;
    let warnings = renamed_keys(&text, renamed);
    let mut doc: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ConfigError::one(format!("{}: {e}", origin.display())))?;
    let applied =
        env::overlay::<T>(&mut doc, keys, env).map_err(|problems| ConfigError { problems })?;
    if applied == 0 {
        return Ok((from_file, warnings));
    }
    let config = toml::Value::Table(doc).try_into().map_err(|e| {
        ConfigError::one(format!(
            "{} with the environment's {}_* variables: {}",
            origin.display(),
            keys.binary.prefix().trim_end_matches('_'),
            e.to_string().trim_end()
        ))
    })?;
    Ok((config, warnings))
}

/// `config` as TOML, every secret of its keys (`keys`) `"<redacted>"`:
/// what `--print-config` prints.
pub fn redacted_toml<T: serde::Serialize>(config: &T, keys: Table) -> Result<String, String> {
    let toml::Value::Table(mut doc) = toml::Value::try_from(config).map_err(|e| e.to_string())?
    else {
        return Err("the configuration is not a table".to_owned());
    };
    redact::redact(&mut doc, keys);
    toml::to_string_pretty(&doc).map_err(|e| e.to_string())
}

/// One warning for each key of `renamed` that `text` (a TOML document
/// that already parsed) uses under its old name.
pub fn renamed_keys(text: &str, renamed: &[Renamed]) -> Vec<String> {
    if renamed.is_empty() {
        return Vec::new();
    }
    let Ok(table) = text.parse::<toml::Table>() else {
        return Vec::new();
    };
    renamed
        .iter()
        .filter(|r| {
            let mut value: Option<&toml::Value> = None;
            let mut at = Some(&table);
            for part in r.old.split('.') {
                value = at.and_then(|t| t.get(part));
                at = value.and_then(|v| v.as_table());
            }
            value.is_some()
        })
        .map(|r| format!("{} is deprecated: use {} (same meaning)", r.old, r.new))
        .collect()
}

impl PublishConfig {
    /// Every rule on the limits, as problems named `publish.*`.
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        let positive = [
            ("publish.max_payload_bytes", self.max_payload_bytes as u64),
            ("publish.max_body_bytes", self.max_body_bytes as u64),
            ("publish.max_batch", self.max_batch as u64),
            ("publish.max_users", self.max_users as u64),
            ("publish.max_clients", self.max_clients as u64),
            ("publish.max_sites", self.max_sites as u64),
            ("publish.max_ttl_ms", self.max_ttl_ms),
            ("publish.dedup_max", self.dedup_max as u64),
        ];
        for (name, value) in positive {
            if value == 0 {
                p.push(format!("{name} must be greater than 0"));
            }
        }
        if self.max_body_bytes < self.max_payload_bytes {
            p.push("publish.max_body_bytes must be at least publish.max_payload_bytes".to_owned());
        }
        p
    }

    /// The envelope limits these settings make.
    pub fn envelope_limits(&self) -> herald_protocol::envelope::Limits {
        herald_protocol::envelope::Limits {
            max_payload_bytes: self.max_payload_bytes,
            max_users: self.max_users,
            max_clients: self.max_clients,
            max_sites: self.max_sites,
            max_identifier_bytes: herald_protocol::envelope::Limits::default().max_identifier_bytes,
            max_ttl: Duration::from_millis(self.max_ttl_ms),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RENAMED: &[Renamed] = &[Renamed {
        old: "edge.reconnect_min_ms",
        new: "edge.reconnect_initial_ms",
    }];

    #[test]
    fn an_old_key_is_named_in_a_warning() {
        let warnings = renamed_keys("[edge]\nreconnect_min_ms = 50\n", RENAMED);
        assert_eq!(
            warnings,
            ["edge.reconnect_min_ms is deprecated: use edge.reconnect_initial_ms (same meaning)"]
        );
        assert!(renamed_keys("[edge]\nreconnect_initial_ms = 50\n", RENAMED).is_empty());
        assert!(renamed_keys("reconnect_min_ms = 50\n", RENAMED).is_empty());
        assert!(renamed_keys("edge = 1\n", RENAMED).is_empty());
    }
}
