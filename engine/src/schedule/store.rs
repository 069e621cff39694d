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
//! Bodies are kept while an entry is live (scheduled, firing, held,
//! retry_wait) and by dead letters (so that [`Store::replay`] can send them
//! again). Another final entry keeps only its [`Status`]. Every final entry
//! (dead letters too) stays until [`Store::purge`] removes it after the
//! retention period, with its attempt log.
//!
//! # Callbacks
//! A notification with a callback goes through more states, each a store
//! call, so every change is durable before it is acted on:
//!
//! ```text
//! claim_due/claim_held --> firing (phase Deliver: browsers, then the callback)
//!   firing --mark_step--> firing, step rechecking / calling (shown in the status)
//!   firing --retry_wait--> retry_wait at `at_ms` (attempt logged, browsers done,
//!                          calls + 1 when counted)
//!   retry_wait --claim_due at `at_ms`--> firing (phase Callback: the callback only)
//!   firing --finish--> delivered | declined | dead (attempt logged; dead keeps the body)
//!   dead --replay--> retry_wait due now, attempts 0, calls 0, log kept
//! ```
//!
//! Each entry's [`Entry::calls`] counts the callback attempts made under its
//! topic's retry policy, apart from `attempts` (claims): the store keeps it
//! with the entry's state, not in its record. Inserted entries have 0 (the
//! caller's value is ignored); [`Store::retry_wait`] adds 1 for each item
//! that is [`RetryWait::counted`]; [`Store::replay`] sets it to 0; nothing
//! else changes it (claims, holds, releases, an expired lease,
//! [`Store::finish`]), and every claim returns it. The entry's own
//! [`Entry::target`] is part of its record, kept as it was inserted.
//!
//! A kill -9 at any point loses nothing: an entry is firing under a lease
//! until one of these calls returns, so at worst the call is made again
//! (by whoever claims it when the lease runs out, in the same phase).
//! The attempt log of an entry is bounded: [`MAX_ATTEMPTS_KEPT`] records,
//! and when it is full the first [`FIRST_ATTEMPTS_KEPT`] and the latest
//! are kept (each new record drops the oldest one in between), so both how
//! it started and how it is going stay readable. One record is one policy
//! attempt: its call, with the recheck that let it go ahead before it
//! when there was one ([`RetryWait::recheck`]), so [`Store::attempts`]
//! may return up to twice as many requests.

use std::future::Future;
use std::pin::Pin;

#[cfg(feature = "embedded")]
pub mod embedded;
#[cfg(feature = "redis")]
pub mod redis;

use super::entry::{Entry, Millis, State, Status, Step};
use crate::callback::attempt::Attempt;

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

/// A notification id to take in the idempotency ledger
/// ([`crate::publish::ledger`]) until `hold_until_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdClaim {
    /// The id, in its tenant's namespace.
    pub id: String,
    /// When its notification is due (its acceptance, for an immediate
    /// one): what a later claim of the id is told.
    pub due_ms: Millis,
    /// Until when the id is taken.
    pub hold_until_ms: Millis,
}

/// The outcome of claiming one id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claimed {
    /// It was free and is now taken by this claim.
    New,
    /// A notification due at `due_ms` holds it: this one is a duplicate.
    Taken {
        /// The holder's due time.
        due_ms: Millis,
    },
}

/// The outcome of a cancel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cancel {
    /// It was scheduled, held, waiting for a callback retry
    /// (`retry_wait`) or a dead letter, and is now cancelled (a dead
    /// letter: nobody will send it again; its body is dropped, its attempt
    /// log kept until purged); or it had already been cancelled (cancel is
    /// idempotent).
    Cancelled(Status),
    /// It is firing or in another final state: too late to cancel.
    TooLate(Status),
    /// No such id (never stored, or purged).
    NotFound,
}

/// Most attempt records kept per entry (see the module docs for what is
/// dropped when an entry has more).
pub const MAX_ATTEMPTS_KEPT: usize = 200;

/// The first attempt records of an entry, always kept when its log is
/// full.
pub const FIRST_ATTEMPTS_KEPT: usize = 10;

/// A firing entry whose callback is to be tried again later
/// ([`Store::retry_wait`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryWait {
    /// The entry.
    pub id: String,
    /// When to claim it again (its fire time; its `due_ms` stays).
    pub at_ms: Millis,
    /// The recheck that let this attempt's call go ahead, if there was
    /// one: logged with it, before it ([`Attempt::encode_all`]).
    pub recheck: Option<Attempt>,
    /// The attempt that failed, appended to its log (`None`: waiting
    /// without a request made, e.g. its destination's circuit is open).
    pub attempt: Option<Attempt>,
    /// Whether the attempt used up one of its retry policy's: the entry's
    /// [`Entry::calls`] goes up by one. Not when nothing was tried (its
    /// destination was paused).
    pub counted: bool,
}

/// How a firing entry ends ([`Store::finish`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Done: the callback (and the browser part) succeeded.
    Delivered,
    /// The recheck said not to send.
    Declined,
    /// No attempt left: a dead letter, body kept for [`Store::replay`].
    Dead,
}

impl Ending {
    /// The final state it leads to.
    pub fn state(self) -> State {
        match self {
            Ending::Delivered => State::Delivered,
            Ending::Declined => State::Declined,
            Ending::Dead => State::Dead,
        }
    }
}

/// A firing entry that ends ([`Store::finish`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finish {
    /// The entry.
    pub id: String,
    /// How it ends.
    pub ending: Ending,
    /// The recheck that let this attempt's call go ahead, if there was
    /// one: logged with it, before it ([`Attempt::encode_all`]).
    pub recheck: Option<Attempt>,
    /// The last attempt, appended to its log.
    pub attempt: Option<Attempt>,
}

/// What [`Store::retry_wait`] or [`Store::finish`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Settled {
    /// Entries that were firing and moved (the others were left alone).
    pub moved: u64,
    /// Attempt records dropped because an entry's log was full (the
    /// oldest after the first [`FIRST_ATTEMPTS_KEPT`]).
    pub trimmed: u64,
}

/// The outcome of [`Store::replay`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replay {
    /// It was dead and now waits in `retry_wait`, due now.
    Replayed(Status),
    /// It is not a dead letter: nothing changed.
    NotDead(Status),
    /// No such id (never stored, or purged).
    NotFound,
}

/// Which statuses a [`Store::list`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListFilter {
    /// Only this topic (`None`: every entry of the state, whatever its
    /// topic).
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
    /// Callbacks waiting for their next attempt (not claimed).
    pub retry_wait: u64,
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
    /// Store new entries (state scheduled, `attempts` 0, `calls` 0, phase
    /// [`Phase::Deliver`](super::entry::Phase), their target as given)
    /// durably, in one commit. One outcome per entry, in order. An id that already exists,
    /// in any state, is left alone and reported as [`Insert::Duplicate`];
    /// the same id twice within one call is stored once.
    fn insert(&self, entries: Vec<Entry>, now: Millis) -> StoreFuture<'_, Vec<Insert>>;

    /// When this store was first opened by a Herald that keeps tenants'
    /// ids apart ([`herald_protocol::tenant`]), recorded in the store
    /// itself: an id kept as written and accepted before then may be a
    /// tenant's (the status and cancel endpoints' migration).
    fn tenants_since(&self) -> Millis;

    /// Claim up to `limit` entries that are due: scheduled or retry_wait
    /// with fire time `<= now`, or firing with an expired lease
    /// (`lease_until <= now`; their firer crashed). Each becomes firing
    /// with `lease_until = now + lease_ms`, `attempts + 1`, no step, and is
    /// returned (with its `calls` and target), earliest fire time first (entries with the same fire time
    /// in the backend's order: the embedded store's is acceptance, Redis's
    /// is id). An entry claimed from retry_wait, or again after the lease
    /// of such a claim, has phase [`Phase::Callback`](super::entry::Phase);
    /// the others [`Phase::Deliver`](super::entry::Phase).
    /// Atomic: concurrent claimers never get the same entry.
    fn claim_due(&self, now: Millis, limit: usize, lease_ms: u64) -> StoreFuture<'_, Vec<Entry>>;

    /// Up to `limit` (fire time, id) pairs of scheduled, retry_wait and
    /// firing entries
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
    /// Ids not firing, or firing in phase
    /// [`Phase::Callback`](super::entry::Phase) (their browser part is
    /// done), are left alone.
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
    /// scheduled again with fire time `retry_ms` (its `due_ms` unchanged);
    /// one in phase [`Phase::Callback`](super::entry::Phase) goes back to
    /// retry_wait instead, so it keeps its phase. Ids not firing are left
    /// alone.
    fn release(&self, ids: Vec<String>, retry_ms: Millis, now: Millis) -> StoreFuture<'_, ()>;

    /// Cancel an entry that is scheduled, held, in retry_wait or dead (see
    /// [`Cancel`]). A cancelled retry_wait or dead entry keeps its attempt
    /// log.
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
    /// (`expires_ms <= now`): each becomes expired at `now`. Returns the
    /// topic of each one that expired (`None` without a topic), so they
    /// are counted per topic; its length is how many expired.
    fn expire(&self, now: Millis, limit: usize) -> StoreFuture<'_, Vec<Option<String>>>;

    /// Remove up to `limit` final entries (dead letters included) that
    /// entered their state before `before`, with their attempt logs.
    /// Returns how many were removed.
    fn purge(&self, before: Millis, limit: usize) -> StoreFuture<'_, u64>;

    /// Counts for the metrics (see [`Counts`]); `bounds` are offsets from
    /// `now` in ms, ascending.
    fn counts(&self, now: Millis, bounds: Vec<u64>) -> StoreFuture<'_, Counts>;

    /// Mark firing entries as being at `step` of their callback since
    /// `now` (their status shows it, with `updated_ms = now`). Ids not
    /// firing are left alone. The step is part of the claim: it goes when
    /// the entry leaves firing or is claimed again.
    fn mark_step(&self, ids: Vec<String>, step: Step, now: Millis) -> StoreFuture<'_, ()>;

    /// These firing entries' callbacks are to be tried again: each becomes
    /// retry_wait at `now` with fire time `at_ms` (its `due_ms`
    /// unchanged), its browser part done (claimed again, it has phase
    /// [`Phase::Callback`](super::entry::Phase)), its attempt appended to
    /// its log, and its `calls` + 1 when the item is
    /// [`counted`](RetryWait::counted). Ids not firing are left alone
    /// (nothing is logged or counted for them; an id twice in `items` moves
    /// once).
    fn retry_wait(&self, items: Vec<RetryWait>, now: Millis) -> StoreFuture<'_, Settled>;

    /// These firing entries end: each becomes delivered, declined or dead
    /// at `now`, its attempt appended to its log, its `calls` unchanged. A dead letter keeps its
    /// body; the others keep only their status. Ids not firing are left
    /// alone (nothing is logged for them).
    fn finish(&self, items: Vec<Finish>, now: Millis) -> StoreFuture<'_, Settled>;

    /// The attempt log of an entry, oldest first (see the module docs for
    /// its bound); empty when it has none or is not stored.
    fn attempts(&self, id: &str) -> StoreFuture<'_, Vec<Attempt>>;

    /// Send a dead letter again: it becomes retry_wait at `now`, due `now`,
    /// with `attempts` and `calls` 0 (its log is kept and goes on), so the
    /// next claim makes its callback as attempt 1 (see [`Replay`]).
    fn replay(&self, id: &str, now: Millis) -> StoreFuture<'_, Replay>;

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

    /// Whether this store keeps an idempotency ledger every process
    /// sharing it sees ([`Store::claim_ids`]). The embedded one does not:
    /// its one process keeps the ledger in memory
    /// ([`crate::publish::ledger`]).
    fn keeps_ids(&self) -> bool {
        false
    }

    /// Claim ids in the shared idempotency ledger, one outcome per claim
    /// in order (a second claim of an id in the same call finds it taken
    /// by the first). Only called when [`Store::keeps_ids`]; a store
    /// without a ledger finds every id new.
    fn claim_ids(&self, claims: Vec<IdClaim>) -> StoreFuture<'_, Vec<Claimed>> {
        Box::pin(std::future::ready(Ok(vec![Claimed::New; claims.len()])))
    }

    /// Free ids this process claimed ([`Store::claim_ids`]) for
    /// publications it then failed to take (the store or the link
    /// refused them), so that a retry is not a duplicate.
    fn release_ids(&self, ids: Vec<String>) -> StoreFuture<'_, ()> {
        drop(ids);
        Box::pin(std::future::ready(Ok(())))
    }
}
