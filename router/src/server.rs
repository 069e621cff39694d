//! The `herald-router` process: the HTTP API and the supervised AMQP intake,
//! wired together, with one shutdown path.
//!
//! | route | what |
//! |---|---|
//! | `POST /v1/notifications` | the publish API ([`herald_engine::publish`]) over [`AmqpLink`] |
//! | `GET /healthz` | liveness: 200 while serving (`"draining"` once shutdown starts) |
//! | `GET /readyz` | readiness: 200 when connected to the broker (topology declared) and, with `[redis]`, Redis answers; else 503 naming why ([`crate::health`]) |
//! | `GET /metrics` | Prometheus text format |
//! | `GET /v1/stats` | the cluster's figures: every edge's and router's part, added up ([`crate::stats`]) |
//! | `GET /v1/openapi.json` | the OpenAPI document of what this router serves ([`herald_engine::openapi`]) |
//! | `GET /console`, `/console/assets/{file}` | the operator's web console ([`herald_engine::console`]); `GET /v1/operator` checks its key |
//! | `GET/DELETE /v1/notifications/{id}`, `GET /v1/notifications`, `POST /v1/users/{uid}/online` | delayed notifications, with `[redis]` |
//!
//! With `[redis]`, the router also runs the firer of delayed notifications
//! (due ones go out through the same [`AmqpLink`] as the HTTP API), the
//! presence intake (edges' reports, on a connection of its own), the stats
//! intake and this router's stats summary ([`crate::stats_intake`]), and the
//! alerts of `[callbacks.alerts]` (dead letters, Redis down and back).
//! With `routing.mode = "targeted"` it also runs the routing intake
//! ([`crate::routing_intake`], a connection of its own), whose view the
//! publisher routes every forward by.
//! # Shutdown
//! When the token fires: the HTTP server stops accepting (the listener
//! closes: new connections, `/healthz` and `/readyz` included, are refused
//! from here on) and finishes its requests (their forwards still go out); then the intake cancels its
//! consumer, waits for in-flight forwards to be confirmed and acked, and the
//! connection closes. Each phase waits at most `shutdown_grace_ms`.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::health::Health;
use crate::presence_intake::PresenceIntake;
use crate::stats::{RouterStats, StatsMetrics};
use crate::stats_intake::StatsIntake;
use herald_amqp::{AmqpLink, AmqpMetrics, Bundling, PublisherSlot, Supervisor};

use crate::config::Config;
use crate::ingest::{Ingest, IngestConfig};
use crate::routing_intake::RoutingIntake;
use herald_amqp::routing::{Mode, Routing, RoutingMetrics};
use herald_engine::api_key::ApiKeys;
use herald_engine::callback::alert::Alerts;
use herald_engine::callback::alert::metrics::AlertMetrics;
use herald_engine::metrics::PublishMetrics;
use herald_engine::publish::PublishApi;
use herald_engine::schedule::metrics::DelayedMetrics;
use herald_engine::schedule::service::Delayed;
use herald_engine::schedule::store::StoreError;
use herald_engine::schedule::store::redis::RedisStore;
use herald_engine::task::{Tasks, task_fn};

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
    let mut registry = Registry::default();
    herald_engine::metrics::register_build_info(
        &mut registry,
        env!("CARGO_PKG_VERSION"),
        env!("HERALD_COMMIT"),
    );
    herald_engine::process::metrics::register(&mut registry);
    // Per-topic statistics, shared by the publish paths and the delayed
    // service (herald_topic_*).
    let topic_stats = herald_engine::stats::TopicStats::default();
    topic_stats.register(&mut registry);
    let publish_metrics = PublishMetrics {
        topics: topic_stats.clone(),
        ..PublishMetrics::default()
    };
    let amqp_metrics = AmqpMetrics::default();
    publish_metrics.register(&mut registry);
    publish_metrics.precreate(&["http", "amqp"]);
    api_keys.register(&mut registry);
    amqp_metrics.register(&mut registry);

    let slot = PublisherSlot::new();
    let slot_for_routing = slot.clone();
    let bundling = Bundling {
        max: config.amqp.bundle_max,
        max_bytes: config.amqp.bundle_max_bytes,
    };
    let link = AmqpLink::new(
        slot.clone(),
        std::time::Duration::from_millis(config.amqp.publish_timeout_ms),
        bundling,
    );
    let store = store.map(Arc::new);
    let delayed = store.as_ref().map(|store| {
        let metrics = DelayedMetrics {
            topics: topic_stats.clone(),
            ..DelayedMetrics::default()
        };
        metrics.register(&mut registry);
        store.metrics().register(&mut registry);
        let presence = store.presence(std::time::Duration::from_millis(
            config.redis.presence_edge_ttl_ms,
        ));
        let topics = herald_engine::schedule::topics::Topics::new(
            &config.schedule,
            config.callbacks.allowed(),
        );
        let alert_metrics = AlertMetrics::default();
        alert_metrics.register(&mut registry);
        let alerts = Alerts::new(&config.callbacks.alerts, alert_metrics);
        let delayed = Delayed::with_topics(
            config.schedule.clone(),
            store.clone(),
            topics,
            metrics,
            alerts,
        );
        delayed.send_callbacks(&config.callbacks);
        // The routers know the topics: only registered (or configured)
        // ones get a row of their own in the statistics.
        let known = delayed.topics().clone();
        topic_stats.admit_with(Arc::new(move |t: &str| known.snapshot().knows(t)));
        (delayed, presence)
    });
    let presence_metrics = herald_engine::schedule::presence::view::PresenceMetrics::default();
    let event_metrics = herald_engine::schedule::presence_events::EventMetrics::default();
    if delayed.is_some() {
        presence_metrics.register(&mut registry);
        event_metrics.register(&mut registry);
    }
    let api = PublishApi::with_delayed(
        config.publish_api(api_keys),
        Arc::new(link.clone()),
        publish_metrics.clone(),
        delayed.as_ref().map(|(d, _)| d.clone()),
    );
    // The presence API reads what the edges reported, kept beside the
    // delayed store.
    let api = match &delayed {
        Some((_, presence)) => api.with_presence(Arc::new(presence.clone()), presence_metrics),
        None => api,
    };
    let stats_metrics = StatsMetrics::default();
    stats_metrics.register(&mut registry);
    let stats_book = store.as_ref().map(|s| s.stats_book());
    let stats = Arc::new(RouterStats::new(
        crate::stats::router_id(listener.local_addr().map_or(0, |a| a.port())),
        topic_stats.clone(),
        delayed.as_ref().map(|(d, _)| d.clone()),
        stats_book.clone(),
        config.redis.presence_edge_ttl_ms,
        stats_metrics.clone(),
    ));
    // Targeted routing: one view for every forward of this router, fed by
    // its own routing intake below.
    // Its series exist in fanout mode too (zero), as the docs list them.
    let routing_metrics = RoutingMetrics::default();
    routing_metrics.register(&mut registry);
    let routing = (config.routing.mode == Mode::Targeted).then(|| {
        let metrics = routing_metrics;
        Arc::new(Routing::new(
            config.routing.view(),
            config.routing.recent(),
            metrics,
        ))
    });
    let registry = Arc::new(registry);
    let health = Health::new(slot.clone(), shutdown.clone(), store);
    let openapi = herald_engine::openapi::routes(herald_engine::openapi::Surface {
        publish: true,
        delayed: delayed.is_some(),
        gateway: false,
        demo: false,
    });
    let routes = Router::new()
        .route("/metrics", get(metrics))
        .with_state(registry)
        .merge(health.routes())
        .merge(api.routes())
        .merge(stats.clone().routes())
        .merge(herald_engine::console::routes())
        .merge(openapi)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed);

    let ingest_config = IngestConfig {
        routing: routing.clone(),
        ..config.ingest()
    };
    let ingest = Ingest::new(
        ingest_config,
        slot,
        publish_metrics,
        amqp_metrics.clone(),
        delayed.as_ref().map(|(d, _)| d.clone()),
    );
    // The AMQP side: the intake, and with delayed notifications the firer
    // (due ones leave through the AMQP link) and the presence intake on a
    // connection of its own. Stopped after the HTTP server has drained.
    let amqp_shutdown = CancellationToken::new();
    let mut tasks = Tasks::default();
    tasks.spawn(
        Supervisor::new(config.supervisor(), amqp_metrics.clone()).into_task(
            "intake",
            move |connection, shutdown| {
                let ingest = ingest.clone();
                async move { ingest.run(connection, shutdown).await }
            },
        ),
        amqp_shutdown.clone(),
    );
    if let Some(routing) = routing {
        let intake = RoutingIntake::new(
            config.amqp.topology.clone(),
            routing,
            slot_for_routing,
            bundling,
            config.routing.queue_max_length,
        );
        let mut supervisor_config = config.supervisor();
        supervisor_config.connection_name =
            format!("{} routing", supervisor_config.connection_name);
        tasks.spawn(
            Supervisor::new(supervisor_config, AmqpMetrics::default()).into_task(
                "routing-intake",
                move |connection, shutdown| {
                    let intake = intake.clone();
                    async move { intake.run(connection, shutdown).await }
                },
            ),
            amqp_shutdown.clone(),
        );
    }
    if let Some((delayed, presence)) = &delayed {
        let presence = Arc::new(presence.clone());
        if let Some(scheduling) = delayed.scheduling(Arc::new(link), presence.clone()) {
            tasks.spawn(scheduling, amqp_shutdown.clone());
        }
        let (events, storer) = herald_engine::schedule::presence_events::PresenceEvents::new(
            &config.presence,
            delayed.clone(),
            event_metrics,
        );
        if let Some(storer) = storer {
            tasks.spawn(storer, amqp_shutdown.clone());
        }
        let (book, sweep_events) = (presence.clone(), events.clone());
        tasks.spawn(
            task_fn("presence-sweep", move |shutdown| {
                crate::presence_sweep::run(
                    book,
                    sweep_events,
                    crate::presence_sweep::EVERY,
                    shutdown,
                )
            }),
            amqp_shutdown.clone(),
        );
        let intake = PresenceIntake::new(
            config.amqp.topology.clone(),
            presence,
            delayed.clone(),
            amqp_metrics.clone(),
            events,
        );
        let mut supervisor_config = config.supervisor();
        supervisor_config.connection_name =
            format!("{} presence", supervisor_config.connection_name);
        tasks.spawn(
            Supervisor::new(supervisor_config, AmqpMetrics::default()).into_task(
                "presence-intake",
                move |connection, shutdown| {
                    let intake = intake.clone();
                    async move { intake.run(connection, shutdown).await }
                },
            ),
            amqp_shutdown.clone(),
        );
    }
    if let Some(book) = stats_book {
        let intake = StatsIntake::new(
            config.amqp.topology.clone(),
            book,
            stats_metrics,
            amqp_metrics.clone(),
        );
        let mut supervisor_config = config.supervisor();
        supervisor_config.connection_name = format!("{} stats", supervisor_config.connection_name);
        tasks.spawn(
            Supervisor::new(supervisor_config, AmqpMetrics::default()).into_task(
                "stats-intake",
                move |connection, shutdown| {
                    let intake = intake.clone();
                    async move { intake.run(connection, shutdown).await }
                },
            ),
            amqp_shutdown.clone(),
        );
        tasks.spawn(
            herald_engine::task::task_fn("stats-summary", move |shutdown| {
                crate::stats::run_summary(stats, shutdown)
            }),
            amqp_shutdown.clone(),
        );
    }

    let grace = config.shutdown_grace();
    let server =
        axum::serve(listener, routes).with_graceful_shutdown(shutdown.clone().cancelled_owned());
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
    tracing::info!("HTTP server stopped; stopping the AMQP intake");
    amqp_shutdown.cancel();
    // The intake waits up to `grace` for its forwards; closing takes a little more.
    if tokio::time::timeout(grace + std::time::Duration::from_secs(5), tasks.join())
        .await
        .is_err()
    {
        tracing::warn!("the AMQP intake did not stop in time");
    }
}

async fn metrics(State(registry): State<Arc<Registry>>) -> Response {
    let mut body = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut body, &registry) {
        tracing::error!(error = %e, "metrics encoding failed");
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

async fn method_not_allowed() -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        axum::Json(json!({"error": {
            "code": "method_not_allowed",
            "message": "this endpoint does not take that method"
        }})),
    )
        .into_response()
}

async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        axum::Json(json!({"error": {"code": "not_found", "message": "no such endpoint"}})),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use herald_engine::openapi::{PATH, drift, whole};

    /// Every route the router registers itself is in engine/openapi.json
    /// under the `operations` tag and the other way round (the publish
    /// API's are checked in the engine).
    #[test]
    fn the_router_registers_what_its_openapi_document_says() {
        let mut routes = drift::registered(include_str!("server.rs"));
        routes.extend(drift::registered(include_str!("health.rs")));
        routes.extend(drift::registered(include_str!("stats.rs")));
        // Merged from herald_engine::openapi::routes.
        routes
            .entry(PATH.to_owned())
            .or_default()
            .insert("GET".to_owned());
        let problems = drift::compare(&routes, &drift::documented(&whole(), &["operations"]));
        assert!(problems.is_empty(), "{problems:#?}");
    }
}
