//! Reads: an entry's status, list pages and counts.

use std::collections::BTreeMap;

use futures_util::future::try_join_all;

use super::RedisStore;
use super::conn::unavailable;
use super::layout::{self, score};
use super::merge::{Resume, merge};
use super::reply::{array, blob, groups, num, unexpected};
use crate::schedule::entry::{Millis, Status};
use crate::schedule::store::{Counts, Cursor, ListFilter, Page, StoreError};

impl RedisStore {
    /// The status of one entry, if stored.
    pub(super) async fn status_of(&self, id: &str) -> Result<Option<Status>, StoreError> {
        let s = self.keys.shard(id);
        let args = vec![id.as_bytes().to_vec()];
        let answer = array(self.run(&self.scripts.headers, s, args).await?)?;
        match answer.into_iter().next().map(blob).transpose()? {
            Some(raw) if !raw.is_empty() => layout::status(id, &raw).map(Some),
            _ => Ok(None),
        }
    }

    /// The headers of `ids`: None when not stored, or when the header
    /// cannot be decoded (counted and logged; the entry is left alone).
    pub(super) async fn headers_of(
        &self,
        ids: &[String],
    ) -> Result<Vec<(String, Option<layout::Header>)>, StoreError> {
        let mut out = Vec::with_capacity(ids.len());
        let mut by_shard: BTreeMap<u16, Vec<&String>> = BTreeMap::new();
        for id in ids {
            by_shard.entry(self.keys.shard(id)).or_default().push(id);
        }
        let max = self.config.max_entries_per_script;
        let answers = try_join_all(by_shard.iter().flat_map(|(&s, ids)| {
            ids.chunks(max).map(move |chunk| {
                let args = chunk.iter().map(|id| id.as_bytes().to_vec()).collect();
                async move {
                    let a = array(self.run(&self.scripts.headers, s, args).await?)?;
                    Ok::<_, StoreError>((chunk, a))
                }
            })
        }))
        .await?;
        for (chunk, answer) in answers {
            if answer.len() != chunk.len() {
                return Err(unexpected("headers"));
            }
            for (id, raw) in chunk.iter().zip(answer) {
                let raw = blob(raw)?;
                let h = if raw.is_empty() {
                    None
                } else {
                    match layout::Header::decode(&raw) {
                        Ok(h) => Some(h),
                        Err(reason) => {
                            self.metrics.corrupt.inc();
                            tracing::error!(id = %id, %reason, "a delayed entry's header cannot be decoded; left alone");
                            None
                        }
                    }
                };
                out.push(((*id).clone(), h));
            }
        }
        Ok(out)
    }

    pub(super) async fn list_page(
        &self,
        filter: ListFilter,
        after: Option<Cursor>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        if limit == 0 {
            return Ok(Page {
                items: Vec::new(),
                next: after,
            });
        }
        let suffix = layout::list_suffix(filter.state, filter.topic.as_deref());
        let start = after.as_ref().map(|c| layout::member(c.due_ms, &c.id));
        let merged = merge(
            usize::from(self.keys.shards()),
            limit,
            true,
            |r: Resume<Vec<u8>>| {
                let from = match r.after.as_ref().or(start.as_ref()) {
                    Some(m) => [b"(".as_slice(), m].concat(),
                    None => b"-".to_vec(),
                };
                let args = vec![suffix.clone().into_bytes(), from, num(r.count as u64)];
                async move {
                    let flat = array(self.run(&self.scripts.list, r.stream as u16, args).await?)?;
                    groups(flat, "list")?
                        .into_iter()
                        .map(|[m, h]| Ok((blob(m)?, blob(h)?)))
                        .collect::<Result<Vec<_>, _>>()
                }
            },
        )
        .await?;
        let mut items = Vec::with_capacity(merged.items.len());
        let mut last = None;
        for (_, member, header) in merged.items {
            let (due, id) =
                layout::split_member(&member).ok_or_else(|| unexpected("list member"))?;
            if header.is_empty() {
                self.metrics.orphans.inc();
                tracing::error!(
                    id,
                    "a delayed-store list named an entry that is missing; skipped"
                );
            } else {
                let status = layout::status(&id, &header)?;
                // Scheduled and firing share their lists.
                if status.state == filter.state {
                    items.push(status);
                }
            }
            last = Some(Cursor { due_ms: due, id });
        }
        Ok(Page {
            items,
            next: if merged.more { last } else { None },
        })
    }

    /// How many of each shard's `key` have a score in [min, max].
    pub(super) async fn count_each(
        &self,
        key: impl Fn(u16) -> String,
        min: &str,
        max: &str,
    ) -> Result<Vec<u64>, StoreError> {
        try_join_all((0..self.keys.shards()).map(|s| {
            let mut cmd = redis::cmd("ZCOUNT");
            cmd.arg(key(s)).arg(min).arg(max);
            async move { self.query::<u64>(&cmd).await }
        }))
        .await
    }

    pub(super) async fn count_all(
        &self,
        now: Millis,
        bounds: Vec<u64>,
    ) -> Result<Counts, StoreError> {
        let edges: Vec<Millis> = bounds
            .iter()
            .map(|b| score(now.saturating_add(*b)))
            .collect();
        // Per shard: each bucket of `due`, then of `rw` (the retry_wait
        // entries `due` also holds: subtracted), then the other counts.
        let buckets = edges.len() + 1;
        let per = try_join_all((0..self.keys.shards()).map(|s| {
            let mut pipe = redis::pipe();
            for set in [self.keys.due(s), self.keys.retry_wait(s)] {
                let mut lo = "-inf".to_owned();
                for e in &edges {
                    pipe.cmd("ZCOUNT").arg(&set).arg(&lo).arg(format!("({e}"));
                    lo = e.to_string();
                }
                pipe.cmd("ZCOUNT").arg(&set).arg(&lo).arg("+inf");
            }
            pipe.cmd("ZCARD").arg(self.keys.lease(s));
            pipe.cmd("ZCARD").arg(self.keys.hold_expiry(s));
            pipe.cmd("ZCARD").arg(self.keys.retry_wait(s));
            async move {
                pipe.query_async::<Vec<u64>>(&mut self.conn.clone())
                    .await
                    .map_err(unavailable)
            }
        }))
        .await?;
        let mut c = Counts {
            scheduled: vec![0; buckets],
            ..Counts::default()
        };
        for n in per {
            if n.len() != 2 * buckets + 3 {
                return Err(unexpected("counts"));
            }
            let (due, rest) = n.split_at(buckets);
            let (rw, rest) = rest.split_at(buckets);
            for ((total, d), r) in c.scheduled.iter_mut().zip(due).zip(rw) {
                *total += d.saturating_sub(*r);
            }
            c.firing += rest[0];
            c.held += rest[1];
            c.retry_wait += rest[2];
        }
        Ok(c)
    }
}
