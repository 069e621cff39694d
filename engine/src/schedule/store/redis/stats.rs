//! The cluster's stats parts in Redis, shared by every router
//! ([`RedisStatsBook`]): each router writes its own summary and the edge
//! reports it consumes; the router answering `/v1/stats` reads them all.
//!
//! ```text
//! <p>:stats   HASH "<kind>:<id>" -> the part's JSON (herald_engine::stats::part::Part)
//! ```
//!
//! Bounded: at most [`MAX_PARTS`] fields. A part of a process not yet in
//! the hash is refused while it is full (policy *refuse-new*, counted by
//! the caller); parts older than [`FORGET_MS`] are removed when read, so
//! an edge that stopped shows as stale for a day, then goes.

use redis::Value;

use super::conn::{Conn, unavailable};
use crate::schedule::store::StoreError;
use crate::stats::part::Part;

/// Most parts (edges and routers) kept.
pub const MAX_PARTS: usize = 1_000;
/// A part this old (ms since measured) is forgotten.
pub const FORGET_MS: u64 = 24 * 3600 * 1000;

/// What came of [`RedisStatsBook::put`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Put {
    /// Kept.
    Stored,
    /// A new process while the hash holds [`MAX_PARTS`]: not kept.
    Full,
    /// Older than the one kept for the same process: not kept.
    Older,
}

/// The stats parts in the store's Redis. Cheap to clone.
#[derive(Clone)]
pub struct RedisStatsBook {
    conn: Conn,
    key: String,
}

impl std::fmt::Debug for RedisStatsBook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStatsBook")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl super::RedisStore {
    /// The stats parts on the same Redis, under the same prefix.
    pub fn stats_book(&self) -> RedisStatsBook {
        RedisStatsBook {
            conn: self.conn.clone(),
            key: format!("{}:stats", self.config.prefix),
        }
    }
}

fn field(part: &Part) -> String {
    format!("{}:{}", part.kind, part.id)
}

impl RedisStatsBook {
    /// Keep `part` (in place of the process's last one).
    pub async fn put(&self, part: &Part) -> Result<Put, StoreError> {
        let mut conn = self.conn.clone();
        let field = field(part);
        let (kept, len): (Option<String>, usize) = redis::pipe()
            .cmd("HGET")
            .arg(&self.key)
            .arg(&field)
            .cmd("HLEN")
            .arg(&self.key)
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?;
        match kept.as_deref().map(serde_json::from_str::<Part>) {
            None if len >= MAX_PARTS => return Ok(Put::Full),
            Some(Ok(k)) if k.at_ms > part.at_ms => return Ok(Put::Older),
            _ => {}
        }
        let json = serde_json::to_string(part).unwrap_or_default();
        let _: Value = redis::cmd("HSET")
            .arg(&self.key)
            .arg(&field)
            .arg(json)
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?;
        Ok(Put::Stored)
    }

    /// Every part measured within [`FORGET_MS`] of `now_ms` (older ones and
    /// unreadable ones are removed).
    pub async fn all(&self, now_ms: u64) -> Result<Vec<Part>, StoreError> {
        let mut conn = self.conn.clone();
        let all: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(&self.key)
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?;
        let mut parts = Vec::with_capacity(all.len());
        let mut gone = Vec::new();
        for (f, json) in all {
            match serde_json::from_str::<Part>(&json) {
                Ok(p) if now_ms.saturating_sub(p.at_ms) <= FORGET_MS && p.check().is_ok() => {
                    parts.push(p)
                }
                Ok(_) => gone.push(f),
                Err(e) => {
                    tracing::warn!(field = %f, error = %e, "an unreadable stats part in Redis; removed");
                    gone.push(f);
                }
            }
        }
        if !gone.is_empty() {
            let _: Value = redis::cmd("HDEL")
                .arg(&self.key)
                .arg(gone)
                .query_async(&mut conn)
                .await
                .map_err(unavailable)?;
        }
        Ok(parts)
    }
}
