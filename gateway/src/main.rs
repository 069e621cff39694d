//! `herald-gateway`: parse flags, load configuration, run until a signal.

use std::process::ExitCode;

use clap::Parser;
use herald_engine::api_key::ApiKeys;
use herald_engine::process::notify::{Notifier, announce_ready};
use herald_engine::process::{
    EX_CANTCREAT, EX_CONFIG, EX_UNAVAILABLE, init_tracing, on_reload_signal, print_config_errors,
    wait_for_signal,
};
use herald_gateway::auth::Verifier;
use herald_gateway::config::{Cli, Config, LogFormat};
use herald_gateway::{Gateway, StartError};
use herald_gateway::{dev, server};
use tokio_util::sync::CancellationToken;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match Config::load(&cli) {
        Ok(c) => c,
        Err(e) => {
            print_config_errors("herald-gateway", &e.problems);
            return ExitCode::from(EX_CONFIG);
        }
    };
    if cli.print_config {
        return print_config(&config);
    }
    if !cli.check_config {
        init_tracing(config.log_format == LogFormat::Json);
    }
    for warning in &config.warnings {
        if cli.check_config {
            eprintln!("herald-gateway: warning: {warning}");
        } else {
            tracing::warn!("{warning}");
        }
    }
    let (verifier, dev_creds) = if config.dev_mode() {
        let (v, c) = dev::credentials(config.auth.leeway_secs);
        (v, Some(c))
    } else {
        match Verifier::from_config(&config.auth) {
            Ok(v) => (v, None),
            Err(e) => {
                eprintln!("herald-gateway: configuration error:\n  - {e}");
                return ExitCode::from(EX_CONFIG);
            }
        }
    };
    if cli.check_config {
        let mode = if config.edge_mode() {
            "edge"
        } else if dev_creds.is_some() {
            "standalone, dev mode"
        } else {
            "standalone"
        };
        drop(verifier);
        println!(
            "herald-gateway {}: configuration OK ({mode}, listen {})",
            herald_gateway::config::VERSION,
            config.listen
        );
        return ExitCode::SUCCESS;
    }
    tracing::info!(
        version = herald_gateway::config::VERSION,
        "herald-gateway starting"
    );
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("herald-gateway: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let listener = match server::bind(config.listen) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("herald-gateway: cannot listen on {}: {e}", config.listen);
                return ExitCode::from(EX_UNAVAILABLE);
            }
        };
        let addr = listener.local_addr().unwrap_or(config.listen);
        if let Some(creds) = &dev_creds {
            if let Err(e) = dev::write_files(&config.data_dir, creds) {
                eprintln!(
                    "herald-gateway: cannot write dev credentials under {}: {e}",
                    config.data_dir.display()
                );
                return ExitCode::from(EX_CONFIG);
            }
            println!("{}", dev::banner(addr, &config.data_dir, creds));
        }
        let dev = dev_creds.is_some();
        let shutdown = CancellationToken::new();
        let store = herald_gateway::standalone::store_path(&config);
        let gateway = match Gateway::new(config, verifier.clone(), dev_creds, shutdown.clone()) {
            Ok(g) => g,
            Err(StartError::Store(e)) => {
                eprintln!(
                    "herald-gateway: cannot open the delayed-notification store {}: {e}",
                    store.display()
                );
                return ExitCode::from(EX_CANTCREAT);
            }
            Err(StartError::ApiKeys(problems)) => {
                print_config_errors("herald-gateway", &problems);
                return ExitCode::from(EX_CONFIG);
            }
        };
        // SIGHUP reloads the JWT keys and the API keys (dev mode has none
        // to reload).
        let api_keys = gateway.api_keys().cloned();
        let reloads = tokio::spawn(on_reload_signal(move || {
            reload_keys(&cli, &verifier, api_keys.as_ref(), dev)
        }));
        let mode = gateway.mode().name();
        tracing::info!(%addr, mode, dev, "herald-gateway listening");
        // systemd (Type=notify): READY=1 once listening and, for an edge,
        // linked to a root (what /readyz asks); STOPPING=1 at the drain.
        let readiness = gateway.readiness();
        let notify = tokio::spawn(announce_ready(
            Notifier::from_env(),
            "herald-gateway",
            move || std::future::ready(readiness()),
            shutdown.clone(),
        ));
        let signals = tokio::spawn(async move {
            wait_for_signal().await;
            shutdown.cancel();
        });
        gateway.serve(listener).await;
        signals.abort();
        reloads.abort();
        // It sent STOPPING=1 when the token fired (serve returns only after).
        let _ = notify.await;
        ExitCode::SUCCESS
    })
}

/// `--print-config`: the configuration in force as TOML, secrets redacted,
/// warnings (deprecated keys) on stderr.
fn print_config(config: &Config) -> ExitCode {
    for warning in &config.warnings {
        eprintln!("herald-gateway: warning: {warning}");
    }
    match config.to_redacted_toml() {
        Ok(text) => {
            println!(
                "# herald-gateway {}: the configuration in force (defaults < file < \
                 environment < flags), secrets \"<redacted>\"\n\n{text}",
                herald_gateway::config::VERSION
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("herald-gateway: cannot print the configuration: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Read the configuration again (file, environment, flags) and use the
/// JWT keys its `[auth]` names and the API keys it lists (`api_keys`,
/// `[[api_key]]`, their files read again); on any problem keep the current
/// keys and log why (a failed API key reload is also counted in
/// `herald_api_key_reloads_total{result="failed"}`). Nothing else of the
/// configuration changes without a restart.
fn reload_keys(cli: &Cli, verifier: &Verifier, api_keys: Option<&ApiKeys>, dev: bool) {
    if dev {
        tracing::warn!("dev mode: no configured keys to reload (restart to leave dev mode)");
        return;
    }
    let failed = |problems: &str| {
        if let Some(keys) = api_keys {
            keys.reload_failed();
        }
        tracing::warn!(
            problems,
            "key reload failed, keeping the current keys: the configuration is invalid"
        );
    };
    let config = match Config::load(cli) {
        Ok(c) if !c.dev_mode() => c,
        Ok(_) => {
            failed("the configuration names no JWT key now");
            return;
        }
        Err(e) => {
            failed(&e.to_string());
            return;
        }
    };
    match verifier.reload(&config.auth) {
        Ok(keys) => tracing::info!(keys, "keys reloaded"),
        Err(error) => {
            tracing::warn!(%error, "key reload failed, keeping the current keys");
        }
    }
    if let Some(keys) = api_keys {
        match config.api_key_set() {
            Ok(set) => {
                let names: Vec<&str> = set.names().collect();
                let names = names.join(",");
                let count = keys.replace(set);
                tracing::info!(api_keys = count, names = %names, "API keys reloaded");
            }
            Err(e) => {
                keys.reload_failed();
                tracing::warn!(problems = %e, "API key reload failed, keeping the current API keys");
            }
        }
    }
}
