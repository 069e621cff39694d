//! Starting and stopping a standalone `herald-gateway` for a benchmark (`--spawn-gateway PATH`).
//!
//! The gateway gets a free `127.0.0.1` port, the JWT secret and a fresh API key on its command
//! line; readiness and stopping are [`Service`]'s (`/readyz`, then `SIGTERM`).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use crate::client::transport::Transport;
use crate::harness::service::{Service, ServiceError, free_local_addr};
use crate::harness::token::random_token;

/// A gateway this process started.
#[derive(Debug)]
pub(crate) struct SpawnedGateway {
    service: Service,
    pub(crate) addr: SocketAddr,
    /// The API key the gateway accepts for `POST /v1/notifications` (for later commands).
    #[allow(dead_code)]
    pub(crate) api_key: String,
}

impl SpawnedGateway {
    /// Starts the gateway and waits until `/readyz` answers 200 or `startup_timeout` passes.
    pub(crate) async fn start(
        path: &Path,
        jwt_secret: &str,
        log: Option<&Path>,
        startup_timeout: Duration,
    ) -> Result<Self, ServiceError> {
        let addr = free_local_addr()?;
        let api_key = random_token(32);
        let args = [
            "--listen".to_owned(),
            addr.to_string(),
            "--jwt-secret".to_owned(),
            jwt_secret.to_owned(),
            "--api-key".to_owned(),
            api_key.clone(),
        ];
        let service = Service::start("gateway", path, &args, addr, log, startup_timeout).await?;
        Ok(Self {
            service,
            addr,
            api_key,
        })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.service.pid()
    }

    /// The URL sessions of `transport` use on this gateway.
    pub(crate) fn url(&self, transport: Transport) -> String {
        transport.url(&self.addr.to_string())
    }

    /// Stops the gateway (see [`Service::stop`]). Returns how it ended, for the report.
    pub(crate) async fn stop(self) -> String {
        self.service.stop().await
    }
}
