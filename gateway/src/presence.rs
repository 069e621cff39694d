//! Edge mode: tell the roots which users came online and went offline, so
//! routers fire `when-online` notifications at the right time, and the
//! sessions of every user whose sessions changed (by site, transport and
//! client company, since when), so routers answer the presence API.
//!
//! Sessions report changes through a [`PresenceReporter`] (a bounded
//! queue; when full the change is dropped and counted, policy
//! *drop-newest*: a user whose "online" is lost gets held notifications at
//! their next connect, and their session counts are corrected by their
//! next change). The [`run_batcher`] task coalesces the changes per
//! user for `edge.presence_batch_ms` (or until `MAX_REPORT_USERS`), reads
//! each changed user's sessions from the hub as the report is made (the
//! report's detail), and
//! hands each [`PresenceReport`] to every root link through a broadcast
//! channel; with nothing to report it sends an empty report every
//! `edge.presence_heartbeat_ms`, which keeps this edge alive in the routers'
//! eyes.
//!
//! Every report carries this edge's mailbox TTL. Every
//! `edge.presence_sync_ms`, and whenever a root link comes up
//! ([`SyncRequests`]), the batcher also sends a snapshot of every mailbox
//! it holds ([`crate::hub::Hub::held`]), in parts of at most
//! `MAX_REPORT_USERS` users numbered like the other reports: routers
//! routing by edge (`routing.mode = "targeted"`) trust their view of this
//! edge again once they have one whole (a router that started after this
//! edge, or missed a report).
//!
//! [`view`]: standalone, the presence API answered from the hub.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use herald_amqp::presence::{MAX_MISSED_BYTES, MAX_REPORT_USERS, PresenceReport, SyncPart};
use herald_engine::presence::view::UserSessions;
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

pub mod view;

/// Reports handed to the root links, at most this many waiting per link
/// (a link that falls further behind skips the oldest; counted).
pub const LINK_BACKLOG: usize = 64;

/// What happened to a user's sessions on this edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Their first session started.
    Online,
    /// Their last session ended.
    Offline,
    /// A session started or ended; others remain.
    Sessions,
}

impl Change {
    /// `self` followed by `next` within one batch: coming or going wins
    /// over a change of count, and the later of the two wins otherwise.
    fn then(self, next: Change) -> Change {
        match next {
            Change::Sessions => self,
            other => other,
        }
    }
}

/// The sending side, held by [`crate::app::Mode::Edge`].
#[derive(Debug, Clone)]
pub struct PresenceReporter {
    tx: mpsc::Sender<(Arc<str>, Change)>,
    metrics: Arc<Metrics>,
}

impl PresenceReporter {
    /// `user`'s first session on this edge started.
    pub fn online(&self, user: &Arc<str>) {
        self.send(user, Change::Online);
    }

    /// `user`'s last session on this edge ended.
    pub fn offline(&self, user: &Arc<str>) {
        self.send(user, Change::Offline);
    }

    /// One of `user`'s sessions started or ended, and they still have one.
    pub fn sessions(&self, user: &Arc<str>) {
        self.send(user, Change::Sessions);
    }

    fn send(&self, user: &Arc<str>, change: Change) {
        if self.tx.try_send((Arc::clone(user), change)).is_err() {
            self.metrics.presence_dropped.inc();
        }
    }
}

/// The batcher's settings.
#[derive(Debug, Clone)]
pub struct BatcherConfig {
    /// This edge's id.
    pub edge: String,
    /// Random per process start.
    pub boot: String,
    /// Longest a change waits before it is sent.
    pub batch: Duration,
    /// Longest time between two reports (an empty one is a heartbeat).
    pub heartbeat: Duration,
    /// How long a mailbox outlives its last session (`mailbox.ttl_secs`).
    pub mailbox_ttl: Duration,
    /// Time between two snapshots.
    pub sync: Duration,
}

/// What the root links take from the batcher and give it: the reports to
/// send, and requests for a snapshot.
#[derive(Debug, Clone)]
pub struct ToRoots {
    /// The reports, to every root link.
    pub reports: broadcast::Sender<Arc<PresenceReport>>,
    /// Asked when a root link comes up.
    pub syncs: SyncRequests,
}

/// Asks the batcher for a snapshot soon (a root link came up). Requests
/// made before the batcher takes one are coalesced into it (a queue of
/// one; policy drop-newest, nothing lost: the snapshot asked for first
/// serves them all).
#[derive(Debug, Clone)]
pub struct SyncRequests(mpsc::Sender<()>);

impl SyncRequests {
    /// A requester, and the receiving end for [`run_batcher`].
    pub fn channel() -> (SyncRequests, mpsc::Receiver<()>) {
        let (tx, rx) = mpsc::channel(1);
        (SyncRequests(tx), rx)
    }

    /// Ask for a snapshot.
    pub fn request(&self) {
        let _ = self.0.try_send(());
    }
}

/// A reporter, and the receiving end for [`run_batcher`].
pub fn channel(
    bound: usize,
    metrics: Arc<Metrics>,
) -> (PresenceReporter, mpsc::Receiver<(Arc<str>, Change)>) {
    let (tx, rx) = mpsc::channel(bound.max(1));
    (PresenceReporter { tx, metrics }, rx)
}

/// What the batcher reads from the hub: a user's live mailboxes as a
/// report is made ([`crate::hub::Hub::user_sessions`]), and every mailbox
/// for a snapshot ([`crate::hub::Hub::held`]).
pub trait Mailboxes: Send {
    /// `user`'s mailboxes with a live session.
    fn user_sessions(&self, user: &str) -> UserSessions;
    /// Every user with a mailbox, live or idle.
    fn held(&self) -> Vec<UserSessions>;
}

impl Mailboxes for Arc<crate::hub::Hub> {
    fn user_sessions(&self, user: &str) -> UserSessions {
        crate::hub::Hub::user_sessions(self, user)
    }

    fn held(&self) -> Vec<UserSessions> {
        crate::hub::Hub::held(self)
    }
}

/// Coalesce changes into reports until `shutdown`, and send snapshots
/// every `config.sync` and when `syncs` asks.
pub async fn run_batcher(
    config: BatcherConfig,
    mut rx: mpsc::Receiver<(Arc<str>, Change)>,
    out: broadcast::Sender<Arc<PresenceReport>>,
    hub: impl Mailboxes,
    mut syncs: mpsc::Receiver<()>,
    shutdown: CancellationToken,
) {
    let mut pending: HashMap<Arc<str>, Change> = HashMap::new();
    let mut heartbeat = tokio::time::interval(config.heartbeat);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first snapshot is asked for by the first root link to come up.
    let mut sync = tokio::time::interval_at(tokio::time::Instant::now() + config.sync, config.sync);
    sync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let ttl_ms = u64::try_from(config.mailbox_ttl.as_millis()).unwrap_or(u64::MAX);
    let mut flush_at: Option<tokio::time::Instant> = None;
    // Each report's number in this process: routers derive the ids of
    // presence events from it (the same in every root's copy).
    let mut seq = 0u64;
    loop {
        let batch_due = async {
            match flush_at {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            change = rx.recv() => {
                let Some((user, change)) = change else { return };
                pending
                    .entry(user)
                    .and_modify(|c| *c = c.then(change))
                    .or_insert(change);
                flush_at.get_or_insert_with(|| tokio::time::Instant::now() + config.batch);
                if pending.len() < MAX_REPORT_USERS {
                    continue;
                }
            }
            _ = batch_due => {}
            _ = heartbeat.tick() => {}
            _ = sync.tick() => {
                send_snapshot(&config, &mut seq, ttl_ms, &hub, &out);
                continue;
            }
            Some(()) = syncs.recv() => {
                sync.reset();
                send_snapshot(&config, &mut seq, ttl_ms, &hub, &out);
                continue;
            }
        }
        flush_at = None;
        heartbeat.reset();
        // No link connected: nobody to tell; the next heartbeat after a
        // reconnect tells the routers this edge is alive.
        for report in reports(&config, &mut seq, ttl_ms, &hub, pending.drain()) {
            let _ = out.send(Arc::new(report));
        }
    }
}

/// The reports of one batch of changes (one when there are none: a
/// heartbeat), numbered from `seq + 1`: a report is closed early when its
/// `missed-since` header would grow past [`MAX_MISSED_BYTES`] (many users
/// moving here at once from an edge that died).
fn reports(
    config: &BatcherConfig,
    seq: &mut u64,
    ttl_ms: u64,
    hub: &impl Mailboxes,
    changes: impl Iterator<Item = (Arc<str>, Change)>,
) -> Vec<PresenceReport> {
    let new = |seq: &mut u64| {
        *seq += 1;
        PresenceReport {
            edge: config.edge.clone(),
            boot: config.boot.clone(),
            seq: *seq,
            mailbox_ttl_ms: ttl_ms,
            ..PresenceReport::default()
        }
    };
    let mut out = Vec::new();
    let mut report = new(seq);
    let mut missed_bytes = 0;
    for (user, change) in changes {
        let sessions = hub.user_sessions(&user);
        if sessions.missed_since_ms > 0 {
            // Each entry: the key, its length byte, a type byte, 8 bytes.
            let bytes = user.len() + 10;
            if missed_bytes + bytes > MAX_MISSED_BYTES {
                out.push(std::mem::replace(&mut report, new(seq)));
                missed_bytes = 0;
            }
            missed_bytes += bytes;
        }
        match change {
            Change::Online => report.online.push(user.to_string()),
            Change::Offline => report.offline.push(user.to_string()),
            Change::Sessions => {}
        }
        report.detail.push(sessions);
    }
    out.push(report);
    out
}

/// Send a snapshot of every mailbox of `hub`, in parts of at most
/// [`MAX_REPORT_USERS`] users with consecutive numbers (one empty part
/// when there is no mailbox). Changes still pending are reported after
/// it: a router applies them on top.
fn send_snapshot(
    config: &BatcherConfig,
    seq: &mut u64,
    ttl_ms: u64,
    hub: &impl Mailboxes,
    out: &broadcast::Sender<Arc<PresenceReport>>,
) {
    let held = hub.held();
    let parts = held.len().div_ceil(MAX_REPORT_USERS).max(1);
    let parts_u32 = u32::try_from(parts).unwrap_or(u32::MAX);
    let mut chunks = held.chunks(MAX_REPORT_USERS);
    for part in 1..=parts_u32 {
        *seq += 1;
        let report = PresenceReport {
            edge: config.edge.clone(),
            boot: config.boot.clone(),
            seq: *seq,
            detail: chunks.next().map(<[_]>::to_vec).unwrap_or_default(),
            mailbox_ttl_ms: ttl_ms,
            sync: Some(SyncPart {
                part,
                parts: parts_u32,
            }),
            ..PresenceReport::default()
        };
        let _ = out.send(Arc::new(report));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_engine::presence::view::MailboxSessions;

    /// Alice with two sessions (and, for snapshots, `idle` users more
    /// without one).
    struct Fake(usize);

    fn alice() -> MailboxSessions {
        MailboxSessions {
            site: "s".into(),
            client: Some("acme".into()),
            since_ms: 7,
            by_transport: [("websocket".to_owned(), 2)].into(),
        }
    }

    impl Mailboxes for Fake {
        /// Alice, and users named `moved-...` who came from another edge.
        fn user_sessions(&self, user: &str) -> UserSessions {
            UserSessions {
                user: user.to_owned(),
                mailboxes: match user {
                    "alice" => vec![alice()],
                    u if u.starts_with("moved-") => vec![alice()],
                    _ => vec![],
                },
                missed_since_ms: if user.starts_with("moved-") { 5 } else { 0 },
            }
        }

        fn held(&self) -> Vec<UserSessions> {
            let mut out = vec![UserSessions {
                user: "alice".into(),
                mailboxes: vec![alice()],
                missed_since_ms: 0,
            }];
            out.extend((0..self.0).map(|i| UserSessions {
                user: format!("idle-{i}"),
                mailboxes: vec![MailboxSessions {
                    by_transport: Default::default(),
                    since_ms: 0,
                    ..alice()
                }],
                missed_since_ms: 0,
            }));
            out
        }
    }

    /// Batches of 100 ms, a heartbeat every 10 s, snapshots every `sync`.
    fn batcher_config(sync: Duration) -> BatcherConfig {
        BatcherConfig {
            edge: "e1".into(),
            boot: "b1".into(),
            batch: Duration::from_millis(100),
            heartbeat: Duration::from_secs(10),
            mailbox_ttl: Duration::from_secs(300),
            sync,
        }
    }

    #[test]
    fn a_batch_of_many_moved_users_is_split_to_keep_the_missed_header_bounded() {
        let config = batcher_config(Duration::from_secs(60));
        // 1,000 users with 200-byte ids came from a dead edge: 210 KB of
        // missed-since entries, more than one header may hold.
        let moved: Vec<(Arc<str>, Change)> = (0..1_000)
            .map(|i| (Arc::from(format!("moved-{i:0>194}")), Change::Online))
            .chain([(Arc::from("alice"), Change::Sessions)])
            .collect();
        let mut seq = 7;
        let out = reports(&config, &mut seq, 300_000, &Fake(0), moved.into_iter());
        assert!(out.len() >= 4, "{} reports", out.len());
        assert_eq!(seq, 7 + out.len() as u64);
        for (i, r) in out.iter().enumerate() {
            assert_eq!(r.seq, 8 + i as u64, "numbered in order");
            let bytes: usize = r
                .detail
                .iter()
                .filter(|u| u.missed_since_ms > 0)
                .map(|u| u.user.len() + 10)
                .sum();
            assert!(bytes <= MAX_MISSED_BYTES, "{bytes}");
            assert_eq!(
                r.online.len(),
                r.detail.iter().filter(|u| u.user != "alice").count()
            );
        }
        let users: usize = out.iter().map(|r| r.detail.len()).sum();
        assert_eq!(users, 1_001, "every user in exactly one report");
        // A batch with nobody who moved is one report, as before.
        let mut seq = 0;
        let one = reports(
            &config,
            &mut seq,
            300_000,
            &Fake(0),
            [(Arc::from("alice"), Change::Online)].into_iter(),
        );
        assert_eq!(
            (one.len(), seq, one[0].detail[0].missed_since_ms),
            (1, 1, 0)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn snapshots_come_in_numbered_parts_when_asked_and_every_sync_interval() {
        let (_reporter, rx) = channel(16, Arc::new(Metrics::default()));
        let (out, mut reports) = broadcast::channel(16);
        let shutdown = CancellationToken::new();
        let config = BatcherConfig {
            edge: "e1".into(),
            boot: "b1".into(),
            batch: Duration::from_millis(100),
            heartbeat: Duration::from_secs(3600),
            mailbox_ttl: Duration::from_secs(300),
            sync: Duration::from_secs(60),
        };
        let (syncs, requests) = SyncRequests::channel();
        let task = tokio::spawn(run_batcher(
            config,
            rx,
            out,
            Fake(MAX_REPORT_USERS),
            requests,
            shutdown.clone(),
        ));
        let beat = reports.recv().await.unwrap();
        assert_eq!(
            (beat.seq, beat.sync, beat.mailbox_ttl_ms),
            (1, None, 300_000)
        );
        let started = tokio::time::Instant::now();
        syncs.request();
        syncs.request();
        let one = reports.recv().await.unwrap();
        let two = reports.recv().await.unwrap();
        assert_eq!(started.elapsed(), Duration::ZERO, "asked for: at once");
        assert_eq!(
            (one.seq, one.sync),
            (2, Some(SyncPart { part: 1, parts: 2 }))
        );
        assert_eq!(
            (two.seq, two.sync),
            (3, Some(SyncPart { part: 2, parts: 2 }))
        );
        assert_eq!(one.detail.len() + two.detail.len(), MAX_REPORT_USERS + 1);
        assert!(
            two.detail
                .iter()
                .chain(&one.detail)
                .any(|u| u.mailboxes[0].total() == 0)
        );
        assert_eq!(one.mailbox_ttl_ms, 300_000);
        // Two requests before the batcher took one: one snapshot. The next
        // comes a sync interval after the one asked for.
        let next = reports.recv().await.unwrap();
        assert_eq!(started.elapsed(), Duration::from_secs(60));
        assert_eq!((next.seq, next.sync.unwrap().part), (4, 1));
        shutdown.cancel();
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn changes_are_coalesced_per_user_and_heartbeats_fill_the_silence() {
        let metrics = Arc::new(Metrics::default());
        let (reporter, rx) = channel(16, metrics);
        let (out, mut reports) = broadcast::channel(8);
        let shutdown = CancellationToken::new();
        let config = batcher_config(Duration::from_secs(3600));
        let task = tokio::spawn(run_batcher(
            config,
            rx,
            out,
            Fake(1),
            SyncRequests::channel().1,
            shutdown.clone(),
        ));
        // The interval's first tick is immediate: a heartbeat at start.
        let first = reports.recv().await.unwrap();
        assert!(first.online.is_empty() && first.offline.is_empty());
        assert_eq!(first.seq, 1, "reports are numbered from 1");
        let (a, b): (Arc<str>, Arc<str>) = ("alice".into(), "bob".into());
        reporter.online(&a);
        reporter.sessions(&a);
        reporter.online(&b);
        reporter.offline(&b);
        reporter.sessions(&b);
        let r = reports.recv().await.unwrap();
        assert_eq!(r.online, vec!["alice"], "coming online wins over a count");
        assert_eq!(r.offline, vec!["bob"], "the last change of a user wins");
        let mut detail = r.detail.clone();
        detail.sort_by(|x, y| x.user.cmp(&y.user));
        assert_eq!(detail.len(), 2, "every changed user is in the detail");
        assert_eq!(detail[0].user, "alice");
        assert_eq!(detail[0].mailboxes[0].total(), 2);
        assert!(detail[1].mailboxes.is_empty(), "bob has no session left");
        let (c, d): (Arc<str>, Arc<str>) = ("carol".into(), "dave".into());
        reporter.online(&c);
        let r = reports.recv().await.unwrap();
        assert_eq!(r.online, vec!["carol"]);
        reporter.sessions(&d);
        let r = reports.recv().await.unwrap();
        assert!(r.online.is_empty() && r.offline.is_empty());
        assert_eq!(r.detail.len(), 1, "a change of count alone is reported");
        assert_eq!((r.edge.as_str(), r.boot.as_str()), ("e1", "b1"));
        let started = tokio::time::Instant::now();
        let beat = reports.recv().await.unwrap();
        assert!(beat.online.is_empty() && beat.offline.is_empty());
        assert_eq!(started.elapsed(), Duration::from_secs(10));
        shutdown.cancel();
        task.await.unwrap();
    }
}
