//! The `herald-router` process: the HTTP API and the supervised AMQP intake,
//! wired together, with one shutdown path.
//!
//! | route | what |
//! |---|---|
//! | `POST /v1/notifications` | the publish API ([`herald_engine::publish`]) over [`AmqpLink`] |
//! | `GET /healthz` | liveness: 200 while serving (`"draining"` once shutdown starts) |
//! | `GET /readyz` | readiness: 200 when connected to the broker (topology declared) and, with `[redis]`, Redis answers; else 503 naming why ([`crate::health`]) |
//! | `GET /metrics` | Prometheus text format; with `metrics_require_key`, for an API key allowed `metrics` ([`answers::MetricsAccess`]) |
//! | `GET /v1/stats` | the cluster's figures: every edge's and router's part, added up ([`crate::stats`]) |
//! | `GET /v1/openapi.json` | the OpenAPI document of what this router serves ([`herald_engine::openapi`]) |
//! | `GET /console`, `/console/assets/{file}` | the operator's web console ([`herald_engine::console`]); `GET /v1/operator` checks its key |
//! | `GET/DELETE /v1/notifications/{id}`, `GET /v1/notifications`, `POST /v1/users/{uid}/online` | delayed notifications, with `[redis]` |
//!
//! # Assembly
//! [`run`] builds the parts only a router has (the AMQP link to the edges;
//! with `[redis]`, Redis as the delayed store and the presence source),
//! hands them to [`herald_engine::engine::Engine::build`] (the publish API,
//! delayed notifications, callbacks, alerts, presence, the console, with
//! their metrics and tasks), then spawns its intakes ([`crate::intake`]):
//! the AMQP intake; with `routing.mode = "targeted"` the routing intake
//! ([`crate::routing_intake`]), whose view the publisher routes every
//! forward by; with `[redis]` the engine's firer (due notifications go out
//! through the same [`AmqpLink`] as the HTTP API), the presence intake and
//! sweep, the stats intake and this router's stats summary
//! ([`crate::stats_intake`]).
//!
//! # Limits
//! `[http]` ([`herald_engine::deadline`]): a connection whose client takes
//! no byte of an answer for `http.write_timeout_ms` is closed; a request
//! body slower than `http.body_min_bytes_per_sec` once `http.body_grace_ms`
//! has passed is answered 408 and its connection closed. Both are counted
//! in `herald_connections_refused_total{reason}`.
//!
//! # Shutdown
//! When the token fires: the HTTP server stops accepting (the listener
//! closes: new connections, `/healthz` and `/readyz` included, are refused
//! from here on) and finishes its requests (their forwards still go out); then the intake cancels its
//! consumer, waits for in-flight forwards to be confirmed and acked, and the
//! connection closes. Each phase waits at most `shutdown_grace_ms`.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::health::Health;
use crate::ingest::{Ingest, IngestConfig};
use crate::intake;
use crate::presence_intake::PresenceIntake;
use crate::routing_intake::RoutingIntake;
use crate::stats::{RouterStats, StatsMetrics};
use crate::stats_intake::StatsIntake;
use herald_amqp::routing::{Mode, Routing, RoutingMetrics};
use herald_amqp::{AmqpLink, AmqpMetrics, Bundling, PublisherSlot};
use herald_engine::answers::{self, MetricsAccess};
use herald_engine::api_key::ApiKeys;
use herald_engine::deadline::{DeadlineCounters, DeadlineListener, Deadlines};
use herald_engine::engine::{Durable, Engine, Parts, PresenceSource};
use herald_engine::presence::redis::RedisPresence;
use herald_engine::process::notify::{Notifier, announce_ready};
use herald_engine::schedule::store::StoreError;
use herald_engine::schedule::store::redis::RedisStore;
use herald_engine::stats::TopicStats;
use herald_engine::task::{Task, Tasks, task_fn};

/// Connect the delayed store when `[redis]` is configured. Fails when Redis
/// cannot be reached or refuses the configuration.
pub async fn connect_store(config: &Config) -> Result<Option<RedisStore>, StoreError> {
    match config.redis.store_config() {
        Some(c) => RedisStore::connect(c).await.map(Some),
        None => Ok(None),
    }
}

/// Run the router on `listener` until `shutdown` fires, then wind down (see
/// the module docs). Returns once the broker connection is closed. `store`
/// (from [`connect_store`]) enables delayed notifications. `api_keys`
/// authenticate the HTTP API (from [`Config::api_key_set`]; `main` keeps a
/// clone to reload them on SIGHUP).
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: CancellationToken,
    store: Option<RedisStore>,
    api_keys: ApiKeys,
) {
    run_notifying(
        config,
        listener,
        shutdown,
        store,
        api_keys,
        Notifier::none(),
    )
    .await;
}

/// [`run`], telling systemd (`notifier`, from `$NOTIFY_SOCKET`) `READY=1`
/// once the conditions of `/readyz` hold (broker connected, Redis
/// answering) on a listening port, and `STOPPING=1` when `shutdown` fires
/// ([`herald_engine::process::notify`]).
pub async fn run_notifying(
    config: Config,
    listener: TcpListener,
    shutdown: CancellationToken,
    store: Option<RedisStore>,
    api_keys: ApiKeys,
    notifier: Notifier,
) {
    let mut registry = Registry::default();
    herald_engine::metrics::register_process(
        &mut registry,
        env!("CARGO_PKG_VERSION"),
        env!("HERALD_COMMIT"),
    );
    let topics = TopicStats::default();
    topics.register(&mut registry);
    let amqp_metrics = AmqpMetrics::default();
    amqp_metrics.register(&mut registry);
    let side = Side::new(&config, store, &mut registry);
    let parts = side.parts(topics.clone());
    let (engine, engine_tasks) =
        Engine::build(config.engine(api_keys.clone()), parts, &mut registry);
    let access = MetricsAccess::new(
        config.metrics_require_key,
        &api_keys,
        &engine.publish_metrics,
    );

    let stats_metrics = StatsMetrics::default();
    stats_metrics.register(&mut registry);
    let stats_book = side.store.as_ref().map(|s| s.stats_book());
    let stats = Arc::new(RouterStats::new(
        crate::stats::router_id(listener.local_addr().map_or(0, |a| a.port())),
        topics,
        engine.delayed.clone(),
        stats_book.clone(),
        config.redis.presence_edge_ttl_ms,
        stats_metrics.clone(),
    ));
    // Targeted routing: one view for every forward of this router, fed by
    // its own routing intake. Its series exist in fanout mode too (zero),
    // as the docs list them.
    let routing_metrics = RoutingMetrics::default();
    routing_metrics.register(&mut registry);
    let routing = (config.routing.mode == Mode::Targeted).then(|| {
        let view = config.routing.view();
        Arc::new(Routing::new(view, config.routing.recent(), routing_metrics))
    });
    let health = Health::new(side.slot.clone(), shutdown.clone(), side.store.clone());
    let deadlines = Deadlines::new(&config.http, DeadlineCounters::register(&mut registry));
    let exposition = Exposition { registry, access };
    let notify = tokio::spawn({
        let health = health.clone();
        announce_ready(
            notifier,
            "herald-router",
            move || {
                let health = health.clone();
                async move { health.not_ready().await }
            },
            shutdown.clone(),
        )
    });
    let routes = routes(Arc::new(exposition), health, &engine, &stats);

    // The AMQP side, stopped after the HTTP server has drained: the
    // intakes and the engine's tasks (due notifications leave through the
    // AMQP link).
    let amqp_shutdown = CancellationToken::new();
    let mut tasks = Tasks::default();
    let ingest = Ingest::new(
        IngestConfig {
            routing: routing.clone(),
            ..config.ingest()
        },
        side.slot.clone(),
        engine.publish_metrics.clone(),
        amqp_metrics.clone(),
        engine.delayed.clone(),
        engine.publish.ledger().clone(),
    );
    tasks.spawn(
        intake::task(ingest, &config, amqp_metrics.clone()),
        amqp_shutdown.clone(),
    );
    if let Some(routing) = routing {
        tasks.spawn(side.routing_intake(&config, routing), amqp_shutdown.clone());
    }
    engine_tasks.spawn(&mut tasks, &amqp_shutdown);
    side.spawn_presence(&mut tasks, &config, &engine, &amqp_metrics, &amqp_shutdown);
    if let Some(book) = stats_book {
        let topology = config.amqp.topology.clone();
        let intake = StatsIntake::new(topology, book, stats_metrics, amqp_metrics);
        let summary = task_fn("stats-summary", move |shutdown| {
            crate::stats::run_summary(stats, shutdown)
        });
        tasks.spawn(
            intake::task(intake, &config, AmqpMetrics::default()),
            amqp_shutdown.clone(),
        );
        tasks.spawn(summary, amqp_shutdown.clone());
    }
    serve(
        listener,
        routes,
        &deadlines,
        config.shutdown_grace(),
        shutdown.clone(),
    )
    .await;
    // The server stops when the token fires (notify has sent STOPPING=1
    // then) or when it failed: the process winds down either way.
    shutdown.cancel();
    let _ = notify.await;
    tracing::info!("HTTP server stopped; stopping the AMQP intake");
    amqp_shutdown.cancel();
    // The intake waits up to the grace for its forwards; closing takes a little more.
    let grace = config.shutdown_grace() + Duration::from_secs(5);
    if tokio::time::timeout(grace, tasks.join()).await.is_err() {
        tracing::warn!("the AMQP intake did not stop in time");
    }
}

/// What only a router has: the AMQP link to the edges and, with `[redis]`,
/// Redis as the delayed store and the presence source.
struct Side {
    /// The confirmed publisher the intake opens; the link and the routing
    /// intake publish through it.
    slot: PublisherSlot,
    bundling: Bundling,
    link: Arc<AmqpLink>,
    store: Option<Arc<RedisStore>>,
    presence: Option<Arc<RedisPresence>>,
}

impl Side {
    fn new(config: &Config, store: Option<RedisStore>, registry: &mut Registry) -> Side {
        let slot = PublisherSlot::new();
        let bundling = Bundling {
            max: config.amqp.bundle_max,
            max_bytes: config.amqp.bundle_max_bytes,
        };
        let publish_timeout = Duration::from_millis(config.amqp.publish_timeout_ms);
        let link = Arc::new(AmqpLink::new(slot.clone(), publish_timeout, bundling));
        let store = store.map(Arc::new);
        let edge_ttl = Duration::from_millis(config.redis.presence_edge_ttl_ms);
        let presence = store.as_ref().map(|s| Arc::new(s.presence(edge_ttl)));
        if let Some(store) = &store {
            store.metrics().register(registry);
        }
        Side {
            slot,
            bundling,
            link,
            store,
            presence,
        }
    }

    /// The engine's parts: the AMQP link, and Redis when configured.
    fn parts(&self, topics: TopicStats) -> Parts {
        let durable = self.store.as_ref().zip(self.presence.as_ref());
        Parts {
            link: self.link.clone(),
            durable: durable.map(|(store, presence)| Durable {
                store: store.clone(),
                presence: PresenceSource {
                    online: presence.clone(),
                    view: presence.clone(),
                },
            }),
            topics,
        }
    }

    /// The routing intake (`routing.mode = "targeted"`): the view of which
    /// edge holds whom, and catch-ups through this router's publisher.
    fn routing_intake(&self, config: &Config, routing: Arc<Routing>) -> impl Task {
        let topology = config.amqp.topology.clone();
        let queue_max = config.routing.queue_max_length;
        let slot = self.slot.clone();
        let routing = RoutingIntake::new(topology, routing, slot, self.bundling, queue_max);
        intake::task(routing, config, AmqpMetrics::default())
    }

    /// With Redis: the presence intake (the edges' reports into the book,
    /// with online and offline events) and the sweep of dead edges.
    fn spawn_presence(
        &self,
        tasks: &mut Tasks,
        config: &Config,
        engine: &Engine,
        amqp_metrics: &AmqpMetrics,
        shutdown: &CancellationToken,
    ) {
        let (Some(delayed), Some(presence)) = (&engine.delayed, &self.presence) else {
            return;
        };
        let (book, events) = (presence.clone(), engine.events.clone());
        let sweep = task_fn("presence-sweep", move |shutdown| {
            crate::presence_sweep::run(book, events, crate::presence_sweep::EVERY, shutdown)
        });
        tasks.spawn(sweep, shutdown.clone());
        let intake = PresenceIntake::new(
            config.amqp.topology.clone(),
            presence.clone(),
            delayed.clone(),
            amqp_metrics.clone(),
            engine.events.clone(),
        );
        let intake = intake::task(intake, config, AmqpMetrics::default());
        tasks.spawn(intake, shutdown.clone());
    }
}

/// What `GET /metrics` answers: the registry, to whom it may.
struct Exposition {
    registry: Registry,
    access: MetricsAccess,
}

/// Everything the router serves: `/metrics`, the probes, the engine's
/// routes, the cluster's stats, the OpenAPI document.
fn routes(
    exposition: Arc<Exposition>,
    health: Health,
    engine: &Engine,
    stats: &Arc<RouterStats>,
) -> Router {
    let openapi = herald_engine::openapi::routes(herald_engine::openapi::Surface {
        publish: true,
        delayed: engine.delayed.is_some(),
        gateway: false,
        demo: false,
    });
    Router::new()
        .route("/metrics", get(metrics))
        .with_state(exposition)
        .merge(health.routes())
        .merge(engine.routes())
        .merge(Arc::clone(stats).routes())
        .merge(openapi)
        .fallback(answers::not_found)
        .method_not_allowed_fallback(answers::method_not_allowed)
}

async fn metrics(State(exposition): State<Arc<Exposition>>, headers: HeaderMap) -> Response {
    exposition.access.answer(&exposition.registry, &headers)
}

/// Serve `routes` until `shutdown` fires, then finish the requests running,
/// for at most `grace`. Every connection's answers and request bodies are
/// bounded by `deadlines` (`[http]`).
async fn serve(
    listener: TcpListener,
    routes: Router,
    deadlines: &Deadlines,
    grace: Duration,
    shutdown: CancellationToken,
) {
    let listener = DeadlineListener::new(listener, deadlines.clone());
    let server = axum::serve(listener, deadlines.bound_bodies(routes))
        .with_graceful_shutdown(shutdown.clone().cancelled_owned());
    let deadline = async {
        shutdown.cancelled().await;
        tokio::time::sleep(grace).await;
    };
    tokio::select! {
        r = server => if let Err(e) = r {
            tracing::error!(error = %e, "the HTTP server failed");
        },
        _ = deadline => tracing::warn!(grace_ms = grace.as_millis() as u64, "HTTP requests still running at the end of the grace period"),
    }
}

#[cfg(test)]
mod deadline_tests;

#[cfg(test)]
mod tests {
    use herald_engine::openapi::{drift, served_routes, whole};

    /// Every route the router registers itself is in engine/openapi.json
    /// under the `operations` tag and the other way round (the publish
    /// API's are checked in the engine).
    #[test]
    fn the_router_registers_what_its_openapi_document_says() {
        let mut routes = drift::registered(include_str!("server.rs"));
        routes.extend(drift::registered(include_str!("health.rs")));
        routes.extend(drift::registered(include_str!("stats.rs")));
        // Merged from herald_engine::openapi::routes.
        routes.extend(served_routes());
        let problems = drift::compare(&routes, &drift::documented(&whole(), &["operations"]));
        assert!(problems.is_empty(), "{problems:#?}");
    }
}
