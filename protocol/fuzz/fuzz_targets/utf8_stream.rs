//! Arbitrary bytes, fed to the streaming UTF-8 validator in up to three
//! pieces, get the verdict of the whole (see `checks::utf8_stream`).
//!
//! The check itself is `checks::utf8_stream`, which the stable corpus replay
//! (`protocol/tests/fuzz_corpus.rs`) runs too.

#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::utf8_stream(data));
