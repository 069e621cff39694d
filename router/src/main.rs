//! `herald-router`: parse flags, load configuration, run until a signal.

use std::process::ExitCode;

use clap::Parser;
use herald_router::config::{Cli, Config, LogFormat};
use herald_router::server;
use tokio_util::sync::CancellationToken;

/// sysexits.h EX_CONFIG: the configuration is unusable.
const EX_CONFIG: u8 = 78;
/// sysexits.h EX_UNAVAILABLE: a needed resource (the port) is unavailable.
const EX_UNAVAILABLE: u8 = 69;

/// lapin logs every message the broker returns (an unroutable forward: no
/// edge is bound) at WARN with its whole body. Herald counts those in
/// `herald_amqp_unroutable_total` instead; payloads stay out of the logs.
const QUIET_RETURNS: &str = "lapin::returned_messages=off";

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let filter = match QUIET_RETURNS.parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    };
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
            eprintln!("herald-router: configuration error:");
            for p in &e.problems {
                eprintln!("  - {p}");
            }
            return ExitCode::from(EX_CONFIG);
        }
    };
    init_tracing(config.log_format);
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
        let listener = match tokio::net::TcpListener::bind(config.listen).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("herald-router: cannot listen on {}: {e}", config.listen);
                return ExitCode::from(EX_UNAVAILABLE);
            }
        };
        let addr = listener.local_addr().unwrap_or(config.listen);
        tracing::info!(%addr, broker = %herald_router::amqp::supervisor::redact(&config.amqp.url), "herald-router listening");
        let shutdown = CancellationToken::new();
        let signals = tokio::spawn({
            let shutdown = shutdown.clone();
            async move {
                wait_for_signal().await;
                shutdown.cancel();
            }
        });
        server::run(config, listener, shutdown).await;
        signals.abort();
        ExitCode::SUCCESS
    })
}
