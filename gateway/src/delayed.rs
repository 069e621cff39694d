//! Delayed notifications in standalone Herald: the embedded store under
//! the data directory, presence from this gateway's own mailboxes, and the
//! local link into the hub. The scheduling itself is the router crate's
//! ([`herald_engine::schedule`]): one implementation for both modes.

use std::path::PathBuf;
use std::sync::Arc;

use herald_engine::callback::alert::Alerts;
use herald_engine::presence::{Asked, Presence, PresenceFuture};
use herald_engine::schedule::metrics::DelayedMetrics;
use herald_engine::schedule::service::Delayed;
use herald_engine::schedule::store::StoreError;
use herald_engine::schedule::store::embedded::EmbeddedStore;
use herald_engine::schedule::topics::Topics;

use crate::config::Config;
use crate::hub::Hub;

/// Presence as this gateway's mailboxes see it.
#[derive(Debug, Clone)]
pub struct HubPresence(pub Arc<Hub>);

impl Presence for HubPresence {
    fn online<'a>(&'a self, who: &'a [Asked]) -> PresenceFuture<'a> {
        let answers = who
            .iter()
            .map(|a| self.0.is_online(&a.user, &a.sites))
            .collect();
        Box::pin(std::future::ready(answers))
    }
}

/// Where the embedded store lives.
pub fn store_path(config: &Config) -> PathBuf {
    config.data_dir.join("delayed")
}

/// Open the embedded store and build the service, raising `alerts` (from
/// `[callbacks.alerts]`).
pub fn open(
    config: &Config,
    metrics: DelayedMetrics,
    alerts: Alerts,
) -> Result<Delayed, StoreError> {
    let path = store_path(config);
    std::fs::create_dir_all(&path)
        .map_err(|e| StoreError::Unavailable(format!("cannot create {}: {e}", path.display())))?;
    let store = EmbeddedStore::open(&path)?;
    tracing::info!(path = %path.display(), "delayed-notification store open");
    let topics = Topics::new(&config.schedule, config.callbacks.allowed());
    let delayed = Delayed::with_topics(
        config.schedule.clone(),
        Arc::new(store),
        topics,
        metrics,
        alerts,
    );
    delayed.send_callbacks(&config.callbacks);
    Ok(delayed)
}
