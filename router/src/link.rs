//! Where accepted notifications go.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use herald_protocol::envelope::Notification;

/// A future returned by [`Link::publish`].
pub type LinkFuture<'a> = Pin<Box<dyn Future<Output = Result<(), LinkError>> + Send + 'a>>;

/// The way out of the router: in-process to local mailboxes (standalone), or
/// over AMQP to every edge (distributed). `publish` resolves once the link
/// has taken responsibility for the whole batch, in order.
pub trait Link: Send + Sync + 'static {
    /// Hand a batch of validated notifications to the link.
    fn publish(&self, batch: Vec<Arc<Notification>>) -> LinkFuture<'_>;
}

/// The link could not take a batch (e.g. the broker is unreachable).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("link unavailable: {0}")]
pub struct LinkError(pub String);
