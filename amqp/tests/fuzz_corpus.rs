//! The AMQP side's fuzz corpora, replayed on stable: every file of
//! `amqp/fuzz/corpus/<target>/` goes through the check the cargo-fuzz
//! target of that name runs (`amqp/fuzz/checks.rs`). The files are small,
//! hand-made inputs; a crash input a fuzzer finds is added here so it
//! stays fixed.

#[path = "../fuzz/checks.rs"]
mod checks;

use std::path::Path;

/// Run every file of `corpus/<target>/` through `check`.
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
        assert!(outcome.is_ok(), "{} fails", file.display());
    }
}

#[test]
fn wire_frames_corpus() {
    replay("wire_frames", checks::wire_frames);
}

#[test]
fn guarded_stream_corpus() {
    replay("guarded_stream", checks::guarded_stream);
}

#[test]
fn wire_handshake_corpus() {
    replay("wire_handshake", checks::wire_handshake);
}

#[test]
fn presence_decode_corpus() {
    replay("presence_decode", checks::presence_decode);
}

/// The seeds reach what they are named for: `ok-*` is read as a report,
/// `bad-*` is refused (or is not a header table at all).
#[test]
fn presence_seeds_are_read_or_refused_as_named() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/presence_decode");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let read = checks::presence_read(&std::fs::read(&path).unwrap());
        if name.starts_with("ok-") {
            assert!(matches!(read, Some(Ok(_))), "{name}: {read:?}");
        } else {
            assert!(name.starts_with("bad-"), "{name}: named ok-* or bad-*");
            assert!(!matches!(read, Some(Ok(_))), "{name}: {read:?}");
        }
    }
    let read = checks::presence_read(&std::fs::read(dir.join("ok-detail-missed-since")).unwrap());
    let report = read.unwrap().unwrap();
    assert_eq!(report.detail[0].missed_since_ms, 1_795_000_000_000);
}
