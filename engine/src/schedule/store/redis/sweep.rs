//! Expire and purge: sweeps over every shard, a limited number at a time.
//! One round counts what each shard has (`ZCOUNT`), then gives out the
//! limit shard by shard from a start that turns per call, so routers
//! sweeping together spread over the shards.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use futures_util::future::try_join_all;
use redis::Value;

use super::RedisStore;
use super::layout::score;
use super::reply::{array, groups, int, num, text, unexpected};
use crate::schedule::entry::Millis;
use crate::schedule::store::StoreError;

impl RedisStore {
    /// Shards in rotation order for this call, with how many of `limit`
    /// each gets from `counts` (what each has).
    pub(super) fn allocate(&self, counts: &[u64], limit: usize) -> Vec<(u16, usize)> {
        let start = self.rotation.fetch_add(1, Ordering::Relaxed);
        allocate(counts, limit, start)
    }

    pub(super) async fn expire_some(
        &self,
        now: Millis,
        limit: usize,
    ) -> Result<Vec<Option<String>>, StoreError> {
        let now = score(now);
        let counts = self
            .count_each(|s| self.keys.hold_expiry(s), "-inf", &now.to_string())
            .await?;
        let answers =
            try_join_all(
                self.allocate(&counts, limit).into_iter().map(|(s, n)| {
                    let args = vec![num(now), num(n as u64)];
                    async move {
                        Ok::<_, StoreError>((s, self.run(&self.scripts.expire, s, args).await?))
                    }
                }),
            )
            .await?;
        let mut expired = Vec::new();
        let mut cleanup: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (s, answer) in answers {
            let [_, users, topics] =
                <[Value; 3]>::try_from(array(answer)?).map_err(|_| unexpected("expire"))?;
            for t in array(topics)? {
                let t = text(t)?;
                expired.push((!t.is_empty()).then_some(t));
            }
            for [user, tokens] in groups(array(users)?, "expire")? {
                let fields = cleanup.entry(text(user)?).or_default();
                for t in array(tokens)? {
                    fields.push(format!("{s}:{}", text(t)?));
                }
            }
        }
        try_join_all(
            cleanup
                .iter()
                .map(|(user, fields)| self.unhint(user, fields.clone())),
        )
        .await?;
        Ok(expired)
    }

    pub(super) async fn purge_some(&self, before: Millis, limit: usize) -> Result<u64, StoreError> {
        let before = score(before);
        let counts = self
            .count_each(|s| self.keys.finished(s), "-inf", &format!("({before}"))
            .await?;
        let removed = try_join_all(self.allocate(&counts, limit).into_iter().map(|(s, n)| {
            let args = vec![num(before), num(n as u64)];
            async move { int(&self.run(&self.scripts.purge, s, args).await?) }
        }))
        .await?;
        Ok(removed
            .into_iter()
            .map(|n| u64::try_from(n).unwrap_or(0))
            .sum())
    }
}

/// Starting at shard `start % n` and going round, give each shard up to
/// what it has until `limit` is given out.
fn allocate(counts: &[u64], limit: usize, start: usize) -> Vec<(u16, usize)> {
    let n = counts.len();
    let mut left = limit;
    let mut out = Vec::new();
    for k in 0..n {
        if left == 0 {
            break;
        }
        let s = (start + k) % n;
        let take = usize::try_from(counts[s]).unwrap_or(usize::MAX).min(left);
        if take > 0 {
            out.push((s as u16, take));
            left -= take;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_goes_round_from_the_start_and_stops_at_the_limit() {
        assert_eq!(allocate(&[5, 0, 3, 2], 6, 2), vec![(2, 3), (3, 2), (0, 1)]);
        assert_eq!(
            allocate(&[5, 0, 3, 2], 100, 0),
            vec![(0, 5), (2, 3), (3, 2)]
        );
        assert_eq!(allocate(&[5, 0, 3, 2], 0, 1), vec![]);
        assert_eq!(allocate(&[], 10, 7), vec![]);
    }
}
