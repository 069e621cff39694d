//! The standalone link: notifications accepted by the publish API (and
//! delayed ones as they fall due) go straight into this gateway's hub,
//! through the same duplicate filter an edge's uplink uses.

use std::sync::Arc;

use herald_engine::link::{DisconnectFuture, Link, LinkFuture};
use herald_protocol::envelope::Notification;
use tokio::time::Instant;

use crate::dedup::DuplicateFilter;
use crate::hub::Hub;

/// In-process link from the router core to the local hub.
#[derive(Debug, Clone)]
pub struct LocalLink {
    hub: Arc<Hub>,
    duplicates: Arc<DuplicateFilter>,
}

impl LocalLink {
    /// A link into `hub` for what `duplicates` admits: a notification id
    /// repeated within the window reaches no mailbox.
    pub fn new(hub: Arc<Hub>, duplicates: Arc<DuplicateFilter>) -> Self {
        LocalLink { hub, duplicates }
    }
}

impl Link for LocalLink {
    fn publish(&self, batch: Vec<Arc<Notification>>) -> LinkFuture<'_> {
        Box::pin(async move {
            let now = Instant::now();
            for n in &batch {
                // A repeat is taken like the first (the publisher's retry
                // succeeds), counted and dropped.
                if !self.duplicates.admit(&n.id, now) {
                    continue;
                }
                let d = self.hub.deliver(n, now);
                tracing::debug!(id = %n.id, mailboxes = d.mailboxes, sessions = d.sessions, "delivered");
            }
            Ok(())
        })
    }

    fn disconnect<'a>(&'a self, user: &'a str, reason: &'a str) -> DisconnectFuture<'a> {
        let told = self.hub.disconnect(user, reason);
        tracing::info!(user, told, %reason, "user disconnected by an operator");
        Box::pin(std::future::ready(Ok(Some(told))))
    }
}
