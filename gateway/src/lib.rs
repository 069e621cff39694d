//! Herald's edge gateway: browser sessions, per-user mailboxes, and (with no
//! broker configured) the whole of Herald in one process.
//!
//! # Layout
//! - [`config`]: defaults, TOML file, environment, flags; validation.
//! - [`server`]: the accept loop: accept, a PROXY header (`[proxy]`), then
//!   the front.
//! - [`front`]: where each new connection goes, from a look at its first
//!   request head: the direct publish path ([`publish_direct`]), a `/ws`
//!   WebSocket served on the socket ([`ws`]), a SockJS streaming receiver
//!   served on the socket ([`sockjs`]), or hyper (HTTP/1.1 with upgrades)
//!   for everything else; with the header timeout, the bound on connections
//!   being looked at, and the per-address rate.
//! - [`http`]: routes: `/ws`, `/sockjs`, `/healthz`, `/readyz`, `/metrics`,
//!   the demo page, and (standalone) the publish API from `herald-engine`.
//! - [`js`]: the browser client as served: `/js/herald.js` as written,
//!   `/js/herald.<hash>.js` minified and immutable, with its source map.
//! - [`health`]: liveness (`/healthz`) and readiness (`/readyz`: not
//!   draining; an edge linked to a root).
//! - [`ws`]: the WebSocket upgrade, shared by `/ws` and SockJS's websocket
//!   transports; it hands the raw socket to a session.
//! - [`permit`]: session slots; a [`permit::SessionPermit`] gives its slot
//!   back when dropped.
//! - [`conn_rate`]: new connections per source address
//!   (`[connection_rate]`, off by default): over it, 429 and close.
//! - [`client_addr`], [`proxy_header`]: the client's address behind
//!   trusted proxies (`[proxy]`): a PROXY protocol header read at accept, or
//!   `X-Forwarded-For` per request; what logs and the connection rate use.
//! - [`session`]: STOMP over WebSocket: sans-I/O state machine, the bytes it
//!   writes, the async shell.
//! - [`sockjs`]: SockJS 0.3 under `/sockjs` (and the test-suite services).
//! - [`auth`]: JWT verification: keys by `kid` (single key, `[[auth.keys]]`,
//!   a JWKS file), reloaded on SIGHUP; `exp`/`nbf`, optional `iss`/`aud`;
//!   how long a token stays valid, for ending its session at expiry.
//! - [`hub`]: mailboxes by (site, user), routing by scope, replay, expiry.
//! - [`outbox`]: each session's bounded window onto its mailbox: a session
//!   whose window fills reads on from the mailbox; the policy when the
//!   mailbox evicts what a lagging session was not sent.
//! - [`filter`]: event filters on subscriptions.
//! - [`link`]: the in-process link from the publish API to the hub.
//! - [`uplink`]: edge mode: a link to every root broker, feeding the same
//!   hub.
//! - [`dedup`]: the duplicate filter both links pass: a notification id
//!   repeated within the window reaches no mailbox, in either mode.
//! - [`app`]: the shared state, and the [`app::Mode`] (standalone or edge)
//!   decided once at start.
//! - [`standalone`]: the engine ([`herald_engine::engine::Engine::build`])
//!   over this gateway's parts: the local link into the hub, the embedded
//!   store, the hub as the presence source.
//! - [`presence`]: edge mode: users coming and going, batched into reports
//!   for the roots.
//! - [`stats`]: `GET /v1/stats` (this process's figures) and, in edge
//!   mode, the stats reports for the roots.
//! - [`metrics`], [`dev`]: metrics, dev mode.
//!
//! # Data flow
//! ```text
//! POST /v1/notifications -> PublishApi (validate once) -> LocalLink -> DuplicateFilter -> Hub::deliver
//!   Hub: scope -> mailboxes -> seq + replay buffer -> Outbox::push (Arc, no copy)
//!   session task: Outbox::pop -> [ws header + STOMP head][shared payload][NUL] -> writev
//!     (window full: the session is behind; Hub::refill reads on from the replay buffer)
//! ```
//!
//! # Tasks
//! [`Gateway::serve`] spawns the background tasks of its mode as
//! [`herald_engine::task::Task`]s: mailbox expiry in both; standalone, the
//! engine's (`scheduling`, with `alerts` in it, and `presence-events` with
//! `presence.events_topic` set); edge, the presence batcher, the stats
//! reporter and the uplink. All are stopped by the shutdown token and
//! joined after the drain.
//!
//! # Shutdown
//! The token fires (SIGTERM/SIGINT in `main`): the listener closes (new
//! connections, probes included, are refused; a balancer's check fails and
//! its retries send reconnecting users elsewhere), each session sends ERROR
//! "server shutting down" and a close frame, and [`Gateway::serve`] waits up
//! to `shutdown_grace_ms` for them. A SockJS session between two polls
//! keeps its notice for the next poll, on the keep-alive connection the last
//! one came on, for up to [`sockjs::session::SHUTDOWN_LINGER`]. `/readyz` reached on a connection still
//! open answers 503 `draining`.

pub mod app;
pub mod auth;
pub mod client_addr;
pub mod config;
pub mod conn_rate;
pub mod dedup;
pub mod dev;
pub mod filter;
pub mod front;
pub mod health;
pub mod http;
pub mod hub;
pub mod js;
pub mod link;
pub mod metrics;
pub mod outbox;
pub mod permit;
pub mod presence;
pub mod proxy_header;
pub mod publish_direct;
pub mod server;
pub mod session;
pub mod sockjs;
pub mod standalone;
pub mod stats;
pub mod uplink;
pub mod ws;

#[cfg(test)]
mod test_support;

use std::sync::Arc;
use std::time::Duration;

use herald_engine::answers::MetricsAccess;
use herald_engine::api_key::ApiKeys;
use herald_engine::engine::EngineTasks;
use herald_engine::task::{Tasks, task_fn};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use app::{DevCredentials, Mode, Shared};
use auth::Verifier;
use config::Config;
use dedup::DuplicateFilter;
use hub::Hub;
use metrics::Metrics;
use permit::SessionSlots;
pub use standalone::StartError;

/// A configured gateway, ready to serve.
#[derive(Debug)]
pub struct Gateway {
    shared: Arc<Shared>,
    /// Edge mode: the presence changes sessions report, for the batcher.
    presence_rx: Option<tokio::sync::mpsc::Receiver<(Arc<str>, presence::Change)>>,
    /// The API keys, for reloads ([`Gateway::api_keys`]).
    api_keys: Option<ApiKeys>,
    /// Standalone: the engine's tasks, for [`Gateway::serve`].
    engine_tasks: Option<EngineTasks>,
}

impl Gateway {
    /// Build from a validated configuration. `shutdown` is the token that
    /// starts the drain; in dev mode `dev` carries the made-up credentials
    /// (and its API key is accepted).
    pub fn new(
        config: Config,
        verifier: Verifier,
        dev: Option<DevCredentials>,
        shutdown: CancellationToken,
    ) -> Result<Gateway, StartError> {
        let config = Arc::new(config);
        let metrics = Arc::new(Metrics::default());
        metrics
            .root_links_configured
            .set(config.edge.roots.len() as i64);
        let mut registry = Registry::default();
        herald_engine::metrics::register_process(
            &mut registry,
            env!("CARGO_PKG_VERSION"),
            env!("HERALD_COMMIT"),
        );
        metrics.register(&mut registry);
        let hub = Arc::new(Hub::new(&config.mailbox, Arc::clone(&metrics)));
        // One filter for whatever feeds the hub, so an id is an idempotency
        // key in both modes.
        let duplicates = Arc::new(DuplicateFilter::new(
            Duration::from_secs(config.edge.dedup_window_secs),
            config.edge.dedup_max,
            Arc::clone(&metrics),
        ));
        // Standalone, this process runs the engine (the publish API,
        // delayed notifications); an edge leaves both to its routers and
        // reports presence to them instead.
        let (mode, presence_rx, api_keys, engine_tasks, metrics_access) = if config.edge_mode() {
            let (presence, rx) =
                presence::channel(config.edge.presence_queue, Arc::clone(&metrics));
            let (api_keys, access) = standalone::edge_metrics_keys(&config, &mut registry)?;
            (Mode::Edge { presence }, Some(rx), api_keys, None, access)
        } else {
            let topics = metrics.topics.clone();
            let built = standalone::build(
                &config,
                &hub,
                &duplicates,
                dev.as_ref(),
                topics,
                &mut registry,
            )?;
            let access = MetricsAccess::new(
                config.metrics_require_key,
                &built.api_keys,
                &built.engine.publish_metrics,
            );
            let mode = Mode::Standalone {
                engine: built.engine,
            };
            (mode, None, Some(built.api_keys), Some(built.tasks), access)
        };
        let shared = Arc::new(Shared {
            sessions: SessionSlots::new(config.session.max_sessions),
            config,
            hub,
            duplicates,
            verifier,
            metrics,
            registry,
            shutdown,
            tracker: TaskTracker::new(),
            dev,
            mode,
            metrics_access,
        });
        Ok(Gateway {
            shared,
            presence_rx,
            api_keys,
            engine_tasks,
        })
    }

    /// The API keys (clones share them, so [`ApiKeys::replace`] on one
    /// reloads them): standalone, the publish API's; on an edge, with
    /// `metrics_require_key`, those `/metrics` takes. Else None.
    pub fn api_keys(&self) -> Option<&ApiKeys> {
        self.api_keys.as_ref()
    }

    /// The mode this gateway runs in.
    pub fn mode(&self) -> &Mode {
        &self.shared.mode
    }

    /// The shared state (tests read metrics and the hub through it).
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// What keeps this gateway from taking new sessions, asked at any time
    /// (the conditions of `/readyz`, [`health::not_ready`]): for
    /// `$NOTIFY_SOCKET`'s `READY=1` ([`herald_engine::process::notify`]).
    pub fn readiness(&self) -> impl Fn() -> Vec<herald_engine::health::Reason> + Send + 'static {
        let shared = Arc::clone(&self.shared);
        move || health::not_ready(&shared)
    }

    /// Serve on `listener` until the shutdown token fires, then drain.
    pub async fn serve(self, listener: TcpListener) {
        let shared = self.shared;
        let cfg = &shared.config;
        let shutdown = shared.shutdown.clone();
        // The background tasks of this mode, each stopped by `shutdown`.
        let mut tasks = Tasks::default();
        let hub = Arc::clone(&shared.hub);
        let (tick, budget) = (
            Duration::from_millis(cfg.mailbox.expiry_tick_ms),
            cfg.mailbox.max_expirations_per_tick,
        );
        tasks.spawn(
            task_fn("mailbox-expiry", move |shutdown| {
                hub.run_expiry(tick, budget, shutdown)
            }),
            shutdown.clone(),
        );
        // Standalone: the engine's tasks and routes (the publish API, the
        // console). An edge takes notifications from its roots; publishing
        // goes through a router, so it serves no engine.
        if let Some(engine_tasks) = self.engine_tasks {
            engine_tasks.spawn(&mut tasks, &shutdown);
        }
        let engine_routes = match &shared.mode {
            Mode::Standalone { engine } => engine.routes(),
            Mode::Edge { .. } => {
                spawn_edge(&shared, self.presence_rx, &mut tasks);
                axum::Router::new()
            }
        };
        let (router, sockjs) = http::routes(Arc::clone(&shared), engine_routes);
        let clients = Arc::new(client_addr::ClientAddrs::new(
            cfg.proxy.clone(),
            cfg.connection_rate.rate().map(|rate| {
                Arc::new(conn_rate::ConnectionRate::new(
                    rate,
                    cfg.connection_rate.max_addresses,
                    Arc::clone(&shared.metrics),
                ))
            }),
        ));
        let front = front::Front::new(Arc::clone(&shared), router, sockjs, clients);
        server::serve(
            listener,
            Arc::new(front),
            shared.shutdown.clone(),
            shared.tracker.clone(),
        )
        .await;
        shared.tracker.close();
        let grace = Duration::from_millis(cfg.shutdown_grace_ms);
        let open = shared.session_slots();
        tracing::info!(
            sessions = open,
            grace_ms = cfg.shutdown_grace_ms,
            "draining"
        );
        if tokio::time::timeout(grace, shared.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                remaining = shared.tracker.len(),
                "shutdown grace elapsed with connections still open"
            );
        }
        tasks.join().await;
        tracing::info!("stopped");
    }
}

/// An edge's tasks: the presence batcher (reports for the routers), the
/// stats reporter and the uplink to every root.
fn spawn_edge(
    shared: &Arc<Shared>,
    presence_rx: Option<tokio::sync::mpsc::Receiver<(Arc<str>, presence::Change)>>,
    tasks: &mut Tasks,
) {
    let cfg = &shared.config;
    let shutdown = &shared.shutdown;
    let (reports, _) = tokio::sync::broadcast::channel(presence::LINK_BACKLOG);
    let (syncs, sync_requests) = presence::SyncRequests::channel();
    if let Some(rx) = presence_rx {
        let batcher = presence::BatcherConfig {
            edge: cfg.edge.id.clone().unwrap_or_else(|| "unnamed".into()),
            boot: format!("{:016x}", rand::random::<u64>()),
            batch: Duration::from_millis(cfg.edge.presence_batch_ms),
            heartbeat: Duration::from_millis(cfg.edge.presence_heartbeat_ms),
            mailbox_ttl: Duration::from_secs(cfg.mailbox.ttl_secs),
            sync: Duration::from_millis(cfg.edge.presence_sync_ms),
        };
        let out = reports.clone();
        let hub = Arc::clone(&shared.hub);
        tasks.spawn(
            task_fn("presence-batcher", move |shutdown| {
                presence::run_batcher(batcher, rx, out, hub, sync_requests, shutdown)
            }),
            shutdown.clone(),
        );
    }
    let (stats_reports, _) = tokio::sync::broadcast::channel(stats::LINK_BACKLOG);
    let every = Duration::from_millis(cfg.edge.presence_heartbeat_ms);
    let (me, out) = (Arc::clone(shared), stats_reports.clone());
    tasks.spawn(
        task_fn("stats-reporter", move |shutdown| {
            stats::run_reporter(me, every, out, shutdown)
        }),
        shutdown.clone(),
    );
    let uplink = Arc::new(uplink::Uplink::new(
        cfg.edge.clone(),
        Arc::clone(&shared.hub),
        Arc::clone(&shared.duplicates),
        cfg.envelope_limits(),
        Arc::clone(&shared.metrics),
        presence::ToRoots { reports, syncs },
        stats_reports,
    ));
    tasks.spawn(
        task_fn("uplink", move |shutdown| uplink.run(shutdown)),
        shutdown.clone(),
    );
}
