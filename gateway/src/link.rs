//! The standalone link: notifications accepted by the publish API go
//! straight into this gateway's hub.

use std::sync::Arc;

use herald_engine::link::{Link, LinkFuture};
use herald_protocol::envelope::Notification;
use tokio::time::Instant;

use crate::hub::Hub;

/// In-process link from the router core to the local hub.
#[derive(Debug, Clone)]
pub struct LocalLink {
    hub: Arc<Hub>,
}

impl LocalLink {
    /// A link into `hub`.
    pub fn new(hub: Arc<Hub>) -> Self {
        LocalLink { hub }
    }
}

impl Link for LocalLink {
    fn publish(&self, batch: Vec<Arc<Notification>>) -> LinkFuture<'_> {
        Box::pin(async move {
            let now = Instant::now();
            for n in &batch {
                let d = self.hub.deliver(n, now);
                tracing::debug!(id = %n.id, mailboxes = d.mailboxes, sessions = d.sessions, "delivered");
            }
            Ok(())
        })
    }
}
