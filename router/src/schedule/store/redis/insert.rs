//! Inserting a batch: one script call per shard touched (split past
//! `max_entries_per_script`), all in flight at once. Each script is atomic
//! and idempotent: an id already stored is reported with its status.
//! Callers' batches reach here grouped ([`super::group`]).

use std::collections::{BTreeMap, HashMap};

use futures_util::future::try_join_all;
use redis::{Script, Value};

use super::conn::Conn;
use super::layout::{self, Keys, score};
use super::reply::{array, blob, unexpected};
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

impl Inserter {
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
                let mut args = Vec::with_capacity(4 * chunk.len());
                for &i in chunk {
                    let e = &entries[i];
                    args.push(e.id().as_bytes().to_vec());
                    args.push(layout::encode_new(e, now));
                    // The `due` score as text: a Lua number handed to a
                    // redis.call is formatted with sprintf, per entry.
                    args.push(score(e.due_ms).to_string().into_bytes());
                    // The topic, so that the script need not parse the
                    // header for it (empty: none; topics are never empty).
                    args.push(
                        e.notification
                            .topic
                            .as_deref()
                            .unwrap_or_default()
                            .as_bytes()
                            .to_vec(),
                    );
                }
                let v = self.run(s, args).await?;
                Ok::<_, StoreError>((chunk, array(v)?))
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
