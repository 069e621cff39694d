//! Process plumbing shared by Herald's binaries (`herald-router`,
//! `herald-gateway`): exit codes, logging set-up, the shutdown signal, the
//! reload signal, the version string ([`crate::version!`]), and the process
//! metrics ([`metrics`]).

pub mod metrics;
pub mod notify;

/// The version of the binary that calls it and the commit it was built
/// from, as `--version` says: `0.1.0 (commit 0123456789ab)`, a string
/// literal. A macro, so that it reads the calling crate's
/// `CARGO_PKG_VERSION` and `HERALD_COMMIT` (which its build script,
/// `scripts/build-version.rs`, sets), not the engine's.
#[macro_export]
macro_rules! version {
    () => {
        concat!(
            env!("CARGO_PKG_VERSION"),
            " (commit ",
            env!("HERALD_COMMIT"),
            ")"
        )
    };
}

/// sysexits.h EX_CONFIG: the configuration is unusable.
pub const EX_CONFIG: u8 = 78;
/// sysexits.h EX_UNAVAILABLE: a needed resource (the port) is unavailable.
pub const EX_UNAVAILABLE: u8 = 69;
/// sysexits.h `EX_CANTCREAT`: a file Herald needs (its store) cannot be
/// created or opened.
pub const EX_CANTCREAT: u8 = 73;

/// lapin logs every message the broker returns (an unroutable forward: no
/// edge is bound) at WARN with its whole body. Herald counts those in
/// `herald_amqp_unroutable_total` instead; payloads stay out of the logs.
const QUIET_RETURNS: &str = "lapin::returned_messages=off";

/// Structured logs to stdout, levels from `RUST_LOG` (default `info`), as
/// text or one JSON object per line. Text is coloured only when stdout is a
/// terminal (and `NO_COLOR` is unset), so a log written to a file or the
/// journal carries no escape codes.
pub fn init_tracing(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let filter = match QUIET_RETURNS.parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    };
    let colour = std::io::IsTerminal::is_terminal(&std::io::stdout())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Print every configuration problem for `program`.
pub fn print_config_errors(program: &str, problems: &[String]) {
    eprintln!("{program}: configuration error:");
    for p in problems {
        eprintln!("  - {p}");
    }
}

/// Resolve on SIGTERM or SIGINT (logged); never resolves when the handlers
/// cannot be installed (logged as an error).
pub async fn wait_for_signal() {
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

/// Call `reload` on every SIGHUP (logged), forever; run it as a task and
/// abort it at shutdown. Installing the handler also keeps SIGHUP from
/// killing the process (its default action). When the handler cannot be
/// installed this logs a warning and never resolves.
pub async fn on_reload_signal(mut reload: impl FnMut()) {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::hangup()) {
        Ok(mut hup) => {
            while hup.recv().await.is_some() {
                tracing::info!(signal = "SIGHUP", "reloading");
                reload();
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot install the SIGHUP handler: reloading needs a restart");
            std::future::pending::<()>().await;
        }
    }
}

/// `url` with the password replaced by `***`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let userinfo = &rest[..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{scheme}://{user}:***{}", &rest[at..])
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("amqp://guest:guest@127.0.0.1:5672/%2f"),
            "amqp://guest:***@127.0.0.1:5672/%2f"
        );
        assert_eq!(
            redact("amqps://u:p@ss@host/v?heartbeat=10"),
            "amqps://u:***@host/v?heartbeat=10"
        );
        assert_eq!(redact("amqp://host:5672"), "amqp://host:5672");
        assert_eq!(redact("not a url"), "not a url");
    }
}
