//! [`AlertTask`]: takes alerts from the queue, coalesces them per kind,
//! and sends each message to every channel. Sends run side by side
//! within the task (at most one message per kind per interval, each
//! bounded by its timeout, so few are ever in flight), and the loop keeps
//! taking alerts while they run. A failed send is logged and counted,
//! never retried.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::coalesce::{Coalescer, Digest};
use super::config::Channels;
use super::mail::Mail;
use super::message::{Message, render};
use super::metrics::AlertMetrics;
use super::webhook::Webhook;
use super::{Alert, Kind, SEND_TIMEOUT, now_ms};
use crate::task::{Task, TaskFuture};

/// Longest the task sleeps with nothing held (it wakes for any alert).
const IDLE: Duration = Duration::from_secs(3600);

/// Where a message goes.
enum Channel {
    Webhook(Webhook),
    Mail(Mail),
}

impl Channel {
    async fn send(&self, message: &Message) -> Result<(), String> {
        match self {
            Channel::Webhook(w) => w.send(&message.text).await,
            Channel::Mail(m) => m.send(&message.subject, &message.text).await,
        }
    }
}

/// A channel by name (`webhook`, `mail`), or why it could not be set up
/// (then every message to it fails, logged and counted).
pub(crate) struct Out {
    name: &'static str,
    channel: Result<Arc<Channel>, String>,
}

/// The channels of `channels`, set up.
pub(crate) fn outs(channels: Channels) -> Vec<Out> {
    let mut outs = Vec::new();
    if let Some(url) = channels.webhook {
        outs.push(out("webhook", Webhook::new(url).map(Channel::Webhook)));
    }
    if let Some(mail) = channels.mail {
        outs.push(out("mail", Mail::new(mail).map(Channel::Mail)));
    }
    outs
}

fn out(name: &'static str, channel: Result<Channel, String>) -> Out {
    if let Err(e) = &channel {
        tracing::error!(channel = name, error = %e, "alert channel cannot be used: every alert to it fails");
    }
    Out {
        name,
        channel: channel.map(Arc::new),
    }
}

/// The outcome of one message to one channel.
struct Sent {
    kind: Kind,
    channel: &'static str,
    alerts: u64,
    result: Result<(), String>,
}

type Sending = FuturesUnordered<Pin<Box<dyn Future<Output = Sent> + Send>>>;

/// The task that sends alerts (from [`super::Alerts::task`]). Runs until
/// its shutdown token fires; then it lets the messages in flight finish
/// (within [`SEND_TIMEOUT`]) and logs how many held alerts were not sent.
pub struct AlertTask {
    queue: mpsc::Receiver<Alert>,
    outs: Vec<Out>,
    coalescers: [Coalescer<Alert>; 3],
    metrics: AlertMetrics,
}

impl std::fmt::Debug for AlertTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlertTask")
            .field(
                "channels",
                &self.outs.iter().map(|o| o.name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Task for AlertTask {
    fn name(&self) -> &'static str {
        "alerts"
    }

    fn run(self: Box<Self>, shutdown: CancellationToken) -> TaskFuture {
        Box::pin(self.serve(shutdown))
    }
}

impl AlertTask {
    pub(crate) fn new(
        queue: mpsc::Receiver<Alert>,
        outs: Vec<Out>,
        interval_ms: u64,
        metrics: AlertMetrics,
    ) -> Self {
        AlertTask {
            queue,
            outs,
            coalescers: Kind::ALL.map(|_| Coalescer::new(interval_ms)),
            metrics,
        }
    }

    async fn serve(mut self: Box<Self>, shutdown: CancellationToken) {
        let mut sending = Sending::new();
        loop {
            let now = now_ms();
            for kind in Kind::ALL {
                if let Some(digest) = self.coalescers[kind.index()].poll(now) {
                    self.dispatch(kind, &digest, &mut sending);
                }
            }
            let deadline = self.coalescers.iter().filter_map(Coalescer::deadline).min();
            let wait = deadline.map(|d| Duration::from_millis(d.saturating_sub(now)));
            tokio::select! {
                _ = shutdown.cancelled() => break,
                alert = self.queue.recv() => {
                    let Some(alert) = alert else { break };
                    let kind = alert.kind();
                    if let Some(digest) = self.coalescers[kind.index()].offer(alert, now_ms()) {
                        self.dispatch(kind, &digest, &mut sending);
                    }
                }
                Some(sent) = sending.next(), if !sending.is_empty() => self.record(sent),
                _ = tokio::time::sleep(wait.unwrap_or(IDLE)), if wait.is_some() => {}
            }
        }
        self.wind_down(sending).await;
    }

    /// Send `digest` to every channel (in flight in `sending`).
    fn dispatch(&self, kind: Kind, digest: &Digest<Alert>, sending: &mut Sending) {
        let message = Arc::new(render(kind, digest));
        let alerts = digest.alerts();
        for out in &self.outs {
            let (channel, target, message) = (out.name, out.channel.clone(), message.clone());
            sending.push(Box::pin(async move {
                let result = match target {
                    Ok(target) => target.send(&message).await,
                    Err(e) => Err(e),
                };
                Sent {
                    kind,
                    channel,
                    alerts,
                    result,
                }
            }));
        }
    }

    fn record(&self, sent: Sent) {
        let Sent {
            kind,
            channel,
            alerts,
            result,
        } = sent;
        match result {
            Ok(()) => {
                self.metrics.count(kind.label(), channel, "sent", alerts);
                tracing::info!(alert = kind.label(), channel, alerts, "alert sent");
            }
            Err(error) => {
                self.metrics.count(kind.label(), channel, "failed", alerts);
                tracing::warn!(alert = kind.label(), channel, alerts, %error, "alert not sent");
            }
        }
    }

    /// Let the sends in flight finish (within [`SEND_TIMEOUT`]); say what
    /// was held and will not be sent.
    async fn wind_down(mut self: Box<Self>, mut sending: Sending) {
        self.queue.close();
        let mut queued = [0u64; 3];
        while let Ok(alert) = self.queue.try_recv() {
            queued[alert.kind().index()] += 1;
        }
        let drain = async {
            while let Some(sent) = sending.next().await {
                self.record(sent);
            }
        };
        if tokio::time::timeout(SEND_TIMEOUT, drain).await.is_err() {
            tracing::warn!("alerts still being sent at shutdown were abandoned");
        }
        for kind in Kind::ALL {
            let held = self.coalescers[kind.index()].held() + queued[kind.index()];
            if held > 0 {
                tracing::warn!(
                    alert = kind.label(),
                    held,
                    "alerts held for a summary were not sent: shutting down (each was logged)"
                );
            }
        }
    }
}
