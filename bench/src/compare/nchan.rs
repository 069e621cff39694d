//! The Nchan peer: Debian's nginx with the Nchan module, on a free 127.0.0.1 port, with its
//! configuration, pid file, logs and temporary files in a directory of the run's own, never the
//! machine's nginx.
//!
//! Subscribers open a WebSocket on `/sub/{channel}` (one channel per user, or `broadcast`);
//! publishers `POST /pub/{channel}`. Nchan's defaults otherwise (its message buffer keeps the
//! last 10 messages of a channel for an hour, as Herald's mailboxes keep theirs for replay).
//! `/readyz` answers 200 so the bench's readiness probe works unchanged.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::harness::configs::{self, RunDir};
use crate::harness::outcome::BenchError;
use crate::harness::service::{Service, free_local_addr};

/// Debian's nginx binary (package `nginx-light`).
pub(crate) const NGINX: &str = "/usr/sbin/nginx";
/// Debian's Nchan module (package `libnginx-mod-nchan`).
pub(crate) const MODULE: &str = "/usr/lib/nginx/modules/ngx_nchan_module.so";
/// Connections one worker accepts (a process here may hold 20,000 file descriptors).
const WORKER_CONNECTIONS: usize = 19_500;
/// The channel every broadcast session subscribes to.
pub(crate) const BROADCAST_CHANNEL: &str = "broadcast";

/// The nginx configuration for `workers` worker processes listening on `listen`, every path
/// under `dir` (pure).
pub(crate) fn config(dir: &Path, listen: SocketAddr, workers: usize) -> String {
    let d = dir.display();
    format!(
        "load_module {MODULE};
worker_processes {workers};
daemon off;
master_process on;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
worker_rlimit_nofile 20000;
worker_shutdown_timeout 2s;
events {{
    worker_connections {WORKER_CONNECTIONS};
    multi_accept on;
}}
http {{
    access_log off;
    # The large-message scenario publishes up to 1 MiB (nginx's default limit is 1m), kept in
    # memory: a temporary file would land in the run's directory, which nginx's workers (user
    # nobody when started as root) may not enter.
    client_max_body_size 2m;
    client_body_buffer_size 2m;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    server {{
        listen {listen} backlog=4096;
        location = /readyz {{
            return 200 \"ready\\n\";
        }}
        location ~ ^/sub/([A-Za-z0-9_.~-]+)$ {{
            nchan_subscriber websocket;
            nchan_channel_id $1;
        }}
        location ~ ^/pub/([A-Za-z0-9_.~-]+)$ {{
            nchan_publisher;
            nchan_channel_id $1;
        }}
    }}
}}
"
    )
}

/// Whether nginx and the module are installed.
pub(crate) fn installed() -> bool {
    Path::new(NGINX).exists() && Path::new(MODULE).exists()
}

/// Installs them with `{peers_dir}/nchan/install.sh` unless they are there.
pub(crate) async fn install(peers_dir: &Path) -> Result<(), BenchError> {
    let what = format!("{NGINX} and {MODULE}");
    super::install::run(peers_dir, "nchan/install.sh", &installed, &what).await
}

/// The versions, for the report: `nginx/1.22.1, nchan 1:1.3.6+dfsg-2`.
pub(crate) async fn version() -> String {
    let nginx = tokio::process::Command::new(NGINX)
        .arg("-v")
        .output()
        .await
        .map(|o| {
            String::from_utf8_lossy(&o.stderr)
                .trim()
                .trim_start_matches("nginx version: ")
                .to_owned()
        })
        .unwrap_or_else(|e| format!("nginx -v failed: {e}"));
    let nchan = tokio::process::Command::new("dpkg-query")
        .args(["-W", "-f", "${Version}", "libnginx-mod-nchan"])
        .output()
        .await
        .ok()
        .filter(|o| o.status.success())
        .map_or_else(
            || "unknown".to_owned(),
            |o| String::from_utf8_lossy(&o.stdout).into_owned(),
        );
    format!("{nginx}, libnginx-mod-nchan {nchan}")
}

/// A running nginx with Nchan.
pub(crate) struct Nchan {
    pub(crate) addr: SocketAddr,
    pub(crate) command: String,
    service: Service,
    dir: RunDir,
}

impl Nchan {
    pub(crate) async fn start(
        workers: usize,
        log: Option<&Path>,
        startup_timeout: Duration,
    ) -> Result<Self, BenchError> {
        let failed = |e: &dyn std::fmt::Display| BenchError::Failed(format!("nchan: {e}"));
        let dir = RunDir::create(&configs::new_run_id())
            .map_err(|e| failed(&format!("cannot create the run directory: {e}")))?;
        let started = async {
            let addr = free_local_addr().map_err(|e| failed(&e))?;
            let path: PathBuf = dir
                .write("nginx.conf", &config(&dir.path, addr, workers))
                .map_err(|e| failed(&e))?;
            let args = [
                "-p".to_owned(),
                dir.path.display().to_string(),
                "-c".to_owned(),
                path.display().to_string(),
            ];
            let command = format!("{NGINX} {}", args.join(" "));
            let service =
                Service::start("nchan", Path::new(NGINX), &args, addr, log, startup_timeout)
                    .await
                    .map_err(|e| failed(&e))?;
            Ok((addr, command, service))
        }
        .await;
        match started {
            Ok((addr, command, service)) => Ok(Self {
                addr,
                command,
                service,
                dir,
            }),
            Err(e) => {
                dir.remove();
                Err(e)
            }
        }
    }

    /// The master's pid (its workers are its children).
    pub(crate) fn pid(&self) -> u32 {
        self.service.pid()
    }

    /// Stops nginx (SIGTERM: the master stops its workers) and removes its files.
    pub(crate) async fn finish(self) -> String {
        let how = self.service.stop().await;
        self.dir.remove();
        how
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_keeps_everything_in_its_directory() {
        let text = config(
            Path::new("/tmp/herald-x"),
            "127.0.0.1:4000".parse().unwrap(),
            2,
        );
        assert!(text.starts_with(&format!("load_module {MODULE};\n")));
        assert!(text.contains("worker_processes 2;"));
        assert!(text.contains("listen 127.0.0.1:4000 backlog=4096;"));
        for line in text
            .lines()
            .filter(|l| l.contains("_path ") || l.contains("pid "))
        {
            assert!(line.contains("/tmp/herald-x/"), "{line}");
        }
        assert!(text.contains("nchan_subscriber websocket;"));
        assert!(text.contains("location = /readyz"));
        assert!(text.contains("client_body_buffer_size 2m;"));
        assert_eq!(text.matches('{').count(), text.matches('}').count());
    }
}
