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
//! [`view`]: standalone, the presence API answered from the hub.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use herald_amqp::presence::{MAX_REPORT_USERS, PresenceReport};
use herald_engine::schedule::presence::view::{MailboxSessions, UserSessions};
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
}

/// A reporter, and the receiving end for [`run_batcher`].
pub fn channel(
    bound: usize,
    metrics: Arc<Metrics>,
) -> (PresenceReporter, mpsc::Receiver<(Arc<str>, Change)>) {
    let (tx, rx) = mpsc::channel(bound.max(1));
    (PresenceReporter { tx, metrics }, rx)
}

/// Coalesce changes into reports until `shutdown`; `sessions` reads a
/// user's live mailboxes as a report is made ([`crate::hub::Hub::sessions_of`]).
pub async fn run_batcher(
    config: BatcherConfig,
    mut rx: mpsc::Receiver<(Arc<str>, Change)>,
    out: broadcast::Sender<Arc<PresenceReport>>,
    sessions: impl Fn(&str) -> Vec<MailboxSessions> + Send,
    shutdown: CancellationToken,
) {
    let mut pending: HashMap<Arc<str>, Change> = HashMap::new();
    let mut heartbeat = tokio::time::interval(config.heartbeat);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
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
        }
        seq += 1;
        let mut report = PresenceReport {
            edge: config.edge.clone(),
            boot: config.boot.clone(),
            seq,
            ..PresenceReport::default()
        };
        for (user, change) in pending.drain() {
            match change {
                Change::Online => report.online.push(user.to_string()),
                Change::Offline => report.offline.push(user.to_string()),
                Change::Sessions => {}
            }
            report.detail.push(UserSessions {
                mailboxes: sessions(&user),
                user: user.to_string(),
            });
        }
        flush_at = None;
        heartbeat.reset();
        // No link connected: nobody to tell; the next heartbeat after a
        // reconnect tells the routers this edge is alive.
        let _ = out.send(Arc::new(report));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn changes_are_coalesced_per_user_and_heartbeats_fill_the_silence() {
        let metrics = Arc::new(Metrics::default());
        let (reporter, rx) = channel(16, metrics);
        let (out, mut reports) = broadcast::channel(8);
        let shutdown = CancellationToken::new();
        let config = BatcherConfig {
            edge: "e1".into(),
            boot: "b1".into(),
            batch: Duration::from_millis(100),
            heartbeat: Duration::from_secs(10),
        };
        let sessions = |user: &str| match user {
            "alice" => vec![MailboxSessions {
                site: "s".into(),
                client: Some("acme".into()),
                since_ms: 7,
                by_transport: [("websocket".to_owned(), 2)].into(),
            }],
            _ => vec![],
        };
        let task = tokio::spawn(run_batcher(config, rx, out, sessions, shutdown.clone()));
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
