//! The idempotency ledger every router sharing the prefix sees
//! ([`Store::claim_ids`](crate::schedule::store::Store::claim_ids)): an id
//! is the key `<base>:id:<id>` of its shard, holding the due time of the
//! publication that took it and expiring when its hold ends. One script
//! call per shard touched (`lua/ids.lua`), all in flight at once.

use std::collections::BTreeMap;

use futures_util::future::try_join_all;

use super::reply::{array, int, num};
use super::{RedisStore, invoke};
use crate::schedule::store::{Claimed, IdClaim, StoreError};

impl RedisStore {
    /// Claim `claims`, one outcome each, in order.
    pub(super) async fn claim_ids_now(
        &self,
        claims: Vec<IdClaim>,
    ) -> Result<Vec<Claimed>, StoreError> {
        let mut by_shard: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
        for (i, c) in claims.iter().enumerate() {
            by_shard.entry(self.keys.shard(&c.id)).or_default().push(i);
        }
        let calls = by_shard.iter().map(|(&shard, indexes)| {
            let mut args = Vec::with_capacity(3 * indexes.len());
            for &i in indexes {
                let c = &claims[i];
                args.push(c.id.as_bytes().to_vec());
                args.push(num(c.due_ms));
                args.push(num(c.hold_until_ms.max(1)));
            }
            async move { invoke(&self.conn, &self.keys, &self.scripts.ids, shard, &args).await }
        });
        let replies = try_join_all(calls).await?;
        let mut out = vec![Claimed::New; claims.len()];
        for ((_, indexes), reply) in by_shard.iter().zip(replies) {
            let values = array(reply)?;
            if values.len() != indexes.len() {
                return Err(super::reply::unexpected("the ids script (count)"));
            }
            for (&i, v) in indexes.iter().zip(values) {
                let n = int(&v)?;
                if n >= 0 {
                    out[i] = Claimed::Taken { due_ms: n as u64 };
                }
            }
        }
        Ok(out)
    }

    /// Free `ids` (taken by this process's claims): one pipeline per
    /// shard (one hash slot each, so one Cluster node).
    pub(super) async fn release_ids_now(&self, ids: Vec<String>) -> Result<(), StoreError> {
        let mut by_shard: BTreeMap<u16, redis::Pipeline> = BTreeMap::new();
        for id in &ids {
            by_shard
                .entry(self.keys.shard(id))
                .or_insert_with(redis::pipe)
                .cmd("DEL")
                .arg(self.keys.id(id))
                .ignore();
        }
        try_join_all(by_shard.into_values().map(|pipe| async move {
            pipe.query_async::<()>(&mut self.conn.clone())
                .await
                .map_err(super::conn::unavailable)
        }))
        .await?;
        Ok(())
    }
}
