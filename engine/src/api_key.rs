//! API keys of the HTTP API: who may call it, for what, on which sites, and
//! how fast.
//!
//! Each key has a **name** (in logs and metrics; the key itself never is),
//! the **operations** it may perform ([`Operation`]), optionally the
//! **sites** it may publish to, and optionally a **publish rate** (a token
//! bucket per key, [`crate::rate_limit`]). Two configuration forms, both
//! loaded by [`KeySet::load`]:
//!
//! - `api_keys = ["..."]` (and `--api-key`, `HERALD_API_KEYS`): plain keys,
//!   each allowed every operation on every site, without a rate limit,
//!   named `key-1`, `key-2`, ... by position;
//! - `[[api_key]]` tables ([`ApiKeyConfig`]): `name`, one of `key`,
//!   `key_file` or `key_env`, `ops`, `sites`, `tenant`, `rate_per_sec`,
//!   `burst`.
//!
//! A key limited to sites, or naming a `tenant`, publishes and reads ids
//! in its tenant's namespace ([`herald_protocol::tenant`]).
//!
//! A presented key is hashed (SHA-256) and compared with every configured
//! key's hash, each comparison in constant time, so neither the position of
//! a differing byte nor the key's length shows in the timing.
//!
//! [`ApiKeys`] is the shared handle the API holds: [`ApiKeys::replace`]
//! swaps in a freshly loaded set (SIGHUP) for every clone at once; a key
//! that keeps its name keeps its rate-limit state across the swap.

mod config;
mod metrics;

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Mutex, RwLock};
use prometheus_client::encoding::{EncodeLabelValue, LabelValueEncoder};
use prometheus_client::registry::Registry;
use serde::Deserialize;
use sha2::{Digest, Sha256};

pub use config::ApiKeyConfig;
pub use metrics::{KeyMetrics, ReloadLabels, ReloadResult};

use crate::rate_limit::{Rate, Refusal, TokenBucket};

/// What a key may do; each HTTP endpoint needs one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    /// `POST /v1/notifications`, `POST /v1/users/{uid}/online`.
    Publish,
    /// `GET /v1/notifications/{id}`.
    Status,
    /// `DELETE /v1/notifications/{id}`.
    Cancel,
    /// `GET /v1/notifications` (the list of every scheduled notification,
    /// every site and user) and the topics API (`/v1/topics`, every
    /// method: callback URLs and signing secrets, for every site).
    Admin,
    /// `GET /metrics` when `metrics_require_key` is on (its series name
    /// the API keys and count every site's traffic).
    Metrics,
}

impl Operation {
    /// Every operation, in the order the docs list them.
    pub const ALL: [Operation; 5] = [
        Operation::Publish,
        Operation::Status,
        Operation::Cancel,
        Operation::Admin,
        Operation::Metrics,
    ];

    /// The name used in configuration, errors and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Publish => "publish",
            Operation::Status => "status",
            Operation::Cancel => "cancel",
            Operation::Admin => "admin",
            Operation::Metrics => "metrics",
        }
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl EncodeLabelValue for Operation {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), fmt::Error> {
        fmt::Write::write_str(encoder, self.as_str())
    }
}

/// A per-key publish rate with its bucket.
struct Limit {
    rate: Rate,
    bucket: Mutex<TokenBucket>,
}

/// One loaded key.
struct Key {
    name: Arc<str>,
    digest: [u8; 32],
    /// Bits of [`Operation::bit`].
    ops: u8,
    /// None: every site.
    sites: Option<Box<[String]>>,
    /// The namespace of its ids; None: the ids as written.
    tenant: Option<Arc<str>>,
    limit: Option<Limit>,
}

/// A loaded, validated set of keys.
pub struct KeySet {
    keys: Vec<Key>,
}

impl fmt::Debug for KeySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.keys.iter().map(|k| &*k.name))
            .finish()
    }
}

fn digest(key: &[u8]) -> [u8; 32] {
    Sha256::digest(key).into()
}

impl KeySet {
    /// No key: every request is refused.
    pub fn empty() -> Self {
        KeySet { keys: Vec::new() }
    }

    /// Load `plain` keys (`api_keys`; empty entries are skipped) and
    /// `named` ones (`[[api_key]]`; their files and environment variables
    /// are read now). Every problem is reported, none of them with a key.
    pub fn load(plain: &[String], named: &[ApiKeyConfig]) -> Result<KeySet, Vec<String>> {
        config::load(plain, named, Instant::now())
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there is no key.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Whether some key may perform `op`.
    pub fn any_may(&self, op: Operation) -> bool {
        self.keys.iter().any(|k| k.ops & op.bit() != 0)
    }

    /// The names, in configuration order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|k| &*k.name)
    }

    /// The index of the key whose hash is `presented`'s, comparing with
    /// every key in constant time.
    fn find(&self, presented: &[u8]) -> Option<usize> {
        let wanted = digest(presented);
        // Index + 1 of the match (keys are unique: at most one), built
        // without branching on the comparisons.
        let mut found = 0usize;
        for (i, key) in self.keys.iter().enumerate() {
            let equal = constant_time_eq(&key.digest, &wanted);
            found |= usize::from(equal).wrapping_neg() & (i + 1);
        }
        found.checked_sub(1)
    }

    /// Carry the rate-limit state of `old`'s keys over to this set's keys
    /// of the same name (retuned to their new rate).
    fn inherit(&self, old: &KeySet, now: Instant) {
        for key in &self.keys {
            let Some(limit) = &key.limit else { continue };
            let previous = old
                .keys
                .iter()
                .find(|k| k.name == key.name)
                .and_then(|k| k.limit.as_ref());
            if let Some(prev) = previous {
                let state = *prev.bucket.lock();
                *limit.bucket.lock() = state.retuned(&prev.rate, &limit.rate, now);
            }
        }
    }
}

fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The API keys in use. Clones share them, so a [`ApiKeys::replace`]
/// reaches every holder.
#[derive(Clone)]
pub struct ApiKeys {
    inner: Arc<Inner>,
}

struct Inner {
    set: RwLock<Arc<KeySet>>,
    metrics: KeyMetrics,
}

impl Default for ApiKeys {
    fn default() -> Self {
        ApiKeys::from_set(KeySet::empty())
    }
}

impl fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ApiKeys({:?})", self.inner.set.read())
    }
}

impl ApiKeys {
    /// A handle on `set`.
    pub fn from_set(set: KeySet) -> Self {
        let metrics = KeyMetrics::default();
        metrics.keys.set(set.len() as i64);
        ApiKeys {
            inner: Arc::new(Inner {
                set: RwLock::new(Arc::new(set)),
                metrics,
            }),
        }
    }

    /// Whether no key is configured (then every request is refused).
    pub fn is_empty(&self) -> bool {
        self.inner.set.read().is_empty()
    }

    /// Whether `presented` is one of the keys.
    pub fn verify(&self, presented: &str) -> bool {
        self.authenticate(presented).is_some()
    }

    /// The key `presented` is, if it is one.
    pub fn authenticate(&self, presented: &str) -> Option<Caller> {
        let set = Arc::clone(&self.inner.set.read());
        let index = set.find(presented.as_bytes())?;
        Some(Caller { set, index })
    }

    /// Use `fresh` from now on (a reload), keeping the rate-limit state of
    /// keys whose name stays; returns how many keys are in use. Counted in
    /// `herald_api_key_reloads_total{result="ok"}`.
    pub fn replace(&self, fresh: KeySet) -> usize {
        let count = fresh.len();
        let mut set = self.inner.set.write();
        fresh.inherit(&set, Instant::now());
        *set = Arc::new(fresh);
        drop(set);
        self.inner.metrics.reloaded(true);
        self.inner.metrics.keys.set(count as i64);
        count
    }

    /// A reload failed and the current keys stay: counted in
    /// `herald_api_key_reloads_total{result="failed"}`.
    pub fn reload_failed(&self) {
        self.inner.metrics.reloaded(false);
    }

    /// Register `herald_api_keys` and `herald_api_key_reloads`.
    pub fn register(&self, registry: &mut Registry) {
        self.inner.metrics.register(registry);
    }
}

/// An authenticated caller: its key, as loaded when it called.
pub struct Caller {
    set: Arc<KeySet>,
    index: usize,
}

impl fmt::Debug for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Caller({})", self.name())
    }
}

impl Caller {
    fn key(&self) -> &Key {
        &self.set.keys[self.index]
    }

    /// The key's name.
    pub fn name(&self) -> &str {
        &self.key().name
    }

    /// The key's name, shared.
    pub fn name_arc(&self) -> Arc<str> {
        Arc::clone(&self.key().name)
    }

    /// Whether the key may perform `op`.
    pub fn may(&self, op: Operation) -> bool {
        self.key().ops & op.bit() != 0
    }

    /// The operations the key may perform, comma-separated (for errors).
    pub fn ops(&self) -> String {
        let ops: Vec<&str> = Operation::ALL
            .iter()
            .filter(|op| self.may(**op))
            .map(|op| op.as_str())
            .collect();
        ops.join(", ")
    }

    /// The sites the key may publish to; None for every site.
    pub fn sites(&self) -> Option<&[String]> {
        self.key().sites.as_deref()
    }

    /// The tenant whose ids the key publishes and reads
    /// ([`herald_protocol::tenant`]); None for a key of every site that
    /// names none.
    pub fn tenant(&self) -> Option<&str> {
        self.key().tenant.as_deref()
    }

    /// The id Herald keeps for `id` given by this key.
    pub fn scoped_id(&self, id: &str) -> String {
        herald_protocol::tenant::scope(id, self.tenant())
    }

    /// The key's publish rate, when it has one.
    pub fn rate(&self) -> Option<Rate> {
        self.key().limit.as_ref().map(|l| l.rate)
    }

    /// Take `n` publications from the key's rate; always allowed for a key
    /// without one.
    pub fn take(&self, n: u32, now: Instant) -> Result<(), Refusal> {
        match &self.key().limit {
            Some(limit) => limit.bucket.lock().take(&limit.rate, n, now),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;
