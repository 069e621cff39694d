//! The deployment under soak: `deploy/up` on its own state directory and port offset, from
//! binaries already built (`--bin-dir`), read back from what it wrote (`deployment.env`,
//! `secrets/`, `run/*.pid`; layout in `deploy/lib.sh`), and `deploy/down --purge` at the end.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use super::sample::Process;
use crate::harness::outcome::BenchError;

/// How long `deploy/up` may take as a whole (two RabbitMQ nodes boot slowly on a loaded
/// machine).
const UP_TIMEOUT: Duration = Duration::from_secs(600);
/// How long `deploy/down` may take.
const DOWN_TIMEOUT: Duration = Duration::from_secs(180);

/// The routers' TOML: callbacks may reach the bench's receiver on 127.0.0.1, and finished
/// statuses are purged after 30 s instead of three days, so Redis reaches its steady size
/// within the warm-up (what it keeps on purpose for days would read as growth).
pub(crate) const ROUTER_TOML: &str = "\
# Written by herald-bench soak (deploy/up --router-config).
[callbacks]
allow_private_networks = true

[schedule]
retention_ms = 30000
";

/// The edges' TOML (appended by deploy/up): what the edges keep on purpose for a while is
/// kept for less, so the soak reaches its steady state within the warm-up: a mailbox outlives
/// its user's last session 30 s (300 s by default: churned users' mailboxes would pile up for
/// five minutes), its replay buffer holds 32 messages (256: a steady user's fills in seconds,
/// not in minutes), and repeated ids are remembered 30 s (120 s).
pub(crate) const EDGE_TOML: &str = "\
# Written by herald-bench soak (deploy/up --edge-config).
[mailbox]
ttl_secs = 30
buffer_messages = 32

[edge]
dedup_window_secs = 30
";

/// A running deployment.
pub(crate) struct Deployment {
    deploy_dir: PathBuf,
    pub(crate) state: PathBuf,
    pub(crate) jwt_secret: String,
    pub(crate) api_key: String,
    /// HAProxy: browsers and the publish API.
    pub(crate) proxy: SocketAddr,
    /// (name, node, AMQP URL) of each root.
    pub(crate) roots: Vec<(String, String, String)>,
    pub(crate) routers: Vec<(String, SocketAddr)>,
    pub(crate) edges: Vec<(String, SocketAddr)>,
    pub(crate) redis_url: String,
}

/// What to bring up.
pub(crate) struct UpOptions<'a> {
    pub(crate) deploy_dir: &'a Path,
    pub(crate) bin_dir: &'a Path,
    pub(crate) state: &'a Path,
    pub(crate) port_offset: u32,
    pub(crate) log: &'a Path,
}

impl Deployment {
    /// Runs `deploy/up` (its output to `log`) and reads the deployment back.
    pub(crate) async fn up(o: &UpOptions<'_>) -> Result<Self, BenchError> {
        let work = o.state.parent().unwrap_or(Path::new("/tmp"));
        let router_toml = work.join("soak-router.toml");
        let edge_toml = work.join("soak-edge.toml");
        std::fs::write(&router_toml, ROUTER_TOML)
            .and_then(|()| std::fs::write(&edge_toml, EDGE_TOML))
            .map_err(|e| BenchError::Failed(format!("writing {}: {e}", work.display())))?;
        let log = std::fs::File::create(o.log)
            .map_err(|e| BenchError::Failed(format!("{}: {e}", o.log.display())))?;
        let log2 = log
            .try_clone()
            .map_err(|e| BenchError::Failed(format!("{}: {e}", o.log.display())))?;
        let mut up = tokio::process::Command::new(o.deploy_dir.join("up"));
        up.arg("--state-dir")
            .arg(o.state)
            .arg("--bin-dir")
            .arg(o.bin_dir)
            .arg("--port-offset")
            .arg(o.port_offset.to_string())
            .arg("--router-config")
            .arg(&router_toml)
            .arg("--edge-config")
            .arg(&edge_toml)
            .arg("--timeout")
            .arg("180")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .kill_on_drop(true);
        let status = tokio::time::timeout(UP_TIMEOUT, up.status())
            .await
            .map_err(|_| BenchError::Failed(format!("deploy/up: not up in {UP_TIMEOUT:?}")))?
            .map_err(|e| {
                BenchError::Failed(format!("{}: {e}", o.deploy_dir.join("up").display()))
            })?;
        if !status.success() {
            return Err(BenchError::Failed(format!(
                "deploy/up failed ({status}); its output: {}",
                o.log.display()
            )));
        }
        Self::read(o.deploy_dir, o.state)
    }

    /// Reads a deployment from its state directory.
    pub(crate) fn read(deploy_dir: &Path, state: &Path) -> Result<Self, BenchError> {
        let fail = |what: String| BenchError::Failed(format!("{}: {what}", state.display()));
        let env_text = std::fs::read_to_string(state.join("deployment.env"))
            .map_err(|e| fail(format!("deployment.env: {e}")))?;
        let env = parse_env(&env_text);
        let get = |k: &str| {
            env.get(k)
                .cloned()
                .ok_or_else(|| fail(format!("deployment.env has no {k}")))
        };
        let addr = |k: &str| -> Result<SocketAddr, BenchError> {
            let v = get(k)?;
            v.parse()
                .map_err(|e| fail(format!("{k}={v}: not an address: {e}")))
        };
        let secret = |name: &str| -> Result<String, BenchError> {
            std::fs::read_to_string(state.join("secrets").join(name))
                .map_err(|e| fail(format!("secrets/{name}: {e}")))
                .map(|s| s.lines().next().unwrap_or("").to_owned())
        };
        let mut roots = Vec::new();
        for r in get("ROOTS")?.split_whitespace() {
            roots.push((
                r.to_owned(),
                get(&format!("NODE_{r}"))?,
                get(&format!("AMQP_URL_{r}"))?,
            ));
        }
        let mut routers = Vec::new();
        for r in get("ROUTERS")?.split_whitespace() {
            routers.push((r.to_owned(), addr(&format!("ADDR_{r}"))?));
        }
        let mut edges = Vec::new();
        for e in get("EDGES")?.split_whitespace() {
            edges.push((e.to_owned(), addr(&format!("ADDR_{e}"))?));
        }
        Ok(Self {
            deploy_dir: deploy_dir.to_owned(),
            state: state.to_owned(),
            jwt_secret: secret("jwt-secret")?,
            api_key: secret("api-key")?,
            proxy: addr("PROXY")?,
            roots,
            routers,
            edges,
            redis_url: get("REDIS_URL")?,
        })
    }

    /// The processes deploy/up started, by their pid files (`run/NAME.pid`; a RabbitMQ node's
    /// is `run/rootK.beam.pid`, its Erlang VM), in name order.
    pub(crate) fn processes(&self) -> Vec<Process> {
        let mut out = Vec::new();
        let Ok(dir) = std::fs::read_dir(self.state.join("run")) else {
            return out;
        };
        for entry in dir.flatten() {
            let file = entry.file_name().to_string_lossy().into_owned();
            let Some(stem) = file.strip_suffix(".pid") else {
                continue;
            };
            let name = stem.strip_suffix(".beam").unwrap_or(stem);
            // The launcher of a RabbitMQ node (a shell) has a pid file too; its VM is the one
            // that holds the memory.
            if stem != name || !self.roots.iter().any(|r| r.0 == name) {
                let pid = std::fs::read_to_string(entry.path())
                    .ok()
                    .and_then(|s| s.trim().parse().ok());
                if let Some(pid) = pid {
                    out.push(Process {
                        name: name.to_owned(),
                        pid,
                    });
                }
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// `HOME` of `rabbitmqctl` (the deployment's Erlang cookie).
    pub(crate) fn rabbit_home(&self) -> PathBuf {
        self.state.join("rabbitmq").join("home")
    }

    /// `deploy/down --purge` (or without `--purge`, keeping the state directory).
    pub(crate) async fn down(&self, purge: bool, log: &Path) -> Result<(), String> {
        let out = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(log)
            .map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let mut down = tokio::process::Command::new(self.deploy_dir.join("down"));
        down.arg("--state-dir").arg(&self.state);
        if purge {
            down.arg("--purge");
        }
        down.stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true);
        let status = tokio::time::timeout(DOWN_TIMEOUT, down.status())
            .await
            .map_err(|_| format!("deploy/down: not done in {DOWN_TIMEOUT:?}"))?
            .map_err(|e| format!("deploy/down: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!(
                "deploy/down failed ({status}); see {}",
                log.display()
            ))
        }
    }
}

/// `KEY=VALUE` lines as deploy/up writes them (values bare, single- or double-quoted).
pub(crate) fn parse_env(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let (k, v) = l.split_once('=')?;
            let v = v
                .strip_prefix('\'')
                .and_then(|v| v.strip_suffix('\''))
                .or_else(|| v.strip_prefix('"').and_then(|v| v.strip_suffix('"')))
                .unwrap_or(v);
            Some((k.to_owned(), v.to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deployment_env_values_lose_their_quotes() {
        let env = parse_env(
            "# Written by deploy/up\nSTATE=/tmp/x\nROOTS=\"root1 root2\"\n\
             AMQP_URL_root1='amqp://guest:guest@127.0.0.1:5681/%2f'\n\n",
        );
        assert_eq!(env["STATE"], "/tmp/x");
        assert_eq!(env["ROOTS"], "root1 root2");
        assert_eq!(
            env["AMQP_URL_root1"],
            "amqp://guest:guest@127.0.0.1:5681/%2f"
        );
        assert_eq!(env.len(), 3);
    }

    #[test]
    fn the_soak_configurations_are_toml() {
        let r: toml::Value = toml::from_str(ROUTER_TOML).expect("router toml");
        assert_eq!(r["schedule"]["retention_ms"].as_integer(), Some(30000));
        let e: toml::Value = toml::from_str(EDGE_TOML).expect("edge toml");
        assert_eq!(e["mailbox"]["ttl_secs"].as_integer(), Some(30));
    }
}
