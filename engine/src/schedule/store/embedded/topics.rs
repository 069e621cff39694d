//! Registered topics in the embedded store: the `topics` table (name ->
//! `updated_ms` (8 LE) ++ settings JSON) and `meta["topics_version"]`,
//! bumped by every put and delete. Writes run in the writer's group
//! commit like every other change; reads on their own snapshot.

use redb::{ReadTransaction, ReadableTable, ReadableTableMetadata, Table};

use super::io;
use super::layout::{META, TOPICS, TOPICS_VERSION};
use crate::schedule::entry::Millis;
use crate::schedule::store::{PutTopic, StoreError, StoredTopic};

type R<T> = Result<T, StoreError>;

/// The two tables a topic write touches, open in the writer's transaction.
pub(super) struct TopicTables<'a, 't> {
    pub(super) topics: &'a mut Table<'t, &'static str, &'static [u8]>,
    pub(super) meta: &'a mut Table<'t, &'static str, u64>,
}

impl TopicTables<'_, '_> {
    /// See [`crate::schedule::store::Store::put_topic`]; returns whether
    /// it wrote, with the outcome.
    pub(super) fn put(
        &mut self,
        name: &str,
        settings: &[u8],
        max_topics: usize,
        now: Millis,
    ) -> R<PutTopic> {
        let exists = self.topics.get(name).map_err(io)?.is_some();
        if !exists && self.topics.len().map_err(io)? >= max_topics as u64 {
            return Ok(PutTopic::Full);
        }
        let mut value = Vec::with_capacity(8 + settings.len());
        value.extend_from_slice(&now.to_le_bytes());
        value.extend_from_slice(settings);
        self.topics.insert(name, value.as_slice()).map_err(io)?;
        self.bump()?;
        Ok(if exists {
            PutTopic::Replaced
        } else {
            PutTopic::Created
        })
    }

    /// Remove `name`; whether it was there.
    pub(super) fn delete(&mut self, name: &str) -> R<bool> {
        let removed = self.topics.remove(name).map_err(io)?.is_some();
        if removed {
            self.bump()?;
        }
        Ok(removed)
    }

    fn bump(&mut self) -> R<()> {
        let was = self
            .meta
            .get(TOPICS_VERSION)
            .map_err(io)?
            .map_or(0, |v| v.value());
        self.meta
            .insert(TOPICS_VERSION, was.wrapping_add(1))
            .map_err(io)?;
        Ok(())
    }
}

fn decode(name: &str, raw: &[u8]) -> R<StoredTopic> {
    if raw.len() < 8 {
        return Err(StoreError::Corrupt {
            id: format!("topic {name}"),
            reason: format!("stored value of {} bytes", raw.len()),
        });
    }
    let (updated, settings) = raw.split_at(8);
    Ok(StoredTopic {
        name: name.to_owned(),
        settings: bytes::Bytes::copy_from_slice(settings),
        updated_ms: u64::from_le_bytes(updated.try_into().expect("8 bytes")),
    })
}

/// One topic.
pub(super) fn get(txn: &ReadTransaction, name: &str) -> R<Option<StoredTopic>> {
    let table = txn.open_table(TOPICS).map_err(io)?;
    let found = table.get(name).map_err(io)?;
    found.map(|v| decode(name, v.value())).transpose()
}

/// A page of topics after `after`, in name order.
pub(super) fn page(
    txn: &ReadTransaction,
    after: Option<&str>,
    limit: usize,
) -> R<Vec<StoredTopic>> {
    let table = txn.open_table(TOPICS).map_err(io)?;
    let range = match after {
        Some(after) => {
            table.range::<&str>((std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded))
        }
        None => table.range::<&str>(..),
    }
    .map_err(io)?;
    let mut out = Vec::new();
    for item in range.take(limit) {
        let (k, v) = item.map_err(io)?;
        out.push(decode(k.value(), v.value())?);
    }
    Ok(out)
}

/// The topics version.
pub(super) fn version(txn: &ReadTransaction) -> R<u64> {
    let meta = txn.open_table(META).map_err(io)?;
    Ok(meta
        .get(TOPICS_VERSION)
        .map_err(io)?
        .map_or(0, |v| v.value()))
}
