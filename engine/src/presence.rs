//! Presence: who is online, in one place.
//!
//! # Layout
//! - this file: the reports edges send about their sessions
//!   ([`PresenceReport`]; its AMQP form lives in `herald-amqp`), and the
//!   [`PresenceBook`] the routers keep them in.
//! - [`view`]: the same for operators and backends: sessions by transport,
//!   edges, since when, counts per client company ([`view::PresenceView`]).
//! - [`api`]: the presence endpoints `GET /v1/presence/...`
//!   ([`api::PresenceApi`]), served beside the publish API with its keys.
//! - [`transition`]: online and offline transitions (pure): their ids and
//!   the entries they become.
//! - [`events`]: `[presence]`, the bounded queue of transitions to
//!   `presence.events_topic` and the task that stores them.
//!
//! The question the firer asks for `when-online` notifications, the
//! [`Presence`] trait, is defined by the delayed service that asks it
//! (`schedule::online`) and re-exported here: presence sits above the
//! delayed store (its events are stored as delayed notifications, its
//! errors are the store's), so the store does not depend on it.
//!
//! Who implements the sources: standalone, the gateway's hub
//! (`gateway/src/hub/presence.rs`, `gateway/src/presence/view.rs`);
//! distributed, the routers' Redis ([`redis`], feature `redis`),
//! fed by the edges' reports (`gateway/src/presence.rs` batches them,
//! `amqp/src/presence.rs` is their wire form, `router/src/presence_intake.rs`
//! takes them in).

pub mod api;
pub mod events;
#[cfg(feature = "redis")]
pub mod redis;
pub mod transition;
pub mod view;

use std::future::Future;
use std::pin::Pin;

pub use crate::schedule::online::{Asked, Presence, PresenceFuture};

/// One report from an edge.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PresenceReport {
    /// The edge id (`edge.id`).
    pub edge: String,
    /// Random per edge process start.
    pub boot: String,
    /// The report's number in its edge process (1, 2, ...: header `seq`);
    /// 0 from an edge of an older version. The same in every root's copy,
    /// so routers derive the same event ids from it.
    pub seq: u64,
    /// Users whose first session on this edge started.
    pub online: Vec<String>,
    /// Users whose last session on this edge ended.
    pub offline: Vec<String>,
    /// The sessions of every user whose sessions changed on this edge
    /// (came, went, or changed transport), as they stand when the report
    /// is made; a user without a live session here has no mailboxes. Empty
    /// from an edge of an older version, which reports only `online` and
    /// `offline`.
    pub detail: Vec<crate::presence::view::UserSessions>,
    /// How long the edge keeps a user's mailbox after their last session
    /// left (its `mailbox.ttl_secs`, in ms); 0 from an edge of an older
    /// version. Routers routing by edge keep sending a user's
    /// notifications to an edge this long after the user left it.
    pub mailbox_ttl_ms: u64,
    /// Set on the parts of a snapshot: every mailbox the edge holds, not
    /// only those that changed. Snapshots go to the routers routing by
    /// edge only (exchange `<presence_exchange>.sync`), never to the
    /// presence book.
    pub sync: Option<SyncPart>,
}

/// Which part of an edge's snapshot a report is: `part` of `parts`,
/// counted from 1, sent one after the other with consecutive `seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncPart {
    /// This part's number, from 1.
    pub part: u32,
    /// How many parts the snapshot has.
    pub parts: u32,
}

/// A future returned by [`PresenceBook::record`]: the users the report moved between
/// offline and online cluster-wide.
pub type RecordFuture<'a> = Pin<
    Box<
        dyn Future<Output = Result<Vec<transition::Transition>, crate::schedule::error::StoreError>>
            + Send
            + 'a,
    >,
>;

/// Where the routers keep what edges report (distributed mode): the
/// writing side of a [`Presence`].
pub trait PresenceBook: Send + Sync + 'static {
    /// Apply one edge's report: it is alive (with this boot), these users
    /// came online on it, these went offline. Returns the users it moved
    /// between offline and online cluster-wide (decided atomically with
    /// the update: a second copy of the same report moves nobody).
    fn record<'a>(&'a self, report: &'a PresenceReport, now_ms: u64) -> RecordFuture<'a>;

    /// Take up to `limit` users off edge processes that are no longer
    /// alive (their liveness key expired, or their edge restarted with a
    /// new boot); returns those this left with no live session anywhere.
    fn sweep(&self, now_ms: u64, limit: usize) -> SweepFuture<'_>;
}

/// What a [`PresenceBook::sweep`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Swept {
    /// Users taken off dead edge processes (at most the limit).
    pub users: u64,
    /// Those of them left with no live session anywhere: offline.
    pub moved: Vec<transition::Transition>,
}

/// A future returned by [`PresenceBook::sweep`].
pub type SweepFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Swept, crate::schedule::error::StoreError>> + Send + 'a>>;
