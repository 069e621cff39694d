//! The publish decoder's fuzz corpus, replayed on stable: every file of
//! `engine/fuzz/corpus/publish_decode/` goes through the check the
//! cargo-fuzz target `publish_decode` runs (`engine/fuzz/checks.rs`). The
//! files are small, hand-written requests; a crash input a fuzzer finds is
//! added here so it stays fixed.

#[path = "../fuzz/checks.rs"]
mod checks;

use std::path::Path;

#[test]
fn publish_decode_corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/publish_decode");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} has no corpus files", dir.display());
    for file in files {
        let data = std::fs::read(&file).unwrap();
        let outcome = std::panic::catch_unwind(|| checks::publish_decode(&data));
        assert!(outcome.is_ok(), "{} fails", file.display());
    }
}
