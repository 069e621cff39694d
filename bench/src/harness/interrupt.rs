//! Ctrl-C and `SIGTERM`: a run that gets either stops measuring, stops what it started the way
//! each thing is stopped (a peer's own `stop`: nginx's master takes its workers with it), cleans
//! up, and reports what it measured so far. Without this a `SIGTERM` (a CI job's timeout, `kill`)
//! ended the bench at once and left its servers running.

use std::sync::OnceLock;

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

use crate::harness::outcome::BenchError;

/// What [`interruptible`] answers when the run was interrupted.
pub(crate) const INTERRUPTED: &str = "interrupted";

/// Fires on the first Ctrl-C (`SIGINT`) or `SIGTERM` this process gets. The first call starts
/// listening (from then on neither signal ends the process by itself): call it before starting
/// anything that must be stopped.
pub(crate) fn interrupt() -> CancellationToken {
    static TOKEN: OnceLock<CancellationToken> = OnceLock::new();
    TOKEN
        .get_or_init(|| {
            let token = CancellationToken::new();
            let fire = token.clone();
            let mut term = signal(SignalKind::terminate());
            tokio::spawn(async move {
                let terminated = async {
                    match term.as_mut() {
                        Ok(term) => {
                            term.recv().await;
                        }
                        Err(_) => std::future::pending::<()>().await,
                    }
                };
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = terminated => {}
                }
                eprintln!("herald-bench: interrupted; stopping what was started");
                fire.cancel();
            });
            token
        })
        .clone()
}

/// Runs `work` unless the run is interrupted first (then the caller still cleans up).
pub(crate) async fn interruptible<T>(
    work: impl Future<Output = Result<T, BenchError>>,
) -> Result<T, BenchError> {
    let interrupt = interrupt();
    tokio::select! {
        r = work => r,
        _ = interrupt.cancelled() => Err(BenchError::Failed(INTERRUPTED.into())),
    }
}
