//! Configuration: defaults, then a TOML file, then environment variables
//! (one per key: [`keys`], the gateway's rows, and the rows both binaries
//! share in `herald_engine::config::table`), then command-line flags.
//!
//! Every bound Herald enforces has a key here. A key is described once, in
//! its row (which docs/configuration.md shows); the field that holds it
//! names the key. [`Config::validate`] lists
//! every problem at once, so a bad configuration is fixed in one go.

mod auth;
mod cli;
pub mod keys;
mod proxy;
#[cfg(test)]
mod table_tests;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use auth::{ALGORITHMS, AuthConfig, KeyConfig, MIN_SECRET_BYTES};
pub use cli::{Cli, VERSION};
use herald_amqp::Reconnect;
use herald_engine::api_key::{ApiKeyConfig, KeySet};
use herald_engine::config::env::{Env, process_env, unknown_variables};
pub use herald_engine::config::{ConfigError, PublishConfig};
use herald_engine::config::{Renamed, load, parse_toml, redacted_toml, renamed_keys};
use herald_engine::schedule::config::ScheduleConfig;
pub use proxy::{Cidr, ProxyConfig};

/// What happens to a session that has fallen so far behind that its
/// mailbox evicts a message it has not been sent. (A full session queue
/// alone cuts nobody: the session reads on from the mailbox's buffer; see
/// [`crate::outbox`].)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum WhenFull {
    /// Close the session with an ERROR "slow consumer" frame (the default):
    /// the client reconnects and resumes from its last sequence (a gap
    /// marker tells it what the buffer no longer covers).
    Disconnect,
    /// Skip the lost messages and send a `herald.gap` marker
    /// (`reason:queue-overflow`) in their place, so the application knows it
    /// missed something; the session goes on.
    DropOldest,
}

/// The AMQP client of an edge's root links.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum UplinkClient {
    /// herald-amqp's own consumer (the default): the link's task reads the
    /// socket itself. Plain `amqp://` roots only; `amqps://` roots use lapin.
    Herald,
    /// lapin, which runs each connection's socket on a thread of its own.
    Lapin,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Browser session settings, `[session]`. Each field is the key of its name, described once in its row of
/// [`keys::OWN`].
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionConfig {
    /// Key `session.max_sessions`.
    pub max_sessions: usize,
    /// Key `session.max_per_user`.
    pub max_per_user: usize,
    /// Key `session.connect_timeout_ms`.
    pub connect_timeout_ms: u64,
    /// Key `session.header_timeout_ms`.
    pub header_timeout_ms: u64,
    /// Key `session.max_sniffing`.
    pub max_sniffing: usize,
    /// Key `session.max_sniffing_per_address`.
    pub max_sniffing_per_address: usize,
    /// Key `session.heartbeat_send_ms`.
    pub heartbeat_send_ms: u32,
    /// Key `session.heartbeat_receive_ms`.
    pub heartbeat_receive_ms: u32,
    /// Key `session.max_frame_bytes`.
    pub max_frame_bytes: usize,
    /// Key `session.max_headers`.
    pub max_headers: usize,
    /// Key `session.max_header_bytes`.
    pub max_header_bytes: usize,
    /// Key `session.max_subscriptions`.
    pub max_subscriptions: usize,
    /// Key `session.queue_messages`.
    pub queue_messages: usize,
    /// Key `session.queue_bytes`.
    pub queue_bytes: usize,
    /// Key `session.when_full`.
    pub when_full: WhenFull,
    /// Key `session.max_lag_ms`.
    pub max_lag_ms: u64,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            max_sessions: 100_000,
            max_per_user: 100,
            connect_timeout_ms: 10_000,
            header_timeout_ms: 10_000,
            max_sniffing: 4096,
            max_sniffing_per_address: 256,
            heartbeat_send_ms: 10_000,
            heartbeat_receive_ms: 10_000,
            max_frame_bytes: 64 * 1024,
            max_headers: 32,
            max_header_bytes: 4096,
            max_subscriptions: 8,
            queue_messages: 256,
            queue_bytes: 8 * 1024 * 1024,
            when_full: WhenFull::Disconnect,
            max_lag_ms: 30_000,
        }
    }
}

/// `[connection_rate]`: new connections per source address, for a gateway
/// that browsers reach directly. Off by default: behind HAProxy every
/// connection comes from HAProxy's own addresses (limit there instead, with
/// the template's stick table), and many users behind one NAT share an
/// address. (What one address may hold open while its request heads are
/// read is `session.max_sniffing_per_address`'s, on by default.) Each
/// field is the key of its name, described once in its row of
/// [`keys::OWN`].
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConnectionRateConfig {
    /// Key `connection_rate.per_sec`.
    pub per_sec: f64,
    /// Key `connection_rate.burst`.
    pub burst: u32,
    /// Key `connection_rate.max_addresses`.
    pub max_addresses: usize,
}

impl Default for ConnectionRateConfig {
    fn default() -> Self {
        ConnectionRateConfig {
            per_sec: 0.0,
            burst: 20,
            max_addresses: 65_536,
        }
    }
}

impl ConnectionRateConfig {
    /// The rate, when the limit is on.
    pub fn rate(&self) -> Option<herald_engine::rate_limit::Rate> {
        (self.per_sec > 0.0)
            .then(|| herald_engine::rate_limit::Rate::new(self.per_sec, self.burst).ok())
            .flatten()
    }
}

/// Mailbox settings, `[mailbox]`. Each field is the key of its name, described once in its row of
/// [`keys::OWN`].
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MailboxConfig {
    /// Key `mailbox.ttl_secs`.
    pub ttl_secs: u64,
    /// Key `mailbox.buffer_messages`.
    pub buffer_messages: usize,
    /// Key `mailbox.buffer_bytes`.
    pub buffer_bytes: usize,
    /// Key `mailbox.unsent_bytes`.
    pub unsent_bytes: usize,
    /// Key `mailbox.expiry_tick_ms`.
    pub expiry_tick_ms: u64,
    /// Key `mailbox.max_expirations_per_tick`.
    pub max_expirations_per_tick: usize,
}

impl Default for MailboxConfig {
    fn default() -> Self {
        MailboxConfig {
            ttl_secs: 300,
            buffer_messages: 256,
            buffer_bytes: 1024 * 1024,
            unsent_bytes: 64 << 20,
            expiry_tick_ms: 100,
            max_expirations_per_tick: 1000,
        }
    }
}

/// SockJS settings, `[sockjs]`. Each field is the key of its name, described once in its row of
/// [`keys::OWN`].
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SockjsConfig {
    /// Key `sockjs.heartbeat_ms`.
    pub heartbeat_ms: u64,
    /// Key `sockjs.session_timeout_ms`.
    pub session_timeout_ms: u64,
    /// Key `sockjs.streaming_limit_bytes`.
    pub streaming_limit_bytes: usize,
    /// Key `sockjs.max_send_bytes`.
    pub max_send_bytes: usize,
    /// Key `sockjs.jsessionid`.
    pub jsessionid: bool,
    /// Key `sockjs.websocket`.
    pub websocket: bool,
    /// Key `sockjs.test_endpoints`.
    pub test_endpoints: bool,
}

impl Default for SockjsConfig {
    fn default() -> Self {
        SockjsConfig {
            heartbeat_ms: 25_000,
            session_timeout_ms: 5_000,
            streaming_limit_bytes: 128 * 1024,
            max_send_bytes: 64 * 1024,
            jsessionid: false,
            websocket: true,
            test_endpoints: false,
        }
    }
}

/// Edge mode, `[edge]`: consume from root brokers instead of running
/// standalone. Each field is the key of its name, described once in its
/// row of [`keys::OWN`].
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct EdgeConfig {
    /// Key `edge.id`.
    pub id: Option<String>,
    /// Key `edge.roots`.
    pub roots: Vec<String>,
    /// Key `edge.exchange`.
    pub exchange: String,
    /// Key `edge.prefetch`.
    pub prefetch: u16,
    /// Key `edge.queue_expires_secs`.
    pub queue_expires_secs: u64,
    /// Key `edge.dedup_window_secs`.
    pub dedup_window_secs: u64,
    /// Key `edge.dedup_max`.
    pub dedup_max: usize,
    /// Key `edge.reconnect_initial_ms`.
    #[serde(alias = "reconnect_min_ms")]
    pub reconnect_initial_ms: u64,
    /// Key `edge.reconnect_max_ms`.
    pub reconnect_max_ms: u64,
    /// Key `edge.connect_timeout_ms`.
    pub connect_timeout_ms: u64,
    /// Key `edge.presence_exchange`.
    pub presence_exchange: String,
    /// Key `edge.presence_batch_ms`.
    pub presence_batch_ms: u64,
    /// Key `edge.presence_heartbeat_ms`.
    pub presence_heartbeat_ms: u64,
    /// Key `edge.presence_queue`.
    pub presence_queue: usize,
    /// Key `edge.presence_sync_ms`.
    pub presence_sync_ms: u64,
    /// Key `edge.uplink_client`.
    pub uplink_client: UplinkClient,
}

impl EdgeConfig {
    /// The reconnect settings of every root link, as both binaries name
    /// them.
    pub fn reconnect(&self) -> Reconnect {
        Reconnect {
            initial_ms: self.reconnect_initial_ms,
            max_ms: self.reconnect_max_ms,
            connect_timeout_ms: self.connect_timeout_ms,
        }
    }
}

impl Default for EdgeConfig {
    fn default() -> Self {
        EdgeConfig {
            id: None,
            roots: Vec::new(),
            exchange: "herald.edges".into(),
            prefetch: 256,
            queue_expires_secs: 600,
            dedup_window_secs: 120,
            dedup_max: 1_000_000,
            reconnect_initial_ms: Reconnect::default().initial_ms,
            reconnect_max_ms: Reconnect::default().max_ms,
            connect_timeout_ms: Reconnect::default().connect_timeout_ms,
            presence_exchange: herald_amqp::presence::PRESENCE_EXCHANGE.into(),
            presence_batch_ms: 100,
            presence_heartbeat_ms: 10_000,
            presence_queue: 65_536,
            presence_sync_ms: 60_000,
            uplink_client: UplinkClient::Herald,
        }
    }
}

/// The whole gateway configuration. A field that is a key (not a section)
/// is described once in its row of [`keys::TABLE`].
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Key `listen`.
    pub listen: SocketAddr,
    /// Key `data_dir`.
    pub data_dir: PathBuf,
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
    /// JWT verification.
    pub auth: AuthConfig,
    /// Sessions.
    pub session: SessionConfig,
    /// New connections per source address.
    pub connection_rate: ConnectionRateConfig,
    /// The client's address behind proxies.
    pub proxy: ProxyConfig,
    /// Mailboxes.
    pub mailbox: MailboxConfig,
    /// SockJS.
    pub sockjs: SockjsConfig,
    /// Edge mode.
    pub edge: EdgeConfig,
    /// Publish API.
    pub publish: PublishConfig,
    /// Deadlines of HTTP connections.
    pub http: herald_engine::deadline::HttpConfig,
    /// Delayed notifications (standalone; an edge leaves them to its routers).
    pub schedule: ScheduleConfig,
    /// Callbacks (standalone; an edge leaves them to its routers).
    pub callbacks: herald_engine::callback::config::CallbackConfig,
    /// Presence events to a topic (standalone; an edge's routers publish
    /// them).
    pub presence: herald_engine::presence::events::PresenceConfig,
    /// Warnings from loading (keys used under a deprecated name), for
    /// `main` to log once logging is up.
    #[serde(skip)]
    pub warnings: Vec<String>,
}

/// Keys that were renamed; the old names still work, with a warning.
pub const RENAMED: &[Renamed] = &[Renamed {
    old: "edge.reconnect_min_ms",
    new: "edge.reconnect_initial_ms",
}];

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            data_dir: PathBuf::from("herald-data"),
            log_format: LogFormat::Text,
            api_keys: Vec::new(),
            api_key: Vec::new(),
            metrics_require_key: false,
            shutdown_grace_ms: 10_000,
            auth: AuthConfig {
                leeway_secs: 30,
                ..AuthConfig::default()
            },
            session: SessionConfig::default(),
            connection_rate: ConnectionRateConfig::default(),
            proxy: ProxyConfig::default(),
            mailbox: MailboxConfig::default(),
            sockjs: SockjsConfig::default(),
            edge: EdgeConfig::default(),
            publish: PublishConfig::default(),
            http: Default::default(),
            schedule: ScheduleConfig::default(),
            callbacks: Default::default(),
            presence: Default::default(),
            warnings: Vec::new(),
        }
    }
}

impl Config {
    /// Parse a TOML document.
    pub fn from_toml(text: &str, origin: &Path) -> Result<Config, ConfigError> {
        let mut config: Config = parse_toml(text, origin)?;
        config.warnings = renamed_keys(text, RENAMED);
        Ok(config)
    }

    /// Load: defaults, the file named by `--config` (if any), the
    /// environment (every key's `HERALD_*` variable, docs/configuration.md),
    /// then flags. Validated.
    pub fn load(cli: &Cli) -> Result<Config, ConfigError> {
        let mut config = Config::load_with(cli, &process_env)?;
        let names = std::env::vars_os().filter_map(|(k, _)| k.into_string().ok());
        // What the gateway reads besides its settings' variables.
        let mut also: Vec<&str> = vec!["HERALD_CONFIG"];
        also.extend(config.api_key.iter().filter_map(|k| k.key_env.as_deref()));
        let unknown = unknown_variables(names, keys::TABLE, &also);
        config.warnings.extend(unknown);
        Ok(config)
    }

    /// [`Config::load`] with the variables read from `env`.
    pub fn load_with(cli: &Cli, env: Env<'_>) -> Result<Config, ConfigError> {
        let (mut config, warnings): (Config, _) =
            load(cli.config.as_deref(), RENAMED, keys::TABLE, env)?;
        config.warnings = warnings;
        cli.apply(&mut config);
        config.validate()?;
        Ok(config)
    }

    /// This configuration as TOML with every secret `"<redacted>"`
    /// (`--print-config`).
    pub fn to_redacted_toml(&self) -> Result<String, String> {
        redacted_toml(self, keys::TABLE)
    }

    /// Whether root brokers are configured: this gateway is an edge.
    pub fn edge_mode(&self) -> bool {
        !self.edge.roots.is_empty()
    }

    /// Whether no JWT key is configured: the gateway makes its own secret and
    /// prints a demo token.
    pub fn dev_mode(&self) -> bool {
        self.auth.no_keys()
    }

    /// Check every rule; report all violations.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut p = Vec::new();
        p.extend(self.auth.problems());
        if self.edge_mode() && self.dev_mode() {
            p.push(
                "edge mode needs a JWT key (auth.jwt_secret, jwt_public_key_file, keys or jwks_file): dev mode is standalone only"
                    .to_owned(),
            );
        }
        match self.api_key_set() {
            Ok(keys) if keys.is_empty() && !self.dev_mode() && !self.edge_mode() => p.push(
                "api_keys is empty: the publish API needs at least one key (api_keys, [[api_key]], HERALD_API_KEYS or --api-key)"
                    .to_owned(),
            ),
            // Dev mode's own key may do everything.
            Ok(keys) if self.metrics_require_key && !self.dev_mode() => {
                p.extend(herald_engine::answers::metrics_key_problem(&keys));
            }
            Ok(_) => {}
            Err(e) => p.extend(e.problems),
        }
        let s = &self.session;
        let positive = [
            ("session.max_sessions", s.max_sessions),
            ("session.max_per_user", s.max_per_user),
            ("session.max_frame_bytes", s.max_frame_bytes),
            ("session.max_headers", s.max_headers),
            ("session.max_header_bytes", s.max_header_bytes),
            ("session.max_subscriptions", s.max_subscriptions),
            ("session.queue_messages", s.queue_messages),
            ("session.queue_bytes", s.queue_bytes),
            ("session.connect_timeout_ms", s.connect_timeout_ms as usize),
            ("session.header_timeout_ms", s.header_timeout_ms as usize),
            ("session.max_sniffing", s.max_sniffing),
            (
                "session.max_sniffing_per_address",
                s.max_sniffing_per_address,
            ),
            ("session.max_lag_ms", s.max_lag_ms as usize),
            ("mailbox.buffer_messages", self.mailbox.buffer_messages),
            ("mailbox.buffer_bytes", self.mailbox.buffer_bytes),
            ("mailbox.unsent_bytes", self.mailbox.unsent_bytes),
            (
                "mailbox.expiry_tick_ms",
                self.mailbox.expiry_tick_ms as usize,
            ),
            (
                "mailbox.max_expirations_per_tick",
                self.mailbox.max_expirations_per_tick,
            ),
            ("sockjs.heartbeat_ms", self.sockjs.heartbeat_ms as usize),
            (
                "sockjs.session_timeout_ms",
                self.sockjs.session_timeout_ms as usize,
            ),
            (
                "sockjs.streaming_limit_bytes",
                self.sockjs.streaming_limit_bytes,
            ),
            ("sockjs.max_send_bytes", self.sockjs.max_send_bytes),
            // Both modes deduplicate.
            ("edge.dedup_max", self.edge.dedup_max),
        ];
        for (name, value) in positive {
            if value == 0 {
                p.push(format!("{name} must be greater than 0"));
            }
        }
        if !self.edge.roots.is_empty() {
            match &self.edge.id {
                None => p.push(
                    "edge.id is required with edge.roots: the edge's queue on each root is named after it"
                        .to_owned(),
                ),
                Some(id) if !herald_protocol::envelope::is_valid_name(id) => p.push(format!(
                    "edge.id {id:?} must be 1 to 200 characters of A-Z a-z 0-9 . _ ~ @ / + = -"
                )),
                Some(_) => {}
            }
            for root in &self.edge.roots {
                if !(root.starts_with("amqp://") || root.starts_with("amqps://")) {
                    p.push(format!("edge.roots: {root:?} is not an amqp:// URL"));
                }
            }
            if self.edge.presence_batch_ms == 0
                || self.edge.presence_heartbeat_ms == 0
                || self.edge.presence_sync_ms == 0
                || self.edge.presence_queue == 0
            {
                p.push(
                    "edge.presence_batch_ms, edge.presence_heartbeat_ms, edge.presence_sync_ms and edge.presence_queue must be greater than 0"
                        .to_owned(),
                );
            }
            if self.edge.prefetch == 0 {
                p.push("edge.prefetch must be greater than 0".to_owned());
            }
            p.extend(self.edge.reconnect().problems("edge"));
        }
        p.extend(self.publish.problems());
        p.extend(self.http.problems());
        p.extend(self.proxy.problems());
        p.extend(self.schedule.problems());
        p.extend(self.callbacks.problems());
        p.extend(self.presence.problems());
        let rate = &self.connection_rate;
        if !rate.per_sec.is_finite() || rate.per_sec < 0.0 {
            p.push("connection_rate.per_sec must be 0 (off) or a positive number".to_owned());
        }
        if rate.burst == 0 || rate.max_addresses == 0 {
            p.push(
                "connection_rate.burst and connection_rate.max_addresses must be greater than 0"
                    .to_owned(),
            );
        }
        if self.mailbox.ttl_secs == 0 {
            p.push("mailbox.ttl_secs must be greater than 0".to_owned());
        }
        if p.is_empty() {
            Ok(())
        } else {
            Err(ConfigError { problems: p })
        }
    }

    /// Load the API keys (`api_keys` and `[[api_key]]`, their files and
    /// environment variables read now).
    pub fn api_key_set(&self) -> Result<KeySet, ConfigError> {
        KeySet::load(&self.api_keys, &self.api_key).map_err(|problems| ConfigError { problems })
    }

    /// The envelope limits for the publish API.
    pub fn envelope_limits(&self) -> herald_protocol::envelope::Limits {
        self.publish.envelope_limits()
    }
}

#[cfg(test)]
mod tests;
