//! What a benchmark run gives the processes it starts (pure, apart from [`RunDir`]): unique
//! broker names, and the TOML configuration files of `herald-router` and of an edge
//! `herald-gateway`.
//!
//! Every run gets a run id (`bench-` and 8 random characters). The router's `[amqp.topology]`
//! names are the defaults with `.{run id}` appended, and an edge's id is the run id, so a run
//! never touches the names of another run, of the tests, or of a real installation sharing the
//! broker. The files are written with `toml`, so any value (a URL with odd characters, a
//! secret) is quoted correctly.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use rand::Rng as _;
use serde::Serialize;

/// The router's `[amqp.topology]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Topology {
    /// Topic exchange backends publish to.
    pub(crate) exchange: String,
    /// The router consumes it.
    pub(crate) queue: String,
    pub(crate) dead_exchange: String,
    pub(crate) dead_queue: String,
    /// Fanout exchange every edge binds its own queue to.
    pub(crate) edges_exchange: String,
    /// Fanout exchange edges report presence to, and the routers' queue on it (declared by a
    /// router with `[redis]`).
    pub(crate) presence_exchange: String,
    pub(crate) presence_queue: String,
}

impl Topology {
    /// The router's default names (`herald`, `herald.publications`, ...), each followed by
    /// `.{run_id}`.
    pub(crate) fn for_run(run_id: &str) -> Self {
        Self {
            exchange: format!("herald.{run_id}"),
            queue: format!("herald.publications.{run_id}"),
            dead_exchange: format!("herald.dead.{run_id}"),
            dead_queue: format!("herald.dead.{run_id}"),
            edges_exchange: format!("herald.edges.{run_id}"),
            presence_exchange: format!("herald.presence.{run_id}"),
            presence_queue: format!("herald.presence.{run_id}"),
        }
    }
}

/// A fresh run id: `bench-` and 8 random lowercase letters and digits.
pub(crate) fn new_run_id() -> String {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    let tail: String = (0..8)
        .map(|_| char::from(CHARS[rng.random_range(0..CHARS.len())]))
        .collect();
    format!("bench-{tail}")
}

/// The settings of a router the bench starts.
#[derive(Debug, Clone)]
pub(crate) struct RouterSettings {
    pub(crate) listen: SocketAddr,
    pub(crate) amqp_url: String,
    pub(crate) api_key: String,
    pub(crate) run_id: String,
    /// `amqp.prefetch`; `None` keeps the router's default.
    pub(crate) prefetch: Option<u16>,
    pub(crate) topology: Topology,
    /// `[redis]`: delayed notifications on, in this Redis under this prefix.
    pub(crate) redis: Option<RedisSettings>,
    /// `[schedule]` keys to set (empty: the router's defaults).
    pub(crate) schedule: toml::Table,
    /// `[callbacks]` keys to set (empty: the router's defaults; the callback benchmark sets
    /// `allow_private_networks`, its receiver being on loopback).
    pub(crate) callbacks: toml::Table,
}

/// The router's `[redis]` section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct RedisSettings {
    pub(crate) url: String,
    /// Every key of the run starts with `{prefix}:`.
    pub(crate) prefix: String,
}

impl RedisSettings {
    /// The key prefix of a run: `herald.{run_id}`, so a run never touches another's keys
    /// (nor those of the default prefix, `herald`).
    pub(crate) fn prefix_for_run(run_id: &str) -> String {
        format!("herald.{run_id}")
    }
}

#[derive(Serialize)]
struct RouterFile<'a> {
    listen: String,
    api_keys: [&'a str; 1],
    amqp: RouterAmqp<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    redis: Option<&'a RedisSettings>,
    #[serde(skip_serializing_if = "toml::Table::is_empty")]
    schedule: &'a toml::Table,
    #[serde(skip_serializing_if = "toml::Table::is_empty")]
    callbacks: &'a toml::Table,
}

#[derive(Serialize)]
struct RouterAmqp<'a> {
    url: &'a str,
    connection_name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    prefetch: Option<u16>,
    topology: &'a Topology,
}

/// The router's configuration file.
pub(crate) fn router_toml(s: &RouterSettings) -> String {
    let file = RouterFile {
        listen: s.listen.to_string(),
        api_keys: [&s.api_key],
        amqp: RouterAmqp {
            url: &s.amqp_url,
            connection_name: format!("herald-router {}", s.run_id),
            prefetch: s.prefetch,
            topology: &s.topology,
        },
        redis: s.redis.as_ref(),
        schedule: &s.schedule,
        callbacks: &s.callbacks,
    };
    toml_text(&file)
}

/// The settings of an edge gateway the bench starts. Its id goes on the command line
/// (`--edge-id`), everything else in the file.
#[derive(Debug, Clone)]
pub(crate) struct EdgeSettings {
    pub(crate) listen: SocketAddr,
    /// Where the gateway may keep files (the run's directory).
    pub(crate) data_dir: PathBuf,
    pub(crate) jwt_secret: String,
    /// The root broker's URL.
    pub(crate) root: String,
    /// The routers' fanout exchange ([`Topology::edges_exchange`]).
    pub(crate) exchange: String,
    /// Where the edge reports its users online ([`Topology::presence_exchange`]), so its
    /// reports reach the run's routers and nobody else's.
    pub(crate) presence_exchange: String,
    /// How long the root keeps the edge's queue once the edge is gone: short, so a run that
    /// dies before cleaning up leaves nothing for long.
    pub(crate) queue_expires_secs: u64,
}

#[derive(Serialize)]
struct GatewayFile<'a> {
    listen: String,
    data_dir: &'a Path,
    auth: GatewayAuth<'a>,
    edge: GatewayEdge<'a>,
}

#[derive(Serialize)]
struct GatewayAuth<'a> {
    jwt_secret: &'a str,
}

#[derive(Serialize)]
struct GatewayEdge<'a> {
    roots: [&'a str; 1],
    exchange: &'a str,
    presence_exchange: &'a str,
    queue_expires_secs: u64,
}

/// The edge gateway's configuration file.
pub(crate) fn gateway_edge_toml(s: &EdgeSettings) -> String {
    let file = GatewayFile {
        listen: s.listen.to_string(),
        data_dir: &s.data_dir,
        auth: GatewayAuth {
            jwt_secret: &s.jwt_secret,
        },
        edge: GatewayEdge {
            roots: [&s.root],
            exchange: &s.exchange,
            presence_exchange: &s.presence_exchange,
            queue_expires_secs: s.queue_expires_secs,
        },
    };
    toml_text(&file)
}

/// The settings of a standalone gateway the bench starts (delayed notifications in its
/// embedded store, under `data_dir`).
#[derive(Debug, Clone)]
pub(crate) struct StandaloneSettings {
    pub(crate) listen: SocketAddr,
    pub(crate) data_dir: PathBuf,
    pub(crate) api_key: String,
    pub(crate) jwt_secret: String,
    /// `[schedule]` keys to set (empty: the gateway's defaults).
    pub(crate) schedule: toml::Table,
    /// `[callbacks]` keys to set (empty: the gateway's defaults).
    pub(crate) callbacks: toml::Table,
}

#[derive(Serialize)]
struct StandaloneFile<'a> {
    listen: String,
    data_dir: &'a Path,
    api_keys: [&'a str; 1],
    auth: GatewayAuth<'a>,
    #[serde(skip_serializing_if = "toml::Table::is_empty")]
    schedule: &'a toml::Table,
    #[serde(skip_serializing_if = "toml::Table::is_empty")]
    callbacks: &'a toml::Table,
}

/// The standalone gateway's configuration file.
pub(crate) fn gateway_standalone_toml(s: &StandaloneSettings) -> String {
    let file = StandaloneFile {
        listen: s.listen.to_string(),
        data_dir: &s.data_dir,
        api_keys: [&s.api_key],
        auth: GatewayAuth {
            jwt_secret: &s.jwt_secret,
        },
        schedule: &s.schedule,
        callbacks: &s.callbacks,
    };
    toml_text(&file)
}

/// Parses `KEY=VALUE` settings (`claim_batch=5000`, `merge=true`) into a table: the key is a
/// plain TOML key, the value TOML (an integer, a boolean, a quoted string).
pub(crate) fn parse_settings(pairs: &[String]) -> Result<toml::Table, String> {
    let mut table = toml::Table::new();
    for pair in pairs {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("{pair:?} is not KEY=VALUE"))?;
        let key = key.trim();
        if key.is_empty()
            || !key
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            return Err(format!("{key:?} is not a setting name (a-z, 0-9, _)"));
        }
        let parsed: toml::Table =
            toml::from_str(&format!("v = {}", value.trim())).map_err(|_| {
                format!("{pair:?}: the value is not TOML (a number, true/false, \"text\")")
            })?;
        let value = parsed
            .get("v")
            .cloned()
            .ok_or_else(|| format!("{pair:?}: no value"))?;
        table.insert(key.to_owned(), value);
    }
    Ok(table)
}

/// The queue an edge with this id declares on its roots (see `herald-gateway`'s uplink).
pub(crate) fn edge_queue(edge_id: &str) -> String {
    format!("herald.edge.{edge_id}")
}

fn toml_text<T: Serialize>(value: &T) -> String {
    // Serializing plain structs of strings and numbers cannot fail.
    toml::to_string(value).unwrap_or_default()
}

/// A private directory for one run's files (configuration files hold secrets), removed by
/// [`RunDir::remove`].
#[derive(Debug)]
pub(crate) struct RunDir {
    pub(crate) path: PathBuf,
}

impl RunDir {
    /// Creates `$TMPDIR/herald-{run_id}`, mode 0700.
    pub(crate) fn create(run_id: &str) -> std::io::Result<Self> {
        use std::os::unix::fs::DirBuilderExt as _;
        let path = std::env::temp_dir().join(format!("herald-{run_id}"));
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        Ok(Self { path })
    }

    /// Writes `name` in the directory, mode 0600; returns its path.
    pub(crate) fn write(&self, name: &str, text: &str) -> std::io::Result<PathBuf> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let path = self.path.join(name);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        file.write_all(text.as_bytes())?;
        Ok(path)
    }

    pub(crate) fn remove(self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router_settings() -> RouterSettings {
        let run_id = "bench-abc12345".to_owned();
        RouterSettings {
            listen: "127.0.0.1:40123".parse().unwrap(),
            amqp_url: "amqp://guest:gu\"est@127.0.0.1:5672/%2f".into(),
            api_key: "k3y".into(),
            topology: Topology::for_run(&run_id),
            run_id,
            prefetch: Some(512),
            redis: None,
            schedule: toml::Table::new(),
            callbacks: toml::Table::new(),
        }
    }

    #[test]
    fn run_ids_are_unique_valid_names() {
        let a = new_run_id();
        assert!(a.starts_with("bench-") && a.len() == 14, "{a}");
        assert!(
            a.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
        assert_ne!(a, new_run_id());
    }

    #[test]
    fn topology_names_carry_the_run_id() {
        let t = Topology::for_run("bench-x");
        assert_eq!(t.exchange, "herald.bench-x");
        assert_eq!(t.queue, "herald.publications.bench-x");
        assert_eq!(t.dead_exchange, "herald.dead.bench-x");
        assert_eq!(t.dead_queue, "herald.dead.bench-x");
        assert_eq!(t.edges_exchange, "herald.edges.bench-x");
        assert_eq!(t.presence_exchange, "herald.presence.bench-x");
        assert_eq!(t.presence_queue, "herald.presence.bench-x");
        assert_eq!(edge_queue("bench-x"), "herald.edge.bench-x");
    }

    #[test]
    fn router_file_text() {
        let text = router_toml(&router_settings());
        assert!(text.contains("listen = \"127.0.0.1:40123\""), "{text}");
        assert!(text.contains("[amqp.topology]"), "{text}");
        assert!(
            text.contains("edges_exchange = \"herald.edges.bench-abc12345\""),
            "{text}"
        );
        let mut s = router_settings();
        s.prefetch = None;
        assert!(!router_toml(&s).contains("prefetch"));
    }

    /// The file means to the router what the bench meant: parsed and validated by the router's
    /// own configuration code.
    #[test]
    fn the_router_accepts_its_file() {
        use herald_router::config::Config;
        let s = router_settings();
        let c = Config::from_toml(&router_toml(&s), Path::new("router.toml")).unwrap();
        c.validate().unwrap();
        assert_eq!(c.listen, s.listen);
        assert_eq!(c.api_keys, ["k3y"]);
        assert_eq!(c.amqp.url, s.amqp_url);
        assert_eq!(c.amqp.prefetch, 512);
        assert_eq!(c.amqp.connection_name, "herald-router bench-abc12345");
        let t = &c.amqp.topology;
        assert_eq!(t.exchange, s.topology.exchange);
        assert_eq!(t.queue, s.topology.queue);
        assert_eq!(t.dead_exchange, s.topology.dead_exchange);
        assert_eq!(t.dead_queue, s.topology.dead_queue);
        assert_eq!(t.edges_exchange, s.topology.edges_exchange);
        assert_eq!(t.presence_exchange, s.topology.presence_exchange);
        assert_eq!(t.presence_queue, s.topology.presence_queue);
        assert!(t.problems("amqp.topology.").is_empty());
        assert!(!c.redis.enabled(), "no [redis] unless asked");
        assert!(!c.callbacks.allow_private_networks);
        let mut s = router_settings();
        s.callbacks = private_callbacks();
        let c = Config::from_toml(&router_toml(&s), Path::new("router.toml")).unwrap();
        c.validate().unwrap();
        assert!(c.callbacks.allow_private_networks);
        assert_eq!(c.callbacks.max_per_host, 128);
    }

    /// With `[redis]`, delayed notifications are on, under the run's own prefix.
    #[test]
    fn the_router_takes_the_redis_section() {
        use herald_router::config::Config;
        let mut s = router_settings();
        s.redis = Some(RedisSettings {
            url: "redis://127.0.0.1:6379/0".into(),
            prefix: RedisSettings::prefix_for_run(&s.run_id),
        });
        s.schedule =
            parse_settings(&["claim_batch=5000".to_owned(), "merge = true".to_owned()]).unwrap();
        let text = router_toml(&s);
        assert!(text.contains("[redis]"), "{text}");
        let c = Config::from_toml(&text, Path::new("router.toml")).unwrap();
        c.validate().unwrap();
        assert!(c.redis.enabled());
        assert_eq!(c.redis.url.as_deref(), Some("redis://127.0.0.1:6379/0"));
        assert_eq!(c.redis.prefix, "herald.bench-abc12345");
        assert_eq!(c.schedule.claim_batch, 5000);
        assert!(c.schedule.merge);
    }

    #[test]
    fn settings_are_key_equals_toml_value() {
        let t = parse_settings(&[
            "claim_batch=5000".to_owned(),
            "merge=true".to_owned(),
            "name=\"x\"".to_owned(),
        ])
        .unwrap();
        assert_eq!(t["claim_batch"].as_integer(), Some(5000));
        assert_eq!(t["merge"].as_bool(), Some(true));
        assert_eq!(t["name"].as_str(), Some("x"));
        for bad in ["claim_batch", "=3", "Claim=3", "a.b=3", "x=not toml", "x="] {
            assert!(parse_settings(&[bad.to_owned()]).is_err(), "{bad}");
        }
        assert!(parse_settings(&[]).unwrap().is_empty());
    }

    /// Likewise for the gateway, with `--edge-id` applied as its command line would.
    #[test]
    fn the_gateway_accepts_its_edge_file() {
        use herald_gateway::config::Config;
        let s = EdgeSettings {
            listen: "127.0.0.1:40124".parse().unwrap(),
            data_dir: PathBuf::from("/tmp/herald-bench-abc12345"),
            jwt_secret: "s".repeat(32),
            root: "amqp://guest:guest@127.0.0.1:5672/%2f".into(),
            exchange: "herald.edges.bench-abc12345".into(),
            presence_exchange: "herald.presence.bench-abc12345".into(),
            queue_expires_secs: 60,
        };
        let mut c = Config::from_toml(&gateway_edge_toml(&s), Path::new("gateway.toml")).unwrap();
        assert!(c.edge_mode());
        assert!(c.validate().is_err(), "no edge id yet");
        c.edge.id = Some("bench-abc12345".into());
        c.validate().unwrap();
        assert!(!c.dev_mode());
        assert_eq!(c.listen, s.listen);
        assert_eq!(c.data_dir, s.data_dir);
        assert_eq!(c.edge.roots, std::slice::from_ref(&s.root));
        assert_eq!(c.edge.exchange, s.exchange);
        assert_eq!(c.edge.presence_exchange, s.presence_exchange);
        assert_eq!(c.edge.queue_expires_secs, 60);
    }

    #[test]
    fn the_gateway_accepts_its_standalone_file() {
        use herald_gateway::config::Config;
        let s = StandaloneSettings {
            listen: "127.0.0.1:40125".parse().unwrap(),
            data_dir: PathBuf::from("/tmp/herald-bench-abc12345/gateway-data"),
            api_key: "k3y".into(),
            jwt_secret: "s".repeat(32),
            schedule: toml::Table::new(),
            callbacks: toml::Table::new(),
        };
        let c = Config::from_toml(&gateway_standalone_toml(&s), Path::new("gateway.toml")).unwrap();
        c.validate().unwrap();
        assert!(!c.edge_mode());
        assert!(!c.dev_mode());
        assert_eq!(c.listen, s.listen);
        assert_eq!(c.data_dir, s.data_dir);
        assert_eq!(c.api_keys, ["k3y"]);
        assert!(!c.callbacks.allow_private_networks);
        let open = StandaloneSettings {
            callbacks: private_callbacks(),
            ..s
        };
        let c =
            Config::from_toml(&gateway_standalone_toml(&open), Path::new("gateway.toml")).unwrap();
        c.validate().unwrap();
        assert!(c.callbacks.allow_private_networks);
        assert_eq!(c.callbacks.max_per_host, 128);
    }

    fn private_callbacks() -> toml::Table {
        let mut t = toml::Table::new();
        t.insert("allow_private_networks".into(), true.into());
        t.insert("max_per_host".into(), 128.into());
        t
    }

    #[test]
    fn run_dir_is_private_and_removed() {
        use std::os::unix::fs::PermissionsExt as _;
        let id = new_run_id();
        let dir = RunDir::create(&id).unwrap();
        let file = dir.write("router.toml", "listen = \"x\"\n").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir.path), 0o700);
        assert_eq!(mode(&file), 0o600);
        assert!(
            dir.write("router.toml", "again").is_err(),
            "never overwrites"
        );
        let path = dir.path.clone();
        dir.remove();
        assert!(!path.exists());
    }
}
