//! [`View`]: which edges hold a mailbox for which user and client company,
//! as one router learns it from the edges' presence reports, and which
//! edges a notification must go to. Pure: every call takes `now` (wall
//! clock, ms since the Unix epoch), nothing here does I/O.
//!
//! An edge *holds* a user while the user has a live session there, and
//! for the edge's mailbox TTL (`mailbox-ttl-ms` of its reports) after the
//! user's last session there left: the mailbox keeps what arrives for a
//! resume. A client company is held while a user of it is. A notification
//! goes to the edges that hold one of its users (user scope) or clients
//! (client scope), and to every edge whose view is not *trusted*:
//!
//! - **incomplete**: the router has not seen every change since the
//!   edge's process started (it came in later, a report is missing: a gap
//!   in `seq`, the edge is older and sends no `seq` or TTL, or the edge
//!   holds more than [`MAX_USERS_PER_EDGE`]) and no snapshot since;
//! - **stale**: no report for `stale_ms` (the edge died, or its link to
//!   this root is down; its queue may still be bound).
//!
//! Until the view has listened for `stale_ms` (every live edge has sent a
//! heartbeat by then), or while its consumer is down, everything goes to
//! every edge ([`Route::Every`]), as it does for global scope and when the
//! chosen edges are all the edges it knows.
//!
//! [`View::apply`] answers the *arrivals* a report brought: a user (or
//! client) an edge did not hold before, with when its sessions there
//! began. The router re-sends to that edge what it sent for that user
//! elsewhere since then ([`super::recent::Recent`]), which closes the
//! window between a user's move to another edge and that edge's report.

mod holds;

use std::collections::HashMap;
use std::sync::Arc;

use herald_engine::presence::PresenceReport;
use herald_protocol::envelope::{Notification, Scope};

use holds::{Holds, set_user};

/// Most users (and, separately, client companies) one edge's view keeps;
/// past it the edge is incomplete (it gets everything) until a snapshot
/// that fits.
pub const MAX_USERS_PER_EDGE: usize = 4_000_000;
/// Most edges the view keeps; a report from one more is not recorded, and
/// with an edge the view does not know of, everything goes to every edge.
pub const MAX_EDGES: usize = 10_000;

/// The view's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ViewConfig {
    /// An edge is trusted this long after its last report; the view is
    /// ready this long after it started listening.
    pub stale_ms: u64,
    /// An edge not heard from for this long is forgotten (its queue on the
    /// root has expired by then: keep it at the edges' `queue_expires_secs`).
    pub forget_ms: u64,
}

/// Why a notification goes to every edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Every {
    /// Global scope.
    Global,
    /// The view has not listened for `stale_ms` yet.
    Warming,
    /// The view's consumer is not running.
    Down,
    /// An edge reported that the view could not record ([`MAX_EDGES`]).
    Unknown,
    /// The edges it must go to are every edge the view knows.
    AllEdges,
}

impl Every {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Every::Global => "global",
            Every::Warming => "warming",
            Every::Down => "down",
            Every::Unknown => "unknown_edge",
            Every::AllEdges => "all_edges",
        }
    }
}

/// Why an edge gets a notification it may not hold a recipient of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fallback {
    /// No report for `stale_ms`.
    Stale,
    /// The view of the edge misses changes.
    Incomplete,
}

impl Fallback {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Fallback::Stale => "stale",
            Fallback::Incomplete => "incomplete",
        }
    }
}

/// Where a notification goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// To every edge (one publication with the every-edge key).
    Every(Every),
    /// To these edges, each by its own key; none when no edge holds a
    /// recipient. `fallbacks` of them only because their view is not
    /// trusted.
    Edges {
        /// The edges, in the view's order.
        edges: Vec<Arc<str>>,
        /// How many of them are there as a fallback, by reason.
        fallbacks: [(Fallback, u32); 2],
    },
}

/// What a notification's holders are looked up by.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    /// A user id (user scope).
    User(Box<str>),
    /// A client company (client scope).
    Client(Box<str>),
}

impl Key {
    /// The keys of a user- or client-scoped notification (none for
    /// global scope).
    pub fn of(n: &Notification) -> Vec<Key> {
        match n.scope {
            Scope::User => n
                .users
                .iter()
                .map(|u| Key::User(u.as_str().into()))
                .collect(),
            Scope::Client => n
                .clients
                .iter()
                .map(|c| Key::Client(c.as_str().into()))
                .collect(),
            Scope::Global => Vec::new(),
        }
    }
}

/// A user or client an edge holds now and did not before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arrival {
    /// The edge.
    pub edge: Arc<str>,
    /// Who arrived.
    pub key: Key,
    /// When their sessions there began (edge's clock; 0: unknown).
    pub since_ms: u64,
}

/// One edge process as the view knows it.
#[derive(Debug)]
struct EdgeView {
    boot: String,
    /// The `seq` the next report must have; 0 before the first.
    next_seq: u64,
    heard_ms: u64,
    ttl_ms: u64,
    complete: bool,
    /// The snapshot being received: the next part it needs, and what the
    /// parts so far held.
    sync: Option<(u32, Holds, Holds)>,
    users: Holds,
    clients: Holds,
}

impl EdgeView {
    fn new(boot: &str) -> Self {
        EdgeView {
            boot: boot.to_owned(),
            next_seq: 0,
            heard_ms: 0,
            ttl_ms: 0,
            complete: false,
            sync: None,
            users: Holds::default(),
            clients: Holds::default(),
        }
    }

    fn trust(&self, now: u64, stale_ms: u64) -> Result<(), Fallback> {
        if now.saturating_sub(self.heard_ms) > stale_ms {
            Err(Fallback::Stale)
        } else if !self.complete {
            Err(Fallback::Incomplete)
        } else {
            Ok(())
        }
    }

    /// Whether the edge holds a recipient of `n` (by reference: no
    /// allocation on this path, which every forward takes).
    fn holds_recipient(&self, n: &Notification, now: u64) -> bool {
        match n.scope {
            Scope::User => n.users.iter().any(|u| self.users.held(u, now)),
            Scope::Client => n.clients.iter().any(|c| self.clients.held(c, now)),
            Scope::Global => true,
        }
    }
}

/// The edges' states, for a gauge.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EdgeCounts {
    /// Complete and fresh.
    pub trusted: u64,
    /// Not heard from for `stale_ms`.
    pub stale: u64,
    /// Heard from, missing changes.
    pub incomplete: u64,
}

/// What applying one report did, for the counters.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Users and clients the edge holds now and did not before.
    pub arrivals: Vec<Arrival>,
    /// The report showed that earlier ones are missing.
    pub gap: bool,
    /// The report completed a snapshot.
    pub synced: bool,
    /// The edge holds more than [`MAX_USERS_PER_EDGE`].
    pub overflow: bool,
}

/// The routing view of one router (see the module docs).
#[derive(Debug)]
pub struct View {
    config: ViewConfig,
    /// When the current consumer started; None while it is down.
    started_ms: Option<u64>,
    edges: HashMap<Arc<str>, EdgeView>,
    /// A report came from an edge past [`MAX_EDGES`].
    unknown: bool,
}

impl View {
    /// An empty view, down until [`View::start`].
    pub fn new(config: ViewConfig) -> Self {
        View {
            config,
            started_ms: None,
            edges: HashMap::new(),
            unknown: false,
        }
    }

    /// The consumer (re)started at `now`: what it knew may have missed
    /// reports, so start over.
    pub fn start(&mut self, now: u64) {
        self.started_ms = Some(now);
        self.edges.clear();
        self.unknown = false;
    }

    /// The consumer stopped: route everything to every edge.
    pub fn stop(&mut self) {
        self.started_ms = None;
    }

    /// Whether the view routes by edge at `now`: listening, and for
    /// `stale_ms` already; else why not.
    pub fn ready(&self, now: u64) -> Result<(), Every> {
        match self.started_ms {
            None => Err(Every::Down),
            Some(t) if now < t.saturating_add(self.config.stale_ms) => Err(Every::Warming),
            Some(_) => Ok(()),
        }
    }

    /// Where `n` goes at `now`.
    pub fn route(&self, n: &Notification, now: u64) -> Route {
        if let Err(why) = self.ready(now) {
            return Route::Every(why);
        }
        if n.scope == Scope::Global {
            return Route::Every(Every::Global);
        }
        if self.unknown {
            return Route::Every(Every::Unknown);
        }
        let mut edges = Vec::new();
        let mut stale = 0;
        let mut incomplete = 0;
        for (id, edge) in &self.edges {
            let take = match edge.trust(now, self.config.stale_ms) {
                Err(Fallback::Stale) => {
                    stale += 1;
                    true
                }
                Err(Fallback::Incomplete) => {
                    incomplete += 1;
                    true
                }
                Ok(()) => edge.holds_recipient(n, now),
            };
            if take {
                edges.push(Arc::clone(id));
            }
        }
        if !edges.is_empty() && edges.len() == self.edges.len() {
            return Route::Every(Every::AllEdges);
        }
        Route::Edges {
            edges,
            fallbacks: [(Fallback::Stale, stale), (Fallback::Incomplete, incomplete)],
        }
    }

    /// Record one report received at `now`.
    pub fn apply(&mut self, r: &PresenceReport, now: u64) -> Applied {
        let mut out = Applied::default();
        self.forget(now);
        let id: Arc<str> = match self.edges.get_key_value(r.edge.as_str()) {
            Some((id, _)) => Arc::clone(id),
            None if self.edges.len() >= MAX_EDGES => {
                self.unknown = true;
                return out;
            }
            None => Arc::from(r.edge.as_str()),
        };
        let edge = self
            .edges
            .entry(Arc::clone(&id))
            .or_insert_with(|| EdgeView::new(&r.boot));
        if edge.boot != r.boot {
            // The edge restarted: its mailboxes went with the old process.
            *edge = EdgeView::new(&r.boot);
        }
        if r.seq != 0 && edge.next_seq != 0 && r.seq < edge.next_seq {
            // A copy of a report already applied (a redelivery).
            return out;
        }
        let first = edge.next_seq == 0;
        if r.seq == 0 || r.mailbox_ttl_ms == 0 {
            // An edge of an older version: no numbers, no TTL.
            edge.complete = false;
        } else if first {
            edge.complete = r.seq == 1;
        } else if r.seq != edge.next_seq {
            out.gap = true;
            edge.complete = false;
            edge.sync = None;
        }
        edge.next_seq = r.seq.saturating_add(1);
        edge.heard_ms = now;
        edge.ttl_ms = r.mailbox_ttl_ms;
        edge.users.purge(now);
        edge.clients.purge(now);
        match r.sync {
            Some(part) => apply_sync(&id, edge, r, part, now, &mut out),
            None => {
                for u in &r.detail {
                    let ttl = edge.ttl_ms;
                    set_user(
                        &id,
                        &mut edge.users,
                        &mut edge.clients,
                        u,
                        now,
                        ttl,
                        Some(&mut out.arrivals),
                    );
                }
            }
        }
        if edge.users.map.len() > MAX_USERS_PER_EDGE || edge.clients.map.len() > MAX_USERS_PER_EDGE
        {
            out.overflow = true;
            edge.complete = false;
            edge.users = Holds::default();
            edge.clients = Holds::default();
        }
        out
    }

    /// Forget the edges not heard from for `forget_ms`.
    fn forget(&mut self, now: u64) {
        let forget_ms = self.config.forget_ms;
        self.edges
            .retain(|_, e| now.saturating_sub(e.heard_ms) <= forget_ms);
    }

    /// How many edges are in each state at `now`.
    pub fn counts(&self, now: u64) -> EdgeCounts {
        let mut c = EdgeCounts::default();
        for e in self.edges.values() {
            match e.trust(now, self.config.stale_ms) {
                Ok(()) => c.trusted += 1,
                Err(Fallback::Stale) => c.stale += 1,
                Err(Fallback::Incomplete) => c.incomplete += 1,
            }
        }
        c
    }
}

/// Apply one part of a snapshot: the first starts a fresh copy, the last
/// replaces the edge's holds with it and makes the edge complete (unless
/// a report went missing in between: then the snapshot is dropped).
fn apply_sync(
    id: &Arc<str>,
    edge: &mut EdgeView,
    r: &PresenceReport,
    part: herald_engine::presence::SyncPart,
    now: u64,
    out: &mut Applied,
) {
    if part.part == 1 {
        edge.sync = Some((1, Holds::default(), Holds::default()));
    }
    let Some((next, users, clients)) = edge.sync.as_mut() else {
        return;
    };
    if *next != part.part {
        edge.sync = None;
        return;
    }
    *next += 1;
    for u in &r.detail {
        set_user(id, users, clients, u, now, edge.ttl_ms, None);
    }
    if part.part < part.parts {
        return;
    }
    let Some((_, users, clients)) = edge.sync.take() else {
        return;
    };
    // Users and clients the snapshot shows that the view did not hold:
    // when the edge was trusted, a report went missing after all; when
    // not, the edge was getting everything. Either way, nothing to lose by
    // catching up.
    for (user, hold) in &users.map {
        if hold.held(now) && !edge.users.held(user, now) {
            out.arrivals.push(Arrival {
                edge: Arc::clone(id),
                key: Key::User(user.clone()),
                since_ms: 0,
            });
        }
    }
    edge.users = users;
    edge.clients = clients;
    edge.complete = true;
    out.synced = true;
}
