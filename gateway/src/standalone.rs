//! Standalone Herald: the whole of it in one process. The engine
//! ([`Engine::build`]: the publish API, delayed notifications, callbacks,
//! presence, the console) over this gateway's own parts: the local link
//! into the hub (through the duplicate filter an edge's uplink uses too),
//! the embedded store under the data directory, and presence from the
//! hub's mailboxes. One implementation of each engine feature for both
//! modes: the router builds the same engine over AMQP and Redis.

use std::path::PathBuf;
use std::sync::Arc;

use herald_engine::answers::MetricsAccess;
use herald_engine::api_key::{ApiKeyConfig, ApiKeys, KeySet};
use herald_engine::engine::{Durable, Engine, EngineConfig, EngineTasks, Parts, PresenceSource};
use herald_engine::metrics::PublishMetrics;
use herald_engine::presence::{Asked, Presence, PresenceFuture};
use herald_engine::publish::PublishConfig;
use herald_engine::schedule::store::Store;
use herald_engine::schedule::store::StoreError;
use herald_engine::schedule::store::embedded::EmbeddedStore;
use herald_engine::stats::TopicStats;
use prometheus_client::registry::Registry;

use crate::app::DevCredentials;
use crate::config::Config;
use crate::dedup::DuplicateFilter;
use crate::hub::Hub;
use crate::link::LocalLink;
use crate::presence::view::HubView;

/// Why a gateway could not be built.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The delayed-notification store could not be opened.
    #[error("{0}")]
    Store(#[from] StoreError),
    /// The API keys could not be loaded (a key file went away since the
    /// configuration was validated).
    #[error("{}", .0.join("; "))]
    ApiKeys(Vec<String>),
}

/// The engine of a standalone gateway, with what the gateway keeps of it.
#[derive(Debug)]
pub struct Standalone {
    /// The assembled engine.
    pub engine: Engine,
    /// Its tasks, spawned when the gateway serves.
    pub tasks: EngineTasks,
    /// The publish API's keys (clones share them: reloaded on SIGHUP).
    pub api_keys: ApiKeys,
}

/// Build the engine over `hub`, feeding it through `duplicates`, counting
/// per topic in `topics` (the gateway's, which the hub records in too).
/// In dev mode `dev`'s API key is accepted besides the configured ones.
pub fn build(
    config: &Config,
    hub: &Arc<Hub>,
    duplicates: &Arc<DuplicateFilter>,
    dev: Option<&DevCredentials>,
    topics: TopicStats,
    registry: &mut Registry,
) -> Result<Standalone, StartError> {
    let api_keys = api_keys(config, dev)?;
    let parts = Parts {
        link: Arc::new(LocalLink::new(Arc::clone(hub), Arc::clone(duplicates))),
        durable: Some(Durable {
            store: open_store(config)?,
            presence: PresenceSource {
                online: Arc::new(HubPresence(Arc::clone(hub))),
                view: Arc::new(HubView::new(Arc::clone(hub), config.edge.id.as_deref())),
            },
        }),
        topics,
    };
    let (engine, tasks) = Engine::build(engine_config(config, api_keys.clone()), parts, registry);
    Ok(Standalone {
        engine,
        tasks,
        api_keys,
    })
}

/// The engine's settings from this gateway's configuration.
fn engine_config(config: &Config, api_keys: ApiKeys) -> EngineConfig {
    EngineConfig {
        publish: PublishConfig {
            api_keys,
            limits: config.envelope_limits(),
            max_body_bytes: config.publish.max_body_bytes,
            max_batch: config.publish.max_batch,
            ledger: config.publish.ledger(),
        },
        schedule: config.schedule.clone(),
        callbacks: config.callbacks.clone(),
        presence: config.presence.clone(),
        sources: &["http"],
    }
}

/// The configured API keys and, in dev mode, the dev key.
fn api_keys(config: &Config, dev: Option<&DevCredentials>) -> Result<ApiKeys, StartError> {
    let mut named = config.api_key.clone();
    if let Some(d) = dev {
        named.push(ApiKeyConfig {
            name: crate::dev::API_KEY_NAME.into(),
            key: Some(d.api_key.clone()),
            ..ApiKeyConfig::default()
        });
    }
    let set = KeySet::load(&config.api_keys, &named).map_err(StartError::ApiKeys)?;
    Ok(ApiKeys::from_set(set))
}

/// An edge serves no publish API, so it loads no API keys, but for
/// `/metrics` with `metrics_require_key`: then the keys (registering
/// `herald_api_keys`, `herald_api_key_reloads` and `herald_api_key_refused`;
/// `main` reloads them on SIGHUP) and the access they give. Else no keys
/// and an open `/metrics`.
pub fn edge_metrics_keys(
    config: &Config,
    registry: &mut Registry,
) -> Result<(Option<ApiKeys>, MetricsAccess), StartError> {
    if !config.metrics_require_key {
        return Ok((None, MetricsAccess::open()));
    }
    let set = KeySet::load(&config.api_keys, &config.api_key).map_err(StartError::ApiKeys)?;
    let keys = ApiKeys::from_set(set);
    keys.register(registry);
    let refusals = PublishMetrics::default();
    refusals.register_key_refusals(registry);
    let access = MetricsAccess::keyed(keys.clone(), refusals);
    Ok((Some(keys), access))
}

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

/// Open the embedded store under the data directory.
fn open_store(config: &Config) -> Result<Arc<dyn Store>, StoreError> {
    let path = store_path(config);
    std::fs::create_dir_all(&path)
        .map_err(|e| StoreError::Unavailable(format!("cannot create {}: {e}", path.display())))?;
    let store = EmbeddedStore::open(&path)?;
    tracing::info!(path = %path.display(), "delayed-notification store open");
    Ok(Arc::new(store))
}
