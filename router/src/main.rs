//! `herald-router`: parse flags, load configuration, run until a signal.

use std::process::ExitCode;

use clap::Parser;
use herald_engine::api_key::ApiKeys;
use herald_engine::process::{
    EX_CONFIG, EX_UNAVAILABLE, init_tracing, on_reload_signal, print_config_errors, wait_for_signal,
};
use herald_router::config::{Cli, Config, LogFormat};
use herald_router::server;
use tokio_util::sync::CancellationToken;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match Config::load(&cli) {
        Ok(c) => c,
        Err(e) => {
            print_config_errors("herald-router", &e.problems);
            return ExitCode::from(EX_CONFIG);
        }
    };
    if cli.print_config {
        return print_config(&config);
    }
    if cli.check_config {
        for warning in &config.warnings {
            eprintln!("herald-router: warning: {warning}");
        }
        println!(
            "herald-router {}: configuration OK (listen {}, delayed notifications {})",
            herald_router::config::VERSION,
            config.listen,
            if config.redis.store_config().is_some() {
                "on"
            } else {
                "off"
            }
        );
        return ExitCode::SUCCESS;
    }
    init_tracing(config.log_format == LogFormat::Json);
    tracing::info!(
        version = herald_router::config::VERSION,
        "herald-router starting"
    );
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
    let api_keys = match config.api_key_set() {
        Ok(set) => ApiKeys::from_set(set),
        Err(e) => {
            print_config_errors("herald-router", &e.problems);
            return ExitCode::from(EX_CONFIG);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("herald-router: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let store = match server::connect_store(&config).await {
            Ok(store) => store,
            Err(e) => {
                eprintln!("herald-router: cannot open the delayed-notification store: {e}");
                return ExitCode::from(EX_UNAVAILABLE);
            }
        };
        let listener = match tokio::net::TcpListener::bind(config.listen).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("herald-router: cannot listen on {}: {e}", config.listen);
                return ExitCode::from(EX_UNAVAILABLE);
            }
        };
        let addr = listener.local_addr().unwrap_or(config.listen);
        tracing::info!(%addr, broker = %herald_engine::process::redact(&config.amqp.url), "herald-router listening");
        let shutdown = CancellationToken::new();
        let signals = tokio::spawn({
            let shutdown = shutdown.clone();
            async move {
                wait_for_signal().await;
                shutdown.cancel();
            }
        });
        // SIGHUP reloads the API keys.
        let reloads = tokio::spawn({
            let api_keys = api_keys.clone();
            on_reload_signal(move || reload_api_keys(&cli, &api_keys))
        });
        // systemd (Type=notify): READY=1 once ready as /readyz says,
        // STOPPING=1 at the drain.
        let notifier = herald_engine::process::notify::Notifier::from_env();
        server::run_notifying(config, listener, shutdown, store, api_keys, notifier).await;
        signals.abort();
        reloads.abort();
        ExitCode::SUCCESS
    })
}

/// `--print-config`: the configuration in force as TOML, secrets redacted.
fn print_config(config: &Config) -> ExitCode {
    for warning in &config.warnings {
        eprintln!("herald-router: warning: {warning}");
    }
    match config.to_redacted_toml() {
        Ok(text) => {
            println!(
                "# herald-router {}: the configuration in force (defaults < file < \
                 environment < flags), secrets \"<redacted>\"\n\n{text}",
                herald_router::config::VERSION
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("herald-router: cannot print the configuration: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Read the configuration again (file, environment, flags) and use the API
/// keys it lists (`api_keys`, `[[api_key]]`, their files read again); on
/// any problem keep the current keys, log why and count it in
/// `herald_api_key_reloads_total{result="failed"}`. Nothing else of the
/// configuration changes without a restart.
fn reload_api_keys(cli: &Cli, api_keys: &ApiKeys) {
    match Config::load(cli) {
        Ok(config) => match config.api_key_set() {
            Ok(set) => {
                let names: Vec<&str> = set.names().collect();
                let names = names.join(",");
                let count = api_keys.replace(set);
                tracing::info!(api_keys = count, names = %names, "API keys reloaded");
            }
            Err(e) => {
                api_keys.reload_failed();
                tracing::warn!(problems = %e, "API key reload failed, keeping the current API keys");
            }
        },
        Err(e) => {
            api_keys.reload_failed();
            tracing::warn!(problems = %e, "API key reload failed, keeping the current API keys: the configuration is invalid");
        }
    }
}
