//! Presence in Redis, for the distributed routers: what edges report
//! ([`PresenceBook`]) and who is online ([`Presence`]), shared by every
//! router.
//!
//! ```text
//! <p>:pr:<user>    SET of "<edge>:<boot>": the edge processes the user has a
//!                  session on; expires 7 days after the user last came online
//! <p>:edge:<edge>  the edge's current boot id; expires `edge_ttl` after its
//!                  last report (a heartbeat comes every 10 s by default)
//! ```
//!
//! A user is online when one of their members names an edge whose key
//! holds that boot: the users of an edge that stopped reporting go offline
//! when its key expires, those of a restarted edge at once (new boot).
//! Sites are not recorded: a distributed `when-online` asks whether the
//! user is online anywhere.

use std::collections::HashMap;
use std::time::Duration;

use redis::Value;

use super::conn::{Conn, unavailable};
use crate::schedule::presence::PresenceReport;
use crate::schedule::presence::{Asked, Presence, PresenceBook, PresenceFuture, RecordFuture};

/// How long a user's presence set outlives their last "online".
const USER_TTL_MS: u64 = 7 * 24 * 3600 * 1000;

/// Presence in the store's Redis. Cheap to clone.
#[derive(Clone)]
pub struct RedisPresence {
    conn: Conn,
    prefix: String,
    edge_ttl: Duration,
}

impl std::fmt::Debug for RedisPresence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisPresence")
            .field("prefix", &self.prefix)
            .field("edge_ttl", &self.edge_ttl)
            .finish_non_exhaustive()
    }
}

impl super::RedisStore {
    /// Presence on the same Redis, under the same prefix. An edge counts as
    /// alive for `edge_ttl` after its last report (keep it a few heartbeat
    /// intervals).
    pub fn presence(&self, edge_ttl: Duration) -> RedisPresence {
        RedisPresence {
            conn: self.conn.clone(),
            prefix: self.config.prefix.clone(),
            edge_ttl,
        }
    }
}

impl RedisPresence {
    fn user_key(&self, user: &str) -> String {
        format!("{}:pr:{user}", self.prefix)
    }

    fn edge_key(&self, edge: &str) -> String {
        format!("{}:edge:{edge}", self.prefix)
    }

    async fn answer(&self, who: &[Asked]) -> Result<Vec<bool>, redis::RedisError> {
        let mut conn = self.conn.clone();
        let mut members = redis::pipe();
        for a in who {
            members.cmd("SMEMBERS").arg(self.user_key(&a.user));
        }
        let sets: Vec<Vec<String>> = members.query_async(&mut conn).await?;
        let mut edges: Vec<&str> = sets
            .iter()
            .flatten()
            .filter_map(|m| m.split_once(':').map(|(edge, _)| edge))
            .collect();
        edges.sort_unstable();
        edges.dedup();
        if edges.is_empty() {
            return Ok(vec![false; who.len()]);
        }
        let mut boots = redis::pipe();
        for edge in &edges {
            boots.cmd("GET").arg(self.edge_key(edge));
        }
        let current: Vec<Option<String>> = boots.query_async(&mut conn).await?;
        let alive: HashMap<&str, &str> = edges
            .iter()
            .zip(&current)
            .filter_map(|(edge, boot)| boot.as_deref().map(|b| (*edge, b)))
            .collect();
        Ok(sets
            .iter()
            .map(|members| {
                members.iter().any(|m| {
                    m.split_once(':')
                        .is_some_and(|(edge, boot)| alive.get(edge) == Some(&boot))
                })
            })
            .collect())
    }
}

impl Presence for RedisPresence {
    fn online<'a>(&'a self, who: &'a [Asked]) -> PresenceFuture<'a> {
        Box::pin(async move {
            match self.answer(who).await {
                Ok(answers) => answers,
                Err(e) => {
                    // Unknown counts as offline: the entries are held, and
                    // the user's next connect releases them.
                    tracing::warn!(error = %e, "reading presence from Redis failed; holding");
                    vec![false; who.len()]
                }
            }
        })
    }
}

impl PresenceBook for RedisPresence {
    fn record<'a>(&'a self, report: &'a PresenceReport, _now_ms: u64) -> RecordFuture<'a> {
        Box::pin(async move {
            let member = format!("{}:{}", report.edge, report.boot);
            let mut p = redis::pipe();
            p.cmd("SET")
                .arg(self.edge_key(&report.edge))
                .arg(&report.boot)
                .arg("PX")
                .arg(self.edge_ttl.as_millis() as u64)
                .ignore();
            for user in &report.online {
                let key = self.user_key(user);
                p.cmd("SADD").arg(&key).arg(&member).ignore();
                p.cmd("PEXPIRE").arg(&key).arg(USER_TTL_MS).ignore();
            }
            for user in &report.offline {
                p.cmd("SREM").arg(self.user_key(user)).arg(&member).ignore();
            }
            let mut conn = self.conn.clone();
            let _: Value = p.query_async(&mut conn).await.map_err(unavailable)?;
            Ok(())
        })
    }
}
