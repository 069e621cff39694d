//! The durable store of delayed notifications, behind one trait.
//!
//! Two backends implement [`Store`] and pass the same test suite
//! (`engine/tests/store_suite/`): `embedded` (a file under the data
//! directory; standalone Herald) and `redis` (one Redis or a Redis
//! Cluster; the distributed routers share it).
//!
//! Each live entry has a place in the firing queue, its *fire time*: its
//! due time when scheduled, `lease_until` when firing, the retry time after
//! [`Store::release`]. An entry's reported `due_ms` never changes.
//!
//! # Contract
//! Every method takes the caller's clock (`now`, epoch ms) instead of
//! reading one, so the scheduler decides time and tests can use a fake one.
//! A method that returns `Ok` has made its change durable (embedded: the
//! transaction is fsynced, with concurrent callers grouped into one commit;
//! Redis: acknowledged by the server, durable as far as its persistence
//! settings go). Claims are the exception in the embedded store: one
//! process owns it, so its claims live in that process's memory (a crash
//! ends them, and what they held is due again at the next open, without
//! waiting for the lease). Changes are atomic per entry: two firers racing for the
//! same entry never both claim it within one lease, and a cancel racing a
//! claim either cancels the entry (and the claim does not return it) or
//! finds it claimed (and reports [`Cancel::TooLate`]).
//!
//! Bodies are kept while an entry is live (scheduled, firing, held). A
//! final entry keeps only its [`Status`] until [`Store::purge`] removes it
//! after the retention period.

use std::future::Future;
use std::pin::Pin;

#[cfg(feature = "embedded")]
pub mod embedded;
#[cfg(feature = "redis")]
pub mod redis;

use super::entry::{Entry, Millis, State, Status};

/// A future returned by a [`Store`] method.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

pub use super::error::StoreError;

/// The outcome of inserting one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Insert {
    /// Stored as a new scheduled entry.
    Accepted,
    /// An entry with this id exists (in any state, until purged): nothing
    /// changed. Submitting the same id again is idempotent.
    Duplicate(Status),
}

/// The outcome of a cancel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cancel {
    /// It was scheduled or held and is now cancelled; or it had already
    /// been cancelled (cancel is idempotent).
    Cancelled(Status),
    /// It is firing, delivered or expired: too late to cancel.
    TooLate(Status),
    /// No such id (never stored, or purged).
    NotFound,
}

/// Which statuses a [`Store::list`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListFilter {
    /// Only this topic (`None`: entries without a topic).
    pub topic: Option<String>,
    /// Only this state.
    pub state: State,
}

/// Where a page of [`Store::list`] starts: after this (due, id).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor {
    /// Due time of the last entry of the previous page.
    pub due_ms: Millis,
    /// Its id.
    pub id: String,
}

/// One page of statuses, ordered by due time (entries due at the same time
/// in the backend's order: the embedded store's is acceptance, Redis's is
/// id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The statuses.
    pub items: Vec<Status>,
    /// Where the next page starts; `None` when this is the last.
    pub next: Option<Cursor>,
}

/// Counts for the metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// Scheduled entries by due time: `scheduled[i]` counts those due
    /// before `now + bounds[i]` (and at or after the previous bound); the
    /// last element counts the rest. One more element than `bounds`.
    pub scheduled: Vec<u64>,
    /// Firing (claimed, not yet delivered or held).
    pub firing: u64,
    /// Held for users who are offline.
    pub held: u64,
}

/// A registered topic as stored: its settings in their stored JSON form
/// ([`crate::callback::topic::Topic::to_stored_json`]), which the store
/// keeps as opaque bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredTopic {
    /// The topic's name.
    pub name: String,
    /// Its settings, JSON.
    pub settings: bytes::Bytes,
    /// When they were last put.
    pub updated_ms: Millis,
}

/// The outcome of [`Store::put_topic`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutTopic {
    /// A new topic.
    Created,
    /// The topic existed; its settings are replaced.
    Replaced,
    /// A new topic, refused: `max_topics` are registered already.
    Full,
}

/// The durable store of delayed notifications. See the module docs for the
/// contract every backend keeps.
pub trait Store: Send + Sync + 'static {
    /// Store new entries (state scheduled, `attempts` 0) durably, in one
    /// commit. One outcome per entry, in order. An id that already exists,
    /// in any state, is left alone and reported as [`Insert::Duplicate`];
    /// the same id twice within one call is stored once.
    fn insert(&self, entries: Vec<Entry>, now: Millis) -> StoreFuture<'_, Vec<Insert>>;

    /// Claim up to `limit` entries that are due: scheduled with fire time
    /// `<= now`, or firing with an expired lease (`lease_until <= now`; their
    /// firer crashed). Each becomes firing with `lease_until = now +
    /// lease_ms`, `attempts + 1`, and is returned, earliest fire time first
    /// (entries with the same fire time in the backend's order: the
    /// embedded store's is acceptance, Redis's is id).
    /// Atomic: concurrent claimers never get the same entry.
    fn claim_due(&self, now: Millis, limit: usize, lease_ms: u64) -> StoreFuture<'_, Vec<Entry>>;

    /// Up to `limit` (fire time, id) pairs of scheduled and firing entries
    /// whose fire time is in `from..=until`, earliest first: what the
    /// scheduler's in-memory window holds (`from` 0 reads it whole; a
    /// later `from` reads only what came into its horizon since the last
    /// read). Reads only.
    fn upcoming(
        &self,
        from: Millis,
        until: Millis,
        limit: usize,
    ) -> StoreFuture<'_, Vec<(Millis, String)>>;

    /// The link took these firing entries: each becomes delivered at `now`
    /// (its body dropped). Ids not firing are left alone.
    fn delivered(&self, ids: Vec<String>, now: Millis) -> StoreFuture<'_, ()>;

    /// These firing `when_online` entries found their user offline: each
    /// becomes held at `now`, until its user comes online
    /// ([`Store::claim_held`]) or `expires_ms` passes ([`Store::expire`]).
    /// Ids not firing are left alone.
    fn hold(&self, ids: Vec<String>, expires_ms: Millis, now: Millis) -> StoreFuture<'_, ()>;

    /// `user` came online: claim up to `limit` of the entries held for them
    /// (as [`Store::claim_due`] does: firing, leased, attempts + 1),
    /// earliest (due, id) first.
    fn claim_held(
        &self,
        user: &str,
        now: Millis,
        limit: usize,
        lease_ms: u64,
    ) -> StoreFuture<'_, Vec<Entry>>;

    /// Release the claim on firing entries that could not be delivered now
    /// (the link is down, or its user had a send too recently): each becomes
    /// scheduled again with fire time `retry_ms` (its `due_ms` unchanged).
    /// Ids not firing are left alone.
    fn release(&self, ids: Vec<String>, retry_ms: Millis, now: Millis) -> StoreFuture<'_, ()>;

    /// Cancel an entry that is scheduled or held (see [`Cancel`]).
    fn cancel(&self, id: &str, now: Millis) -> StoreFuture<'_, Cancel>;

    /// The status of one entry, if stored.
    fn status(&self, id: &str) -> StoreFuture<'_, Option<Status>>;

    /// Up to `limit` statuses matching `filter`, after `after`, in the
    /// order of [`Page`].
    fn list(
        &self,
        filter: ListFilter,
        after: Option<Cursor>,
        limit: usize,
    ) -> StoreFuture<'_, Page>;

    /// Expire up to `limit` held entries whose hold limit has passed
    /// (`expires_ms <= now`): each becomes expired at `now`. Returns how
    /// many expired.
    fn expire(&self, now: Millis, limit: usize) -> StoreFuture<'_, u64>;

    /// Remove up to `limit` final statuses that entered their state before
    /// `before`. Returns how many were removed.
    fn purge(&self, before: Millis, limit: usize) -> StoreFuture<'_, u64>;

    /// Counts for the metrics (see [`Counts`]); `bounds` are offsets from
    /// `now` in ms, ascending.
    fn counts(&self, now: Millis, bounds: Vec<u64>) -> StoreFuture<'_, Counts>;

    /// Register `name` with `settings`, or replace its settings. A new
    /// name is refused ([`PutTopic::Full`]) when `max_topics` are
    /// registered. Every put and delete changes [`Store::topics_version`].
    fn put_topic(
        &self,
        name: &str,
        settings: bytes::Bytes,
        max_topics: usize,
        now: Millis,
    ) -> StoreFuture<'_, PutTopic>;

    /// One topic, if registered.
    fn topic(&self, name: &str) -> StoreFuture<'_, Option<StoredTopic>>;

    /// Remove a topic; whether it was registered.
    fn delete_topic(&self, name: &str) -> StoreFuture<'_, bool>;

    /// Up to `limit` topics whose names sort after `after` (byte order),
    /// in name order.
    fn topics(&self, after: Option<String>, limit: usize) -> StoreFuture<'_, Vec<StoredTopic>>;

    /// A number that changes whenever a topic is put or deleted (by any
    /// process sharing the store), so a cache of the topics knows when to
    /// read them again.
    fn topics_version(&self) -> StoreFuture<'_, u64>;
}
