//! Standalone: the presence API answered from this gateway's own hub
//! ([`herald_engine::presence::view::PresenceView`]). The whole deployment is one
//! edge, named by `edge.id` or `standalone`.

use std::sync::Arc;

use herald_engine::presence::view::{
    ClientCount, ClientPage, PresenceView, UserPresence, ViewFuture, summarize,
};

use crate::hub::Hub;

/// The edge name a standalone server without `edge.id` answers with.
pub const STANDALONE_EDGE: &str = "standalone";

/// Presence as this gateway's mailboxes see it.
#[derive(Debug, Clone)]
pub struct HubView {
    hub: Arc<Hub>,
    edge: String,
}

impl HubView {
    /// A view of `hub`, whose sessions show as on `edge`.
    pub fn new(hub: Arc<Hub>, edge: Option<&str>) -> Self {
        HubView {
            hub,
            edge: edge.unwrap_or(STANDALONE_EDGE).to_owned(),
        }
    }
}

impl PresenceView for HubView {
    fn user<'a>(&'a self, user: &'a str, site: Option<&'a str>) -> ViewFuture<'a, UserPresence> {
        let here = self.hub.sessions_of(user);
        let answer = summarize(user, vec![(self.edge.clone(), here)], site);
        Box::pin(std::future::ready(Ok(answer)))
    }

    fn clients<'a>(&'a self, after: Option<&'a str>, limit: usize) -> ViewFuture<'a, ClientPage> {
        Box::pin(std::future::ready(Ok(self.hub.client_page(after, limit))))
    }

    fn client<'a>(&'a self, client: &'a str) -> ViewFuture<'a, ClientCount> {
        Box::pin(std::future::ready(Ok(self.hub.client_count(client))))
    }
}
