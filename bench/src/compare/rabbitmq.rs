//! The RabbitMQ Web STOMP peer: a RabbitMQ node of the run's own (Debian's `rabbitmq-server`,
//! its own node name, AMQP, distribution and Web STOMP ports on 127.0.0.1, its own data, log and
//! configuration files, `HOME` for its Erlang cookie), never the machine's broker.
//!
//! Sessions speak STOMP over WebSocket on `/ws` as `guest`, each subscribing to
//! `/topic/{user}` (or `/topic/broadcast`): RabbitMQ gives every subscription a queue of its
//! own, bound to `amq.topic`. Publications are AMQP messages to `amq.topic` with the user (or
//! `broadcast`) as routing key, on a channel in confirm mode, as the field report's backends
//! published.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::harness::amqp;
use crate::harness::configs::{self, RunDir};
use crate::harness::outcome::BenchError;
use crate::harness::service::free_local_addr;
use crate::harness::sys;

/// Debian's server script, run as the current user (`/usr/sbin/rabbitmq-server` would switch
/// to the `rabbitmq` user, which cannot read the run's directory).
pub(crate) const SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";
/// The exchange publications go to; `/topic/{key}` subscriptions bind to it.
pub(crate) const EXCHANGE: &str = "amq.topic";
/// How long a node gets to stop after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(30);
/// How often readiness is probed while the node boots.
const PROBE_EVERY: Duration = Duration::from_millis(250);

/// The node's `rabbitmq.conf` (pure).
pub(crate) fn config(amqp_port: u16, web_stomp_port: u16) -> String {
    format!(
        "listeners.tcp.local = 127.0.0.1:{amqp_port}
loopback_users.guest = true
log.console = false
log.file.level = warning
stomp.listeners.tcp = none
web_stomp.tcp.ip = 127.0.0.1
web_stomp.tcp.port = {web_stomp_port}
web_stomp.ws_path = /ws
web_stomp.max_connections = 100000
"
    )
}

/// Whether the server is installed.
pub(crate) fn installed() -> bool {
    Path::new(SERVER).exists()
}

/// Installs it with `{peers_dir}/rabbitmq/install.sh` unless it is there.
pub(crate) async fn install(peers_dir: &Path) -> Result<(), BenchError> {
    super::install::run(peers_dir, "rabbitmq/install.sh", &installed, SERVER).await
}

/// The version, for the report: `rabbitmq-server 3.10.8-1.1+deb12u1, rabbitmq_web_stomp`.
pub(crate) async fn version() -> String {
    Command::new("dpkg-query")
        .args(["-W", "-f", "${Version}", "rabbitmq-server"])
        .output()
        .await
        .ok()
        .filter(|o| o.status.success())
        .map_or_else(
            || "rabbitmq-server (version unknown)".to_owned(),
            |o| {
                format!(
                    "rabbitmq-server {}, plugin rabbitmq_web_stomp",
                    String::from_utf8_lossy(&o.stdout)
                )
            },
        )
}

/// A running node.
pub(crate) struct Rabbit {
    /// Web STOMP's listener (sessions connect to `ws://{addr}/ws`).
    pub(crate) addr: SocketAddr,
    /// AMQP on the node, as guest.
    pub(crate) amqp_url: String,
    pub(crate) command: String,
    child: Child,
    pid: u32,
    dir: RunDir,
}

impl Rabbit {
    pub(crate) async fn start(
        log: Option<&Path>,
        startup_timeout: Duration,
    ) -> Result<Self, BenchError> {
        let failed = |e: &dyn std::fmt::Display| BenchError::Failed(format!("rabbitmq: {e}"));
        let run_id = configs::new_run_id();
        let dir = RunDir::create(&run_id)
            .map_err(|e| failed(&format!("cannot create the run directory: {e}")))?;
        match Self::spawn(&run_id, &dir, log).await {
            Ok((child, pid, addr, amqp_url, command)) => {
                let mut rabbit = Self {
                    addr,
                    amqp_url,
                    command,
                    child,
                    pid,
                    dir,
                };
                match rabbit.wait_ready(startup_timeout).await {
                    Ok(()) => Ok(rabbit),
                    Err(e) => {
                        rabbit.finish().await;
                        Err(failed(&e))
                    }
                }
            }
            Err(e) => {
                dir.remove();
                Err(failed(&e))
            }
        }
    }

    async fn spawn(
        run_id: &str,
        dir: &RunDir,
        log: Option<&Path>,
    ) -> Result<(Child, u32, SocketAddr, String, String), String> {
        let port = |what: &str| {
            free_local_addr()
                .map(|a| a.port())
                .map_err(|e| format!("no free port for {what}: {e}"))
        };
        let (amqp_port, dist_port, stomp_port) =
            (port("AMQP")?, port("distribution")?, port("Web STOMP")?);
        let write = |name: &str, text: &str| {
            dir.write(name, text)
                .map_err(|e| format!("writing {name}: {e}"))
        };
        let conf = write("rabbitmq.conf", &config(amqp_port, stomp_port))?;
        let plugins = write("enabled_plugins", "[rabbitmq_web_stomp].\n")?;
        // Read instead of /etc/rabbitmq/rabbitmq-env.conf (the system node's).
        let env_conf = write(
            "rabbitmq-env.conf",
            "# Empty: herald-bench sets every variable.\n",
        )?;
        let d = &dir.path;
        let node = format!("{run_id}@localhost");
        let env: Vec<(&str, String)> = vec![
            ("HOME", d.display().to_string()),
            ("RABBITMQ_NODENAME", node),
            ("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1".into()),
            ("RABBITMQ_NODE_PORT", amqp_port.to_string()),
            ("RABBITMQ_DIST_PORT", dist_port.to_string()),
            (
                "RABBITMQ_MNESIA_BASE",
                d.join("mnesia").display().to_string(),
            ),
            ("RABBITMQ_LOG_BASE", d.join("log").display().to_string()),
            ("RABBITMQ_CONFIG_FILE", conf.display().to_string()),
            (
                "RABBITMQ_ENABLED_PLUGINS_FILE",
                plugins.display().to_string(),
            ),
            ("RABBITMQ_CONF_ENV_FILE", env_conf.display().to_string()),
            (
                "RABBITMQ_PID_FILE",
                d.join("beam.pid").display().to_string(),
            ),
            ("ERL_EPMD_ADDRESS", "127.0.0.1".into()),
            // Not into the bench's working directory.
            (
                "ERL_CRASH_DUMP",
                d.join("erl_crash.dump").display().to_string(),
            ),
            (
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
                "-kernel inet_dist_use_interface {127,0,0,1}".into(),
            ),
        ];
        let (stdout, stderr) = match log {
            Some(path) => {
                let file =
                    std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
                let copy = file.try_clone().map_err(|e| e.to_string())?;
                (Stdio::from(file), Stdio::from(copy))
            }
            None => (Stdio::null(), Stdio::null()),
        };
        let mut command = Command::new(SERVER);
        command
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .kill_on_drop(true);
        let child = command.spawn().map_err(|e| format!("{SERVER}: {e}"))?;
        let pid = child.id().unwrap_or_default();
        let shown: Vec<String> = env.iter().map(|(k, v)| format!("{k}='{v}'")).collect();
        let text = format!("env {} {SERVER}", shown.join(" "));
        let addr = SocketAddr::from(([127, 0, 0, 1], stomp_port));
        let amqp_url = format!("amqp://guest:guest@127.0.0.1:{amqp_port}/%2f");
        Ok((child, pid, addr, amqp_url, text))
    }

    /// Ready once an AMQP connection opens and Web STOMP accepts a TCP connection.
    async fn wait_ready(&mut self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "the node exited during startup ({status}; --log-dir keeps its output)"
                ));
            }
            let amqp_up = match amqp::connect(&self.amqp_url, "herald-bench readiness").await {
                Ok(conn) => {
                    let _ = conn.close(200, "ready".into()).await;
                    true
                }
                Err(_) => false,
            };
            if amqp_up && tokio::net::TcpStream::connect(self.addr).await.is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!("not ready within {timeout:?}"));
            }
            tokio::time::sleep(PROBE_EVERY).await;
        }
    }

    /// The server script's pid (the Erlang VM is its child).
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// Stops the node (SIGTERM: the script stops the VM gracefully) and removes its files.
    pub(crate) async fn finish(mut self) -> String {
        let how = if let Ok(Some(status)) = self.child.try_wait() {
            format!("had already exited ({status})")
        } else if let Err(e) = sys::terminate(self.pid) {
            let _ = self.child.kill().await;
            format!("SIGTERM failed ({e}); killed")
        } else {
            match tokio::time::timeout(STOP_GRACE, self.child.wait()).await {
                Ok(Ok(status)) => format!("stopped ({status})"),
                Ok(Err(e)) => format!("wait failed: {e}"),
                Err(_) => {
                    let _ = self.child.kill().await;
                    format!("did not exit within {STOP_GRACE:?} of SIGTERM; killed")
                }
            }
        };
        self.dir.remove();
        how
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_listens_on_loopback_only() {
        let text = config(5999, 15999);
        assert!(text.contains("listeners.tcp.local = 127.0.0.1:5999\n"));
        assert!(text.contains("web_stomp.tcp.ip = 127.0.0.1\n"));
        assert!(text.contains("web_stomp.tcp.port = 15999\n"));
        // No plain STOMP listener on the default port 61613.
        assert!(text.contains("stomp.listeners.tcp = none\n"));
    }
}
