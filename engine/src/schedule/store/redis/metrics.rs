//! Counters of the Redis store: failed operations, the entries it had to
//! skip or drop, and how inserts were grouped.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;

/// Metrics of one [`super::RedisStore`]. Cheap to clone (shared counters).
#[derive(Debug, Clone, Default)]
pub struct RedisStoreMetrics {
    /// Operations that failed with `Unavailable` (Redis down, timed out,
    /// or refused a request).
    pub unavailable: Counter,
    /// Claimed entries whose stored value could not be decoded: left
    /// firing (they come back after their lease, e.g. for a router of a
    /// newer release during a rolling upgrade), not returned.
    pub corrupt: Counter,
    /// Index entries that pointed at a missing entry (only possible if
    /// Redis evicted or lost a key): dropped from the index.
    pub orphans: Counter,
    /// Insert groups sent to Redis (see `group.rs`): with
    /// `insert_batches`, how many callers' batches went together.
    pub insert_groups: Counter,
    /// Callers' insert batches, each in one group.
    pub insert_batches: Counter,
}

impl RedisStoreMetrics {
    /// Register under `herald_store_redis_*`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "herald_store_redis_unavailable",
            "Delayed-store operations that failed: Redis down, timed out or refusing",
            self.unavailable.clone(),
        );
        registry.register(
            "herald_store_redis_corrupt",
            "Claimed delayed entries skipped because their stored value could not be decoded",
            self.corrupt.clone(),
        );
        registry.register(
            "herald_store_redis_orphans",
            "Delayed-store index entries dropped because their entry was missing",
            self.orphans.clone(),
        );
        registry.register(
            "herald_store_redis_insert_groups",
            "Insert groups sent to Redis: callers' batches that arrived together go as one",
            self.insert_groups.clone(),
        );
        registry.register(
            "herald_store_redis_insert_batches",
            "Callers' insert batches (divide by insert_groups: batches per group)",
            self.insert_batches.clone(),
        );
    }
}
