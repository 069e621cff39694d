//! The traffic of a run: the publishers, each publishing its share of the publications with
//! confirms in a sliding window, and the edges consumer counting what the router forwarded.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use futures_util::StreamExt as _;
use lapin::options::BasicAckOptions;
use lapin::{Channel, Consumer};
use tokio_util::sync::CancellationToken;

use crate::harness::amqp::{self, Confirmed, Outgoing, Publisher};

/// Routing key and `event` header of the publications.
pub(super) const EVENT: &str = "bench.throughput";
/// Publications go to this many distinct users (`bench-0-{k % USERS}`).
pub(super) const USERS: u64 = 1000;
/// The message id of publication `seq`.
pub(super) fn message_id(seq: u64) -> String {
    format!("tp-{seq}")
}

/// The `seq` of a message id made by [`message_id`].
pub(super) fn parse_message_id(id: &str) -> Option<u64> {
    id.strip_prefix("tp-")?.parse().ok()
}

/// What one publisher did.
#[derive(Debug, Default)]
pub(super) struct Published {
    pub(super) published: u64,
    pub(super) confirmed: Confirmed,
    /// When its last confirm arrived.
    pub(super) done_at: Option<Instant>,
    pub(super) error: Option<String>,
}

impl Published {
    /// Adds up the publishers' results.
    pub(super) fn merge(
        &mut self,
        joined: Result<Published, tokio::task::JoinError>,
        errors: &mut Vec<String>,
    ) {
        let p = joined.unwrap_or_else(|e| Published {
            error: Some(format!("publisher task: {e}")),
            ..Published::default()
        });
        self.published += p.published;
        self.confirmed.add(p.confirmed);
        self.done_at = self.done_at.max(p.done_at);
        errors.extend(p.error);
    }
}

/// What the edges consumer saw.
#[derive(Debug, Default)]
pub(super) struct Forwarded {
    /// Deliveries, duplicates included.
    pub(super) received: u64,
    /// Distinct publications of this run.
    pub(super) distinct: u64,
    /// Deliveries of a publication already seen (the router redelivers after a failure).
    pub(super) duplicates: u64,
    /// Deliveries whose message id is not one of this run's.
    pub(super) foreign: u64,
    /// When the last distinct publication arrived.
    pub(super) last_at: Option<Instant>,
    pub(super) error: Option<String>,
}

/// Live counters for the progress line and the stall check.
#[derive(Debug, Default)]
pub(super) struct Progress {
    pub(super) published: AtomicU64,
    pub(super) confirmed: AtomicU64,
    pub(super) forwarded: AtomicU64,
}

/// The publications of one publisher: `first`, `first + step`, ... below `end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Share {
    pub(super) first: u64,
    pub(super) step: u64,
    pub(super) end: u64,
}

impl Share {
    fn seqs(self) -> impl Iterator<Item = u64> {
        (self.first..self.end).step_by(self.step as usize)
    }
}

/// Publishes a share in batches; at most `window` publications are unconfirmed at a time
/// (the oldest batch's confirms are awaited when the next batch would exceed it).
pub(super) async fn publish_share(
    publisher: Publisher,
    share: Share,
    batch: usize,
    window: usize,
    payload_bytes: usize,
    persistent: bool,
    progress: Arc<Progress>,
) -> Published {
    let mut out = Published::default();
    let mut pending: std::collections::VecDeque<Vec<lapin::PublisherConfirm>> =
        std::collections::VecDeque::new();
    let mut unconfirmed = 0usize;
    let routing_key: lapin::types::ShortString = EVENT.into();
    let mut seqs = share.seqs().peekable();
    while seqs.peek().is_some() {
        let messages: Vec<Outgoing> = seqs
            .by_ref()
            .take(batch)
            .map(|seq| Outgoing {
                routing_key: routing_key.clone(),
                properties: amqp::publication(
                    &message_id(seq),
                    EVENT,
                    &crate::harness::token::user_id(0, (seq % USERS) as usize),
                    persistent,
                ),
                body: amqp::payload(seq, payload_bytes),
            })
            .collect();
        let n = messages.len();
        while unconfirmed + n > window {
            let Some(oldest) = pending.pop_front() else {
                break;
            };
            unconfirmed -= oldest.len();
            let c = amqp::settle(oldest).await;
            progress.confirmed.fetch_add(c.acked, Ordering::Relaxed);
            out.confirmed.add(c);
        }
        match publisher.publish_batch(messages).await {
            Ok(confirms) => {
                out.published += confirms.len() as u64;
                progress
                    .published
                    .fetch_add(confirms.len() as u64, Ordering::Relaxed);
                unconfirmed += confirms.len();
                pending.push_back(confirms);
            }
            Err(e) => {
                out.error = Some(format!("publishing: {e}"));
                break;
            }
        }
    }
    for confirms in pending {
        let c = amqp::settle(confirms).await;
        progress.confirmed.fetch_add(c.acked, Ordering::Relaxed);
        out.confirmed.add(c);
    }
    out.done_at = Some(Instant::now());
    out
}

/// Consumes the edges queue until every one of the `n` publications has arrived (or
/// `cancel`), acking every `ack_every` deliveries at once.
pub(super) async fn consume(
    mut consumer: Consumer,
    channel: Channel,
    n: u64,
    ack_every: u64,
    progress: Arc<Progress>,
    cancel: CancellationToken,
) -> Forwarded {
    let mut out = Forwarded::default();
    let mut seen = vec![false; n as usize];
    let mut unacked = 0u64;
    let multiple = BasicAckOptions { multiple: true };
    loop {
        let delivery = tokio::select! {
            biased;
            _ = cancel.cancelled() => break,
            d = consumer.next() => d,
        };
        let delivery = match delivery {
            Some(Ok(d)) => d,
            Some(Err(e)) => {
                out.error = Some(format!("edges consumer: {e}"));
                break;
            }
            None => {
                out.error = Some("the broker ended the edges consumer".into());
                break;
            }
        };
        out.received += 1;
        let seq = delivery
            .properties
            .message_id()
            .as_ref()
            .and_then(|id| parse_message_id(id.as_str()))
            .filter(|&seq| seq < n);
        match seq {
            Some(seq) if !seen[seq as usize] => {
                seen[seq as usize] = true;
                out.distinct += 1;
                progress.forwarded.store(out.distinct, Ordering::Relaxed);
            }
            Some(_) => out.duplicates += 1,
            None => out.foreign += 1,
        }
        unacked += 1;
        let done = out.distinct == n;
        if done {
            out.last_at = Some(Instant::now());
        }
        if unacked >= ack_every || done {
            if let Err(e) = channel.basic_ack(delivery.delivery_tag, multiple).await {
                out.error = Some(format!("acking the edges queue: {e}"));
                break;
            }
            unacked = 0;
        }
        if done {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_ids_round_trip() {
        assert_eq!(message_id(42), "tp-42");
        assert_eq!(parse_message_id("tp-42"), Some(42));
        assert_eq!(parse_message_id("lat-42-1"), None);
        assert_eq!(parse_message_id("tp-x"), None);
    }

    #[test]
    fn shares_cover_every_publication_once() {
        let shares: Vec<Share> = (0..3)
            .map(|first| Share {
                first,
                step: 3,
                end: 10,
            })
            .collect();
        let mut all: Vec<u64> = shares.iter().flat_map(|s| s.seqs()).collect();
        all.sort_unstable();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
        assert_eq!(shares[1].seqs().collect::<Vec<_>>(), [1, 4, 7]);
    }
}
