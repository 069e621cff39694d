//! Where the Redis store connects and how its keys are laid out.

use std::time::Duration;

use crate::schedule::store::StoreError;

/// The largest `max_entries_per_script`: the insert script hands two values
/// per entry to one variadic `ZADD`, and Redis's Lua passes at most 8,000.
const MAX_ENTRIES_PER_SCRIPT: usize = 2_000;

/// One Redis server, or a Redis Cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Topology {
    /// One server (or a proxy that behaves as one): `redis://host:port/db`.
    Single(String),
    /// A Redis Cluster, found through these seed nodes
    /// (`redis://host:port`); the rest of the cluster is discovered.
    Cluster(Vec<String>),
}

/// The Redis store's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// Where Redis is.
    pub topology: Topology,
    /// Every key starts with this (default `herald`). Several Herald
    /// deployments can share one Redis under different prefixes. No `{`
    /// or `}` (they would break the per-shard hash tags).
    pub prefix: String,
    /// How many shards the entries are spread over (default 16). Each
    /// shard is one hash slot, so on a cluster this bounds how many nodes
    /// share the work; more shards cost more requests per claim and list.
    /// Fixed for the life of the data: [`super::RedisStore::connect`]
    /// refuses a count that differs from the one stored under the prefix.
    pub shards: u16,
    /// Longest a TCP connect (and Redis handshake) may take.
    pub connect_timeout: Duration,
    /// Longest one Redis request may wait for its answer.
    pub response_timeout: Duration,
    /// Longest one store operation may take in all (it may make several
    /// requests); past it the operation fails with
    /// [`StoreError::Unavailable`].
    pub operation_timeout: Duration,
    /// Most entries one insert script handles (at most 2,000): a larger
    /// batch is split
    /// into several scripts per shard (policy: split; each script is
    /// atomic). Bounds how long one script blocks Redis and how large one
    /// request is.
    pub max_entries_per_script: usize,
    /// Requests queued for the single-server connection's writer; when the
    /// queue is full, callers wait for room (policy: block). The cluster
    /// client has its own queue of 100 requests, with the same policy.
    /// Also bounds the insert batches waiting to be grouped (`group.rs`),
    /// same policy.
    pub request_queue: usize,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            topology: Topology::Single("redis://127.0.0.1:6379".into()),
            prefix: "herald".into(),
            shards: 16,
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(5),
            operation_timeout: Duration::from_secs(10),
            max_entries_per_script: 256,
            request_queue: 256,
        }
    }
}

/// Most shards: each costs a request per claim, peek and list page.
pub const MAX_SHARDS: u16 = 1024;

impl RedisConfig {
    /// A single-server configuration with the defaults.
    pub fn single(url: impl Into<String>) -> Self {
        RedisConfig {
            topology: Topology::Single(url.into()),
            ..RedisConfig::default()
        }
    }

    /// A cluster configuration with the defaults.
    pub fn cluster(seeds: impl IntoIterator<Item = impl Into<String>>) -> Self {
        RedisConfig {
            topology: Topology::Cluster(seeds.into_iter().map(Into::into).collect()),
            ..RedisConfig::default()
        }
    }

    /// Every problem with this configuration, one line each.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        match &self.topology {
            Topology::Single(url) if url.is_empty() => out.push("url is empty".into()),
            Topology::Cluster(seeds) if seeds.is_empty() => {
                out.push("a cluster needs at least one seed node".into())
            }
            _ => {}
        }
        if self.prefix.is_empty() {
            out.push("prefix is empty".into());
        }
        if self.prefix.contains(['{', '}']) {
            out.push(format!(
                "prefix {:?} contains a brace: it would break the per-shard hash tags",
                self.prefix
            ));
        }
        if self.shards == 0 || self.shards > MAX_SHARDS {
            out.push(format!(
                "shards is {}: it must be between 1 and {MAX_SHARDS}",
                self.shards
            ));
        }
        for (name, d) in [
            ("connect_timeout", self.connect_timeout),
            ("response_timeout", self.response_timeout),
            ("operation_timeout", self.operation_timeout),
        ] {
            if d.is_zero() {
                out.push(format!("{name} is zero"));
            }
        }
        if self.max_entries_per_script == 0 {
            out.push("max_entries_per_script is zero".into());
        }
        if self.max_entries_per_script > MAX_ENTRIES_PER_SCRIPT {
            out.push(format!(
                "max_entries_per_script is {}, at most {MAX_ENTRIES_PER_SCRIPT} (the insert script passes two values per entry to one ZADD, and Redis's Lua takes at most 8,000 arguments)",
                self.max_entries_per_script
            ));
        }
        if self.request_queue == 0 {
            out.push("request_queue is zero".into());
        }
        out
    }

    pub(super) fn check(&self) -> Result<(), StoreError> {
        let problems = self.problems();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(StoreError::Unavailable(format!(
                "bad Redis store configuration: {}",
                problems.join("; ")
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid_and_every_problem_is_listed() {
        assert!(RedisConfig::default().problems().is_empty());
        let bad = RedisConfig {
            topology: Topology::Cluster(vec![]),
            prefix: "a{b}".into(),
            shards: 0,
            response_timeout: Duration::ZERO,
            max_entries_per_script: 0,
            ..RedisConfig::default()
        };
        let p = bad.problems();
        assert_eq!(p.len(), 5, "{p:?}");
        assert!(bad.check().is_err());
        let too_many = RedisConfig {
            max_entries_per_script: MAX_ENTRIES_PER_SCRIPT + 1,
            ..RedisConfig::default()
        };
        let p = too_many.problems();
        assert!(p.len() == 1 && p[0].contains("at most 2000"), "{p:?}");
    }
}
