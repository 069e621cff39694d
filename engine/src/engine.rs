//! The engine's front door: [`Engine::build`] assembles everything both
//! binaries share (the publish API, delayed notifications with their
//! callbacks and alerts, the presence API and presence events, the
//! console) with its metrics and its tasks, from the [`Parts`] that differ
//! by mode.
//!
//! | part | standalone `herald-gateway` | `herald-router` |
//! |---|---|---|
//! | [`Parts::link`] | in-process, into the hub | AMQP, to the edges |
//! | [`Durable::store`] | embedded (redb) | Redis (`[redis]`; without it: no delayed notifications) |
//! | [`Durable::presence`] | the hub's mailboxes | the edges' reports in Redis |
//! | [`Parts::topics`] | the gateway's, which the hub also records in | the router's, which its stats read |
//!
//! Each binary's composition root is then a short list: build its parts,
//! [`Engine::build`], spawn [`EngineTasks`] with its own tasks, merge
//! [`Engine::routes`] with its own routes, serve. A feature or metric
//! family that both binaries have is added here, once.
//!
//! ```text
//!   parts (link, store, presence, topics) + EngineConfig
//!        |  Engine::build(config, parts, &mut registry)
//!        v
//!   Engine { publish, delayed, events, presence API }  +  EngineTasks
//!        |  routes(): /v1/notifications..., /v1/topics..., /v1/presence/..., /console
//!        |  tasks:    scheduling (firer, maintenance, alerts), presence-events,
//!        |            id-recorder (with a shared idempotency ledger)
//! ```

use std::sync::Arc;

use axum::Router;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use crate::callback::alert::Alerts;
use crate::callback::alert::metrics::AlertMetrics;
use crate::callback::config::CallbackConfig;
use crate::link::Link;
use crate::metrics::PublishMetrics;
use crate::presence::Presence;
use crate::presence::api::PresenceApi;
use crate::presence::events::{EventMetrics, PresenceConfig, PresenceEvents};
use crate::presence::view::{PresenceMetrics, PresenceView};
use crate::publish::{IdLedger, LedgerMetrics, PublishApi, PublishConfig};
use crate::schedule::config::ScheduleConfig;
use crate::schedule::metrics::DelayedMetrics;
use crate::schedule::service::Delayed;
use crate::schedule::store::Store;
use crate::schedule::topics::Topics;
use crate::stats::TopicStats;
use crate::task::{Task, Tasks};

/// The settings the engine reads, taken from either binary's
/// configuration (the same sections in both).
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The publish API: keys, envelope limits, body and batch bounds.
    pub publish: PublishConfig,
    /// `[schedule]`: delayed notifications and topics configured in the file.
    pub schedule: ScheduleConfig,
    /// `[callbacks]`: destinations allowed, concurrency, alerts.
    pub callbacks: CallbackConfig,
    /// `[presence]`: online and offline events.
    pub presence: PresenceConfig,
    /// The publication sources whose counters exist from the start
    /// (`herald_publish_*{source}`): `http`, and `amqp` on a router.
    pub sources: &'static [&'static str],
}

/// What differs by mode. See the module docs' table.
pub struct Parts {
    /// Where accepted (and fallen due) notifications leave the engine.
    pub link: Arc<dyn Link>,
    /// The durable side; None: publish only (a router without `[redis]`).
    pub durable: Option<Durable>,
    /// The per-topic statistics of this process (`herald_topic_*`),
    /// registered by their owner: the publish paths and the delayed
    /// service count in them, and only known topics get a row.
    pub topics: TopicStats,
}

/// The delayed store and the presence source that go with it.
pub struct Durable {
    /// Where delayed notifications, topics and attempts are kept.
    pub store: Arc<dyn Store>,
    /// Who is online.
    pub presence: PresenceSource,
}

/// Who is online, asked two ways.
pub struct PresenceSource {
    /// By the firer, for `when-online` notifications.
    pub online: Arc<dyn Presence>,
    /// By the presence API (`GET /v1/presence/...`) and the console.
    pub view: Arc<dyn PresenceView>,
}

/// The assembled engine. Its parts are cheap to clone (each is shared
/// state behind an `Arc`), so a binary hands them to whatever else needs
/// them: the AMQP intake, the hub, the direct publish path.
#[derive(Debug, Clone)]
pub struct Engine {
    /// The publish API (`POST /v1/notifications`, status, cancel, list,
    /// topics, `online`).
    pub publish: PublishApi,
    /// Delayed notifications, with a durable store.
    pub delayed: Option<Delayed>,
    /// Online and offline events to `presence.events_topic` (disabled
    /// without a topic or a store).
    pub events: PresenceEvents,
    /// The publication counters (`herald_publish_*`), for other intakes.
    pub publish_metrics: PublishMetrics,
    /// The presence endpoints, with a durable side.
    presence: Option<PresenceApi>,
}

/// The engine's long-running tasks, to spawn with the binary's own
/// ([`EngineTasks::spawn`]): the scheduling (firer, maintenance, alerts)
/// and the presence events' storer, when there is a durable side.
pub struct EngineTasks(Vec<Box<dyn Task>>);

impl std::fmt::Debug for EngineTasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|t| t.name()))
            .finish()
    }
}

impl EngineTasks {
    /// The tasks' names, in the order they are spawned.
    pub fn names(&self) -> Vec<&'static str> {
        self.0.iter().map(|t| t.name()).collect()
    }

    /// Spawn every task into `tasks`, stopped by `shutdown`.
    pub fn spawn(self, tasks: &mut Tasks, shutdown: &CancellationToken) {
        for task in self.0 {
            tasks.spawn(task, shutdown.clone());
        }
    }
}

impl Engine {
    /// Assemble the engine from `parts`, registering its metric families
    /// in `registry`. Returns the engine and the tasks to spawn.
    pub fn build(
        config: EngineConfig,
        parts: Parts,
        registry: &mut Registry,
    ) -> (Engine, EngineTasks) {
        let Parts {
            link,
            durable,
            topics,
        } = parts;
        let publish_metrics = PublishMetrics {
            topics: topics.clone(),
            ..PublishMetrics::default()
        };
        publish_metrics.register(registry);
        publish_metrics.precreate(config.sources);
        config.publish.api_keys.register(registry);

        let ledger_metrics = LedgerMetrics::default();
        ledger_metrics.register(registry);
        ledger_metrics.precreate(config.sources);
        let mut tasks: Vec<Box<dyn Task>> = Vec::new();
        let Some(durable) = durable else {
            let ledger = IdLedger::local(config.publish.ledger, ledger_metrics);
            let publish = PublishApi::with_ledger(
                config.publish,
                link,
                publish_metrics.clone(),
                None,
                ledger,
            );
            let engine = Engine {
                publish,
                delayed: None,
                events: PresenceEvents::disabled(EventMetrics::default()),
                publish_metrics,
                presence: None,
            };
            return (engine, EngineTasks(tasks));
        };

        let delayed_metrics = DelayedMetrics {
            topics: topics.clone(),
            ..DelayedMetrics::default()
        };
        delayed_metrics.register(registry);
        let alert_metrics = AlertMetrics::default();
        alert_metrics.register(registry);
        let alerts = Alerts::new(&config.callbacks.alerts, alert_metrics);
        let known = Topics::new(&config.schedule, config.callbacks.allowed());
        let (ledger, recorder) = IdLedger::over(
            config.publish.ledger,
            ledger_metrics,
            Arc::clone(&durable.store),
        );
        if let Some(recorder) = recorder {
            tasks.push(Box::new(recorder));
        }
        let delayed = Delayed::with_topics(
            config.schedule,
            durable.store,
            known,
            delayed_metrics,
            alerts,
        );
        delayed.send_callbacks(&config.callbacks);
        // The engine knows the topics: only registered (or configured)
        // ones get a row of their own in the statistics.
        let known = delayed.topics().clone();
        topics.admit_with(Arc::new(move |t: &str| known.snapshot().knows(t)));

        let publish = PublishApi::with_ledger(
            config.publish,
            Arc::clone(&link),
            publish_metrics.clone(),
            Some(delayed.clone()),
            ledger,
        );
        let presence_metrics = PresenceMetrics::default();
        presence_metrics.register(registry);
        let presence = PresenceApi::new(publish.clone(), durable.presence.view, presence_metrics);
        let event_metrics = EventMetrics::default();
        event_metrics.register(registry);
        let (events, storer) =
            PresenceEvents::new(&config.presence, delayed.clone(), event_metrics);

        if let Some(scheduling) = delayed.scheduling(link, durable.presence.online) {
            tasks.push(Box::new(scheduling));
        }
        if let Some(storer) = storer {
            tasks.push(Box::new(storer));
        }
        let engine = Engine {
            publish,
            delayed: Some(delayed),
            events,
            publish_metrics,
            presence: Some(presence),
        };
        (engine, EngineTasks(tasks))
    }

    /// The engine's HTTP routes: the publish API (with a durable side also
    /// the delayed, topics and presence endpoints) and the operator's
    /// console.
    pub fn routes(&self) -> Router {
        let router = self.publish.routes();
        let router = match &self.presence {
            Some(presence) => router.merge(presence.routes()),
            None => router,
        };
        router.merge(crate::console::routes())
    }
}

#[cfg(test)]
mod tests;
