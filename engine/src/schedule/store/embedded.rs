//! The embedded backend of [`Store`]: a redb database under the data
//! directory (`DATA_DIR/delayed/store.redb`), for standalone Herald.
//!
//! # Durability: group commit
//! Every change goes through one writer thread. It takes the first waiting
//! request, then every other one already queued (up to
//! [`EmbeddedConfig::max_group`]), applies them all in one write
//! transaction, commits it with fsync (redb's `Durability::Immediate`), and
//! only then answers each caller. So `Ok` means on disk, and many
//! concurrent inserters share one fsync. The request queue is bounded
//! ([`EmbeddedConfig::queue`]); when it is full, callers wait (policy:
//! backpressure). Reads (status, list, upcoming, counts) use their own
//! snapshot on the blocking pool; they wait for the writer only while it
//! commits (claims live in memory, see `claims`, and a reader holds their
//! lock so its snapshot and the claims agree).
//!
//! # Layout
//! One table per index (`layout`), so every operation is a range over the
//! index it needs: O(log n + k), never a scan of all entries. Counts come
//! from maintained counters and a per-minute histogram of scheduled fire
//! times, with the partial minutes at the bucket edges counted exactly.
//! Nothing proportional to the number of entries is held in memory (redb's
//! page cache is bounded by [`EmbeddedConfig::cache_bytes`], the ids not
//! yet folded into the id index by [`EmbeddedConfig::fold_ids`], the users
//! with something held by [`EmbeddedConfig::held_users`]).
//!
//! Why redb: see `docs/delayed-store.md`.
//!
//! # Files
//! - this file: the config, opening the store, and [`Store`] as requests
//!   to the writer or reads on the blocking pool;
//! - `group_commit`: the writer thread (requests, group commit, folds);
//! - `write`: the state transitions inside one write transaction (`write/held`:
//!   claiming what is held, and what a transaction leaves unheld);
//! - `read`: the reads (upcoming, list, status, counts);
//! - `layout`: tables, keys and the stored value (pure); `claims`,
//!   `recent` and `held_users`: what is kept in memory.

mod claims;
mod group_commit;
mod held_users;
mod layout;
mod read;
mod recent;
mod topics;
mod write;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;
use redb::Database;
use tokio::sync::{mpsc, oneshot};

use self::claims::Claims;
use self::group_commit::{Limits, Request, run_writer};
use self::held_users::HeldUsers;
use self::layout::*;
use self::read::StatusTables;
use self::recent::RecentIds;
use self::write::Tables;
use super::{
    Cancel, Counts, Cursor, Finish, Insert, ListFilter, Page, PutTopic, Replay, RetryWait, Settled,
    Store, StoreError, StoreFuture, StoredTopic,
};
use crate::callback::attempt::Attempt;
use crate::schedule::entry::{Entry, Millis, Status, Step};

/// A backend failure, as the store reports it.
fn io(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(format!("embedded store: {e}"))
}

/// Settings of the embedded store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddedConfig {
    /// Requests waiting for the writer at most (callers wait beyond).
    pub queue: usize,
    /// Most requests in one commit.
    pub max_group: usize,
    /// redb's page cache.
    pub cache_bytes: usize,
    /// New ids kept in memory before they are folded into the on-disk id
    /// index in one sorted batch (about 70 bytes of memory each).
    pub fold_ids: usize,
    /// Users with something held known in memory (about 60 bytes each), so
    /// a user coming online with nothing held is answered without a read
    /// (policy when full: read for everyone until nothing is held).
    pub held_users: usize,
}

impl Default for EmbeddedConfig {
    fn default() -> Self {
        EmbeddedConfig {
            queue: 4096,
            max_group: 1024,
            cache_bytes: 64 * 1024 * 1024,
            fold_ids: 200_000,
            held_users: 200_000,
        }
    }
}

/// What the store keeps in memory, shared by the writer and readers: the
/// ids not folded yet, the claims, and the users with something held.
#[derive(Debug)]
struct Memory {
    recent: RecentIds,
    claims: Mutex<Claims>,
    held: HeldUsers,
}

impl Memory {
    fn new(config: &EmbeddedConfig) -> Memory {
        Memory {
            recent: RecentIds::default(),
            claims: Mutex::new(Claims::default()),
            held: HeldUsers::new(config.held_users.max(1)),
        }
    }
}

/// The embedded store. Cheap to share (`Arc`).
pub struct EmbeddedStore {
    db: Arc<Database>,
    mem: Arc<Memory>,
    requests: mpsc::Sender<Request>,
    path: PathBuf,
    writer: Option<JoinHandle<()>>,
    /// [`Store::tenants_since`], from `meta`.
    tenants_since: Millis,
}

impl std::fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Drop for EmbeddedStore {
    fn drop(&mut self) {
        // Closing the queue ends the writer once it has committed what it
        // holds.
        let (closed, _) = mpsc::channel(1);
        self.requests = closed;
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

impl EmbeddedStore {
    /// Open (or create) the store in directory `dir` with the defaults.
    pub fn open(dir: &Path) -> Result<EmbeddedStore, StoreError> {
        EmbeddedStore::open_with(dir, EmbeddedConfig::default())
    }

    /// Open (or create) the store in directory `dir`. Fails with a clear
    /// error when the directory cannot be created, the file cannot be
    /// opened, or another process has it open.
    pub fn open_with(dir: &Path, config: EmbeddedConfig) -> Result<EmbeddedStore, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| {
            StoreError::Unavailable(format!("cannot create {}: {e}", dir.display()))
        })?;
        let path = dir.join("store.redb");
        let db = Database::builder()
            .set_cache_size(config.cache_bytes)
            .create(&path)
            .map_err(|e| match e {
                redb::DatabaseError::DatabaseAlreadyOpen => StoreError::Unavailable(format!(
                    "{} is open in another process (one Herald per data directory)",
                    path.display()
                )),
                other => {
                    StoreError::Unavailable(format!("cannot open {}: {other}", path.display()))
                }
            })?;
        // Check the format, and create every table, so reads never find one
        // missing.
        let mem = Arc::new(Memory::new(&config));
        let txn = db.begin_write().map_err(io)?;
        check_format(&txn, &path)?;
        let tenants_since = tenants_since(&txn)?;
        let unleased = {
            let mut t = Tables::open(&txn, &mem)?;
            let n = t.unlease()?;
            t.flush_counters()?;
            n
        };
        txn.commit().map_err(io)?;
        if unleased > 0 {
            tracing::info!(
                entries = unleased,
                "entries left firing by an earlier Herald are scheduled again, due when their lease runs out"
            );
        }
        read_recent(&db, &mem.recent)?;
        {
            let txn = db.begin_read().map_err(io)?;
            mem.held.load(&txn.open_table(HELD).map_err(io)?)?;
        }
        let db = Arc::new(db);
        let (requests, rx) = mpsc::channel(config.queue.max(1));
        let writer = {
            let db = Arc::clone(&db);
            let mem = Arc::clone(&mem);
            let limits = Limits {
                max_group: config.max_group.max(1),
                fold_ids: config.fold_ids.max(1),
            };
            std::thread::Builder::new()
                .name("herald-store-writer".into())
                .spawn(move || run_writer(&db, &mem, rx, limits))
                .map_err(|e| {
                    StoreError::Unavailable(format!("cannot start the store writer: {e}"))
                })?
        };
        Ok(EmbeddedStore {
            db,
            mem,
            requests,
            path,
            writer: Some(writer),
            tenants_since,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> Request,
    ) -> Result<T, StoreError> {
        let (tx, rx) = oneshot::channel();
        self.requests
            .send(make(tx))
            .await
            .map_err(|_| StoreError::Unavailable("the store writer has stopped".into()))?;
        rx.await
            .map_err(|_| StoreError::Unavailable("the store writer has stopped".into()))?
    }

    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&redb::ReadTransaction) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let db = Arc::clone(&self.db);
        blocking(move || f(&db.begin_read().map_err(io)?)).await
    }

    /// A read that needs the claims: it holds their lock, so its snapshot
    /// and the claims agree (the writer holds the lock across each commit
    /// and the removal of the claims it settled).
    async fn read_claimed<T: Send + 'static>(
        &self,
        f: impl FnOnce(&redb::ReadTransaction, &Claims) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let db = Arc::clone(&self.db);
        let mem = Arc::clone(&self.mem);
        blocking(move || {
            let claims = mem.claims.lock();
            f(&db.begin_read().map_err(io)?, &claims)
        })
        .await
    }

    /// A read that looks ids up: it holds the recent ids' gate, so no fold
    /// drops an id from memory that its snapshot does not have on disk, and
    /// the claims' lock (see [`EmbeddedStore::read_claimed`]).
    async fn read_by_id<T: Send + 'static>(
        &self,
        f: impl FnOnce(&StatusTables<'_>) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let db = Arc::clone(&self.db);
        let mem = Arc::clone(&self.mem);
        blocking(move || {
            let _gate = mem.recent.gate();
            let claims = mem.claims.lock();
            let txn = db.begin_read().map_err(io)?;
            f(&StatusTables::open(&txn, &mem.recent, &claims)?)
        })
        .await
    }
}

/// Run a read on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StoreError::Unavailable(format!("store read task failed: {e}")))?
}

/// Know again the ids not folded yet: every record from `meta["folded"]`
/// on carries its id.
fn read_recent(db: &Database, recent: &RecentIds) -> Result<(), StoreError> {
    let txn = db.begin_read().map_err(io)?;
    let meta = txn.open_table(META).map_err(io)?;
    let folded = meta.get(FOLDED).map_err(io)?.map_or(0, |v| v.value());
    let records = txn.open_table(RECORDS).map_err(io)?;
    for kv in records.range(folded..).map_err(io)? {
        let (seq, raw) = kv.map_err(io)?;
        let id = stored_id(raw.value()).ok_or_else(|| StoreError::Corrupt {
            id: format!("#{}", seq.value()),
            reason: "its id cannot be read".into(),
        })?;
        recent.insert(id.as_bytes(), seq.value());
    }
    Ok(())
}

/// Refuse a file of another layout; stamp a new one, or one of a format
/// this code reads as it is, with [`FORMAT`].
/// `meta["tenants_since"]`, written now by the first open that keeps
/// tenants' ids apart.
fn tenants_since(txn: &redb::WriteTransaction) -> Result<Millis, StoreError> {
    use redb::ReadableTable;
    let mut meta = txn.open_table(META).map_err(io)?;
    let kept = meta.get(TENANTS_SINCE).map_err(io)?.map(|v| v.value());
    match kept {
        Some(since) => Ok(since),
        None => {
            let now = crate::schedule::timing::now_ms();
            meta.insert(TENANTS_SINCE, now).map_err(io)?;
            Ok(now)
        }
    }
}

fn check_format(txn: &redb::WriteTransaction, path: &Path) -> Result<(), StoreError> {
    use redb::{ReadableTable, TableHandle};
    let mut meta = txn.open_table(META).map_err(io)?;
    let format = meta.get(FORMAT_KEY).map_err(io)?.map(|v| v.value());
    let format = match format {
        // Format 3 only added tables (the callback states' `retry` and
        // `attempts`), which opening creates; format 4 only added `calls`
        // to the entry header, and its values say which header they have
        // (`layout::HEADER_4`): a file of format 2 or 3 is read as it is,
        // each entry rewritten in format 4 when it next changes. Stamped 4,
        // an older Herald refuses it with its own clear error rather than
        // meet states or headers it does not know.
        // Format 5 lists every entry under no topic too: a file of an
        // older format gets those keys now, from its own list keys.
        Some(old @ (FORMAT_2 | FORMAT_3 | FORMAT_4)) => {
            let listed = list_under_no_topic(txn)?;
            meta.insert(FORMAT_KEY, FORMAT).map_err(io)?;
            tracing::info!(
                path = %path.display(),
                from = old,
                to = FORMAT,
                listed,
                "delayed store upgraded in place (callback states, callback attempts counted, every entry listed under no topic)"
            );
            FORMAT
        }
        Some(f) => f,
        None if txn
            .list_tables()
            .map_err(io)?
            .any(|t| t.name() == FORMAT_1_TABLE) =>
        {
            1
        }
        None => {
            meta.insert(FORMAT_KEY, FORMAT).map_err(io)?;
            FORMAT
        }
    };
    if format != FORMAT {
        return Err(StoreError::Unavailable(format!(
            "{} has store format {format}; this Herald reads formats {FORMAT_2} to {FORMAT} \
             (deliver or cancel what is pending with the Herald that wrote it, \
             then remove the file)",
            path.display()
        )));
    }
    Ok(())
}

/// Give every list key under a topic its twin under no topic (format 5),
/// a page of keys at a time; how many were added.
fn list_under_no_topic(txn: &redb::WriteTransaction) -> Result<u64, StoreError> {
    use redb::ReadableTable;
    const PAGE: usize = 10_000;
    let mut list = txn.open_table(LIST).map_err(io)?;
    let mut from: Vec<u8> = vec![1];
    let mut added = 0u64;
    loop {
        let mut twins = Vec::with_capacity(PAGE);
        let mut last = None;
        for kv in list.range(from.as_slice()..).map_err(io)?.take(PAGE) {
            let (k, _) = kv.map_err(io)?;
            let key = k.value();
            if let Some(twin) = layout::all_topics_key(key) {
                twins.push(twin.to_vec());
            }
            last = Some(key.to_vec());
        }
        for twin in &twins {
            list.insert(twin.as_slice(), ()).map_err(io)?;
        }
        added += twins.len() as u64;
        match last {
            Some(mut key) => {
                key.push(0);
                from = key;
            }
            None => return Ok(added),
        }
    }
}

impl Store for EmbeddedStore {
    fn insert(&self, entries: Vec<Entry>, now: Millis) -> StoreFuture<'_, Vec<Insert>> {
        Box::pin(self.ask(move |tx| Request::Insert(entries, now, tx)))
    }

    fn tenants_since(&self) -> Millis {
        self.tenants_since
    }

    fn claim_due(&self, now: Millis, limit: usize, lease_ms: u64) -> StoreFuture<'_, Vec<Entry>> {
        Box::pin(self.ask(move |tx| Request::ClaimDue(now, limit, lease_ms, tx)))
    }

    fn upcoming(
        &self,
        from: Millis,
        until: Millis,
        limit: usize,
    ) -> StoreFuture<'_, Vec<(Millis, String)>> {
        Box::pin(
            self.read_claimed(move |txn, claims| read::upcoming(txn, claims, from, until, limit)),
        )
    }

    fn delivered(&self, ids: Vec<String>, now: Millis) -> StoreFuture<'_, ()> {
        Box::pin(self.ask(move |tx| Request::Delivered(ids, now, tx)))
    }

    fn hold(&self, ids: Vec<String>, expires_ms: Millis, now: Millis) -> StoreFuture<'_, ()> {
        Box::pin(self.ask(move |tx| Request::Hold(ids, expires_ms, now, tx)))
    }

    fn claim_held(
        &self,
        user: &str,
        now: Millis,
        limit: usize,
        lease_ms: u64,
    ) -> StoreFuture<'_, Vec<Entry>> {
        // Most users coming online have nothing held: answer that from
        // memory, or (past its bound) from a read, without a commit.
        let known = self.mem.held.may_hold(user);
        if known == Some(false) {
            return Box::pin(std::future::ready(Ok(Vec::new())));
        }
        let user = user.to_owned();
        Box::pin(async move {
            if known.is_none() {
                let probe = user.clone();
                let any = self.read(move |txn| read::any_held(txn, &probe)).await?;
                if !any {
                    return Ok(Vec::new());
                }
            }
            self.ask(move |tx| Request::ClaimHeld(user, now, limit, lease_ms, tx))
                .await
        })
    }

    fn release(&self, ids: Vec<String>, retry_ms: Millis, now: Millis) -> StoreFuture<'_, ()> {
        Box::pin(self.ask(move |tx| Request::Release(ids, retry_ms, now, tx)))
    }

    fn cancel(&self, id: &str, now: Millis) -> StoreFuture<'_, Cancel> {
        let id = id.to_owned();
        Box::pin(self.ask(move |tx| Request::Cancel(id, now, tx)))
    }

    fn status(&self, id: &str) -> StoreFuture<'_, Option<Status>> {
        let id = id.to_owned();
        Box::pin(self.read_by_id(move |tables| tables.status(&id)))
    }

    fn list(
        &self,
        filter: ListFilter,
        after: Option<Cursor>,
        limit: usize,
    ) -> StoreFuture<'_, Page> {
        Box::pin(self.read_by_id(move |tables| read::list(tables, &filter, after.as_ref(), limit)))
    }

    fn expire(&self, now: Millis, limit: usize) -> StoreFuture<'_, Vec<Option<String>>> {
        Box::pin(self.ask(move |tx| Request::Expire(now, limit, tx)))
    }

    fn purge(&self, before: Millis, limit: usize) -> StoreFuture<'_, u64> {
        Box::pin(self.ask(move |tx| Request::Purge(before, limit, tx)))
    }

    fn counts(&self, now: Millis, bounds: Vec<u64>) -> StoreFuture<'_, Counts> {
        Box::pin(self.read_claimed(move |txn, claims| read::counts(txn, claims, now, &bounds)))
    }

    fn mark_step(&self, ids: Vec<String>, step: Step, now: Millis) -> StoreFuture<'_, ()> {
        Box::pin(self.ask(move |tx| Request::MarkStep(ids, step, now, tx)))
    }

    fn retry_wait(&self, items: Vec<RetryWait>, now: Millis) -> StoreFuture<'_, Settled> {
        Box::pin(self.ask(move |tx| Request::RetryWait(items, now, tx)))
    }

    fn finish(&self, items: Vec<Finish>, now: Millis) -> StoreFuture<'_, Settled> {
        Box::pin(self.ask(move |tx| Request::Finish(items, now, tx)))
    }

    fn attempts(&self, id: &str) -> StoreFuture<'_, Vec<Attempt>> {
        let id = id.to_owned();
        Box::pin(self.read_by_id(move |tables| tables.attempts(&id)))
    }

    fn replay(&self, id: &str, now: Millis) -> StoreFuture<'_, Replay> {
        let id = id.to_owned();
        Box::pin(self.ask(move |tx| Request::Replay(id, now, tx)))
    }

    fn put_topic(
        &self,
        name: &str,
        settings: bytes::Bytes,
        max_topics: usize,
        now: Millis,
    ) -> StoreFuture<'_, PutTopic> {
        let name = name.to_owned();
        Box::pin(self.ask(move |tx| Request::PutTopic {
            name,
            settings,
            max_topics,
            now,
            tx,
        }))
    }

    fn topic(&self, name: &str) -> StoreFuture<'_, Option<StoredTopic>> {
        let name = name.to_owned();
        Box::pin(self.read(move |txn| topics::get(txn, &name)))
    }

    fn delete_topic(&self, name: &str) -> StoreFuture<'_, bool> {
        let name = name.to_owned();
        Box::pin(self.ask(move |tx| Request::DeleteTopic(name, tx)))
    }

    fn topics(&self, after: Option<String>, limit: usize) -> StoreFuture<'_, Vec<StoredTopic>> {
        Box::pin(self.read(move |txn| topics::page(txn, after.as_deref(), limit)))
    }

    fn topics_version(&self) -> StoreFuture<'_, u64> {
        Box::pin(self.read(topics::version))
    }
}
