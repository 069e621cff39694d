//! The callback states: a firing callback's step, retry_wait, its end
//! (delivered, declined, dead), the attempt log, and replaying a dead
//! letter. Each change is one script per shard touched (`lua/mark_step.lua`,
//! `retry_wait.lua`, `finish.lua`, `replay.lua`); the log is a list per
//! entry in the entry's shard (`<base>:a:<id>`), bounded by the scripts.

use std::collections::BTreeMap;

use futures_util::future::try_join_all;
use redis::Script;

use super::RedisStore;
use super::layout::{self, score};
use super::reply::{array, blob, int, num, unexpected};
use crate::callback::attempt::Attempt;
use crate::schedule::entry::{Millis, Step};
use crate::schedule::store::{
    FIRST_ATTEMPTS_KEPT, Finish, MAX_ATTEMPTS_KEPT, Replay, RetryWait, Settled, StoreError,
};

/// One entry of a batch: its id and the `N` arguments the script takes
/// with it.
type Item<const N: usize> = (String, [Vec<u8>; N]);

impl RedisStore {
    pub(super) async fn mark_step_all(
        &self,
        ids: Vec<String>,
        step: Step,
        now: Millis,
    ) -> Result<(), StoreError> {
        let head = [num(score(now)), num(u64::from(step.code()))];
        self.per_shard(&self.scripts.mark_step, &ids, &head)
            .await
            .map(drop)
    }

    pub(super) async fn retry_wait_all(
        &self,
        items: Vec<RetryWait>,
        now: Millis,
    ) -> Result<Settled, StoreError> {
        let items = items
            .into_iter()
            .map(|i| {
                let record = Attempt::encode_all(i.recheck.iter().chain(&i.attempt))
                    .map(|r| r.to_vec())
                    .unwrap_or_default();
                let counted = num(u64::from(i.counted));
                (i.id, [num(score(i.at_ms)), record, counted])
            })
            .collect();
        self.per_shard_items(&self.scripts.retry_wait, items, now)
            .await
    }

    pub(super) async fn finish_all(
        &self,
        items: Vec<Finish>,
        now: Millis,
    ) -> Result<Settled, StoreError> {
        let items = items
            .into_iter()
            .map(|i| {
                let record = Attempt::encode_all(i.recheck.iter().chain(&i.attempt))
                    .map(|r| r.to_vec())
                    .unwrap_or_default();
                (i.id, [num(u64::from(i.ending.state().code())), record])
            })
            .collect();
        self.per_shard_items(&self.scripts.finish, items, now).await
    }

    /// Run `script` once per chunk of `items` in each shard, all at once:
    /// its arguments are `now`, the attempt log's bounds, then each item's
    /// id and its `N` arguments; it answers `{ moved, trimmed }`.
    async fn per_shard_items<const N: usize>(
        &self,
        script: &Script,
        items: Vec<Item<N>>,
        now: Millis,
    ) -> Result<Settled, StoreError> {
        let mut by_shard: BTreeMap<u16, Vec<Item<N>>> = BTreeMap::new();
        for item in items {
            by_shard
                .entry(self.keys.shard(&item.0))
                .or_default()
                .push(item);
        }
        let head = [
            num(score(now)),
            num(MAX_ATTEMPTS_KEPT as u64),
            num(FIRST_ATTEMPTS_KEPT as u64),
        ];
        let max = self.config.max_entries_per_script;
        let answers = try_join_all(by_shard.iter().flat_map(|(&s, items)| {
            let head = &head;
            items.chunks(max).map(move |chunk| {
                let mut args = head.to_vec();
                for (id, rest) in chunk {
                    args.push(id.as_bytes().to_vec());
                    args.extend(rest.iter().cloned());
                }
                async move { self.run(script, s, args).await }
            })
        }))
        .await?;
        let mut out = Settled::default();
        for answer in answers {
            let [moved, trimmed] = <[redis::Value; 2]>::try_from(array(answer)?)
                .map_err(|_| unexpected("a callback script"))?;
            out.moved += u64::try_from(int(&moved)?).unwrap_or(0);
            out.trimmed += u64::try_from(int(&trimmed)?).unwrap_or(0);
        }
        Ok(out)
    }

    pub(super) async fn attempts_of(&self, id: &str) -> Result<Vec<Attempt>, StoreError> {
        let mut cmd = redis::cmd("LRANGE");
        cmd.arg(self.keys.attempts(self.keys.shard(id), id))
            .arg(0)
            .arg(-1);
        let records: Vec<Vec<u8>> = self.query(&cmd).await?;
        let mut out = Vec::with_capacity(records.len());
        for r in &records {
            out.extend(Attempt::decode_all(r).map_err(|e| StoreError::Corrupt {
                id: id.to_owned(),
                reason: e.to_string(),
            })?);
        }
        Ok(out)
    }

    pub(super) async fn replay_one(&self, id: &str, now: Millis) -> Result<Replay, StoreError> {
        let s = self.keys.shard(id);
        let args = vec![id.as_bytes().to_vec(), num(score(now))];
        let answer = array(self.run(&self.scripts.replay, s, args).await?)?;
        let mut it = answer.into_iter();
        let outcome = it.next().map(|v| int(&v)).transpose()?.unwrap_or(0);
        if outcome == 0 {
            return Ok(Replay::NotFound);
        }
        let status = layout::status(id, &blob(it.next().ok_or_else(|| unexpected("replay"))?)?)?;
        Ok(if outcome == 1 {
            Replay::Replayed(status)
        } else {
            Replay::NotDead(status)
        })
    }
}
