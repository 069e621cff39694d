//! The Redis backend of [`Store`]: one Redis server or a Redis Cluster,
//! shared by every distributed router. Operator notes (persistence,
//! measurements): `docs/redis-store.md`.
//!
//! # Layout
//! - [`config`](RedisConfig): where Redis is, the key prefix, the shard
//!   count, timeouts and bounds.
//! - `conn`: the connection (single server with reconnects, or cluster).
//! - `layout`: key names, the shard of an id, an entry's stored value.
//! - `lua/*.lua`: one script per state transition, each atomic; `prelude.lua`
//!   (prepended to each) documents the keys and the header.
//! - `insert`, `claim`, `held` (hold, `claim_held` and the per-user hint),
//!   `cancel`, `read` (status, list, counts), `sweep` (expire, purge),
//!   `callback` (step, retry_wait, finish, the attempt log, replay): the
//!   operations.
//! - `merge`: the earliest items across shards, fetched page by page.
//! - `reply`: decoding script replies.
//! - `persistence`: the AOF/fsync/eviction check made at start-up.
//! - presence (who is online, as the edges report it) lives beside the rest
//!   of presence: `crate::presence::redis`, on this store's connection.
//!
//! # Keys
//! Entries are spread over `shards` shards by a stable hash of their id
//! (FNV-1a 64 mod shards). Every key of shard 7 is `<prefix>:{7}:...`: the
//! hash tag puts the whole shard in one hash slot, so every script touches
//! one slot and runs unchanged on a Redis Cluster.
//!
//! ```text
//! <p>:{s}:e:<id>               entry: header (state, attempts, updated,
//!                              deadline, due, accepted, topic, user, calls)
//!                              then the record; header only once final
//! <p>:{s}:due                  ZSET fire time -> id          scheduled, retry_wait
//! <p>:{s}:rw                   ZSET fire time -> id          retry_wait (counts)
//! <p>:{s}:lease                ZSET lease_until -> id        firing
//! <p>:{s}:hx                   ZSET hold expiry -> id        held
//! <p>:{s}:fin                  ZSET updated -> id            final (purge)
//! <p>:{s}:a:<id>               LIST attempt records          the attempt log
//! <p>:{s}:l:<state>[:<topic>]  ZSET 0 -> due(8B BE)++id      list, (due,id) order
//! <p>:{s}:h:<user>             ZSET 0 -> due(8B BE)++id      held for user
//! <p>:{s}:ht:<user>            SET of hold tokens applied here (`held`)
//! <p>:{u}:hint:<user>          HASH "<s>:<token>" -> 1, in the user's shard u
//! <p>:meta                     HASH shards, layout (checked at connect)
//! ```
//!
//! # Operations
//! Every state change is a Lua script (EVALSHA; redis-rs loads it again
//! when Redis answers NOSCRIPT, e.g. after a restart) over one shard, so it
//! is atomic: a cancel and a claim of the same entry are serialized by
//! Redis. Batches (insert, delivered, hold, release) make one script call
//! per shard touched (split past `max_entries_per_script`), all in flight
//! at once on the multiplexed connection.
//!
//! Claims take the earliest (fire time, id) across shards, so several
//! routers share the work without firing an entry twice (`claim`). A
//! user's held entries are found through a hint in the user's own shard,
//! so a user coming online costs one request when nothing is held for
//! them, not one per shard (`held`, with the argument why no held entry is
//! ever lost).

mod callback;
mod cancel;
mod claim;
mod config;
pub(crate) mod conn;
mod group;
mod held;
mod ids;
mod insert;
mod layout;
mod merge;
mod metrics;
mod persistence;
mod read;
mod reply;
mod stats;
mod sweep;
mod topics;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use futures_util::future::try_join_all;
use redis::{Script, Value};

pub use claim::MAX_CLAIM_ROUNDS;
pub use config::{MAX_SHARDS, RedisConfig, Topology};
pub use metrics::RedisStoreMetrics;
pub use persistence::{Durability, Eviction, NodePersistence, Persistence};
pub use stats::{FORGET_MS, MAX_PARTS, Put, RedisStatsBook};

use self::conn::{Conn, unavailable};
use self::group::GroupCommit;
use self::insert::Inserter;
use self::layout::{Keys, score};
use self::reply::{num, unexpected};
use super::{
    Cancel, Claimed, Counts, Cursor, Finish, IdClaim, Insert, ListFilter, Page, PutTopic, Replay,
    RetryWait, Settled, Store, StoreError, StoreFuture, StoredTopic,
};
use crate::callback::attempt::Attempt;
use crate::schedule::entry::{Entry, Millis, Status, Step};

macro_rules! script {
    ($file:literal) => {
        Script::new(concat!(
            include_str!("redis/lua/prelude.lua"),
            include_str!(concat!("redis/lua/", $file))
        ))
    };
}

/// The scripts, each the prelude plus one operation.
struct Scripts {
    claim: Script,
    claim_held: Script,
    hold: Script,
    release: Script,
    delivered: Script,
    cancel: Script,
    expire: Script,
    purge: Script,
    list: Script,
    headers: Script,
    mark_step: Script,
    retry_wait: Script,
    finish: Script,
    replay: Script,
    /// The idempotency ledger's claims ([`ids`]).
    ids: Script,
}

impl Scripts {
    fn new() -> Scripts {
        Scripts {
            claim: script!("claim.lua"),
            claim_held: script!("claim_held.lua"),
            hold: script!("hold.lua"),
            release: script!("release.lua"),
            delivered: script!("delivered.lua"),
            cancel: script!("cancel.lua"),
            expire: script!("expire.lua"),
            purge: script!("purge.lua"),
            list: script!("list.lua"),
            headers: script!("headers.lua"),
            mark_step: script!("mark_step.lua"),
            retry_wait: script!("retry_wait.lua"),
            finish: script!("finish.lua"),
            replay: script!("replay.lua"),
            ids: script!("ids.lua"),
        }
    }
}

/// The Redis store. Cheap to share (`Arc`); every method may be called from
/// many tasks at once.
pub struct RedisStore {
    pub(crate) conn: Conn,
    /// Inserts go through here, grouped ([`group`]).
    inserts: GroupCommit,
    keys: Keys,
    scripts: Scripts,
    pub(crate) config: RedisConfig,
    persistence: Persistence,
    metrics: RedisStoreMetrics,
    /// Where expire and purge start among the shards, turning per call so
    /// routers running them together spread over the shards.
    rotation: AtomicUsize,
    /// [`Store::tenants_since`], from the prefix's meta.
    tenants_since: Millis,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.config.prefix)
            .field("shards", &self.config.shards)
            .field("durability", &self.persistence.durability)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connect, check the shard count stored under the prefix (set it when
    /// the prefix is new), and read Redis's persistence settings (logged:
    /// WARN when acknowledged entries can be lost). Fails when Redis cannot
    /// be reached or the configuration is wrong.
    pub async fn connect(config: RedisConfig) -> Result<RedisStore, StoreError> {
        config.check()?;
        let conn = conn::connect(&config).await?;
        let keys = Keys::new(&config.prefix, config.shards);
        let tenants_since = check_meta(&conn, &keys).await?;
        let persistence = Persistence::from_nodes(conn::config_of_masters(&conn).await);
        persistence.log();
        let metrics = RedisStoreMetrics::default();
        let inserter = Inserter {
            conn: conn.clone(),
            keys: keys.clone(),
            script: script!("insert.lua"),
            max: config.max_entries_per_script,
        };
        let max_group = config.max_entries_per_script * usize::from(config.shards);
        let inserts =
            GroupCommit::start(inserter, config.request_queue, max_group, metrics.clone());
        Ok(RedisStore {
            conn,
            inserts,
            keys,
            scripts: Scripts::new(),
            config,
            persistence,
            metrics,
            rotation: AtomicUsize::new(0),
            tenants_since,
        })
    }

    /// Redis's persistence as read at connect.
    pub fn persistence(&self) -> &Persistence {
        &self.persistence
    }

    /// The weakest durability of any master (see [`Durability`]).
    pub fn durability(&self) -> &Durability {
        &self.persistence.durability
    }

    /// The store's counters (register them with
    /// [`RedisStoreMetrics::register`]).
    pub fn metrics(&self) -> &RedisStoreMetrics {
        &self.metrics
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &RedisConfig {
        &self.config
    }

    /// Whether Redis answers now: one `PING` (to some node of a cluster),
    /// failing after `limit`. For readiness probes: not counted in
    /// `unavailable`, which counts the store's own operations.
    pub async fn ping(&self, limit: Duration) -> Result<(), StoreError> {
        match tokio::time::timeout(limit, self.query::<Value>(&redis::cmd("PING"))).await {
            Ok(answer) => answer.map(drop),
            Err(_) => Err(StoreError::Unavailable(format!(
                "redis: PING took longer than {} ms",
                limit.as_millis()
            ))),
        }
    }

    /// Run `fut` as one store operation: bounded by the operation timeout,
    /// counted when Redis is unavailable.
    fn op<'a, T: Send + 'a>(
        &'a self,
        what: &'static str,
        fut: impl Future<Output = Result<T, StoreError>> + Send + 'a,
    ) -> StoreFuture<'a, T> {
        let limit = self.config.operation_timeout;
        Box::pin(async move {
            let out = match tokio::time::timeout(limit, fut).await {
                Ok(out) => out,
                Err(_) => Err(StoreError::Unavailable(format!(
                    "redis: {what} took longer than {} ms",
                    limit.as_millis()
                ))),
            };
            if let Err(StoreError::Unavailable(e)) = &out {
                self.metrics.unavailable.inc();
                tracing::debug!(operation = what, error = %e, "delayed store operation failed");
            }
            out
        })
    }

    /// Run `script` in `shard` with `args`.
    async fn run(
        &self,
        script: &Script,
        shard: u16,
        args: Vec<Vec<u8>>,
    ) -> Result<Value, StoreError> {
        invoke(&self.conn, &self.keys, script, shard, &args).await
    }

    /// Run one command.
    async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, StoreError> {
        cmd.query_async(&mut self.conn.clone())
            .await
            .map_err(unavailable)
    }

    /// Run `script` once per chunk of ids in each shard, all at once, with
    /// `head` before the ids; the answers, in no particular order.
    async fn per_shard(
        &self,
        script: &Script,
        ids: &[String],
        head: &[Vec<u8>],
    ) -> Result<Vec<(u16, Value)>, StoreError> {
        let mut by_shard: BTreeMap<u16, Vec<&str>> = BTreeMap::new();
        for id in ids {
            by_shard.entry(self.keys.shard(id)).or_default().push(id);
        }
        let max = self.config.max_entries_per_script;
        try_join_all(by_shard.iter().flat_map(|(&s, ids)| {
            ids.chunks(max).map(move |chunk| {
                let mut args = head.to_vec();
                args.extend(chunk.iter().map(|id| id.as_bytes().to_vec()));
                async move { Ok::<_, StoreError>((s, self.run(script, s, args).await?)) }
            })
        }))
        .await
    }
}

/// Run `script` on `conn` in `shard` (its key base the script's one key)
/// with `args`.
async fn invoke(
    conn: &Conn,
    keys: &Keys,
    script: &Script,
    shard: u16,
    args: &[Vec<u8>],
) -> Result<Value, StoreError> {
    let mut call = script.prepare_invoke();
    call.key(keys.base(shard));
    for a in args {
        call.arg(a.as_slice());
    }
    call.invoke_async(&mut conn.clone())
        .await
        .map_err(unavailable)
}

impl Store for RedisStore {
    fn insert(&self, entries: Vec<Entry>, now: Millis) -> StoreFuture<'_, Vec<Insert>> {
        self.op("insert", self.inserts.insert(entries, now))
    }

    fn tenants_since(&self) -> Millis {
        self.tenants_since
    }

    fn claim_due(&self, now: Millis, limit: usize, lease_ms: u64) -> StoreFuture<'_, Vec<Entry>> {
        self.op("claim_due", self.claim_due_all(now, limit, lease_ms))
    }

    fn upcoming(
        &self,
        from: Millis,
        until: Millis,
        limit: usize,
    ) -> StoreFuture<'_, Vec<(Millis, String)>> {
        self.op("upcoming", self.upcoming_all(from, until, limit))
    }

    fn delivered(&self, ids: Vec<String>, now: Millis) -> StoreFuture<'_, ()> {
        self.op("delivered", async move {
            self.per_shard(&self.scripts.delivered, &ids, &[num(score(now))])
                .await
                .map(drop)
        })
    }

    fn hold(&self, ids: Vec<String>, expires_ms: Millis, now: Millis) -> StoreFuture<'_, ()> {
        self.op("hold", self.hold_all(ids, expires_ms, now))
    }

    fn claim_held(
        &self,
        user: &str,
        now: Millis,
        limit: usize,
        lease_ms: u64,
    ) -> StoreFuture<'_, Vec<Entry>> {
        let user = user.to_owned();
        self.op("claim_held", async move {
            self.claim_held_all(&user, now, limit, lease_ms).await
        })
    }

    fn release(&self, ids: Vec<String>, retry_ms: Millis, now: Millis) -> StoreFuture<'_, ()> {
        self.op("release", async move {
            let head = [num(score(retry_ms)), num(score(now))];
            self.per_shard(&self.scripts.release, &ids, &head)
                .await
                .map(drop)
        })
    }

    fn cancel(&self, id: &str, now: Millis) -> StoreFuture<'_, Cancel> {
        let id = id.to_owned();
        self.op("cancel", async move { self.cancel_one(&id, now).await })
    }

    fn status(&self, id: &str) -> StoreFuture<'_, Option<Status>> {
        let id = id.to_owned();
        self.op("status", async move { self.status_of(&id).await })
    }

    fn list(
        &self,
        filter: ListFilter,
        after: Option<Cursor>,
        limit: usize,
    ) -> StoreFuture<'_, Page> {
        self.op("list", self.list_page(filter, after, limit))
    }

    fn expire(&self, now: Millis, limit: usize) -> StoreFuture<'_, Vec<Option<String>>> {
        self.op("expire", self.expire_some(now, limit))
    }

    fn purge(&self, before: Millis, limit: usize) -> StoreFuture<'_, u64> {
        self.op("purge", self.purge_some(before, limit))
    }

    fn counts(&self, now: Millis, bounds: Vec<u64>) -> StoreFuture<'_, Counts> {
        self.op("counts", self.count_all(now, bounds))
    }

    fn mark_step(&self, ids: Vec<String>, step: Step, now: Millis) -> StoreFuture<'_, ()> {
        self.op("mark_step", self.mark_step_all(ids, step, now))
    }

    fn retry_wait(&self, items: Vec<RetryWait>, now: Millis) -> StoreFuture<'_, Settled> {
        self.op("retry_wait", self.retry_wait_all(items, now))
    }

    fn finish(&self, items: Vec<Finish>, now: Millis) -> StoreFuture<'_, Settled> {
        self.op("finish", self.finish_all(items, now))
    }

    fn attempts(&self, id: &str) -> StoreFuture<'_, Vec<Attempt>> {
        let id = id.to_owned();
        self.op("attempts", async move { self.attempts_of(&id).await })
    }

    fn replay(&self, id: &str, now: Millis) -> StoreFuture<'_, Replay> {
        let id = id.to_owned();
        self.op("replay", async move { self.replay_one(&id, now).await })
    }

    fn put_topic(
        &self,
        name: &str,
        settings: bytes::Bytes,
        max_topics: usize,
        now: Millis,
    ) -> StoreFuture<'_, PutTopic> {
        let name = name.to_owned();
        self.op("put_topic", async move {
            self.put_topic_one(&name, &settings, max_topics, now).await
        })
    }

    fn topic(&self, name: &str) -> StoreFuture<'_, Option<StoredTopic>> {
        let name = name.to_owned();
        self.op("topic", async move { self.topic_one(&name).await })
    }

    fn delete_topic(&self, name: &str) -> StoreFuture<'_, bool> {
        let name = name.to_owned();
        self.op(
            "delete_topic",
            async move { self.delete_topic_one(&name).await },
        )
    }

    fn topics(&self, after: Option<String>, limit: usize) -> StoreFuture<'_, Vec<StoredTopic>> {
        self.op("topics", self.topic_page(after, limit))
    }

    fn topics_version(&self) -> StoreFuture<'_, u64> {
        self.op("topics_version", self.topics_version_now())
    }

    fn keeps_ids(&self) -> bool {
        true
    }

    fn claim_ids(&self, claims: Vec<IdClaim>) -> StoreFuture<'_, Vec<Claimed>> {
        self.op("claim_ids", self.claim_ids_now(claims))
    }

    fn release_ids(&self, ids: Vec<String>) -> StoreFuture<'_, ()> {
        self.op("release_ids", self.release_ids_now(ids))
    }
}

/// Record the shard count and layout under the prefix, or check them
/// against what is recorded: every router sharing the data must place ids
/// in the same shards.
/// Checks the prefix's shard count and layout (writing them when new), and
/// reads [`Store::tenants_since`] (written by the first Herald to keep
/// tenants' ids apart).
async fn check_meta(conn: &Conn, keys: &Keys) -> Result<Millis, StoreError> {
    let mut c = conn.clone();
    let meta = keys.meta();
    let mut set = redis::cmd("HSETNX");
    set.arg(&meta).arg("shards").arg(keys.shards());
    let new = set.query_async::<i64>(&mut c).await.map_err(unavailable)? == 1;
    if new {
        let mut set = redis::cmd("HSET");
        set.arg(&meta).arg("lists").arg(LISTS);
        set.query_async::<i64>(&mut c).await.map_err(unavailable)?;
    }
    let mut set = redis::cmd("HSETNX");
    set.arg(&meta).arg("layout").arg(layout::LAYOUT);
    set.query_async::<i64>(&mut c).await.map_err(unavailable)?;
    let mut set = redis::cmd("HSETNX");
    set.arg(&meta)
        .arg("tenants_since")
        .arg(crate::schedule::timing::now_ms());
    set.query_async::<i64>(&mut c).await.map_err(unavailable)?;
    let mut get = redis::cmd("HMGET");
    get.arg(&meta)
        .arg("shards")
        .arg("layout")
        .arg("tenants_since");
    let (shards, lay, tenants_since): (Option<u16>, Option<u8>, Option<Millis>) =
        get.query_async(&mut c).await.map_err(unavailable)?;
    if shards != Some(keys.shards()) {
        return Err(StoreError::Unavailable(format!(
            "the data under this prefix was written with {} shards, this router is configured with {}: \
             every router sharing a prefix must use the same shard count",
            shards.map_or("an unknown number of".into(), |s| s.to_string()),
            keys.shards()
        )));
    }
    if lay != Some(layout::LAYOUT) {
        return Err(StoreError::Unavailable(format!(
            "the data under this prefix has layout {lay:?}; this build reads layout {}",
            layout::LAYOUT
        )));
    }
    list_all(conn, keys).await?;
    Ok(tenants_since.unwrap_or(0))
}

/// The meta `lists` of data whose entries are all in their state's list
/// (`l:<state>`), those with a topic in the topic's as well.
const LISTS: u8 = 2;

/// Data written before meta `lists` 2 listed an entry with a topic under
/// its topic alone: list those under their state too (`lua/list_all.lua`,
/// a SCAN step at a time on each shard), then record `lists` 2. Idempotent:
/// routers that start together may both do it.
async fn list_all(conn: &Conn, keys: &Keys) -> Result<(), StoreError> {
    let mut c = conn.clone();
    let mut get = redis::cmd("HGET");
    get.arg(keys.meta()).arg("lists");
    let lists: Option<u8> = get.query_async(&mut c).await.map_err(unavailable)?;
    if lists == Some(LISTS) {
        return Ok(());
    }
    let script = script!("list_all.lua");
    for shard in 0..keys.shards() {
        let mut cursor = "0".to_owned();
        loop {
            let next = invoke(conn, keys, &script, shard, &[cursor.into_bytes()]).await?;
            cursor = match next {
                Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
                Value::SimpleString(s) => s,
                _ => return Err(unexpected("the list_all script")),
            };
            if cursor == "0" {
                break;
            }
        }
    }
    let mut set = redis::cmd("HSET");
    set.arg(keys.meta()).arg("lists").arg(LISTS);
    set.query_async::<i64>(&mut c).await.map_err(unavailable)?;
    tracing::info!(prefix = %keys.meta(), "delayed store upgraded in place: every entry listed under its state as well as its topic");
    Ok(())
}
