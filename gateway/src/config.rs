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

/// Browser session settings.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionConfig {
    /// Most concurrent sessions; the next upgrade gets 503.
    pub max_sessions: usize,
    /// Most sessions of one user (a token's `sub` on its `site`) on this
    /// gateway at once; the next CONNECT gets ERROR "too many sessions for
    /// this user" and is closed. Users are hashed to edges, so this is
    /// about a user's limit across the deployment too.
    pub max_per_user: usize,
    /// Time allowed between the upgrade and a valid CONNECT.
    pub connect_timeout_ms: u64,
    /// Time a new connection has, from accept, to send its whole request
    /// head (a native streaming receiver: its body too), for `/ws`, SockJS
    /// and every other route alike; then it is closed without an answer.
    /// Also hyper's header read timeout on a keep-alive connection.
    pub header_timeout_ms: u64,
    /// Most connections whose request head is still being sniffed (the
    /// native streaming path); the next one is answered 503 and closed.
    pub max_sniffing: usize,
    /// Shortest interval at which the server sends heart-beats (`sx`).
    pub heartbeat_send_ms: u32,
    /// Shortest interval at which the server wants heart-beats (`sy`).
    pub heartbeat_receive_ms: u32,
    /// Largest inbound STOMP frame (and WebSocket message).
    pub max_frame_bytes: usize,
    /// Most headers in an inbound frame.
    pub max_headers: usize,
    /// Longest inbound header line.
    pub max_header_bytes: usize,
    /// Most subscriptions per session.
    pub max_subscriptions: usize,
    /// Most messages queued for one session (its window onto the mailbox:
    /// beyond it, the session reads on from the mailbox's buffer).
    pub queue_messages: usize,
    /// Most payload bytes queued for one session (as `queue_messages`),
    /// and the bound on the control frames waiting for its socket.
    pub queue_bytes: usize,
    /// What happens when the mailbox evicts a message a lagging session
    /// has not been sent.
    pub when_full: WhenFull,
    /// Longest a session may go without write progress (its client taking
    /// bytes) while something waits for it; then it is cut as a slow
    /// consumer, whatever `when_full` says.
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
/// address.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConnectionRateConfig {
    /// New connections a second per source address, on average; 0 turns
    /// the limit off. A connection over it is answered 429 with
    /// `Retry-After` and closed.
    pub per_sec: f64,
    /// Connections one address may open at once before the rate applies.
    pub burst: u32,
    /// Addresses remembered; beyond it refilled ones are forgotten first,
    /// then the oldest (evict-oldest, counted).
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

/// Mailbox settings.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MailboxConfig {
    /// How long a mailbox outlives its user's last session.
    pub ttl_secs: u64,
    /// Most messages kept for replay, and for sessions that fell behind
    /// to read on from.
    pub buffer_messages: usize,
    /// Most payload bytes kept (as `buffer_messages`).
    pub buffer_bytes: usize,
    /// How often expired mailboxes are removed.
    pub expiry_tick_ms: u64,
    /// Most mailboxes removed per tick, so mass expiry makes no spike.
    pub max_expirations_per_tick: usize,
}

impl Default for MailboxConfig {
    fn default() -> Self {
        MailboxConfig {
            ttl_secs: 300,
            buffer_messages: 256,
            buffer_bytes: 1024 * 1024,
            expiry_tick_ms: 100,
            max_expirations_per_tick: 1000,
        }
    }
}

/// SockJS settings.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SockjsConfig {
    /// Interval of SockJS `h` frames when nothing else is sent.
    pub heartbeat_ms: u64,
    /// How long a session survives without a receiving request.
    pub session_timeout_ms: u64,
    /// Bytes after which an xhr-streaming or EventSource response ends (the
    /// client opens a new one), so browsers can free what they buffered.
    pub streaming_limit_bytes: usize,
    /// Largest `xhr_send` body; 413 beyond.
    pub max_send_bytes: usize,
    /// Set a `JSESSIONID` cookie (for load balancers that stick by it) and
    /// answer `cookie_needed: true` in `/info`.
    pub jsessionid: bool,
    /// Offer the websocket transport in `/info`.
    pub websocket: bool,
    /// Mount the SockJS protocol test suite's services (`/echo`, `/close`,
    /// `/disabled_websocket_echo`, `/cookie_needed_echo`). Tests only.
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

/// Edge mode: consume from root brokers instead of running standalone.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct EdgeConfig {
    /// This edge's stable id: its queue on every root is `herald.edge.<id>`,
    /// so it must survive restarts.
    pub id: Option<String>,
    /// AMQP URLs of every root broker. Empty means standalone.
    pub roots: Vec<String>,
    /// The fanout exchange routers publish to on each root.
    pub exchange: String,
    /// Unacknowledged deliveries per root link.
    pub prefetch: u16,
    /// How long a root keeps this edge's queue once the edge is gone.
    pub queue_expires_secs: u64,
    /// Window in which a repeated notification id reaches no mailbox. Both
    /// modes: standalone deduplicates what the publish API and the delayed
    /// firer hand the hub, an edge what its roots deliver. (The key keeps
    /// its `edge.` name from when only edges deduplicated, so existing
    /// configurations keep working.) 0 turns deduplication off.
    pub dedup_window_secs: u64,
    /// Most ids remembered for deduplication, both modes (the oldest
    /// forgotten first, counted in `herald_dedup_evicted_total`).
    pub dedup_max: usize,
    /// First reconnect delay after a broker connection fails (grows
    /// exponentially, with jitter). Read under its old name
    /// `reconnect_min_ms` too, with a deprecation warning.
    #[serde(alias = "reconnect_min_ms")]
    pub reconnect_initial_ms: u64,
    /// Longest reconnect delay.
    pub reconnect_max_ms: u64,
    /// Longest a connection attempt to a root may take.
    pub connect_timeout_ms: u64,
    /// The fanout exchange presence reports go to on each root.
    pub presence_exchange: String,
    /// Longest a presence change waits before it is reported.
    pub presence_batch_ms: u64,
    /// Longest time between two presence reports (an empty one is a
    /// heartbeat: routers count this edge's users online while they come).
    pub presence_heartbeat_ms: u64,
    /// Bound of the queue of presence changes (drop-newest when full).
    pub presence_queue: usize,
    /// Time between two snapshots of every mailbox this edge holds, which
    /// routers routing by edge (`routing.mode = "targeted"`) need to trust
    /// their view of it after they start or miss a report; one is also
    /// sent whenever a root link comes up.
    pub presence_sync_ms: u64,
    /// The AMQP client of the root links: `herald` (its own, read by the
    /// link's task) or `lapin` (a thread per connection). `amqps://` roots
    /// always use lapin.
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

/// The whole gateway configuration.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address to serve on.
    pub listen: SocketAddr,
    /// Where Herald keeps its files: dev credentials and, standalone, the
    /// delayed-notification store (`DATA_DIR/delayed`).
    pub data_dir: PathBuf,
    /// Log output format.
    pub log_format: LogFormat,
    /// Plain API keys for the publish API (every operation, every site),
    /// named `key-1`, `key-2`, ... by position.
    pub api_keys: Vec<String>,
    /// Named API keys (`[[api_key]]`): operations, sites, publish rate.
    pub api_key: Vec<ApiKeyConfig>,
    /// How long shutdown waits for sessions to drain.
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
        config
            .warnings
            .extend(unknown_variables(names, keys::TABLE));
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
            ("session.max_lag_ms", s.max_lag_ms as usize),
            ("mailbox.buffer_messages", self.mailbox.buffer_messages),
            ("mailbox.buffer_bytes", self.mailbox.buffer_bytes),
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
