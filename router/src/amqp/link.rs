//! [`AmqpLink`]: the [`Link`] of the distributed router. The HTTP publish
//! API hands it batches; it publishes them to the edges exchange and answers
//! once the broker has confirmed every one. The delayed firer uses
//! [`Link::send`] instead: it publishes the next batch while the confirms
//! of the ones before are still on their way.
//!
//! The link does not own a connection. The current session puts its
//! [`Publisher`] in a [`PublisherSlot`] and takes it out when the connection
//! goes; between the two the link fails fast (HTTP 503) instead of waiting
//! for a reconnect.

use std::sync::Arc;
use std::time::Duration;

use herald_protocol::envelope::Notification;
use tokio::sync::watch;

use super::publisher::{Forwarded, Publisher};
use crate::link::{Link, LinkError, LinkFuture, SendFuture, Taken};

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

/// The AMQP [`Link`]: publishes to the edges exchange with confirms.
#[derive(Debug, Clone)]
pub struct AmqpLink {
    slot: PublisherSlot,
    timeout: Duration,
}

impl AmqpLink {
    /// A link publishing through whatever publisher `slot` holds, failing a
    /// batch the broker has not confirmed within `timeout` (e.g. while a
    /// resource alarm blocks publishers).
    pub fn new(slot: PublisherSlot, timeout: Duration) -> Self {
        AmqpLink { slot, timeout }
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
        let mut confirms = Vec::with_capacity(batch.len());
        let sending = async {
            for n in &batch {
                let confirm = publisher
                    .send(n)
                    .await
                    .map_err(|e| LinkError(format!("AMQP: {e}")))?;
                confirms.push(confirm);
            }
            Ok::<(), LinkError>(())
        };
        match tokio::time::timeout_at(deadline, sending).await {
            Ok(r) => r?,
            Err(_) => return Err(not_confirmed(timeout)),
        }
        let confirmed = async move {
            for (n, confirm) in batch.iter().zip(confirms) {
                match publisher.confirmed(confirm).await {
                    Ok(Forwarded::Routed) => {}
                    Ok(Forwarded::Unroutable) => {
                        tracing::debug!(id = %n.id, "no edge is bound to the edges exchange")
                    }
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

/// Most publishes in one [`Link::send`] of the delayed firer.
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

    /// One wait for confirms covers at most this many publishes, so the
    /// delayed firer's queue of batches waiting for confirms (8) holds at
    /// most 8,000 messages.
    fn batch_limit(&self) -> usize {
        SEND_BATCH
    }
}
