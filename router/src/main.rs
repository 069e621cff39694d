//! `herald-router`: parse flags, load configuration, run until a signal.

use std::process::ExitCode;

use clap::Parser;
use herald_engine::process::{
    EX_CONFIG, EX_UNAVAILABLE, init_tracing, print_config_errors, wait_for_signal,
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
    if cli.check_config {
        println!(
            "herald-router {}: configuration OK (listen {}, delayed notifications {})",
            herald_router::VERSION,
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
    tracing::info!(version = herald_router::VERSION, "herald-router starting");
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
        server::run(config, listener, shutdown, store).await;
        signals.abort();
        ExitCode::SUCCESS
    })
}
