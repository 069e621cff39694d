//! Ids accepted since the last fold: the part of the id index kept in
//! memory.
//!
//! An id index on disk takes every insert at a random place, and redb
//! rewrites each page a commit touches: with commits of a few thousand
//! entries, nearly every page of `ids`, every commit. So new ids go here
//! first, and the writer folds them into `ids` in one sorted batch when
//! there are [`EmbeddedConfig::fold_ids`](super::EmbeddedConfig::fold_ids)
//! of them (policy when full: fold). The records say the same durably:
//! each carries its id, and `meta["folded"]` is the first seq not folded,
//! so opening the store reads them back from there.
//!
//! Lookups check here, then `ids`. A read snapshot taken before a fold
//! commits has no folded ids in its `ids`; readers hold [`RecentIds::gate`]
//! (shared) while they read, and the writer takes it (exclusive) to drop
//! folded ids from memory, so no reader misses an id that is in neither.

use std::collections::HashMap;

use parking_lot::{RwLock, RwLockReadGuard};
use redb::ReadableTable;

use super::io;
use crate::schedule::store::StoreError;

/// The in-memory part of the id index. Shared by the writer and readers.
#[derive(Debug, Default)]
pub(super) struct RecentIds {
    map: RwLock<HashMap<Box<[u8]>, u64>>,
    gate: RwLock<()>,
}

impl RecentIds {
    /// Hold while reading a snapshot that looks ids up.
    pub(super) fn gate(&self) -> RwLockReadGuard<'_, ()> {
        self.gate.read()
    }

    pub(super) fn get(&self, id: &[u8]) -> Option<u64> {
        self.map.read().get(id).copied()
    }

    /// The seq of `id`: here, or else in the on-disk index `ids` (of a
    /// write transaction or a read snapshot).
    pub(super) fn seq_of(
        &self,
        ids: &impl ReadableTable<&'static [u8], u64>,
        id: &str,
    ) -> Result<Option<u64>, StoreError> {
        match self.get(id.as_bytes()) {
            Some(seq) => Ok(Some(seq)),
            None => Ok(ids.get(id.as_bytes()).map_err(io)?.map(|v| v.value())),
        }
    }

    pub(super) fn insert(&self, id: &[u8], seq: u64) {
        self.map.write().insert(id.into(), seq);
    }

    /// Forget these (id, seq) pairs; an id since stored again under a
    /// newer seq stays.
    pub(super) fn remove(&self, ids: &[(Box<[u8]>, u64)]) {
        if ids.is_empty() {
            return;
        }
        let mut map = self.map.write();
        for (id, seq) in ids {
            if map.get(id) == Some(seq) {
                map.remove(id);
            }
        }
    }

    pub(super) fn len(&self) -> usize {
        self.map.read().len()
    }

    /// Every (id, seq), sorted by id: what a fold writes.
    pub(super) fn sorted(&self) -> Vec<(Box<[u8]>, u64)> {
        let mut all: Vec<_> = self
            .map
            .read()
            .iter()
            .map(|(id, seq)| (id.clone(), *seq))
            .collect();
        all.sort_unstable();
        all
    }

    /// A fold up to `folded` committed: forget the ids below it, once no
    /// reader holds an older snapshot.
    pub(super) fn folded(&self, folded: u64) {
        let _readers_done = self.gate.write();
        self.map.write().retain(|_, seq| *seq >= folded);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folding_forgets_only_what_was_folded() {
        let r = RecentIds::default();
        r.insert(b"b", 1);
        r.insert(b"a", 2);
        r.insert(b"c", 5);
        assert_eq!(
            r.sorted(),
            vec![
                (b"a".as_slice().into(), 2),
                (b"b".as_slice().into(), 1),
                (b"c".as_slice().into(), 5)
            ]
        );
        r.folded(3);
        assert_eq!((r.get(b"a"), r.get(b"c"), r.len()), (None, Some(5), 1));
        r.remove(&[(b"c".as_slice().into(), 4)]);
        assert_eq!(r.get(b"c"), Some(5), "stored again since");
        r.remove(&[(b"c".as_slice().into(), 5)]);
        assert_eq!(r.len(), 0);
    }
}
