//! Installing a peer: its script beside the bench (`bench/peers/{peer}/install.sh`), run only
//! when what it installs is missing, and checked afterwards. The script's output goes to the
//! bench's stderr: stdout is the report's (`--json`).

use crate::harness::outcome::BenchError;

/// Runs `{peers_dir}/{script}` unless `installed()`, and checks it installed `what`.
pub(crate) async fn run(
    peers_dir: &std::path::Path,
    script: &str,
    installed: &(dyn Fn() -> bool + Sync),
    what: &str,
) -> Result<(), BenchError> {
    if installed() {
        return Ok(());
    }
    let script = peers_dir.join(script);
    eprintln!("herald-bench: installing {what} ({})", script.display());
    let status = tokio::process::Command::new("sh")
        .arg(&script)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::from(std::io::stderr()))
        .status()
        .await
        .map_err(|e| BenchError::Failed(format!("{}: {e}", script.display())))?;
    if !status.success() || !installed() {
        return Err(BenchError::Failed(format!(
            "{} ({status}) did not install {what}",
            script.display()
        )));
    }
    Ok(())
}
