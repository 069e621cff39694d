//! Where accepted notifications go.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use herald_protocol::envelope::Notification;

/// A future returned by [`Link::publish`].
pub type LinkFuture<'a> = Pin<Box<dyn Future<Output = Result<(), LinkError>> + Send + 'a>>;

/// Resolves once the link has taken responsibility for a batch handed
/// over with [`Link::send`] (e.g. the broker confirmed every message).
pub type Taken = Pin<Box<dyn Future<Output = Result<(), LinkError>> + Send + 'static>>;

/// A future returned by [`Link::send`].
pub type SendFuture<'a> = Pin<Box<dyn Future<Output = Result<Taken, LinkError>> + Send + 'a>>;

/// The way out of the router: in-process to local mailboxes (standalone), or
/// over AMQP to every edge (distributed). `publish` resolves once the link
/// has taken responsibility for the whole batch, in order.
pub trait Link: Send + Sync + 'static {
    /// Hand a batch of validated notifications to the link.
    fn publish(&self, batch: Vec<Arc<Notification>>) -> LinkFuture<'_>;

    /// Most notifications [`Link::send`] should get at once (a caller with
    /// more sends several batches). Unbounded by default.
    fn batch_limit(&self) -> usize {
        usize::MAX
    }

    /// Hand a batch over without waiting for the link to take
    /// responsibility for it: resolves once the batch is on its way, in
    /// order after every batch sent before it, with a [`Taken`] that
    /// resolves when the link has it. So a caller can send the next batch
    /// while the first one's confirms are still coming. The default is
    /// [`Link::publish`], then a [`Taken`] that is already resolved.
    fn send(&self, batch: Vec<Arc<Notification>>) -> SendFuture<'_> {
        Box::pin(async move {
            self.publish(batch).await?;
            Ok(Box::pin(std::future::ready(Ok(()))) as Taken)
        })
    }

    /// End every session of `user`, wherever the link reaches, with a STOMP
    /// ERROR giving `reason` (`POST /v1/users/{uid}/disconnect`). A link
    /// that reaches no session refuses.
    fn disconnect<'a>(&'a self, user: &'a str, reason: &'a str) -> DisconnectFuture<'a> {
        let _ = (user, reason);
        Box::pin(std::future::ready(Err(LinkError(
            "this link reaches no session".into(),
        ))))
    }
}

/// What [`Link::disconnect`] did: `Some(n)` sessions told (a link that
/// reaches the sessions itself: standalone), or None when the request went
/// out to edges that tell theirs (distributed: counted there).
pub type DisconnectFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Option<usize>, LinkError>> + Send + 'a>>;

/// The link could not take a batch (e.g. the broker is unreachable).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("link unavailable: {0}")]
pub struct LinkError(pub String);
