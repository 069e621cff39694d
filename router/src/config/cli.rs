//! Command-line flags. Every configuration key also has an environment
//! variable (`HERALD_ROUTER_*`, read by `Config::load` from the router's
//! table of keys, [`super::keys`], the older names of the flags' variables
//! included); flags win over it. A flag that sets a key shows the key's
//! default in `--help`, from `Config::default()`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Arg, Parser};
use herald_engine::config::page::help_with_default;

use super::{Config, LogFormat};

/// The version and the commit it was built from, as `--version` says.
pub const VERSION: &str = herald_engine::version!();

/// `--config`'s help. The paths under `/usr/share/doc/herald-router/` in it
/// and in the text after the flags are where the Debian package installs the
/// files (`[package.metadata.deb]` assets of router/Cargo.toml; a test checks
/// each), since the man page is made from `--help` and read on an installed
/// system, which has no source tree.
const CONFIG_HELP: &str = "TOML configuration file. Every key with its default, annotated: \
                           /usr/share/doc/herald-router/examples/router.example.toml \
                           (from the Debian package; examples/ in a release tarball, \
                           router/router.example.toml in the source)";

/// Herald router: the root layer. Consumes publications from the AMQP
/// exchange `herald` and the HTTP API (`POST /v1/notifications`), validates
/// them once, and forwards them to every edge through the `herald.edges`
/// exchange; invalid AMQP publications go to `herald.dead` with the reason.
///
/// Settings come from defaults, then the TOML file given by --config, then
/// environment variables, then flags.
#[derive(Debug, Clone, Default, Parser)]
#[command(
    name = "herald-router",
    version = VERSION,
    mut_args = defaults_in_help(),
    after_help = "Every configuration key has an environment variable: HERALD_ROUTER_ and its \
                  path in upper case, sections joined by __ (amqp.prefetch: \
                  HERALD_ROUTER_AMQP__PREFETCH); \
                  /usr/share/doc/herald-router/configuration.md lists them all (from the \
                  Debian package; docs/configuration.md in the source). --print-config \
                  shows what is in force."
)]
pub struct Cli {
    /// TOML configuration file; `--help` says [`CONFIG_HELP`] (the example
    /// where an installed system has it).
    #[arg(long, env = "HERALD_ROUTER_CONFIG", value_name = "FILE", help = CONFIG_HELP)]
    pub config: Option<PathBuf>,
    /// Address of the HTTP API.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Broker URL (`amqp://` or `amqps://`).
    #[arg(long, help = "Broker URL", value_name = "URL")]
    pub amqp_url: Option<String>,
    /// API key for the HTTP publish API; repeat the flag or separate with commas.
    #[arg(long = "api-key", value_name = "KEY", value_delimiter = ',')]
    pub api_keys: Vec<String>,
    /// Most unacknowledged AMQP publications in flight.
    #[arg(long, value_name = "N")]
    pub prefetch: Option<u16>,
    /// First reconnect delay in ms; doubles per failure, with jitter.
    #[arg(long, value_name = "MS")]
    pub reconnect_initial_ms: Option<u64>,
    /// Longest reconnect delay in ms.
    #[arg(long, value_name = "MS")]
    pub reconnect_max_ms: Option<u64>,
    /// Largest payload in bytes.
    #[arg(long, value_name = "BYTES")]
    pub max_payload_bytes: Option<usize>,
    /// Most users (and clients, and sites) per publication.
    #[arg(long, env = "HERALD_ROUTER_MAX_RECIPIENTS", value_name = "N")]
    pub max_recipients: Option<usize>,
    /// Redis for delayed notifications and presence (`redis://host:port/db`);
    /// without it (or `[redis]`), delayed publications are refused.
    #[arg(long, value_name = "URL")]
    pub redis_url: Option<String>,
    /// Check the configuration (file, environment and flags, and the keys
    /// they name) and exit: 0 when it is valid, 78 with every problem.
    #[arg(long, conflicts_with = "print_config")]
    pub check_config: bool,
    /// Print the configuration in force (defaults, file, environment and
    /// flags) as TOML, every secret "<redacted>", and exit: 0, or 78 with
    /// every problem when it is not valid.
    #[arg(long)]
    pub print_config: bool,
    /// Log format (levels come from RUST_LOG).
    #[arg(long, value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,
}

/// The flags that set a key, and that key: `--help` shows the key's default,
/// read from `Config::default()`, so a default is written once.
const FLAG_KEYS: &[(&str, &str)] = &[
    ("listen", "listen"),
    ("amqp_url", "amqp.url"),
    ("prefetch", "amqp.prefetch"),
    ("reconnect_initial_ms", "amqp.reconnect_initial_ms"),
    ("reconnect_max_ms", "amqp.reconnect_max_ms"),
    ("max_payload_bytes", "publish.max_payload_bytes"),
    ("max_recipients", "publish.max_users"),
    ("log_format", "log_format"),
];

/// What `--help` says of each flag of `FLAG_KEYS`: its help, then
/// `[default: …]` with its key's default.
fn defaults_in_help() -> impl FnMut(Arg) -> Arg {
    let defaults = serde_json::to_value(Config::default()).unwrap_or_default();
    move |arg| {
        let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
        match help_with_default(&defaults, FLAG_KEYS, arg.get_id().as_str(), &help) {
            Some(help) => arg.help(help),
            None => arg,
        }
    }
}

impl Cli {
    /// Lay the flags over `config` (file and environment already in it).
    pub fn apply(&self, config: &mut Config) {
        if let Some(v) = self.listen {
            config.listen = v;
        }
        if let Some(v) = &self.amqp_url {
            config.amqp.url = v.clone();
        }
        if !self.api_keys.is_empty() {
            config.api_keys = self.api_keys.clone();
        }
        if let Some(v) = self.prefetch {
            config.amqp.prefetch = v;
        }
        if let Some(v) = self.reconnect_initial_ms {
            config.amqp.reconnect_initial_ms = v;
        }
        if let Some(v) = self.reconnect_max_ms {
            config.amqp.reconnect_max_ms = v;
        }
        if let Some(v) = self.max_payload_bytes {
            config.publish.max_payload_bytes = v;
        }
        if let Some(v) = self.max_recipients {
            config.publish.max_users = v;
            config.publish.max_clients = v;
            config.publish.max_sites = v;
        }
        if let Some(v) = &self.redis_url {
            config.redis.url = Some(v.clone());
        }
        if let Some(v) = self.log_format {
            config.log_format = v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_file_values() {
        let cli = Cli::try_parse_from([
            "herald-router",
            "--listen",
            "127.0.0.1:0",
            "--amqp-url",
            "amqp://u:p@broker:5672/%2f",
            "--api-key",
            "a,b",
            "--prefetch",
            "32",
            "--reconnect-initial-ms",
            "50",
            "--reconnect-max-ms",
            "500",
            "--max-payload-bytes",
            "1000",
            "--max-recipients",
            "10",
            "--log-format",
            "json",
        ])
        .unwrap();
        let mut c = Config::default();
        cli.apply(&mut c);
        assert_eq!(c.listen.port(), 0);
        assert_eq!(c.amqp.url, "amqp://u:p@broker:5672/%2f");
        assert_eq!(c.api_keys, vec!["a", "b"]);
        assert_eq!(c.amqp.prefetch, 32);
        assert_eq!(c.supervisor().backoff.max.as_millis(), 500);
        assert_eq!(c.envelope_limits().max_payload_bytes, 1000);
        assert_eq!(c.envelope_limits().max_sites, 10);
        assert_eq!(c.log_format, LogFormat::Json);
        c.validate().unwrap();
    }

    #[test]
    fn help_shows_the_defaults_of_the_configuration() {
        let help = <Cli as clap::CommandFactory>::command()
            .render_help()
            .to_string();
        let d = Config::default();
        for shown in [
            format!("[default: {}]", d.listen),
            format!("[default: {}]", d.amqp.url),
            format!("[default: {}]", d.amqp.prefetch),
            format!("[default: {}]", d.publish.max_users),
            "[default: text]".to_owned(),
        ] {
            assert!(help.contains(&shown), "{shown} not in:\n{help}");
        }
        assert!(!help.contains("[default: null]"), "{help}");
    }

    #[test]
    fn bad_flag_values_are_usage_errors() {
        assert!(Cli::try_parse_from(["herald-router", "--listen", "nowhere"]).is_err());
        assert!(Cli::try_parse_from(["herald-router", "--prefetch", "70000"]).is_err());
        assert!(Cli::try_parse_from(["herald-router", "--log-format", "xml"]).is_err());
    }

    /// Each `/usr/share/doc/herald-router/…` path `--help` (and so the man page)
    /// names is a file the Debian package installs.
    #[test]
    fn help_names_only_files_the_package_installs() {
        let help = <Cli as clap::CommandFactory>::command()
            .render_long_help()
            .to_string();
        let checked = herald_engine::config::packaged::check_help(
            include_str!("../../Cargo.toml"),
            &help,
            "/usr/share/doc/herald-router/",
        );
        assert_eq!(checked, Ok(()));
    }
}
