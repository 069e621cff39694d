//! `herald-gateway`: parse flags, load configuration, run until a signal.

use std::process::ExitCode;

use clap::Parser;
use herald_engine::process::{
    EX_CANTCREAT, EX_CONFIG, EX_UNAVAILABLE, init_tracing, on_reload_signal, print_config_errors,
    wait_for_signal,
};
use herald_gateway::Gateway;
use herald_gateway::auth::Verifier;
use herald_gateway::config::{Cli, Config, LogFormat};
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
            herald_gateway::VERSION,
            config.listen
        );
        return ExitCode::SUCCESS;
    }
    tracing::info!(version = herald_gateway::VERSION, "herald-gateway starting");
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
        // SIGHUP reloads the keys (dev mode has none to reload).
        let reload_verifier = verifier.clone();
        let reloads = tokio::spawn(on_reload_signal(move || {
            reload_keys(&cli, &reload_verifier, dev)
        }));
        let shutdown = CancellationToken::new();
        let store = herald_gateway::delayed::store_path(&config);
        let gateway = match Gateway::new(config, verifier, dev_creds, shutdown.clone()) {
            Ok(g) => g,
            Err(e) => {
                eprintln!(
                    "herald-gateway: cannot open the delayed-notification store {}: {e}",
                    store.display()
                );
                return ExitCode::from(EX_CANTCREAT);
            }
        };
        let mode = gateway.mode().name();
        tracing::info!(%addr, mode, dev, "herald-gateway listening");
        let signals = tokio::spawn(async move {
            wait_for_signal().await;
            shutdown.cancel();
        });
        gateway.serve(listener).await;
        signals.abort();
        reloads.abort();
        ExitCode::SUCCESS
    })
}

/// Read the configuration again (file, environment, flags) and use the
/// keys its `[auth]` names; on any problem keep the current keys and log
/// why. Nothing else of the configuration changes without a restart.
fn reload_keys(cli: &Cli, verifier: &Verifier, dev: bool) {
    if dev {
        tracing::warn!("dev mode: no configured keys to reload (restart to leave dev mode)");
        return;
    }
    let config = match Config::load(cli) {
        Ok(c) if !c.dev_mode() => c,
        Ok(_) => {
            tracing::warn!(
                "key reload failed, keeping the current keys: the configuration names no JWT key now"
            );
            return;
        }
        Err(e) => {
            tracing::warn!(problems = %e, "key reload failed, keeping the current keys: the configuration is invalid");
            return;
        }
    };
    match verifier.reload(&config.auth) {
        Ok(keys) => tracing::info!(keys, "keys reloaded"),
        Err(error) => {
            tracing::warn!(%error, "key reload failed, keeping the current keys");
        }
    }
}
