//! The Node.js peers: Socket.IO 4 (its in-memory adapter) and sockjs-node, each one `node`
//! process running a script of `bench/peers/node-pubsub/` on a free 127.0.0.1 port.
//!
//! Both take the publishing interface of the Nchan peer (`POST /pub/{channel}`, `GET /readyz`;
//! `http-side.js`), so the bench publishes to them alike; their subscribers name their channel
//! in the query (`?channel=`): Socket.IO's join the room of that name once connected, sockjs's
//! are subscribed once open. Their dependencies are pinned in `package-lock.json` and installed
//! with `npm ci` in that directory by `install.sh` beside them, only when missing.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::harness::outcome::BenchError;
use crate::harness::service::{Service, free_local_addr};

/// The directory of the scripts, under `--peers-dir`.
const DIR: &str = "node-pubsub";
/// The event every notification is emitted as (Socket.IO).
pub(crate) const EVENT: &str = "n";

/// Which Node peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    SocketIo,
    Sockjs,
}

impl Kind {
    fn script(self) -> &'static str {
        match self {
            Kind::SocketIo => "socketio.js",
            Kind::Sockjs => "sockjs.js",
        }
    }

    /// The npm package whose version the report states.
    fn package(self) -> &'static str {
        match self {
            Kind::SocketIo => "socket.io",
            Kind::Sockjs => "sockjs",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::SocketIo => "socketio",
            Kind::Sockjs => "sockjs",
        }
    }
}

fn dir(peers_dir: &Path) -> PathBuf {
    peers_dir.join(DIR)
}

/// Whether node and both packages are installed.
fn installed_in(peers_dir: &Path) -> bool {
    let modules = dir(peers_dir).join("node_modules");
    which("node")
        && [Kind::SocketIo, Kind::Sockjs]
            .iter()
            .all(|k| modules.join(k.package()).join("package.json").is_file())
}

/// Whether `program` is on the `PATH`.
fn which(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

/// Installs Node.js (Debian's) and the packages with `{peers_dir}/node-pubsub/install.sh`
/// unless they are there.
pub(crate) async fn install(peers_dir: &Path) -> Result<(), BenchError> {
    let script = format!("{DIR}/install.sh");
    let installed = || installed_in(peers_dir);
    super::install::run(peers_dir, &script, &installed, "node, socket.io and sockjs").await
}

/// The versions, for the report: `socket.io 4.8.4, node v20.19.2`.
pub(crate) async fn version(kind: Kind, peers_dir: &Path) -> String {
    let manifest = dir(peers_dir)
        .join("node_modules")
        .join(kind.package())
        .join("package.json");
    let package = std::fs::read_to_string(&manifest)
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .and_then(|v| v["version"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned());
    let node = tokio::process::Command::new("node")
        .arg("--version")
        .output()
        .await
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|e| format!("node --version failed: {e}"));
    format!("{} {package}, node {node}", kind.package())
}

/// A running Node peer.
pub(crate) struct NodePeer {
    pub(crate) addr: std::net::SocketAddr,
    pub(crate) command: String,
    service: Service,
}

impl NodePeer {
    pub(crate) async fn start(
        kind: Kind,
        peers_dir: &Path,
        log: Option<&Path>,
        startup_timeout: Duration,
    ) -> Result<Self, BenchError> {
        let failed =
            |e: &dyn std::fmt::Display| BenchError::Failed(format!("{}: {e}", kind.name()));
        let addr = free_local_addr().map_err(|e| failed(&e))?;
        let script = dir(peers_dir).join(kind.script());
        let args = [script.display().to_string(), addr.to_string()];
        let command = format!("node {}", args.join(" "));
        let service = Service::start(
            kind.name(),
            Path::new("node"),
            &args,
            addr,
            log,
            startup_timeout,
        )
        .await
        .map_err(|e| failed(&e))?;
        Ok(Self {
            addr,
            command,
            service,
        })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.service.pid()
    }

    /// Stops it (SIGTERM, then a kill after a grace).
    pub(crate) async fn finish(self) -> String {
        self.service.stop().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_has_its_script_beside_the_bench() {
        let peers = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers");
        for kind in [Kind::SocketIo, Kind::Sockjs] {
            assert!(dir(&peers).join(kind.script()).is_file(), "{kind:?}");
        }
        assert!(dir(&peers).join("install.sh").is_file());
        assert!(dir(&peers).join("package-lock.json").is_file());
    }
}
