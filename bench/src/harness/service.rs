//! A Herald process the bench starts and stops: `herald-gateway` (`--spawn-gateway`, and the
//! edge of `latency`) or `herald-router` (`router-throughput`, `latency`).
//!
//! The caller builds the command line; [`Service::start`] spawns it (stdin closed, stdout and
//! stderr to a log file or discarded, killed if the bench drops it), and waits for `GET /readyz`
//! to answer 200, polled until a deadline. Stopping is `SIGTERM`, then a wait with a deadline,
//! then `SIGKILL`.
//!
//! Settings reach the child through its command line and a configuration file the caller
//! writes; `HERALD_*` variables of the bench's own environment are removed from the child's, so
//! a stray `HERALD_ROUTER_AMQP_URL` cannot point a benchmark at another broker.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::harness::sys;

/// What a started service is waited on: readiness (a router connected to its broker, an edge
/// linked to its root, a standalone gateway serving), not `/healthz`, which only says the
/// process answers HTTP.
const READY_PATH: &str = "/readyz";
/// Time between two `/readyz` probes.
const HEALTH_POLL: Duration = Duration::from_millis(50);
/// Deadline for one `/readyz` probe.
const HEALTH_PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a service may take to exit after `SIGTERM` before it is killed.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(10);
/// Environment variables starting with this are not passed on to a service.
const HERALD_ENV_PREFIX: &str = "HERALD_";

#[derive(Debug, thiserror::Error)]
pub(crate) enum ServiceError {
    #[error("no free port on 127.0.0.1: {0}")]
    NoPort(std::io::Error),
    #[error("cannot open {name} log {path}: {source}")]
    Log {
        name: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start {path}: {source}")]
    Spawn {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{name} exited during startup ({status})")]
    ExitedEarly {
        name: &'static str,
        status: std::process::ExitStatus,
    },
    #[error("{name} did not answer 200 on /readyz within {timeout:?} (last: {last})")]
    NotHealthy {
        name: &'static str,
        timeout: Duration,
        last: String,
    },
}

/// Asks the kernel for a free port on 127.0.0.1. The port is released before the service binds
/// it, so another process could take it in between; on loopback in a bench run that is rare
/// enough, and the failure is loud (the service exits, startup reports it).
pub(crate) fn free_local_addr() -> Result<SocketAddr, ServiceError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(ServiceError::NoPort)?;
    listener.local_addr().map_err(ServiceError::NoPort)
}

/// A process this bench started.
#[derive(Debug)]
pub(crate) struct Service {
    /// `gateway`, `router`: for messages.
    name: &'static str,
    child: Child,
    pid: u32,
    /// Where its HTTP side (`/readyz`) listens.
    pub(crate) addr: SocketAddr,
}

impl Service {
    /// Starts `path` with `args` and waits until `http://{addr}/readyz` answers 200 or
    /// `startup_timeout` passes.
    pub(crate) async fn start(
        name: &'static str,
        path: &Path,
        args: &[String],
        addr: SocketAddr,
        log: Option<&Path>,
        startup_timeout: Duration,
    ) -> Result<Self, ServiceError> {
        let (stdout, stderr) = match log {
            Some(log_path) => {
                let open_err = |source| ServiceError::Log {
                    name,
                    path: log_path.to_owned(),
                    source,
                };
                let file = std::fs::File::create(log_path).map_err(open_err)?;
                let copy = file.try_clone().map_err(open_err)?;
                (Stdio::from(file), Stdio::from(copy))
            }
            None => (Stdio::null(), Stdio::null()),
        };
        let mut command = Command::new(path);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            // Never leave a service behind if the bench dies.
            .kill_on_drop(true);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with(HERALD_ENV_PREFIX) {
                command.env_remove(key);
            }
        }
        let child = command.spawn().map_err(|source| ServiceError::Spawn {
            path: path.to_owned(),
            source,
        })?;
        let pid = child.id().unwrap_or_default();
        let mut service = Self {
            name,
            child,
            pid,
            addr,
        };
        service.wait_healthy(startup_timeout).await?;
        Ok(service)
    }

    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// How it ended, if it has.
    pub(crate) fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    async fn wait_healthy(&mut self, timeout: Duration) -> Result<(), ServiceError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exited() {
                return Err(ServiceError::ExitedEarly {
                    name: self.name,
                    status,
                });
            }
            let probe =
                tokio::time::timeout(HEALTH_PROBE_TIMEOUT, http_get_status(self.addr, READY_PATH))
                    .await;
            let last = match probe {
                Ok(Ok(200)) => return Ok(()),
                Ok(Ok(status)) => format!("HTTP {status}"),
                Ok(Err(e)) => e.to_string(),
                Err(_) => "probe timed out".into(),
            };
            if Instant::now() >= deadline {
                return Err(ServiceError::NotHealthy {
                    name: self.name,
                    timeout,
                    last,
                });
            }
            tokio::time::sleep(HEALTH_POLL).await;
        }
    }

    /// Stops the service: `SIGTERM`, wait up to [`STOP_GRACE`], then `SIGKILL`. Returns how it
    /// ended, for the report.
    pub(crate) async fn stop(mut self) -> String {
        if let Some(status) = self.exited() {
            return format!("had already exited ({status})");
        }
        if let Err(e) = sys::terminate(self.pid) {
            let _ = self.child.kill().await;
            return format!("SIGTERM failed ({e}); killed");
        }
        match tokio::time::timeout(STOP_GRACE, self.child.wait()).await {
            Ok(Ok(status)) => format!("stopped ({status})"),
            Ok(Err(e)) => format!("wait failed: {e}"),
            Err(_) => {
                let _ = self.child.kill().await;
                format!("did not exit within {STOP_GRACE:?} of SIGTERM; killed")
            }
        }
    }
}

/// A minimal HTTP/1.1 `GET` that returns the status code (enough for `/readyz`; the bench does
/// not need an HTTP client crate for one probe).
pub(crate) async fn http_get_status(addr: SocketAddr, path: &str) -> std::io::Result<u16> {
    let mut stream = TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut head = Vec::with_capacity(256);
    let mut chunk = [0u8; 256];
    while !head.contains(&b'\n') && head.len() < 4096 {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&chunk[..n]);
    }
    parse_status_line(&head).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not an HTTP response status line",
        )
    })
}

fn parse_status_line(head: &[u8]) -> Option<u16> {
    let line_end = head.iter().position(|&b| b == b'\n')?;
    let line = std::str::from_utf8(&head[..line_end]).ok()?;
    let mut parts = line.split_whitespace();
    if !parts.next()?.starts_with("HTTP/") {
        return None;
    }
    parts.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_line() {
        assert_eq!(parse_status_line(b"HTTP/1.1 200 OK\r\n"), Some(200));
        assert_eq!(
            parse_status_line(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n"),
            Some(503)
        );
        assert_eq!(parse_status_line(b"HTTP/1.1 200 OK"), None);
        assert_eq!(parse_status_line(b"SSH-2.0-OpenSSH\r\n"), None);
    }

    #[test]
    fn free_addresses_are_on_loopback() {
        let addr = free_local_addr().unwrap();
        assert!(addr.ip().is_loopback());
        assert_ne!(addr.port(), 0);
    }

    #[tokio::test]
    async fn probes_a_tiny_http_server() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 512];
            let _ = s.read(&mut buf).await.unwrap();
            s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .await
                .unwrap();
        });
        assert_eq!(http_get_status(addr, READY_PATH).await.unwrap(), 200);
        server.await.unwrap();
    }

    #[tokio::test]
    async fn a_service_that_exits_is_reported() {
        let addr = free_local_addr().unwrap();
        let err = Service::start(
            "router",
            Path::new("/bin/false"),
            &[],
            addr,
            None,
            Duration::from_secs(5),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(err, ServiceError::ExitedEarly { name: "router", .. }),
            "{err}"
        );
    }
}
