//! [`AmqpLink`]: the [`Link`] of the distributed router. The HTTP publish
//! API hands it batches; it publishes them to the edges exchange and answers
//! once the broker has confirmed every one. The delayed firer uses
//! [`Link::send`] instead: it publishes the next batch while the confirms
//! of the ones before are still on their way. A batch goes as bundles
//! ([`herald_protocol::bundle`]) of up to [`Bundling::max`] notifications
//! each: one message, one confirm and one delivery to each edge for many
//! notifications.
//!
//! The link does not own a connection. The current session puts its
//! [`Publisher`] in a [`PublisherSlot`] and takes it out when the connection
//! goes; between the two the link fails fast (HTTP 503) instead of waiting
//! for a reconnect.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use herald_protocol::envelope::Notification;
use herald_protocol::{binary, bundle};
use tokio::sync::watch;

use super::publisher::{Forwarded, Publisher, in_order};
use herald_engine::link::{DisconnectFuture, Link, LinkError, LinkFuture, SendFuture, Taken};

/// Where the current session's [`Publisher`] lives. Clones share the slot.
#[derive(Debug, Clone)]
pub struct PublisherSlot {
    tx: Arc<watch::Sender<Option<Publisher>>>,
}

impl Default for PublisherSlot {
    fn default() -> Self {
        PublisherSlot {
            tx: Arc::new(watch::Sender::new(None)),
        }
    }
}

impl PublisherSlot {
    /// An empty slot.
    pub fn new() -> Self {
        PublisherSlot::default()
    }

    /// Put `publisher` in the slot until the returned guard drops.
    pub fn fill(&self, publisher: Publisher) -> SlotGuard {
        self.tx.send_replace(Some(publisher));
        SlotGuard { slot: self.clone() }
    }

    /// The current publisher, if connected and its channel is open.
    pub fn current(&self) -> Option<Publisher> {
        self.tx.borrow().as_ref().filter(|p| p.is_open()).cloned()
    }

    /// Whether a publisher is ready (the router is connected to the broker,
    /// with the topology declared).
    pub fn is_ready(&self) -> bool {
        self.tx.borrow().as_ref().is_some_and(Publisher::is_open)
    }

    /// Changes of the slot (e.g. to wait for the first connection).
    pub fn subscribe(&self) -> watch::Receiver<Option<Publisher>> {
        self.tx.subscribe()
    }
}

/// Empties its slot when dropped (the session ended).
#[derive(Debug)]
pub struct SlotGuard {
    slot: PublisherSlot,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        self.slot.tx.send_replace(None);
    }
}

/// The largest bundle a router may make (`amqp.bundle_max_bytes`): an
/// edge's root link takes deliveries of at least this size, and drops
/// (acks, counts) larger ones.
pub const MAX_BUNDLE_BYTES: usize = 16 << 20;

/// How [`AmqpLink`] groups a batch into messages: up to `max`
/// notifications and `max_bytes` of bundle in one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bundling {
    /// Most notifications in one message (1: one message each).
    pub max: usize,
    /// Most bytes in one bundle; a larger notification goes alone.
    pub max_bytes: usize,
}

impl Bundling {
    /// The messages `batch` goes as, in order: ranges of `batch`, each one
    /// message (a range of one is sent as a plain notification).
    pub fn split(&self, batch: &[Arc<Notification>]) -> Vec<Range<usize>> {
        let mut out = Vec::new();
        let mut start = 0;
        let mut bytes = bundle::HEADER_LEN;
        for (i, n) in batch.iter().enumerate() {
            let len = binary::encoded_len(n);
            let full = i - start >= self.max.max(1) || bytes + len > self.max_bytes;
            if i > start && full {
                out.push(start..i);
                start = i;
                bytes = bundle::HEADER_LEN;
            }
            bytes += len;
        }
        if start < batch.len() {
            out.push(start..batch.len());
        }
        out
    }
}

/// The AMQP [`Link`]: publishes to the edges exchange with confirms.
#[derive(Debug, Clone)]
pub struct AmqpLink {
    slot: PublisherSlot,
    timeout: Duration,
    bundling: Bundling,
}

impl AmqpLink {
    /// A link publishing through whatever publisher `slot` holds, grouping
    /// batches as `bundling` says, failing a batch the broker has not
    /// confirmed within `timeout` (e.g. while a resource alarm blocks
    /// publishers).
    pub fn new(slot: PublisherSlot, timeout: Duration, bundling: Bundling) -> Self {
        AmqpLink {
            slot,
            timeout,
            bundling,
        }
    }

    /// Publish `batch` in order (each message handed to the channel
    /// before the next), and return the wait for its confirms: a batch the
    /// broker has not confirmed within the timeout, counted from now,
    /// fails.
    async fn send_batch(&self, batch: Vec<Arc<Notification>>) -> Result<Taken, LinkError> {
        let publisher = self
            .slot
            .current()
            .ok_or_else(|| LinkError("not connected to the AMQP broker".into()))?;
        let deadline = tokio::time::Instant::now() + self.timeout;
        let timeout = self.timeout;
        let messages = self.bundling.split(&batch);
        // Every message handed to the channel in the first poll, in order
        // (see `in_order`): another batch sent meanwhile cannot come
        // between two of this one's.
        let sending = in_order(messages.iter().map(|range| {
            let publisher = &publisher;
            let part = &batch[range.clone()];
            async move {
                match part {
                    [one] => publisher.send(one).await,
                    several => publisher.send_bundle(several).await,
                }
            }
        }));
        let confirms = match tokio::time::timeout_at(deadline, sending).await {
            Ok(r) => r.map_err(|e| LinkError(format!("AMQP: {e}")))?,
            Err(_) => return Err(not_confirmed(timeout)),
        };
        let confirmed = async move {
            for (range, confirm) in messages.into_iter().zip(confirms) {
                match publisher.confirmed(confirm).await {
                    Ok(Forwarded::Routed) => {}
                    Ok(Forwarded::Unroutable) => tracing::debug!(
                        first = %batch[range.start].id,
                        notifications = range.len(),
                        "no edge is bound to the edges exchange"
                    ),
                    Err(e) => return Err(LinkError(e.to_string())),
                }
            }
            Ok(())
        };
        Ok(Box::pin(async move {
            match tokio::time::timeout_at(deadline, confirmed).await {
                Ok(r) => r,
                Err(_) => Err(not_confirmed(timeout)),
            }
        }))
    }
}

/// Most notifications in one [`Link::send`] of the delayed firer.
const SEND_BATCH: usize = 1_000;

fn not_confirmed(timeout: Duration) -> LinkError {
    LinkError(format!(
        "the broker did not confirm within {} ms",
        timeout.as_millis()
    ))
}

impl Link for AmqpLink {
    fn publish(&self, batch: Vec<Arc<Notification>>) -> LinkFuture<'_> {
        Box::pin(async move { self.send_batch(batch).await?.await })
    }

    fn send(&self, batch: Vec<Arc<Notification>>) -> SendFuture<'_> {
        Box::pin(self.send_batch(batch))
    }

    /// One wait for confirms covers at most this many notifications, so
    /// the delayed firer's queue of batches waiting for confirms (8) holds
    /// at most 8,000.
    fn batch_limit(&self) -> usize {
        SEND_BATCH
    }

    /// A disconnect request to every edge ([`crate::control::Disconnect`]),
    /// confirmed by the broker within the timeout; each edge ends the
    /// user's sessions it holds (so the count is theirs: None).
    fn disconnect<'a>(&'a self, user: &'a str, reason: &'a str) -> DisconnectFuture<'a> {
        Box::pin(async move {
            let publisher = self
                .slot
                .current()
                .ok_or_else(|| LinkError("not connected to the AMQP broker".into()))?;
            let request = crate::control::Disconnect {
                user: user.to_owned(),
                reason: reason.to_owned(),
            };
            let (properties, body) = request.to_amqp();
            let sent = async {
                let sent = publisher
                    .send_control(properties, &body)
                    .await
                    .map_err(|e| LinkError(format!("AMQP: {e}")))?;
                match publisher.confirmed(sent).await {
                    Ok(Forwarded::Routed) => Ok(None),
                    Ok(Forwarded::Unroutable) => {
                        tracing::debug!(user, "disconnect: no edge is bound to the edges exchange");
                        Ok(None)
                    }
                    Err(e) => Err(LinkError(e.to_string())),
                }
            };
            match tokio::time::timeout(self.timeout, sent).await {
                Ok(r) => r,
                Err(_) => Err(not_confirmed(self.timeout)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn batch(payloads: &[usize]) -> Vec<Arc<Notification>> {
        payloads
            .iter()
            .enumerate()
            .map(|(i, &len)| {
                Arc::new(Notification {
                    id: format!("n{i}"),
                    scope: herald_protocol::envelope::Scope::Global,
                    users: vec![],
                    clients: vec![],
                    sites: vec![],
                    event: "e".into(),
                    topic: None,
                    content_type: "c".into(),
                    payload: Bytes::from(vec![b'x'; len]),
                    payload_is_utf8: true,
                    ttl: None,
                    encodings: Default::default(),
                    accepted: Default::default(),
                })
            })
            .collect()
    }

    #[test]
    fn a_batch_splits_by_count() {
        let b = Bundling {
            max: 3,
            max_bytes: 1 << 20,
        };
        assert_eq!(b.split(&batch(&[1; 7])), vec![0..3, 3..6, 6..7]);
        assert_eq!(b.split(&[]), Vec::<Range<usize>>::new());
    }

    #[test]
    fn a_batch_splits_by_bytes_and_a_large_one_goes_alone() {
        // Each notification of payload p takes 22 + p bytes in a bundle.
        let b = Bundling {
            max: 100,
            max_bytes: bundle::HEADER_LEN + 2 * (22 + 100),
        };
        let parts = b.split(&batch(&[100, 100, 100, 5_000, 100]));
        assert_eq!(parts, vec![0..2, 2..3, 3..4, 4..5]);
    }

    #[test]
    fn one_per_message_when_bundles_are_off() {
        let b = Bundling {
            max: 1,
            max_bytes: 1 << 20,
        };
        assert_eq!(b.split(&batch(&[1; 3])), vec![0..1, 1..2, 2..3]);
    }
}
