//! Claiming due entries, and the read-only look at what comes due.
//!
//! A claim peeks at the earliest due ids across shards (the
//! [`merge`](super::merge) of each shard's `due` and `lease` sets, two
//! streams per shard), then claims exactly those with one script call per
//! shard. The script re-checks each id: one another router took meanwhile
//! is replaced by that shard's next due entry; when a shard cannot make up
//! its share, the claim goes round again, at most [`MAX_CLAIM_ROUNDS`]
//! times. A single claimer so gets the earliest (fire time, id) entries in
//! order; concurrent claimers never get the same entry (the script moves
//! it to `lease` before anyone else can see it due) and share the work.

use std::collections::BTreeMap;

use bytes::Bytes;
use futures_util::future::try_join_all;
use redis::Value;

use super::RedisStore;
use super::layout::{self, score};
use super::merge::{Resume, merge};
use super::reply::{array, blob, groups, num, parse_score, text};
use crate::schedule::entry::{Entry, Millis};
use crate::schedule::store::StoreError;

/// Most rounds of one claim. A round falls short only when other routers
/// took the entries it picked; each such round is progress for someone,
/// and the bound keeps one call short under heavy contention (it then
/// returns what it has; the scheduler claims again at its next tick).
pub const MAX_CLAIM_ROUNDS: usize = 8;

impl RedisStore {
    /// Up to `limit` scheduled and firing (fire time, id) pairs with fire
    /// time in `from..=until`, earliest first.
    pub(super) async fn upcoming_all(
        &self,
        from: Millis,
        until: Millis,
        limit: usize,
    ) -> Result<Vec<(Millis, String)>, StoreError> {
        if from > until {
            return Ok(Vec::new());
        }
        let (from, until) = (score(from), score(until));
        let streams = 2 * usize::from(self.keys.shards());
        let merged = merge(streams, limit, false, |r| self.fire_stream(from, until, r)).await?;
        Ok(merged.items.into_iter().map(|(_, k, ())| k).collect())
    }

    /// Up to `r.count` (score, id) of `key` with score in `min..=max`
    /// (scores are never negative: `min` 0 has no lower bound), from
    /// `r.offset`, earliest first.
    pub(super) async fn peek(
        &self,
        key: String,
        min: Millis,
        max: Millis,
        r: &Resume<(Millis, String)>,
    ) -> Result<Vec<((Millis, String), ())>, StoreError> {
        let mut cmd = redis::cmd("ZRANGE");
        cmd.arg(key)
            .arg(min)
            .arg(max)
            .arg("BYSCORE")
            .arg("LIMIT")
            .arg(r.offset)
            .arg(r.count)
            .arg("WITHSCORES");
        let flat: Vec<Value> = self.query(&cmd).await?;
        groups(flat, "ZRANGE WITHSCORES")?
            .into_iter()
            .map(|[id, s]| Ok(((parse_score(&s)?, text(id)?), ())))
            .collect()
    }

    /// The scheduled and firing (fire time, id) pairs in `min..=max`:
    /// streams `2s` (due) and `2s + 1` (lease) of shard `s`.
    pub(super) async fn fire_stream(
        &self,
        min: Millis,
        max: Millis,
        r: Resume<(Millis, String)>,
    ) -> Result<Vec<((Millis, String), ())>, StoreError> {
        let shard = (r.stream / 2) as u16;
        let key = if r.stream.is_multiple_of(2) {
            self.keys.due(shard)
        } else {
            self.keys.lease(shard)
        };
        self.peek(key, min, max, &r).await
    }

    /// Decode a claimed entry; `None` (counted) for a missing or corrupt
    /// one.
    pub(super) fn take_claimed(&self, id: &str, value: Vec<u8>) -> Option<Entry> {
        if value.is_empty() {
            self.metrics.orphans.inc();
            tracing::error!(
                id,
                "a delayed-store index named an entry that is missing (evicted or lost by Redis); dropped"
            );
            return None;
        }
        match layout::entry(id, Bytes::from(value)) {
            Ok(e) => Some(e),
            Err(e) => {
                self.metrics.corrupt.inc();
                tracing::error!(id, error = %e, "a claimed delayed entry cannot be decoded; it stays firing until its lease expires");
                None
            }
        }
    }

    pub(super) async fn claim_due_all(
        &self,
        now: Millis,
        limit: usize,
        lease_ms: u64,
    ) -> Result<Vec<Entry>, StoreError> {
        let now = score(now);
        let until = score(now.saturating_add(lease_ms));
        let streams = 2 * usize::from(self.keys.shards());
        // Each claimed entry with its fire time, to sort by at the end.
        let mut got: Vec<(Millis, Entry)> = Vec::new();
        for _ in 0..MAX_CLAIM_ROUNDS {
            let want = limit - got.len();
            let picks = merge(streams, want, false, |r| self.fire_stream(0, now, r))
                .await?
                .items;
            if picks.is_empty() {
                break;
            }
            let mut by_shard: BTreeMap<u16, Vec<String>> = BTreeMap::new();
            for (stream, (_, id), ()) in &picks {
                by_shard
                    .entry((stream / 2) as u16)
                    .or_default()
                    .push(id.clone());
            }
            let answers = try_join_all(by_shard.into_iter().map(|(s, ids)| {
                let mut args = vec![num(now), num(until), num(ids.len() as u64)];
                args.extend(ids.into_iter().map(String::into_bytes));
                self.run(&self.scripts.claim, s, args)
            }))
            .await?;
            let mut moved = 0;
            for answer in answers {
                for [id, s, value] in groups(array(answer)?, "claim")? {
                    let fire = parse_score(&s)?;
                    // The value as it was before the claim: the claim
                    // counted one more attempt.
                    if let Some(mut e) = self.take_claimed(&text(id)?, blob(value)?) {
                        e.attempts += 1;
                        e.fire_ms = fire;
                        got.push((fire, e));
                    }
                    moved += 1;
                }
            }
            if got.len() >= limit || moved >= picks.len() {
                break;
            }
        }
        got.sort_unstable_by(|(fa, a), (fb, b)| (fa, a.id()).cmp(&(fb, b.id())));
        Ok(got.into_iter().map(|(_, e)| e).collect())
    }
}
