//! A standalone `herald-gateway` under test (`retained`, `compare`): started on a free
//! 127.0.0.1 port with a data directory, an API key and a JWT secret of the run's own (in
//! `$TMPDIR/herald-{run id}`), and stopped with the directory removed at the end, whatever
//! happened in between.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::harness::configs::{self, RunDir, StandaloneSettings};
use crate::harness::outcome::BenchError;
use crate::harness::service::{Service, free_local_addr};
use crate::harness::token::random_token;

/// How to start it.
#[derive(Debug, Clone)]
pub(crate) struct Launch<'a> {
    pub(crate) bin: &'a Path,
    /// Where its stdout and stderr go (discarded without).
    pub(crate) log: Option<&'a Path>,
    pub(crate) startup_timeout: Duration,
}

/// The running gateway and its files.
pub(crate) struct Gateway {
    pub(crate) run_id: String,
    pub(crate) addr: SocketAddr,
    pub(crate) api_key: String,
    pub(crate) jwt_secret: String,
    bin: PathBuf,
    config: PathBuf,
    service: Service,
    dir: RunDir,
}

impl Gateway {
    pub(crate) async fn start(launch: &Launch<'_>) -> Result<Self, BenchError> {
        let failed = |e: &dyn std::fmt::Display| BenchError::Failed(format!("gateway: {e}"));
        let run_id = configs::new_run_id();
        let dir = RunDir::create(&run_id)
            .map_err(|e| failed(&format!("cannot create the run directory: {e}")))?;
        let settings = StandaloneSettings {
            listen: match free_local_addr() {
                Ok(addr) => addr,
                Err(e) => {
                    dir.remove();
                    return Err(failed(&e));
                }
            },
            data_dir: dir.path.join("gateway-data"),
            api_key: random_token(32),
            jwt_secret: random_token(48),
            schedule: toml::Table::new(),
            callbacks: toml::Table::new(),
        };
        let started = async {
            let path = dir
                .write("gateway.toml", &configs::gateway_standalone_toml(&settings))
                .map_err(|e| failed(&e))?;
            let args = ["--config".to_owned(), path.display().to_string()];
            let service = Service::start(
                "gateway",
                launch.bin,
                &args,
                settings.listen,
                launch.log,
                launch.startup_timeout,
            )
            .await
            .map_err(|e| failed(&e))?;
            Ok((service, path))
        }
        .await;
        match started {
            Ok((service, config)) => Ok(Self {
                bin: launch.bin.to_owned(),
                config,
                run_id,
                addr: settings.listen,
                api_key: settings.api_key,
                jwt_secret: settings.jwt_secret,
                service,
                dir,
            }),
            Err(e) => {
                dir.remove();
                Err(e)
            }
        }
    }

    /// The command it was started with, for a report.
    pub(crate) fn command(&self) -> String {
        format!("{} --config {}", self.bin.display(), self.config.display())
    }

    pub(crate) fn pid(&self) -> u32 {
        self.service.pid()
    }

    /// Why the gateway is gone, if it is.
    pub(crate) fn exited(&mut self) -> Option<String> {
        self.service
            .exited()
            .map(|status| format!("the gateway exited ({status})"))
    }

    /// Stops it and removes its files; how it ended.
    pub(crate) async fn finish(self) -> String {
        let how = self.service.stop().await;
        self.dir.remove();
        how
    }
}
