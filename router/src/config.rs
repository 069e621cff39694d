//! Configuration of `herald-router`: defaults, then a TOML file, then
//! environment variables (`HERALD_ROUTER_*`, one per key: [`keys`], the
//! router's rows, and the rows both binaries share in
//! `herald_engine::config::table`), then flags.
//!
//! Every bound has a key here. A key is described once, in its row (which
//! docs/configuration.md shows); the field that holds it names the key. [`Config::validate`] lists every problem at
//! once, so a bad configuration is fixed in one go. `router.example.toml`
//! next to this crate's `Cargo.toml` has every key with its default.

mod cli;
pub mod keys;
#[cfg(test)]
mod table_tests;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

pub use cli::{Cli, VERSION};

use herald_amqp::routing::Mode;
use herald_amqp::routing::recent::RecentConfig;
use herald_amqp::routing::view::ViewConfig;
use herald_amqp::{Reconnect, SupervisorConfig, Topology};
use herald_engine::api_key::{ApiKeyConfig, ApiKeys, KeySet};
use herald_engine::config::env::{Env, process_env, unknown_variables};
pub use herald_engine::config::{ConfigError, PublishConfig};
use herald_engine::config::{load, parse_toml, redacted_toml};

use crate::ingest::IngestConfig;

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The broker connection and the intake, `[amqp]`. Each field is the key of its
/// name, described once in its row of [`keys::OWN`].
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AmqpConfig {
    /// Key `amqp.url`.
    pub url: String,
    /// Key `amqp.connection_name`.
    pub connection_name: String,
    /// Key `amqp.prefetch`.
    pub prefetch: u16,
    /// Key `amqp.reconnect_initial_ms`.
    pub reconnect_initial_ms: u64,
    /// Key `amqp.reconnect_max_ms`.
    pub reconnect_max_ms: u64,
    /// Key `amqp.connect_timeout_ms`.
    pub connect_timeout_ms: u64,
    /// Key `amqp.publish_timeout_ms`.
    pub publish_timeout_ms: u64,
    /// Key `amqp.bundle_max`.
    pub bundle_max: usize,
    /// Key `amqp.bundle_max_bytes`.
    pub bundle_max_bytes: usize,
    /// Exchange and queue names.
    pub topology: Topology,
}

impl AmqpConfig {
    /// The reconnect settings, as both binaries name them.
    pub fn reconnect(&self) -> Reconnect {
        Reconnect {
            initial_ms: self.reconnect_initial_ms,
            max_ms: self.reconnect_max_ms,
            connect_timeout_ms: self.connect_timeout_ms,
        }
    }
}

impl Default for AmqpConfig {
    fn default() -> Self {
        let reconnect = Reconnect::default();
        AmqpConfig {
            url: "amqp://guest:guest@127.0.0.1:5672/%2f".into(),
            connection_name: "herald-router".into(),
            prefetch: 256,
            reconnect_initial_ms: reconnect.initial_ms,
            reconnect_max_ms: reconnect.max_ms,
            connect_timeout_ms: reconnect.connect_timeout_ms,
            publish_timeout_ms: 5_000,
            bundle_max: 256,
            bundle_max_bytes: 256 * 1024,
            topology: Topology::default(),
        }
    }
}

/// `[redis]`: the delayed-notification store (and presence) of the
/// distributed routers. Delayed notifications are enabled when `url` or
/// `cluster` is set. Each field is the key of its name, described once in
/// its row of [`keys::OWN`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedisSection {
    /// Key `redis.url`.
    pub url: Option<String>,
    /// Key `redis.cluster`.
    pub cluster: Vec<String>,
    /// Key `redis.prefix`.
    pub prefix: String,
    /// Key `redis.shards`.
    pub shards: u16,
    /// Key `redis.connect_timeout_ms`.
    pub connect_timeout_ms: u64,
    /// Key `redis.response_timeout_ms`.
    pub response_timeout_ms: u64,
    /// Key `redis.operation_timeout_ms`.
    pub operation_timeout_ms: u64,
    /// Key `redis.presence_edge_ttl_ms`.
    pub presence_edge_ttl_ms: u64,
}

impl Default for RedisSection {
    fn default() -> Self {
        let d = herald_engine::schedule::store::redis::RedisConfig::default();
        RedisSection {
            url: None,
            cluster: Vec::new(),
            prefix: d.prefix,
            shards: d.shards,
            connect_timeout_ms: d.connect_timeout.as_millis() as u64,
            response_timeout_ms: d.response_timeout.as_millis() as u64,
            operation_timeout_ms: d.operation_timeout.as_millis() as u64,
            presence_edge_ttl_ms: 35_000,
        }
    }
}

impl RedisSection {
    /// Whether a Redis is configured (delayed notifications on).
    pub fn enabled(&self) -> bool {
        self.url.is_some() || !self.cluster.is_empty()
    }

    /// The store's configuration, when enabled.
    pub fn store_config(&self) -> Option<herald_engine::schedule::store::redis::RedisConfig> {
        use herald_engine::schedule::store::redis::{RedisConfig, Topology};
        let topology = match (&self.url, self.cluster.is_empty()) {
            (Some(url), true) => Topology::Single(url.clone()),
            (None, false) => Topology::Cluster(self.cluster.clone()),
            _ => return None,
        };
        Some(RedisConfig {
            topology,
            prefix: self.prefix.clone(),
            shards: self.shards,
            connect_timeout: Duration::from_millis(self.connect_timeout_ms),
            response_timeout: Duration::from_millis(self.response_timeout_ms),
            operation_timeout: Duration::from_millis(self.operation_timeout_ms),
            ..RedisConfig::default()
        })
    }

    /// Every rule, as problems named `redis.*`.
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.url.is_some() && !self.cluster.is_empty() {
            p.push("redis: set url (one server) or cluster (seed nodes), not both".to_owned());
        }
        if self.presence_edge_ttl_ms == 0 {
            p.push("redis.presence_edge_ttl_ms must be greater than 0".to_owned());
        }
        if let Some(c) = self.store_config() {
            p.extend(c.problems().into_iter().map(|m| format!("redis: {m}")));
        }
        p
    }
}

/// `[routing]`: how this router sends notifications to the edges
/// (`herald_amqp::routing`; docs/architecture.md, "Targeted routing").
/// Each field is the key of its name, described once in its row of
/// [`keys::OWN`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RoutingSection {
    /// Key `routing.mode`.
    pub mode: Mode,
    /// Key `routing.stale_ms`.
    pub stale_ms: u64,
    /// Key `routing.forget_ms`.
    pub forget_ms: u64,
    /// Key `routing.catch_up_ms`.
    pub catch_up_ms: u64,
    /// Key `routing.catch_up_max`.
    pub catch_up_max: usize,
    /// Key `routing.catch_up_max_bytes`.
    pub catch_up_max_bytes: usize,
    /// Key `routing.queue_max_length`.
    pub queue_max_length: u32,
}

impl Default for RoutingSection {
    fn default() -> Self {
        RoutingSection {
            mode: Mode::Fanout,
            stale_ms: 35_000,
            forget_ms: 600_000,
            catch_up_ms: 10_000,
            catch_up_max: 200_000,
            catch_up_max_bytes: 256 * 1024 * 1024,
            queue_max_length: 100_000,
        }
    }
}

impl RoutingSection {
    /// Every rule, as problems named `routing.*`.
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        for (name, value) in [
            ("routing.stale_ms", self.stale_ms),
            ("routing.forget_ms", self.forget_ms),
            ("routing.catch_up_ms", self.catch_up_ms),
            ("routing.catch_up_max", self.catch_up_max as u64),
            ("routing.catch_up_max_bytes", self.catch_up_max_bytes as u64),
            ("routing.queue_max_length", u64::from(self.queue_max_length)),
        ] {
            if value == 0 {
                p.push(format!("{name} must be greater than 0"));
            }
        }
        if self.forget_ms < self.stale_ms {
            p.push("routing.forget_ms must be at least routing.stale_ms".to_owned());
        }
        p
    }

    /// The routing view's settings.
    pub fn view(&self) -> ViewConfig {
        ViewConfig {
            stale_ms: self.stale_ms,
            forget_ms: self.forget_ms,
        }
    }

    /// The catch-up log's bounds.
    pub fn recent(&self) -> RecentConfig {
        RecentConfig {
            window_ms: self.catch_up_ms,
            max: self.catch_up_max,
            max_bytes: self.catch_up_max_bytes,
        }
    }
}

/// The whole router configuration. A field that is a key (not a section)
/// is described once in its row of [`keys::TABLE`].
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Key `listen`.
    pub listen: SocketAddr,
    /// Key `log_format`.
    pub log_format: LogFormat,
    /// Key `api_keys`.
    pub api_keys: Vec<String>,
    /// Key `api_key`.
    pub api_key: Vec<ApiKeyConfig>,
    /// Key `metrics_require_key`.
    pub metrics_require_key: bool,
    /// Key `shutdown_grace_ms`.
    pub shutdown_grace_ms: u64,
    /// Broker and intake.
    pub amqp: AmqpConfig,
    /// Publication limits.
    pub publish: PublishConfig,
    /// Deadlines of HTTP connections.
    pub http: herald_engine::deadline::HttpConfig,
    /// Delayed notifications (enabled with `[redis]`).
    pub schedule: herald_engine::schedule::config::ScheduleConfig,
    /// Callbacks (enabled with `[redis]`).
    pub callbacks: herald_engine::callback::config::CallbackConfig,
    /// Presence events to a topic (enabled with `[redis]`).
    pub presence: herald_engine::presence::events::PresenceConfig,
    /// The Redis the delayed store and presence live in.
    pub redis: RedisSection,
    /// How notifications are routed to the edges.
    pub routing: RoutingSection,
    /// Warnings from loading (variables that name no key), for `main` to
    /// log once logging is up.
    #[serde(skip)]
    pub warnings: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 8090)),
            log_format: LogFormat::Text,
            api_keys: Vec::new(),
            api_key: Vec::new(),
            metrics_require_key: false,
            shutdown_grace_ms: 10_000,
            amqp: AmqpConfig::default(),
            publish: PublishConfig::default(),
            http: Default::default(),
            schedule: herald_engine::schedule::config::ScheduleConfig::default(),
            callbacks: Default::default(),
            presence: Default::default(),
            redis: RedisSection::default(),
            routing: RoutingSection::default(),
            warnings: Vec::new(),
        }
    }
}

impl Config {
    /// Parse a TOML document.
    pub fn from_toml(text: &str, origin: &Path) -> Result<Config, ConfigError> {
        parse_toml(text, origin)
    }

    /// Load: defaults, the file named by `--config` (if any), the
    /// environment (every key's `HERALD_ROUTER_*` variable,
    /// docs/configuration.md), then flags. Validated.
    pub fn load(cli: &Cli) -> Result<Config, ConfigError> {
        let mut config = Config::load_with(cli, &process_env)?;
        let names = std::env::vars_os().filter_map(|(k, _)| k.into_string().ok());
        // What the router reads besides its settings' variables.
        let mut also: Vec<&str> = vec!["HERALD_ROUTER_CONFIG", "HERALD_ROUTER_MAX_RECIPIENTS"];
        also.extend(config.api_key.iter().filter_map(|k| k.key_env.as_deref()));
        config.warnings = unknown_variables(names, keys::TABLE, &also);
        Ok(config)
    }

    /// [`Config::load`] with the variables read from `env`.
    pub fn load_with(cli: &Cli, env: Env<'_>) -> Result<Config, ConfigError> {
        let (mut config, _): (Config, _) = load(cli.config.as_deref(), &[], keys::TABLE, env)?;
        cli.apply(&mut config);
        config.validate()?;
        Ok(config)
    }

    /// This configuration as TOML with every secret `"<redacted>"`
    /// (`--print-config`).
    pub fn to_redacted_toml(&self) -> Result<String, String> {
        redacted_toml(self, keys::TABLE)
    }

    /// Check every rule; report all violations.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut p = Vec::new();
        match self.api_key_set() {
            Ok(keys) if keys.is_empty() => p.push(
                "api_keys is empty: the HTTP publish API needs at least one key (api_keys, [[api_key]], HERALD_ROUTER_API_KEYS or --api-key)"
                    .to_owned(),
            ),
            Ok(keys) if self.metrics_require_key => {
                p.extend(herald_engine::answers::metrics_key_problem(&keys));
            }
            Ok(_) => {}
            Err(e) => p.extend(e.problems),
        }
        let a = &self.amqp;
        if let Err(e) = a.url.parse::<lapin::uri::AMQPUri>() {
            p.push(format!(
                "amqp.url {}: {e}",
                herald_engine::process::redact(&a.url)
            ));
        }
        if a.connection_name.is_empty() || a.connection_name.len() > 255 {
            p.push("amqp.connection_name must be 1 to 255 bytes long".to_owned());
        }
        p.extend(a.reconnect().problems("amqp"));
        p.extend(a.topology.problems("amqp.topology."));
        let positive = [
            ("amqp.prefetch", a.prefetch as u64),
            ("amqp.publish_timeout_ms", a.publish_timeout_ms),
            ("amqp.bundle_max", a.bundle_max as u64),
            ("amqp.bundle_max_bytes", a.bundle_max_bytes as u64),
        ];
        for (name, value) in positive {
            if value == 0 {
                p.push(format!("{name} must be greater than 0"));
            }
        }
        if a.bundle_max_bytes > herald_amqp::link::MAX_BUNDLE_BYTES {
            p.push(format!(
                "amqp.bundle_max_bytes ({}) must not exceed {} (edges drop larger deliveries)",
                a.bundle_max_bytes,
                herald_amqp::link::MAX_BUNDLE_BYTES
            ));
        }
        p.extend(self.publish.problems());
        p.extend(self.http.problems());
        p.extend(self.schedule.problems());
        p.extend(self.callbacks.problems());
        p.extend(self.presence.problems());
        p.extend(self.redis.problems());
        p.extend(self.routing.problems());
        if p.is_empty() {
            Ok(())
        } else {
            Err(ConfigError { problems: p })
        }
    }

    /// The envelope limits.
    pub fn envelope_limits(&self) -> herald_protocol::envelope::Limits {
        self.publish.envelope_limits()
    }

    /// Load the API keys (`api_keys` and `[[api_key]]`, their files and
    /// environment variables read now).
    pub fn api_key_set(&self) -> Result<KeySet, ConfigError> {
        KeySet::load(&self.api_keys, &self.api_key).map_err(|problems| ConfigError { problems })
    }

    /// Settings of the HTTP publish API, with `api_keys` (from
    /// [`Config::api_key_set`]; clones share them, so `main` reloads them).
    pub fn publish_api(&self, api_keys: ApiKeys) -> herald_engine::publish::PublishConfig {
        herald_engine::publish::PublishConfig {
            api_keys,
            limits: self.envelope_limits(),
            max_body_bytes: self.publish.max_body_bytes,
            max_batch: self.publish.max_batch,
            ledger: self.publish.ledger(),
        }
    }

    /// The engine's settings ([`herald_engine::engine::Engine::build`]),
    /// its publish API authenticated by `api_keys`.
    pub fn engine(&self, api_keys: ApiKeys) -> herald_engine::engine::EngineConfig {
        herald_engine::engine::EngineConfig {
            publish: self.publish_api(api_keys),
            schedule: self.schedule.clone(),
            callbacks: self.callbacks.clone(),
            presence: self.presence.clone(),
            sources: &["http", "amqp"],
        }
    }

    /// Settings of the connection supervisor.
    pub fn supervisor(&self) -> SupervisorConfig {
        SupervisorConfig {
            url: self.amqp.url.clone(),
            connection_name: self.amqp.connection_name.clone(),
            backoff: self.amqp.reconnect().backoff(),
            connect_timeout: self.amqp.reconnect().connect_timeout(),
        }
    }

    /// Settings of the AMQP intake.
    pub fn ingest(&self) -> IngestConfig {
        IngestConfig {
            topology: self.amqp.topology.clone(),
            prefetch: self.amqp.prefetch,
            limits: self.envelope_limits(),
            drain_timeout: self.shutdown_grace(),
            routing: None,
        }
    }

    /// How long shutdown waits.
    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_millis(self.shutdown_grace_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_key() -> Config {
        Config {
            api_keys: vec!["k".into()],
            ..Config::default()
        }
    }

    #[test]
    fn defaults_need_only_an_api_key() {
        let err = Config::default().validate().unwrap_err();
        assert_eq!(err.problems.len(), 1, "{err}");
        assert!(err.problems[0].contains("api_keys"), "{err}");
        with_key().validate().unwrap();
        let c = Config::default();
        assert_eq!(c.listen.port(), 8090);
        assert_eq!(c.amqp.prefetch, 256);
        assert_eq!(c.amqp.url, "amqp://guest:guest@127.0.0.1:5672/%2f");
    }

    #[test]
    fn toml_unknown_keys_are_named() {
        let err = Config::from_toml("[amqp]\nprefech = 5\n", Path::new("x.toml")).unwrap_err();
        assert!(err.problems[0].contains("prefech"), "{err}");
    }

    #[test]
    fn toml_sets_nested_values() {
        let c = Config::from_toml(
            "listen = \"127.0.0.1:9000\"\napi_keys = [\"k\"]\n[amqp]\nprefetch = 16\n[amqp.topology]\nexchange = \"h2\"\n[publish]\nmax_users = 5\n",
            Path::new("x.toml"),
        )
        .unwrap();
        assert_eq!(c.listen.port(), 9000);
        assert_eq!(c.amqp.prefetch, 16);
        assert_eq!(c.amqp.topology.exchange, "h2");
        assert_eq!(c.amqp.topology.queue, "herald.publications");
        assert_eq!(c.envelope_limits().max_users, 5);
        c.validate().unwrap();
    }

    #[test]
    fn the_example_file_parses_to_the_defaults() {
        let text = include_str!("../router.example.toml");
        let c = Config::from_toml(text, Path::new("router.example.toml")).unwrap();
        let d = Config::default();
        assert_eq!(format!("{c:?}"), format!("{d:?}"));
    }

    #[test]
    fn the_commented_api_key_example_and_the_deploy_example_parse() {
        let text = include_str!("../router.example.toml");
        let table: String = text
            .lines()
            .skip_while(|l| !l.starts_with("# [[api_key]]"))
            .take_while(|l| l.starts_with("# "))
            .map(|l| format!("{}\n", l.trim_start_matches("# ")))
            .collect();
        let c = Config::from_toml(&table, Path::new("example")).unwrap();
        assert_eq!(c.api_key[0].name, "billing");
        let c = Config::from_toml(
            include_str!("../../deploy/examples/router.toml"),
            Path::new("router.toml"),
        )
        .unwrap();
        assert_eq!(c.api_key[0].sites.as_deref(), Some(&["eu".to_owned()][..]));
    }

    #[test]
    fn a_bundle_larger_than_edges_take_is_refused() {
        let mut c = with_key();
        c.amqp.bundle_max_bytes = herald_amqp::link::MAX_BUNDLE_BYTES;
        c.validate().unwrap();
        c.amqp.bundle_max_bytes += 1;
        let err = c.validate().unwrap_err();
        assert!(
            err.problems[0].contains("amqp.bundle_max_bytes (16777217) must not exceed 16777216"),
            "{err}"
        );
    }

    #[test]
    fn every_problem_is_reported() {
        let mut c = with_key();
        c.amqp.url = "http://nowhere".into();
        c.amqp.prefetch = 0;
        c.amqp.reconnect_initial_ms = 20_000;
        c.amqp.topology.edges_exchange = "herald".into();
        c.publish.max_body_bytes = 1;
        let err = c.validate().unwrap_err();
        assert_eq!(err.problems.len(), 5, "{err}");
        assert!(err.to_string().contains("amqp.url"), "{err}");
        assert!(err.to_string().contains("amqp.prefetch"), "{err}");
    }

    #[test]
    fn routing_settings_are_checked() {
        let mut c = with_key();
        c.routing.mode = Mode::Targeted;
        c.validate().unwrap();
        c.routing.catch_up_max = 0;
        c.routing.forget_ms = 1;
        let err = c.validate().unwrap_err();
        assert_eq!(err.problems.len(), 2, "{err}");
        assert!(err.to_string().contains("routing.catch_up_max"), "{err}");
        assert!(err.to_string().contains("routing.forget_ms"), "{err}");
        let c = Config::from_toml(
            "api_keys = [\"k\"]\n[routing]\nmode = \"targeted\"\n",
            Path::new("x.toml"),
        )
        .unwrap();
        assert_eq!(c.routing.mode, Mode::Targeted);
    }

    #[test]
    fn a_bad_url_is_shown_without_its_password() {
        let mut c = with_key();
        c.amqp.url = "amqp://user:secret@host:notaport/".into();
        let err = c.validate().unwrap_err();
        assert!(!err.to_string().contains("secret"), "{err}");
    }
}
