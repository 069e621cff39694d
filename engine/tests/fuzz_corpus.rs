//! The engine's fuzz corpora, replayed on stable: every file of
//! `engine/fuzz/corpus/<target>/` goes through the check the cargo-fuzz
//! target of that name runs (`engine/fuzz/checks.rs`). The files are
//! small, hand-written inputs; a crash input a fuzzer finds is added here
//! so it stays fixed.

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
fn publish_decode_corpus() {
    replay("publish_decode", checks::publish_decode);
}

#[test]
fn record_decode_corpus() {
    replay("record_decode", checks::record_decode);
}

/// The record seeds reach what they are named for: each valid one decodes
/// (with its target), each broken one is refused.
#[test]
fn record_seeds_are_what_their_names_say() {
    use bytes::Bytes;
    use herald_engine::schedule::record;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/record_decode");
    let read = |name: &str| {
        let raw = std::fs::read(dir.join(name)).unwrap();
        record::decode(Bytes::from(raw))
    };
    for ok in [
        "v1-when-online-topic-ttl",
        "v1-global-no-topic",
        "v2-default-target",
        "v2-callback-url-only",
        "v2-recheck-url-only",
    ] {
        assert!(read(ok).is_ok(), "{ok}: {:?}", read(ok));
    }
    let both = read("v2-both-urls-not-browsers").unwrap().target;
    assert_eq!(
        (
            both.callback_url.as_deref(),
            both.recheck_url.as_deref(),
            both.browsers
        ),
        (
            Some("https://cb.example/hook"),
            Some("https://cb.example/check?x=1"),
            false
        )
    );
    for bad in [
        "v2-unknown-target-flag",
        "v2-url-truncated",
        "v2-url-not-utf8",
        "v2-trailing-byte",
        "v2-no-target",
        "version-9",
        "empty",
    ] {
        assert!(read(bad).is_err(), "{bad} decodes");
    }
}
