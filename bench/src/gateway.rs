//! Starting and stopping a `herald-gateway` for a benchmark (`--spawn-gateway PATH`).
//!
//! The gateway gets a free `127.0.0.1` port, the JWT secret and a fresh API key on its command
//! line; readiness is `GET /healthz` answering 200, polled until a deadline. Stopping is
//! `SIGTERM`, then a wait with a deadline, then `SIGKILL`.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use rand::Rng as _;
use rand::distr::Alphanumeric;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::sys;
use crate::transport::Transport;

/// Time between two `/healthz` probes.
const HEALTH_POLL: Duration = Duration::from_millis(50);
/// Deadline for one `/healthz` probe.
const HEALTH_PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a gateway may take to exit after `SIGTERM` before it is killed.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub(crate) enum GatewayError {
    #[error("no free port on 127.0.0.1: {0}")]
    NoPort(std::io::Error),
    #[error("cannot open gateway log {path}: {source}")]
    Log {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start {path}: {source}")]
    Spawn {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("gateway exited during startup ({status})")]
    ExitedEarly { status: std::process::ExitStatus },
    #[error("gateway did not answer 200 on /healthz within {0:?} (last: {1})")]
    NotHealthy(Duration, String),
}

/// A gateway this process started.
#[derive(Debug)]
pub(crate) struct SpawnedGateway {
    child: Child,
    pid: u32,
    pub(crate) addr: SocketAddr,
    /// The API key the gateway accepts for `POST /v1/notifications` (for later commands).
    #[allow(dead_code)]
    pub(crate) api_key: String,
}

/// A random token of `len` alphanumeric characters (JWT secrets, API keys).
pub(crate) fn random_token(len: usize) -> String {
    rand::rng()
        .sample_iter(&Alphanumeric)
        .take(len)
        .map(char::from)
        .collect()
}

/// Asks the kernel for a free port on 127.0.0.1. The port is released before the gateway binds
/// it, so another process could take it in between; on loopback in a bench run that is rare
/// enough, and the failure is loud (the gateway exits, startup reports it).
fn free_port() -> std::io::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

impl SpawnedGateway {
    /// Starts the gateway and waits until `/healthz` answers 200 or `startup_timeout` passes.
    pub(crate) async fn start(
        path: &Path,
        jwt_secret: &str,
        log: Option<&Path>,
        startup_timeout: Duration,
    ) -> Result<Self, GatewayError> {
        let port = free_port().map_err(GatewayError::NoPort)?;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let api_key = random_token(32);

        let (stdout, stderr) = match log {
            Some(log_path) => {
                let open_err = |source| GatewayError::Log {
                    path: log_path.to_owned(),
                    source,
                };
                let file = std::fs::File::create(log_path).map_err(open_err)?;
                let copy = file.try_clone().map_err(open_err)?;
                (Stdio::from(file), Stdio::from(copy))
            }
            None => (Stdio::null(), Stdio::null()),
        };
        let child = Command::new(path)
            .arg("--listen")
            .arg(addr.to_string())
            .arg("--jwt-secret")
            .arg(jwt_secret)
            .arg("--api-key")
            .arg(&api_key)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            // Never leave a gateway behind if the bench dies.
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| GatewayError::Spawn {
                path: path.to_owned(),
                source,
            })?;
        let pid = child.id().unwrap_or_default();
        let mut gateway = Self {
            child,
            pid,
            addr,
            api_key,
        };
        gateway.wait_healthy(startup_timeout).await?;
        Ok(gateway)
    }

    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// The URL sessions of `transport` use on this gateway.
    pub(crate) fn url(&self, transport: Transport) -> String {
        transport.url(&self.addr.to_string())
    }

    async fn wait_healthy(&mut self, timeout: Duration) -> Result<(), GatewayError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(GatewayError::ExitedEarly { status });
            }
            let probe =
                tokio::time::timeout(HEALTH_PROBE_TIMEOUT, http_get_status(self.addr, "/healthz"))
                    .await;
            let last = match probe {
                Ok(Ok(200)) => return Ok(()),
                Ok(Ok(status)) => format!("HTTP {status}"),
                Ok(Err(e)) => e.to_string(),
                Err(_) => "probe timed out".into(),
            };
            if Instant::now() >= deadline {
                return Err(GatewayError::NotHealthy(timeout, last));
            }
            tokio::time::sleep(HEALTH_POLL).await;
        }
    }

    /// Stops the gateway: `SIGTERM`, wait up to [`STOP_GRACE`], then `SIGKILL`. Returns how it
    /// ended, for the report.
    pub(crate) async fn stop(mut self) -> String {
        if let Ok(Some(status)) = self.child.try_wait() {
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

/// A minimal HTTP/1.1 `GET` that returns the status code (enough for `/healthz`; the bench does
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
    fn random_tokens() {
        let a = random_token(32);
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(a, random_token(32));
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
        assert_eq!(http_get_status(addr, "/healthz").await.unwrap(), 200);
        server.await.unwrap();
    }
}
