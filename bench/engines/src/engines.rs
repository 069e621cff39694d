//! The two engines behind [`Engine`], each used the way Herald would:
//! one table (redb) or keyspace (fjall) per index, every commit durable.

use std::path::Path;

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use redb::{Durability, ReadableTable, TableDefinition};

use crate::workload::{Engine, Entry, Result, claimed};

/// The page cache Herald gives redb (`EmbeddedConfig::cache_bytes`); fjall's
/// block cache gets the same.
pub const CACHE_BYTES: usize = 64 * 1024 * 1024;

const ENTRIES: TableDefinition<&str, &[u8]> = TableDefinition::new("entries");
const DUE: TableDefinition<&[u8], ()> = TableDefinition::new("sched");

/// redb 2.6.4 as Herald opens it: one file, `Durability::Immediate` (the
/// default; one fdatasync per commit, checksummed one-phase commit).
pub struct Redb(redb::Database);

impl Engine for Redb {
    fn open(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let db = redb::Database::builder()
            .set_cache_size(CACHE_BYTES)
            .create(dir.join("store.redb"))?;
        let txn = db.begin_write()?;
        txn.open_table(ENTRIES)?;
        txn.open_table(DUE)?;
        txn.commit()?;
        Ok(Redb(db))
    }

    fn insert(&mut self, entries: &[Entry]) -> Result<()> {
        let mut txn = self.0.begin_write()?;
        txn.set_durability(Durability::Immediate);
        {
            let mut primary = txn.open_table(ENTRIES)?;
            let mut due = txn.open_table(DUE)?;
            for e in entries {
                primary.insert(e.id.as_str(), e.value.as_slice())?;
                due.insert(e.due_key().as_slice(), ())?;
            }
        }
        txn.commit()?;
        Ok(())
    }

    fn earliest(&self, n: usize) -> Result<usize> {
        let txn = self.0.begin_read()?;
        let due = txn.open_table(DUE)?;
        let mut count = 0;
        for kv in due.iter()?.take(n) {
            let (k, ()) = kv.map(|(k, v)| (k, v.value()))?;
            std::hint::black_box(k.value());
            count += 1;
        }
        Ok(count)
    }

    fn claim(&mut self, n: usize) -> Result<usize> {
        let mut txn = self.0.begin_write()?;
        txn.set_durability(Durability::Immediate);
        let count;
        {
            let mut primary = txn.open_table(ENTRIES)?;
            let mut due = txn.open_table(DUE)?;
            let keys = due
                .iter()?
                .take(n)
                .map(|kv| kv.map(|(k, _)| k.value().to_vec()))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            for k in &keys {
                due.remove(k.as_slice())?;
                let id = std::str::from_utf8(&k[8..])?;
                let value = primary
                    .get(id)?
                    .ok_or("claimed id missing")?
                    .value()
                    .to_vec();
                primary.insert(id, claimed(&value).as_slice())?;
            }
            count = keys.len();
        }
        txn.commit()?;
        Ok(count)
    }
}

/// fjall 3 with a keyspace per index; a commit is an atomic write batch
/// across both, persisted with `mode` before `commit` returns.
pub struct Fjall {
    db: Database,
    primary: Keyspace,
    due: Keyspace,
    mode: PersistMode,
}

impl Fjall {
    pub fn open_with(dir: &Path, mode: PersistMode) -> Result<Self> {
        let db = Database::builder(dir)
            .cache_size(CACHE_BYTES as u64)
            .open()?;
        let primary = db.keyspace("entries", KeyspaceCreateOptions::default)?;
        let due = db.keyspace("sched", KeyspaceCreateOptions::default)?;
        Ok(Fjall {
            db,
            primary,
            due,
            mode,
        })
    }
}

/// Which fsync fjall uses: `SyncData` (fdatasync, what redb calls) unless
/// `HERALD_ENGINES_FJALL_SYNC=all` asks for `SyncAll` (fsync).
pub fn fjall_mode() -> PersistMode {
    match std::env::var("HERALD_ENGINES_FJALL_SYNC").as_deref() {
        Ok("all") => PersistMode::SyncAll,
        _ => PersistMode::SyncData,
    }
}

impl Engine for Fjall {
    fn open(dir: &Path) -> Result<Self> {
        Fjall::open_with(dir, fjall_mode())
    }

    fn insert(&mut self, entries: &[Entry]) -> Result<()> {
        let mut batch = self.db.batch().durability(Some(self.mode));
        for e in entries {
            batch.insert(&self.primary, e.id.as_str(), e.value.as_slice());
            batch.insert(&self.due, e.due_key(), b"");
        }
        batch.commit()?;
        Ok(())
    }

    fn earliest(&self, n: usize) -> Result<usize> {
        let mut count = 0;
        for guard in self.due.iter().take(n) {
            std::hint::black_box(guard.key()?);
            count += 1;
        }
        Ok(count)
    }

    fn claim(&mut self, n: usize) -> Result<usize> {
        // Herald's single writer thread makes read-then-write safe without
        // fjall's transaction layer, as in redb's write transaction.
        let keys = self
            .due
            .iter()
            .take(n)
            .map(|g| g.key())
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let mut batch = self.db.batch().durability(Some(self.mode));
        for k in &keys {
            let id = &k[8..];
            let value = self.primary.get(id)?.ok_or("claimed id missing")?;
            batch.insert(&self.primary, id, claimed(&value));
            batch.remove(&self.due, k.clone());
        }
        batch.commit()?;
        Ok(keys.len())
    }
}
