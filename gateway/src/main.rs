//! `herald-gateway`: parse flags, load configuration, run until a signal.

use std::process::ExitCode;

use clap::Parser;
use herald_gateway::Gateway;
use herald_gateway::auth::Verifier;
use herald_gateway::config::{Cli, Config, LogFormat};
use herald_gateway::{dev, server};
use tokio_util::sync::CancellationToken;

/// sysexits.h EX_CONFIG: the configuration is unusable.
const EX_CONFIG: u8 = 78;
/// sysexits.h EX_UNAVAILABLE: a needed resource (the port) is unavailable.
const EX_UNAVAILABLE: u8 = 69;

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => tracing::info!(signal = "SIGTERM", "shutting down"),
                _ = int.recv() => tracing::info!(signal = "SIGINT", "shutting down"),
            }
        }
        _ => {
            tracing::error!("cannot install signal handlers; stop with SIGKILL");
            std::future::pending::<()>().await;
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match Config::load(&cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("herald-gateway: configuration error:");
            for p in &e.problems {
                eprintln!("  - {p}");
            }
            return ExitCode::from(EX_CONFIG);
        }
    };
    init_tracing(config.log_format);
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
        let mode = if config.edge_mode() {
            "edge"
        } else {
            "standalone"
        };
        tracing::info!(%addr, mode, dev = dev_creds.is_some(), "herald-gateway listening");
        let shutdown = CancellationToken::new();
        let gateway = Gateway::new(config, verifier, dev_creds, shutdown.clone());
        let signals = tokio::spawn(async move {
            wait_for_signal().await;
            shutdown.cancel();
        });
        gateway.serve(listener).await;
        signals.abort();
        ExitCode::SUCCESS
    })
}
