//! Inserting a batch: one script call per shard touched (split past
//! `max_entries_per_script`), all in flight at once. Each script is atomic
//! and idempotent: an id already stored is reported with its status.
//! Callers' batches reach here grouped ([`super::group`]).

use std::collections::{BTreeMap, HashMap};

use futures_util::future::try_join_all;
use redis::{Script, Value};

use super::conn::Conn;
use super::layout::{self, Keys, score};
use super::reply::{array, blob, num, unexpected};
use crate::schedule::entry::{Entry, Millis, State, Status};
use crate::schedule::store::{Insert, StoreError};

/// What inserting needs of the store, apart from it: the group-commit
/// task owns one.
pub(super) struct Inserter {
    pub(super) conn: Conn,
    pub(super) keys: Keys,
    pub(super) script: Script,
    /// Most entries per script (`max_entries_per_script`).
    pub(super) max: usize,
}

/// An entry's topic as the insert script takes it: empty for none
/// (topics are never empty).
fn topic(e: &Entry) -> &str {
    e.notification.topic.as_deref().unwrap_or_default()
}

impl Inserter {
    /// The insert script's arguments for `chunk` (indexes into `entries`,
    /// sorted by topic), in the layout `lua/insert.lua` documents: ready
    /// to hand to Redis as they are, so the script makes no string per
    /// entry.
    fn args(&self, shard: u16, chunk: &[usize], entries: &[Entry], now: Millis) -> Vec<Vec<u8>> {
        let prefix = self.keys.entry_prefix(shard);
        let mut args = Vec::with_capacity(1 + 6 * chunk.len() + 2);
        args.push(num(chunk.len() as u64));
        for &i in chunk {
            let e = &entries[i];
            args.push([prefix.as_bytes(), e.id().as_bytes()].concat());
            args.push(layout::encode_new(e, now));
        }
        for &i in chunk {
            let e = &entries[i];
            // The `due` score as text: a Lua number handed to a
            // redis.call is formatted with sprintf, per entry.
            args.push(num(score(e.due_ms)));
            args.push(e.id().as_bytes().to_vec());
        }
        let mut rest = chunk;
        while let Some(&first) = rest.first() {
            let t = topic(&entries[first]);
            let m = rest
                .iter()
                .take_while(|&&i| topic(&entries[i]) == t)
                .count();
            args.push(t.as_bytes().to_vec());
            args.push(num(m as u64));
            for &i in &rest[..m] {
                let e = &entries[i];
                args.push(b"0".to_vec());
                args.push(layout::member(score(e.due_ms), e.id()));
            }
            rest = &rest[m..];
        }
        args
    }

    /// Run the insert script in `shard` with `args`.
    async fn run(&self, shard: u16, args: Vec<Vec<u8>>) -> Result<Value, StoreError> {
        super::invoke(&self.conn, &self.keys, &self.script, shard, &args).await
    }

    pub(super) async fn insert_all(
        &self,
        entries: Vec<Entry>,
        now: Millis,
    ) -> Result<Vec<Insert>, StoreError> {
        // The same id twice in one call is sent once; later copies are
        // duplicates of the first.
        let mut first: HashMap<&str, usize> = HashMap::new();
        let mut repeats = Vec::new();
        let mut by_shard: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
        for (i, e) in entries.iter().enumerate() {
            match first.get(e.id()) {
                Some(&f) => repeats.push((i, f)),
                None => {
                    first.insert(e.id(), i);
                    by_shard.entry(self.keys.shard(e.id())).or_default().push(i);
                }
            }
        }
        let max = self.max;
        let entries = &entries;
        let answers = try_join_all(by_shard.iter().flat_map(|(&s, idx)| {
            idx.chunks(max).map(move |chunk| async move {
                // By topic (stable), so that each topic's list section
                // covers consecutive entries; the answer is in this order.
                let mut chunk = chunk.to_vec();
                chunk.sort_by(|&a, &b| topic(&entries[a]).cmp(topic(&entries[b])));
                let args = self.args(s, &chunk, entries, now);
                let answer = match self.run(s, args).await? {
                    // Every one stored.
                    Value::Int(n) if usize::try_from(n).ok() == Some(chunk.len()) => {
                        vec![Value::Int(1); chunk.len()]
                    }
                    v => array(v)?,
                };
                Ok::<_, StoreError>((chunk, answer))
            })
        }))
        .await?;
        let mut out: Vec<Option<Insert>> = vec![None; entries.len()];
        for (chunk, answer) in answers {
            if answer.len() != chunk.len() {
                return Err(unexpected("insert"));
            }
            for (&i, a) in chunk.iter().zip(answer) {
                out[i] = Some(match a {
                    Value::Int(1) => Insert::Accepted,
                    other => Insert::Duplicate(layout::status(entries[i].id(), &blob(other)?)?),
                });
            }
        }
        for (i, f) in repeats {
            out[i] = match &out[f] {
                Some(Insert::Accepted) => {
                    let e = &entries[f];
                    Some(Insert::Duplicate(Status {
                        id: e.id().to_owned(),
                        state: State::Scheduled,
                        topic: e.notification.topic.clone(),
                        accepted_ms: e.accepted_ms,
                        due_ms: score(e.due_ms),
                        updated_ms: score(now),
                        attempts: 0,
                        step: None,
                        next_attempt_ms: None,
                    }))
                }
                other => other.clone(),
            };
        }
        out.into_iter()
            .map(|o| o.ok_or_else(|| unexpected("insert")))
            .collect()
    }
}
