//! The Herald under test, started by the bench on free 127.0.0.1 ports with files of its own:
//!
//! - `router`: `herald-router` with `[redis]` (the run's own key prefix, `herald.{run id}`)
//!   on a run's own broker names ([`crate::harness::run`]); due notifications leave through the broker
//!   to one edge `herald-gateway` (`--root`), where the sessions are. The edge is started only
//!   when the scenario has sessions. At the end: processes stopped, the run's queues and
//!   exchanges deleted, its Redis keys deleted.
//! - `standalone`: one `herald-gateway` with its embedded store under a data directory in the
//!   run's directory, serving both the HTTP API and the sessions. At the end: stopped, the
//!   directory removed.
//!
//! Startup is step by step into a [`System`] that always exists, so whatever was started is
//! cleaned up by [`System::finish`] even when a later step fails.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use super::store::{AofRewrites, RedisInfo, RedisProbe};
use crate::harness::configs::{self, RedisSettings, RunDir, StandaloneSettings};
use crate::harness::outcome::BenchError;
use crate::harness::run::{Cleanup, Run};
use crate::harness::service::{Service, free_local_addr};
use crate::harness::token::random_token;

/// The Herald under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Target {
    /// `herald-router` with Redis (and an edge `herald-gateway` for sessions).
    Router,
    /// One `herald-gateway` with its embedded store.
    Standalone,
}

impl Target {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Target::Router => "router",
            Target::Standalone => "standalone",
        }
    }
}

/// What starting the Herald under test needs.
#[derive(Debug, Clone)]
pub(crate) struct SystemSettings {
    pub(crate) target: Target,
    pub(crate) router_bin: Option<PathBuf>,
    pub(crate) gateway_bin: Option<PathBuf>,
    pub(crate) amqp_url: String,
    pub(crate) redis_url: String,
    /// `[schedule]` settings (empty: Herald's defaults).
    pub(crate) schedule: toml::Table,
    /// `[callbacks]` keys to set (the callback benchmark: `allow_private_networks`, its
    /// receiver being on loopback, and `max_per_host`).
    pub(crate) callbacks: toml::Table,
    /// Seconds to wait for each process's `/readyz` (and the edge's queue).
    pub(crate) startup_timeout: u64,
    pub(crate) router_log: Option<PathBuf>,
    pub(crate) gateway_log: Option<PathBuf>,
}

/// Where the notifications are kept.
pub(crate) enum Store {
    Redis(RedisProbe),
    /// The embedded store's directory.
    Embedded(PathBuf),
}

/// How the cleanup went.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct SystemCleanup {
    /// How each started process ended, and the broker names that could not be deleted.
    #[serde(flatten)]
    pub(crate) amqp: Cleanup,
    /// Redis keys of the run deleted at the end.
    pub(crate) redis_keys_deleted: Option<u64>,
    /// What went wrong deleting them.
    pub(crate) redis_problem: Option<String>,
}

/// What the bench started, and how to reach it.
pub(crate) struct System {
    pub(crate) run_id: String,
    /// Where `POST /v1/notifications` and `/metrics` are.
    pub(crate) api_addr: Option<SocketAddr>,
    pub(crate) api_key: String,
    /// Where the sessions connect (`/ws`), when a gateway runs.
    pub(crate) ws_addr: Option<SocketAddr>,
    pub(crate) jwt_secret: String,
    pub(crate) store: Store,
    pub(crate) redis: Option<RedisInfo>,
    /// Started processes, in the order they are stopped.
    services: Vec<(&'static str, Service)>,
    amqp: Option<Run>,
    dir: Option<RunDir>,
}

impl System {
    /// The run's names and directory, and a connection to Redis (router) so that an
    /// unreachable Redis fails the run before anything starts.
    pub(crate) async fn begin(s: &SystemSettings) -> Result<Self, BenchError> {
        let failed = |e: String| BenchError::Failed(e);
        match s.target {
            Target::Router => {
                let run = Run::begin(&s.amqp_url).await?;
                let prefix = RedisSettings::prefix_for_run(&run.id);
                let store = match RedisProbe::connect(&s.redis_url, &prefix).await {
                    Ok(p) => p,
                    Err(e) => {
                        run.finish(Vec::new()).await;
                        return Err(failed(e));
                    }
                };
                let redis = store.describe().await.ok();
                Ok(Self {
                    run_id: run.id.clone(),
                    api_addr: None,
                    api_key: random_token(32),
                    ws_addr: None,
                    jwt_secret: random_token(48),
                    store: Store::Redis(store),
                    redis,
                    services: Vec::new(),
                    amqp: Some(run),
                    dir: None,
                })
            }
            Target::Standalone => {
                let run_id = configs::new_run_id();
                let dir = RunDir::create(&run_id)
                    .map_err(|e| failed(format!("cannot create the run directory: {e}")))?;
                Ok(Self {
                    store: Store::Embedded(dir.path.join("gateway-data").join("delayed")),
                    run_id,
                    api_addr: None,
                    api_key: random_token(32),
                    ws_addr: None,
                    jwt_secret: random_token(48),
                    redis: None,
                    services: Vec::new(),
                    amqp: None,
                    dir: Some(dir),
                })
            }
        }
    }

    /// Starts the processes; `sessions` says whether a gateway for them is needed (the router
    /// target needs none for ingest alone).
    pub(crate) async fn start(
        &mut self,
        s: &SystemSettings,
        sessions: bool,
    ) -> Result<(), BenchError> {
        let timeout = Duration::from_secs(s.startup_timeout);
        match s.target {
            Target::Router => {
                let run = self.amqp.as_mut().ok_or_else(|| no("run"))?;
                let bin = s.router_bin.as_deref().ok_or_else(|| no("--router-bin"))?;
                let redis = RedisSettings {
                    url: s.redis_url.clone(),
                    prefix: RedisSettings::prefix_for_run(&run.id),
                };
                let router = run
                    .start_router_with(
                        bin,
                        None,
                        Some(redis),
                        s.schedule.clone(),
                        s.callbacks.clone(),
                        &self.api_key,
                        s.router_log.as_deref(),
                        timeout,
                    )
                    .await?;
                eprintln!(
                    "herald-bench: router pid {} on {} (redis prefix {}:)",
                    router.pid(),
                    router.addr,
                    RedisSettings::prefix_for_run(&run.id)
                );
                self.api_addr = Some(router.addr);
                self.services.push(("router", router));
                if sessions {
                    let bin = s
                        .gateway_bin
                        .as_deref()
                        .ok_or_else(|| no("--gateway-bin"))?;
                    run.add_queue(configs::edge_queue(&run.id));
                    let edge = run
                        .start_edge(bin, &self.jwt_secret, s.gateway_log.as_deref(), timeout)
                        .await?;
                    eprintln!(
                        "herald-bench: edge gateway pid {} on {}",
                        edge.pid(),
                        edge.addr
                    );
                    self.ws_addr = Some(edge.addr);
                    // The edge stops first: it is downstream of the router.
                    self.services.insert(0, ("gateway", edge));
                }
            }
            Target::Standalone => {
                let dir = self.dir.as_ref().ok_or_else(|| no("run directory"))?;
                let bin = s
                    .gateway_bin
                    .as_deref()
                    .ok_or_else(|| no("--gateway-bin"))?;
                let failed =
                    |e: &dyn std::fmt::Display| BenchError::Failed(format!("gateway: {e}"));
                let settings = StandaloneSettings {
                    listen: free_local_addr().map_err(|e| failed(&e))?,
                    data_dir: dir.path.join("gateway-data"),
                    api_key: self.api_key.clone(),
                    jwt_secret: self.jwt_secret.clone(),
                    schedule: s.schedule.clone(),
                    callbacks: s.callbacks.clone(),
                };
                let path = dir
                    .write("gateway.toml", &configs::gateway_standalone_toml(&settings))
                    .map_err(|e| failed(&e))?;
                let args = ["--config".to_owned(), path.display().to_string()];
                let gateway = Service::start(
                    "gateway",
                    bin,
                    &args,
                    settings.listen,
                    s.gateway_log.as_deref(),
                    timeout,
                )
                .await
                .map_err(|e| failed(&e))?;
                eprintln!(
                    "herald-bench: standalone gateway pid {} on {} (data {})",
                    gateway.pid(),
                    gateway.addr,
                    settings.data_dir.display()
                );
                self.api_addr = Some(gateway.addr);
                self.ws_addr = Some(gateway.addr);
                self.services.push(("gateway", gateway));
            }
        }
        Ok(())
    }

    /// Names and pids of the started processes.
    pub(crate) fn pids(&self) -> Vec<(&'static str, u32)> {
        self.services.iter().map(|(n, s)| (*n, s.pid())).collect()
    }

    /// Why the system is broken, if a process has exited.
    pub(crate) fn exited(&mut self) -> Option<String> {
        self.services.iter_mut().find_map(|(name, s)| {
            s.exited()
                .map(|status| format!("the {name} exited ({status})"))
        })
    }

    /// Redis's AOF rewrites now (`None` for the embedded store, or when Redis does not say).
    pub(crate) async fn aof_rewrites(&self) -> Option<AofRewrites> {
        match &self.store {
            Store::Redis(r) => r.aof_rewrites().await.ok(),
            Store::Embedded(_) => None,
        }
    }

    /// Bytes the store holds now: Redis `used_memory`, or the embedded store's directory
    /// (allocated, length).
    pub(crate) async fn store_bytes(&self) -> Result<(u64, Option<u64>), String> {
        match &self.store {
            Store::Redis(r) => r.used_memory().await.map(|b| (b, None)),
            // The store's directory appears with the store.
            Store::Embedded(path) if !path.exists() => Ok((0, Some(0))),
            Store::Embedded(path) => super::store::dir_size(path)
                .map(|(allocated, length)| (allocated, Some(length)))
                .map_err(|e| format!("{}: {e}", path.display())),
        }
    }

    /// Stops everything, deletes the broker names, the Redis keys and the files of the run.
    pub(crate) async fn finish(self) -> SystemCleanup {
        let mut out = SystemCleanup::default();
        match self.amqp {
            Some(run) => out.amqp = run.finish(self.services).await,
            None => {
                for (name, service) in self.services {
                    let how = service.stop().await;
                    out.amqp.stopped.push((name.to_owned(), how));
                }
            }
        }
        if let Store::Redis(r) = &self.store {
            eprintln!(
                "herald-bench: deleting the run's Redis keys ({}:*)",
                r.prefix
            );
            match r.delete_run_keys().await {
                Ok(n) => out.redis_keys_deleted = Some(n),
                Err(e) => out.redis_problem = Some(e),
            }
        }
        if let Some(dir) = self.dir {
            dir.remove();
        }
        out
    }
}

fn no(what: &str) -> BenchError {
    BenchError::Usage(format!("{what} is needed for this target"))
}
