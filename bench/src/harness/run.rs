//! What `router-throughput` and `latency` share: a run on the shared broker with names of its
//! own ([`crate::harness::configs`]), a private directory for its configuration files, the processes it
//! starts, and the cleanup that removes all of it, even when the run fails or is interrupted.

use std::path::Path;
use std::time::Duration;

use lapin::Connection;
use serde::Serialize;

use crate::harness::amqp;
use crate::harness::configs::{
    self, EdgeSettings, RedisSettings, RouterSettings, RunDir, Topology,
};
use crate::harness::outcome::BenchError;
use crate::harness::service::{Service, free_local_addr};
use crate::harness::token::random_token;

/// The router's default `amqp.prefetch`, for the report when `--prefetch` is not given.
pub(crate) const ROUTER_DEFAULT_PREFETCH: u16 = 256;
/// An edge's queue outlives a crashed bench by this much at most.
const EDGE_QUEUE_EXPIRES_SECS: u64 = 60;

/// One run's names, files and broker connection.
pub(crate) struct Run {
    pub(crate) id: String,
    pub(crate) topology: Topology,
    pub(crate) amqp_url: String,
    pub(crate) dir: RunDir,
    /// For declaring, watching and deleting the run's queues.
    pub(crate) admin: Connection,
    /// Queues the run declared (or had declared) beyond the router's topology.
    extra_queues: Vec<String>,
}

/// How the cleanup went, for the report.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Cleanup {
    /// How each started process ended, by name.
    pub(crate) stopped: Vec<(String, String)>,
    /// Queues or exchanges that could not be deleted (empty when all went).
    pub(crate) problems: Vec<String>,
}

impl Run {
    /// A new run id, its directory, and a connection to the broker (so an unreachable broker
    /// fails the run before anything is started).
    pub(crate) async fn begin(amqp_url: &str) -> Result<Self, BenchError> {
        let id = configs::new_run_id();
        let admin = amqp::connect(amqp_url, &format!("herald-bench {id} admin"))
            .await
            .map_err(|e| BenchError::Failed(format!("cannot connect to the broker: {e}")))?;
        let dir = RunDir::create(&id)
            .map_err(|e| BenchError::Failed(format!("cannot create the run directory: {e}")))?;
        Ok(Self {
            topology: Topology::for_run(&id),
            id,
            amqp_url: amqp_url.to_owned(),
            dir,
            admin,
            extra_queues: Vec::new(),
        })
    }

    /// Remember a queue to delete at the end.
    pub(crate) fn add_queue(&mut self, queue: String) {
        self.extra_queues.push(queue);
    }

    /// Writes the router's configuration and starts it on a free port; returns once its
    /// `/readyz` answers 200 (connected, topology declared).
    pub(crate) async fn start_router(
        &self,
        bin: &Path,
        prefetch: Option<u16>,
        log: Option<&Path>,
        startup_timeout: Duration,
    ) -> Result<Service, BenchError> {
        self.start_router_with(
            bin,
            prefetch,
            None,
            toml::Table::new(),
            toml::Table::new(),
            &random_token(32),
            log,
            startup_timeout,
        )
        .await
    }

    /// [`Run::start_router`] with `[redis]` (delayed notifications on) when given, `[schedule]`
    /// settings, `[callbacks]` settings, and the API key the caller will
    /// publish with.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn start_router_with(
        &self,
        bin: &Path,
        prefetch: Option<u16>,
        redis: Option<RedisSettings>,
        schedule: toml::Table,
        callbacks: toml::Table,
        api_key: &str,
        log: Option<&Path>,
        startup_timeout: Duration,
    ) -> Result<Service, BenchError> {
        let failed = |e: &dyn std::fmt::Display| BenchError::Failed(format!("router: {e}"));
        let settings = RouterSettings {
            listen: free_local_addr().map_err(|e| failed(&e))?,
            amqp_url: self.amqp_url.clone(),
            api_key: api_key.to_owned(),
            run_id: self.id.clone(),
            prefetch,
            topology: self.topology.clone(),
            redis,
            schedule,
            callbacks,
        };
        let path = self
            .dir
            .write("router.toml", &configs::router_toml(&settings))
            .map_err(|e| failed(&e))?;
        let args = ["--config".to_owned(), path.display().to_string()];
        Service::start("router", bin, &args, settings.listen, log, startup_timeout)
            .await
            .map_err(|e| failed(&e))
    }

    /// Starts `bin` as an edge gateway of the run: its TOML holds a free port, a data directory
    /// in the run's directory, `jwt_secret`, and `[edge]` with the run's broker as its root and
    /// the run's edges and presence exchanges; `--edge-id` is the run id. Returns once its
    /// `/readyz` answers (linked to the root) and its queue ([`configs::edge_queue`], which the caller should
    /// [`Run::add_queue`]) has a consumer.
    pub(crate) async fn start_edge(
        &self,
        bin: &Path,
        jwt_secret: &str,
        log: Option<&Path>,
        startup_timeout: Duration,
    ) -> Result<Service, BenchError> {
        let failed = |e: &dyn std::fmt::Display| BenchError::Failed(format!("gateway: {e}"));
        let settings = EdgeSettings {
            listen: free_local_addr().map_err(|e| failed(&e))?,
            data_dir: self.dir.path.join("gateway-data"),
            jwt_secret: jwt_secret.to_owned(),
            root: self.amqp_url.clone(),
            exchange: self.topology.edges_exchange.clone(),
            presence_exchange: self.topology.presence_exchange.clone(),
            queue_expires_secs: EDGE_QUEUE_EXPIRES_SECS,
        };
        let path = self
            .dir
            .write("gateway.toml", &configs::gateway_edge_toml(&settings))
            .map_err(|e| failed(&e))?;
        let args = [
            "--config".to_owned(),
            path.display().to_string(),
            "--edge-id".to_owned(),
            self.id.clone(),
        ];
        let mut gateway =
            Service::start("gateway", bin, &args, settings.listen, log, startup_timeout)
                .await
                .map_err(|e| failed(&e))?;
        let edge_queue = configs::edge_queue(&self.id);
        let deadline = tokio::time::Instant::now() + startup_timeout;
        loop {
            match amqp::queue_state(&self.admin, &edge_queue).await {
                Ok(Some((_, consumers))) if consumers > 0 => return Ok(gateway),
                Ok(_) => {}
                Err(e) => eprintln!("herald-bench: looking for the edge's queue: {e}"),
            }
            let gone = gateway.exited();
            if gone.is_some() || tokio::time::Instant::now() >= deadline {
                gateway.stop().await;
                return Err(BenchError::Failed(match gone {
                    Some(status) => format!("gateway exited ({status})"),
                    None => format!(
                        "the edge's queue {edge_queue} has no consumer after {} s",
                        startup_timeout.as_secs()
                    ),
                }));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stops `services` in order (SIGTERM), deletes the run's queues and exchanges, closes the
    /// broker connection and removes the directory.
    pub(crate) async fn finish(self, services: Vec<(&'static str, Service)>) -> Cleanup {
        let mut cleanup = Cleanup::default();
        for (name, service) in services {
            let how = service.stop().await;
            cleanup.stopped.push((name.to_owned(), how));
        }
        cleanup.problems = amqp::delete_run(&self.admin, &self.topology, &self.extra_queues).await;
        let _ = self.admin.close(200, "bench done".into()).await;
        self.dir.remove();
        cleanup
    }
}
