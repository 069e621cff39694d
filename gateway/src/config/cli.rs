//! Command-line flags. Every configuration key also has an environment
//! variable (`HERALD_*`, read by `Config::load` from the gateway's table of
//! keys, [`super::keys`], the older names of the flags' variables
//! included); flags win over it. A flag that sets a key shows the key's
//! default in `--help`, from `Config::default()`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Arg, Parser};
use herald_engine::config::page::help_with_default;

use super::{Config, LogFormat, WhenFull};

/// The version and the commit it was built from, as `--version` says.
pub const VERSION: &str = herald_engine::version!();

/// `--config`'s help. The paths under `/usr/share/doc/herald-gateway/` in it
/// and in the text after the flags are where the Debian package installs the
/// files (`[package.metadata.deb]` assets of gateway/Cargo.toml; a test
/// checks each), since the man page is made from `--help` and read on an
/// installed system, which has no `deploy/` directory.
const CONFIG_HELP: &str = "TOML configuration file. Every key with its default, annotated: \
                           /usr/share/doc/herald-gateway/examples/gateway.example.toml \
                           (from the Debian package; examples/ in a release tarball, \
                           deploy/gateway.example.toml in the source)";

/// Herald gateway: browser sessions (STOMP over WebSocket) and per-user
/// mailboxes. With no broker configured it runs standalone: the HTTP publish
/// API is served on the same port.
///
/// Settings come from defaults, then the TOML file given by --config, then
/// environment variables, then flags. With no JWT key configured the gateway
/// runs in dev mode: it makes a secret and an API key, prints a demo token
/// and URL, and serves a demo page at /.
#[derive(Debug, Clone, Default, Parser)]
#[command(
    name = "herald-gateway",
    version = VERSION,
    mut_args = defaults_in_help(),
    after_help = "Every configuration key has an environment variable: HERALD_ and its path in \
                  upper case, sections joined by __ (session.max_sessions: \
                  HERALD_SESSION__MAX_SESSIONS); \
                  /usr/share/doc/herald-gateway/configuration.md lists them all (from the \
                  Debian package; docs/configuration.md in the source). --print-config \
                  shows what is in force."
)]
pub struct Cli {
    /// TOML configuration file; `--help` says [`CONFIG_HELP`] (the example
    /// where an installed system has it).
    #[arg(long, env = "HERALD_CONFIG", value_name = "FILE", help = CONFIG_HELP)]
    pub config: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Data directory (dev credentials, the delayed-notification store).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// HS256 secret for browser JWTs (at least 32 bytes).
    #[arg(long, value_name = "SECRET")]
    pub jwt_secret: Option<String>,
    /// PEM public key for RS256/ES256 browser JWTs.
    #[arg(long, value_name = "FILE")]
    pub jwt_public_key_file: Option<PathBuf>,
    /// JWT algorithm: HS256, RS256 or ES256.
    #[arg(long, value_name = "ALG")]
    pub jwt_algorithm: Option<String>,
    /// API key for the publish API; repeat the flag or separate with commas.
    #[arg(long = "api-key", value_name = "KEY", value_delimiter = ',')]
    pub api_keys: Vec<String>,
    /// How long a mailbox outlives its user's last session, in seconds.
    #[arg(long, value_name = "SECS")]
    pub mailbox_ttl_secs: Option<u64>,
    /// Most concurrent sessions.
    #[arg(long, value_name = "N")]
    pub max_sessions: Option<usize>,
    /// What a session that fell behind further than its mailbox holds gets: cut or gaps.
    #[arg(long, value_name = "POLICY")]
    pub when_full: Option<WhenFull>,
    /// Edge mode: this edge's stable id (names its queue on every root).
    #[arg(long, value_name = "ID")]
    pub edge_id: Option<String>,
    /// Edge mode: a root broker's AMQP URL; repeat for every root (or comma-separate).
    #[arg(long = "root", value_name = "AMQP_URL", value_delimiter = ',')]
    pub roots: Vec<String>,
    /// Mount the SockJS protocol test suite's services (/echo, /close, ...). Tests only.
    #[arg(long)]
    pub sockjs_test_endpoints: bool,
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
    ("data_dir", "data_dir"),
    ("mailbox_ttl_secs", "mailbox.ttl_secs"),
    ("max_sessions", "session.max_sessions"),
    ("when_full", "session.when_full"),
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
        if let Some(v) = &self.data_dir {
            config.data_dir = v.clone();
        }
        if let Some(v) = &self.jwt_secret {
            config.auth.jwt_secret = Some(v.clone());
        }
        if let Some(v) = &self.jwt_public_key_file {
            config.auth.jwt_public_key_file = Some(v.clone());
        }
        if let Some(v) = &self.jwt_algorithm {
            config.auth.jwt_algorithm = Some(v.clone());
        }
        if !self.api_keys.is_empty() {
            config.api_keys = self.api_keys.clone();
        }
        if let Some(v) = self.mailbox_ttl_secs {
            config.mailbox.ttl_secs = v;
        }
        if let Some(v) = self.max_sessions {
            config.session.max_sessions = v;
        }
        if let Some(v) = self.when_full {
            config.session.when_full = v;
        }
        if let Some(v) = &self.edge_id {
            config.edge.id = Some(v.clone());
        }
        if !self.roots.is_empty() {
            config.edge.roots = self.roots.clone();
        }
        if self.sockjs_test_endpoints {
            config.sockjs.test_endpoints = true;
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
            "herald-gateway",
            "--listen",
            "127.0.0.1:0",
            "--api-key",
            "a,b",
            "--when-full",
            "drop-oldest",
        ])
        .unwrap();
        let mut c = Config::default();
        cli.apply(&mut c);
        assert_eq!(c.listen.port(), 0);
        assert_eq!(c.api_keys, vec!["a", "b"]);
        assert_eq!(c.session.when_full, WhenFull::DropOldest);
    }

    #[test]
    fn help_shows_the_defaults_of_the_configuration() {
        let help = <Cli as clap::CommandFactory>::command()
            .render_help()
            .to_string();
        let d = Config::default();
        for shown in [
            format!("[default: {}]", d.listen),
            format!("[default: {}]", d.data_dir.display()),
            format!("[default: {}]", d.mailbox.ttl_secs),
            format!("[default: {}]", d.session.max_sessions),
            "[default: disconnect]".to_owned(),
        ] {
            assert!(help.contains(&shown), "{shown} not in:\n{help}");
        }
    }

    #[test]
    fn bad_flag_values_are_usage_errors() {
        assert!(Cli::try_parse_from(["herald-gateway", "--listen", "nowhere"]).is_err());
        assert!(Cli::try_parse_from(["herald-gateway", "--when-full", "explode"]).is_err());
    }

    /// Each `/usr/share/doc/herald-gateway/…` path `--help` (and so the man page)
    /// names is a file the Debian package installs.
    #[test]
    fn help_names_only_files_the_package_installs() {
        let help = <Cli as clap::CommandFactory>::command()
            .render_long_help()
            .to_string();
        let checked = herald_engine::config::packaged::check_help(
            include_str!("../../Cargo.toml"),
            &help,
            "/usr/share/doc/herald-gateway/",
        );
        assert_eq!(checked, Ok(()));
    }
}
