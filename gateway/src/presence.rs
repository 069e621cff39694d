//! Edge mode: tell the roots which users came online and went offline, so
//! routers fire `when-online` notifications at the right time.
//!
//! Sessions report changes through a [`PresenceReporter`] (a bounded
//! queue; when full the change is dropped and counted, policy
//! *drop-newest*: a user whose "online" is lost gets held notifications at
//! their next connect). The [`run_batcher`] task coalesces the changes per
//! user for `edge.presence_batch_ms` (or until `MAX_REPORT_USERS`), and
//! hands each [`PresenceReport`] to every root link through a broadcast
//! channel; with nothing to report it sends an empty report every
//! `edge.presence_heartbeat_ms`, which keeps this edge alive in the routers'
//! eyes.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use herald_amqp::presence::{MAX_REPORT_USERS, PresenceReport};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// Reports handed to the root links, at most this many waiting per link
/// (a link that falls further behind skips the oldest; counted).
pub const LINK_BACKLOG: usize = 64;

/// The sending side, held by [`crate::app::Mode::Edge`].
#[derive(Debug, Clone)]
pub struct PresenceReporter {
    tx: mpsc::Sender<(Arc<str>, bool)>,
    metrics: Arc<Metrics>,
}

impl PresenceReporter {
    /// `user`'s first session on this edge started.
    pub fn online(&self, user: &Arc<str>) {
        self.send(user, true);
    }

    /// `user`'s last session on this edge ended.
    pub fn offline(&self, user: &Arc<str>) {
        self.send(user, false);
    }

    fn send(&self, user: &Arc<str>, online: bool) {
        if self.tx.try_send((Arc::clone(user), online)).is_err() {
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
) -> (PresenceReporter, mpsc::Receiver<(Arc<str>, bool)>) {
    let (tx, rx) = mpsc::channel(bound.max(1));
    (PresenceReporter { tx, metrics }, rx)
}

/// Coalesce changes into reports until `shutdown`.
pub async fn run_batcher(
    config: BatcherConfig,
    mut rx: mpsc::Receiver<(Arc<str>, bool)>,
    out: broadcast::Sender<Arc<PresenceReport>>,
    shutdown: CancellationToken,
) {
    let mut pending: HashMap<Arc<str>, bool> = HashMap::new();
    let mut heartbeat = tokio::time::interval(config.heartbeat);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut flush_at: Option<tokio::time::Instant> = None;
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
                let Some((user, online)) = change else { return };
                pending.insert(user, online);
                flush_at.get_or_insert_with(|| tokio::time::Instant::now() + config.batch);
                if pending.len() < MAX_REPORT_USERS {
                    continue;
                }
            }
            _ = batch_due => {}
            _ = heartbeat.tick() => {}
        }
        let mut report = PresenceReport {
            edge: config.edge.clone(),
            boot: config.boot.clone(),
            ..PresenceReport::default()
        };
        for (user, online) in pending.drain() {
            if online {
                report.online.push(user.to_string());
            } else {
                report.offline.push(user.to_string());
            }
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
        let task = tokio::spawn(run_batcher(config, rx, out, shutdown.clone()));
        // The interval's first tick is immediate: a heartbeat at start.
        let first = reports.recv().await.unwrap();
        assert!(first.online.is_empty() && first.offline.is_empty());
        let (a, b): (Arc<str>, Arc<str>) = ("alice".into(), "bob".into());
        reporter.online(&a);
        reporter.online(&b);
        reporter.offline(&b);
        let r = reports.recv().await.unwrap();
        assert_eq!(r.online, vec!["alice"]);
        assert_eq!(r.offline, vec!["bob"], "the last change of a user wins");
        assert_eq!((r.edge.as_str(), r.boot.as_str()), ("e1", "b1"));
        let started = tokio::time::Instant::now();
        let beat = reports.recv().await.unwrap();
        assert!(beat.online.is_empty() && beat.offline.is_empty());
        assert_eq!(started.elapsed(), Duration::from_secs(10));
        shutdown.cancel();
        task.await.unwrap();
    }
}
