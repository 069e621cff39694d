//! What the bench's end-to-end tests share.

use std::path::PathBuf;

/// The `herald-gateway` to run: `HERALD_GATEWAY_BIN`, or the workspace's build beside this
/// bench's binary.
pub(crate) fn gateway_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("HERALD_GATEWAY_BIN") {
        return PathBuf::from(bin);
    }
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_herald-bench"));
    let gateway = bench.with_file_name("herald-gateway");
    assert!(
        gateway.exists(),
        "{} is missing: build it first (cargo build -p herald-gateway), or set HERALD_GATEWAY_BIN",
        gateway.display()
    );
    gateway
}
