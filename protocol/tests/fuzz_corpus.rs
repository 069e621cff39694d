//! The fuzz targets' seed corpora, replayed on stable: every file of
//! `protocol/fuzz/corpus/<target>/` goes through the check that the
//! cargo-fuzz target of that name runs (`protocol/fuzz/checks.rs`, shared
//! with `protocol/fuzz/fuzz_targets/`). The corpus files are small,
//! hand-written inputs that reach each decoder's states; a crash input a
//! fuzzer finds is added here so it stays fixed.

#[path = "../fuzz/checks.rs"]
mod checks;

use std::path::Path;

/// Runs `check` on every file of the target's corpus; there must be some.
fn replay(target: &str, check: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} has no corpus files", dir.display());
    for file in files {
        let data = std::fs::read(&file).unwrap();
        let outcome = std::panic::catch_unwind(|| check(&data));
        assert!(outcome.is_ok(), "{target}: {} fails", file.display());
    }
}

#[test]
fn stomp_decode_corpus() {
    replay("stomp_decode", checks::stomp_decode);
}

#[test]
fn websocket_decode_corpus() {
    replay("websocket_decode", checks::websocket_decode);
}

#[test]
fn sockjs_decode_corpus() {
    replay("sockjs_decode", checks::sockjs_decode);
}

#[test]
fn bundle_decode_corpus() {
    replay("bundle_decode", checks::bundle_decode);
}

#[test]
fn utf8_stream_corpus() {
    replay("utf8_stream", checks::utf8_stream);
}

#[test]
fn proxy_header_corpus() {
    replay("proxy_header", checks::proxy_header);
}
