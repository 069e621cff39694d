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
//! yet folded into the id index by [`EmbeddedConfig::fold_ids`]).
//!
//! Why redb: see `docs/delayed-store.md`.

mod claims;
mod layout;
mod recent;
mod write;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;
use redb::Database;
use tokio::sync::{mpsc, oneshot};

use self::claims::Claims;
use self::layout::*;
use self::recent::RecentIds;
use self::write::{Tables, io};
use super::{Cancel, Counts, Cursor, Insert, ListFilter, Page, Store, StoreError, StoreFuture};
use crate::schedule::entry::{Entry, Millis, State, Status};

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
}

impl Default for EmbeddedConfig {
    fn default() -> Self {
        EmbeddedConfig {
            queue: 4096,
            max_group: 1024,
            cache_bytes: 64 * 1024 * 1024,
            fold_ids: 200_000,
        }
    }
}

/// One change, with where its answer goes.
enum Request {
    Insert(
        Vec<Entry>,
        Millis,
        oneshot::Sender<Result<Vec<Insert>, StoreError>>,
    ),
    ClaimDue(
        Millis,
        usize,
        u64,
        oneshot::Sender<Result<Vec<Entry>, StoreError>>,
    ),
    ClaimHeld(
        String,
        Millis,
        usize,
        u64,
        oneshot::Sender<Result<Vec<Entry>, StoreError>>,
    ),
    Delivered(Vec<String>, Millis, oneshot::Sender<Result<(), StoreError>>),
    Hold(
        Vec<String>,
        Millis,
        Millis,
        oneshot::Sender<Result<(), StoreError>>,
    ),
    Release(
        Vec<String>,
        Millis,
        Millis,
        oneshot::Sender<Result<(), StoreError>>,
    ),
    Cancel(String, Millis, oneshot::Sender<Result<Cancel, StoreError>>),
    Expire(Millis, usize, oneshot::Sender<Result<u64, StoreError>>),
    Purge(Millis, usize, oneshot::Sender<Result<u64, StoreError>>),
}

/// The answer of a request, held until its transaction commits.
enum Answer {
    Inserts(
        Vec<Insert>,
        oneshot::Sender<Result<Vec<Insert>, StoreError>>,
    ),
    Entries(Vec<Entry>, oneshot::Sender<Result<Vec<Entry>, StoreError>>),
    Unit(oneshot::Sender<Result<(), StoreError>>),
    Cancel(Cancel, oneshot::Sender<Result<Cancel, StoreError>>),
    Count(u64, oneshot::Sender<Result<u64, StoreError>>),
}

impl Answer {
    fn send(self) {
        match self {
            Answer::Inserts(v, tx) => drop(tx.send(Ok(v))),
            Answer::Entries(v, tx) => drop(tx.send(Ok(v))),
            Answer::Unit(tx) => drop(tx.send(Ok(()))),
            Answer::Cancel(v, tx) => drop(tx.send(Ok(v))),
            Answer::Count(v, tx) => drop(tx.send(Ok(v))),
        }
    }

    fn fail(self, e: StoreError) {
        match self {
            Answer::Inserts(_, tx) => drop(tx.send(Err(e))),
            Answer::Entries(_, tx) => drop(tx.send(Err(e))),
            Answer::Unit(tx) => drop(tx.send(Err(e))),
            Answer::Cancel(_, tx) => drop(tx.send(Err(e))),
            Answer::Count(_, tx) => drop(tx.send(Err(e))),
        }
    }
}

/// What the store keeps in memory, shared by the writer and readers: the
/// ids not folded yet, and the claims.
#[derive(Debug, Default)]
struct Memory {
    recent: RecentIds,
    claims: Mutex<Claims>,
}

/// The embedded store. Cheap to share (`Arc`).
pub struct EmbeddedStore {
    db: Arc<Database>,
    mem: Arc<Memory>,
    requests: mpsc::Sender<Request>,
    path: PathBuf,
    writer: Option<JoinHandle<()>>,
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
        let mem = Arc::new(Memory::default());
        let txn = db.begin_write().map_err(io)?;
        check_format(&txn, &path)?;
        let unleased = {
            let mut t = Tables::open(&txn, &mem.recent, &mem.claims)?;
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

/// Most keys one list page reads beyond its items: a page of a rare
/// state listed among many entries of the other (firing among scheduled)
/// ends there, with a cursor to go on from.
const LIST_SCAN: usize = 10_000;

/// The writer's bounds.
#[derive(Debug, Clone, Copy)]
struct Limits {
    max_group: usize,
    fold_ids: usize,
}

/// The writer thread: group commit until the queue closes, folding the
/// recent ids whenever there are enough of them.
fn run_writer(db: &Database, mem: &Memory, mut rx: mpsc::Receiver<Request>, limits: Limits) {
    while let Some(first) = rx.blocking_recv() {
        let mut group = vec![first];
        while group.len() < limits.max_group {
            match rx.try_recv() {
                Ok(r) => group.push(r),
                Err(_) => break,
            }
        }
        commit_group(db, mem, group);
        if mem.recent.len() >= limits.fold_ids {
            fold(db, mem);
        }
    }
}

/// Fold the recent ids into `ids`, in a commit of their own. If it fails,
/// they stay in memory and the next group tries again.
fn fold(db: &Database, mem: &Memory) {
    let recent = &mem.recent;
    let started = std::time::Instant::now();
    let n = recent.len();
    let outcome = (|| -> Result<u64, StoreError> {
        let txn = db.begin_write().map_err(io)?;
        let folded = Tables::open(&txn, recent, &mem.claims)?.fold()?;
        txn.commit().map_err(io)?;
        Ok(folded)
    })();
    match outcome {
        Ok(folded) => {
            recent.folded(folded);
            tracing::debug!(
                ids = n,
                ms = started.elapsed().as_millis() as u64,
                "folded recent ids into the id index"
            );
        }
        Err(e) => {
            tracing::error!(error = %e, ids = n, "folding recent ids failed; they stay in memory")
        }
    }
}

fn commit_group(db: &Database, mem: &Memory, group: Vec<Request>) {
    let recent = &mem.recent;
    let mut answers = Vec::with_capacity(group.len());
    let mut added = Vec::new();
    let mut removed = Vec::new();
    let mut settled = Vec::new();
    let outcome = (|| -> Result<(), StoreError> {
        let txn = db.begin_write().map_err(io)?;
        let wrote = {
            let mut t = Tables::open(&txn, recent, &mem.claims)?;
            // Claims first, answered at once: they write nothing (claims
            // live in memory) and, applied before anything else of the
            // group, see only what is committed. So a claim waits for no
            // commit, only for the group ahead of it, and the firer is not
            // held up behind a large batch being marked delivered.
            let (claims, others): (Vec<Request>, Vec<Request>) = group
                .into_iter()
                .partition(|r| matches!(r, Request::ClaimDue(..) | Request::ClaimHeld(..)));
            for request in claims {
                if let Some(a) = apply(&mut t, request) {
                    a.send();
                }
            }
            // A request that fails is answered with its error at once;
            // what it wrote before failing is committed with the others
            // (inserts are idempotent and claims leased, so a caller that
            // retries finds duplicates, and a claim nobody got comes back
            // when its lease runs out). A failed commit fails them all.
            for request in others {
                if let Some(a) = apply(&mut t, request) {
                    answers.push(a);
                }
            }
            added = std::mem::take(&mut t.added);
            removed = std::mem::take(&mut t.removed);
            settled = std::mem::take(&mut t.settled);
            t.flush_counters()?;
            t.wrote
        };
        if !wrote {
            // Claims alone: nothing to commit (they live in memory).
            return txn.abort().map_err(io);
        }
        // Readers hold the claims' lock while they read: the commit and
        // the end of the claims it settled are one step for them.
        let mut claims = mem.claims.lock();
        txn.commit().map_err(io)?;
        for seq in settled.drain(..) {
            claims.remove(seq);
        }
        Ok(())
    })();
    match outcome {
        Ok(()) => {
            recent.remove(&removed);
            answers.into_iter().for_each(Answer::send);
        }
        Err(e) => {
            recent.remove(&added);
            tracing::error!(error = %e, "delayed store commit failed; nothing of it was applied");
            for a in answers {
                a.fail(e.clone());
            }
        }
    }
}

/// Apply one request: its answer, to send once the transaction commits;
/// `None` when it failed (and was answered with the error at once).
fn apply(t: &mut Tables<'_>, request: Request) -> Option<Answer> {
    match request {
        Request::Insert(entries, now, tx) => reply(t.insert(entries, now), tx, Answer::Inserts),
        Request::ClaimDue(now, limit, lease, tx) => {
            reply(t.claim_due(now, limit, lease), tx, Answer::Entries)
        }
        Request::ClaimHeld(user, now, limit, lease, tx) => {
            reply(t.claim_held(&user, now, limit, lease), tx, Answer::Entries)
        }
        Request::Delivered(ids, now, tx) => reply(t.delivered(ids, now), tx, unit),
        Request::Hold(ids, expires, now, tx) => reply(t.hold(ids, expires, now), tx, unit),
        Request::Release(ids, at, now, tx) => reply(t.release(ids, at, now), tx, unit),
        Request::Cancel(id, now, tx) => reply(t.cancel(&id, now), tx, Answer::Cancel),
        Request::Expire(now, limit, tx) => reply(t.expire(now, limit), tx, Answer::Count),
        Request::Purge(before, limit, tx) => reply(t.purge(before, limit), tx, Answer::Count),
    }
}

fn unit((): (), tx: oneshot::Sender<Result<(), StoreError>>) -> Answer {
    Answer::Unit(tx)
}

fn reply<T>(
    r: Result<T, StoreError>,
    tx: oneshot::Sender<Result<T, StoreError>>,
    wrap: impl FnOnce(T, oneshot::Sender<Result<T, StoreError>>) -> Answer,
) -> Option<Answer> {
    match r {
        Ok(v) => Some(wrap(v, tx)),
        Err(e) => {
            let _ = tx.send(Err(e));
            None
        }
    }
}

/// Refuse a file of another layout; stamp a new one with [`FORMAT`].
fn check_format(txn: &redb::WriteTransaction, path: &Path) -> Result<(), StoreError> {
    use redb::{ReadableTable, TableHandle};
    let mut meta = txn.open_table(META).map_err(io)?;
    let format = meta.get(FORMAT_KEY).map_err(io)?.map(|v| v.value());
    let format = match format {
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
            "{} has store format {format}; this Herald reads format {FORMAT} \
             (deliver or cancel what is pending with the Herald that wrote it, \
             then remove the file)",
            path.display()
        )));
    }
    Ok(())
}

/// What a read by id needs: the snapshot's tables and the recent ids.
struct StatusTables<'r> {
    ids: redb::ReadOnlyTable<&'static [u8], u64>,
    records: redb::ReadOnlyTable<u64, &'static [u8]>,
    list: redb::ReadOnlyTable<&'static [u8], ()>,
    recent: &'r RecentIds,
    claims: &'r Claims,
}

impl<'r> StatusTables<'r> {
    fn open(
        txn: &redb::ReadTransaction,
        recent: &'r RecentIds,
        claims: &'r Claims,
    ) -> Result<Self, StoreError> {
        Ok(StatusTables {
            ids: txn.open_table(IDS).map_err(io)?,
            records: txn.open_table(RECORDS).map_err(io)?,
            list: txn.open_table(LIST).map_err(io)?,
            recent,
            claims,
        })
    }

    fn seq_of(&self, id: &str) -> Result<Option<u64>, StoreError> {
        self.recent.seq_of(&self.ids, id)
    }

    fn status(&self, id: &str) -> Result<Option<Status>, StoreError> {
        match self.seq_of(id)? {
            Some(seq) => self.status_at(id, seq),
            None => Ok(None),
        }
    }

    /// The status of entry `id` at `seq`, firing if it is claimed.
    fn status_at(&self, id: &str, seq: u64) -> Result<Option<Status>, StoreError> {
        match self.records.get(seq).map_err(io)? {
            Some(v) => {
                Stored::decode(id, v.value()).map(|s| Some(self.claims.status(seq, s.status(id))))
            }
            None => Ok(None),
        }
    }
}

/// Scheduled entries with fire time before `t`: whole minutes from the
/// histogram, the partial minute from the index.
fn scheduled_before(
    hist: &[(u64, u64)],
    sched: &redb::ReadOnlyTable<&'static [u8], ()>,
    t: Millis,
) -> Result<u64, StoreError> {
    let minute = t / MINUTE;
    let whole: u64 = hist
        .iter()
        .take_while(|(m, _)| *m < minute)
        .map(|(_, n)| n)
        .sum();
    let from = (minute * MINUTE).to_be_bytes();
    let to = t.to_be_bytes();
    let partial = sched
        .range(from.as_slice()..to.as_slice())
        .map_err(io)?
        .count() as u64;
    Ok(whole + partial)
}

impl Store for EmbeddedStore {
    fn insert(&self, entries: Vec<Entry>, now: Millis) -> StoreFuture<'_, Vec<Insert>> {
        Box::pin(self.ask(move |tx| Request::Insert(entries, now, tx)))
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
        Box::pin(self.read_claimed(move |txn, claims| {
            if from > until {
                return Ok(Vec::new());
            }
            let start = from.to_be_bytes();
            let bound = time_bound(until);
            // Claimed entries come at their lease's end.
            let mut out: Vec<(Millis, String)> = claims
                .iter()
                .filter(|c| (from..=until).contains(&c.deadline))
                .map(|c| (c.deadline, c.id.clone()))
                .collect();
            let sched = txn.open_table(SCHED).map_err(io)?;
            let mut unclaimed = 0;
            for kv in sched
                .range(start.as_slice()..bound.as_slice())
                .map_err(io)?
            {
                if unclaimed == limit {
                    break;
                }
                let (k, _) = kv.map_err(io)?;
                if let Some((t, seq, id)) = split_queue_key(k.value())
                    && claims.get(seq).is_none()
                {
                    out.push((t, id.to_owned()));
                    unclaimed += 1;
                }
            }
            out.sort();
            out.truncate(limit);
            Ok(out)
        }))
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
        let user = user.to_owned();
        Box::pin(async move {
            // Most users coming online have nothing held: answer that from
            // a read, without a commit.
            let probe = user.clone();
            let any = self
                .read(move |txn| {
                    let held = txn.open_table(HELD).map_err(io)?;
                    let prefix = held_prefix(&probe);
                    let end = prefix_end(&prefix);
                    Ok(held
                        .range(prefix.as_slice()..end.as_slice())
                        .map_err(io)?
                        .next()
                        .is_some())
                })
                .await?;
            if !any {
                return Ok(Vec::new());
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
        Box::pin(self.read_by_id(move |tables| {
            let list = &tables.list;
            let topic = filter.topic.as_deref();
            // Firing entries are listed under scheduled: a page of either
            // reads those keys and keeps the entries in the state asked.
            let keyed = list_state(filter.state);
            let prefix = list_prefix(topic, keyed);
            let end = prefix_end(&prefix);
            let start = match &after {
                // Just after the cursor's own key; if the cursor's entry
                // has been purged since, from the start of its due time
                // (a page may then repeat entries, but never skips one).
                Some(c) => match tables.seq_of(&c.id)? {
                    Some(seq) => {
                        let mut k = list_key(topic, keyed, c.due_ms, seq, &c.id);
                        k.push(0);
                        k
                    }
                    None => {
                        let mut k = prefix.clone();
                        k.extend_from_slice(&c.due_ms.to_be_bytes());
                        k
                    }
                },
                None => prefix.clone(),
            };
            let mut items: Vec<Status> = Vec::new();
            // A page ends at `limit` items, or after LIST_SCAN keys (a page
            // of firing entries among many scheduled ones); when more keys
            // follow, its cursor is the last key it read.
            let mut stop: Option<Cursor> = None;
            let mut last: Option<Cursor> = None;
            let mut scanned = 0;
            for kv in list.range(start.as_slice()..end.as_slice()).map_err(io)? {
                let (k, _) = kv.map_err(io)?;
                let Some((due, seq, id)) = k.value().get(prefix.len()..).and_then(split_queue_key)
                else {
                    continue;
                };
                if items.len() == limit || scanned == LIST_SCAN {
                    stop = last.take();
                    break;
                }
                scanned += 1;
                if let Some(s) = tables.status_at(id, seq)?
                    && s.state == filter.state
                {
                    items.push(s);
                }
                last = Some(Cursor {
                    due_ms: due,
                    id: id.to_owned(),
                });
            }
            Ok(Page { items, next: stop })
        }))
    }

    fn expire(&self, now: Millis, limit: usize) -> StoreFuture<'_, u64> {
        Box::pin(self.ask(move |tx| Request::Expire(now, limit, tx)))
    }

    fn purge(&self, before: Millis, limit: usize) -> StoreFuture<'_, u64> {
        Box::pin(self.ask(move |tx| Request::Purge(before, limit, tx)))
    }

    fn counts(&self, now: Millis, bounds: Vec<u64>) -> StoreFuture<'_, Counts> {
        Box::pin(self.read_claimed(move |txn, claims| {
            let counts = txn.open_table(COUNTS).map_err(io)?;
            let get = |s: State| -> Result<u64, StoreError> {
                Ok(counts.get(s.code()).map_err(io)?.map_or(0, |v| v.value()))
            };
            let total = get(State::Scheduled)?;
            let sched = txn.open_table(SCHED).map_err(io)?;
            let hist_table = txn.open_table(HIST).map_err(io)?;
            let last_minute = bounds.last().map_or(0, |b| now.saturating_add(*b) / MINUTE);
            let mut hist = Vec::new();
            for kv in hist_table.range(..=last_minute).map_err(io)? {
                let (m, n) = kv.map_err(io)?;
                hist.push((m.value(), n.value()));
            }
            let mut scheduled = Vec::with_capacity(bounds.len() + 1);
            let mut below = 0;
            for b in &bounds {
                let upto = scheduled_before(&hist, &sched, now.saturating_add(*b))?;
                scheduled.push(upto.saturating_sub(below));
                below = upto;
            }
            scheduled.push(total.saturating_sub(below));
            // Claimed entries are still scheduled (or held) in the tables:
            // count them as firing instead.
            let mut claimed_held = 0;
            for c in claims.iter() {
                if c.from == State::Held {
                    claimed_held += 1;
                    continue;
                }
                let bucket = bounds
                    .iter()
                    .position(|b| c.fire < now.saturating_add(*b))
                    .unwrap_or(bounds.len());
                scheduled[bucket] = scheduled[bucket].saturating_sub(1);
            }
            Ok(Counts {
                scheduled,
                firing: get(State::Firing)?.saturating_add(claims.len() as u64),
                held: get(State::Held)?.saturating_sub(claimed_held),
            })
        }))
    }
}
