//! A session's forwards in flight, taken back in delivery order, settled
//! and acked: [`InFlight`] and the [`Ingest`] methods that settle what it
//! gives back. See the parent module's docs for the data flow.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use lapin::Channel;
use lapin::options::BasicAckOptions;
use lapin::types::DeliveryTag;
use prometheus_client::metrics::counter::Counter;

use super::ordered::Ordered;
use super::{Confirmed, Forward, Ingest, SOURCE, Sent};
use herald_amqp::publisher::Forwarded;
use herald_amqp::supervisor::SessionError;
use herald_engine::schedule::timing::now_ms;
use herald_engine::stats::Event;

/// The write of a `basic.ack` to the socket.
pub(super) type AckWrite = Pin<Box<dyn Future<Output = lapin::Result<()>> + Send>>;

/// A session's forwards in flight and the acks they release. See the
/// [`ingest`](super) module docs.
pub(super) struct InFlight {
    /// The consumer's channel: deliveries are acked there.
    channel: Channel,
    /// Forwards sent and not taken back yet (at most `prefetch`).
    pub(super) forwards: Ordered<Forward>,
    /// The last `basic.ack` sent, until it is written. lapin writes a
    /// channel's acks in the order they were sent, so this one written means
    /// every one before it was; a newer ack replaces it (one at most).
    pub(super) ack_write: Option<AckWrite>,
}

impl Ingest {
    /// Settle `confirmed` and every other forward taken back now, then ack
    /// their deliveries with one `basic.ack`. On a failure, the deliveries
    /// before the failed one are still acked.
    pub(super) async fn settle_ready(
        &self,
        confirmed: Confirmed,
        flight: &mut InFlight,
        accepted: &Counter,
    ) -> Result<(), SessionError> {
        let mut through = None;
        let mut next = Some(confirmed);
        let mut outcome = Ok(());
        while let Some(confirmed) = next {
            let tag = confirmed.delivery_tag;
            if let Err(e) = self.settle(confirmed, accepted) {
                outcome = Err(e);
                break;
            }
            through = Some(tag);
            next = flight.forwards.next_ready().await;
        }
        if let Some(through) = through {
            flight.ack(through).await?;
        }
        outcome
    }

    /// Whether the delivery of a forward taken back may be acked; count it.
    /// Any failure ends the session, leaving the delivery unacked.
    ///
    /// An unroutable forward to the edges is fine (no edge is listening; it
    /// is counted). An unroutable dead letter is not: its queue is gone, so
    /// the session ends and the next one declares it again before the
    /// publication comes back.
    fn settle(&self, confirmed: Confirmed, accepted: &Counter) -> Result<(), SessionError> {
        let Confirmed {
            delivery_tag,
            outcome,
            sent,
        } = confirmed;
        match (outcome, &sent) {
            (Ok(Forwarded::Routed), _) => {}
            (Ok(Forwarded::Unroutable), Sent::Edges { .. }) => {
                tracing::debug!(
                    delivery_tag,
                    "forward confirmed, but no edge queue is bound"
                )
            }
            (
                Ok(Forwarded::Unroutable),
                Sent::Stored { .. } | Sent::Cancelled { .. } | Sent::Duplicate { .. },
            ) => {}
            (Ok(Forwarded::Unroutable), Sent::Dead { .. }) => {
                tracing::warn!(
                    delivery_tag,
                    "the dead-letter exchange routes to no queue; declaring it again"
                );
                return Err(SessionError::Lost("a dead letter was unroutable".into()));
            }
            (Err(e), _) => {
                tracing::warn!(delivery_tag, error = %e, "a forward was not confirmed; the delivery will be redelivered");
                return Err(SessionError::Lost("a forward failed".into()));
            }
        }
        match sent {
            Sent::Edges {
                notification: n,
                redelivered,
            } => {
                accepted.inc();
                let topics = &self.inner.publish_metrics.topics;
                topics.record(n.topic.as_deref(), Event::Accepted, 1, now_ms());
                tracing::debug!(id = %n.id, event = %n.event, scope = %n.scope, redelivered, "forwarded to the edges");
            }
            Sent::Stored {
                id,
                due_ms,
                duplicate,
                topic,
            } => {
                accepted.inc();
                let topics = &self.inner.publish_metrics.topics;
                topics.record(topic.as_deref(), Event::Accepted, 1, now_ms());
                if duplicate {
                    self.inner.ledger.count_duplicates(SOURCE, 1);
                }
                tracing::debug!(id = %id, due_ms, duplicate, "delayed publication stored");
            }
            Sent::Duplicate { id } => {
                self.inner.ledger.count_duplicates(SOURCE, 1);
                tracing::debug!(id = %id, "duplicate publication acked, sent nowhere");
            }
            Sent::Cancelled { id, too_late } => {
                tracing::debug!(id = %id, too_late, "cancel applied");
            }
            Sent::Dead {
                rejection,
                message_id,
                routing_key,
            } => {
                self.inner.publish_metrics.reject(SOURCE, rejection.kind);
                tracing::warn!(
                    reason = %rejection.reason,
                    field = rejection.field,
                    message_id = message_id.as_ref().map(|m| m.as_str()),
                    routing_key = routing_key.as_str(),
                    "publication refused and dead-lettered"
                );
            }
        }
        Ok(())
    }
}

impl InFlight {
    /// Nothing in flight yet on the consumer's `channel`.
    pub(super) fn new(channel: Channel) -> Self {
        InFlight {
            channel,
            forwards: Ordered::new(),
            ack_write: None,
        }
    }

    /// Ack every delivery up to `through` with one `basic.ack`
    /// (`multiple`).
    async fn ack(&mut self, through: DeliveryTag) -> Result<(), SessionError> {
        let channel = self.channel.clone();
        let mut write: AckWrite = Box::pin(async move {
            channel
                .basic_ack(through, BasicAckOptions { multiple: true })
                .await
        });
        // Polled once here, the ack is queued for the socket now.
        match poll_once(write.as_mut()).await {
            Some(Ok(())) => self.ack_write = None,
            Some(Err(e)) => {
                tracing::warn!(error = %e, through, "cannot ack forwarded deliveries; they will be redelivered");
                return Err(e.into());
            }
            None => self.ack_write = Some(write),
        }
        Ok(())
    }
}

/// Wait until the last ack sent is written (at once if there is none), and
/// forget it.
pub(super) async fn ack_written(write: &mut Option<AckWrite>) -> lapin::Result<()> {
    let result = match write.as_mut() {
        Some(w) => w.await,
        None => Ok(()),
    };
    *write = None;
    result
}

/// Poll `future` once: its output if it is ready, else `None` (the task is
/// woken when it makes progress, as after any poll).
async fn poll_once<F: Future + Unpin>(mut future: F) -> Option<F::Output> {
    std::future::poll_fn(|cx| match Pin::new(&mut future).poll(cx) {
        Poll::Ready(output) => Poll::Ready(Some(output)),
        Poll::Pending => Poll::Ready(None),
    })
    .await
}
