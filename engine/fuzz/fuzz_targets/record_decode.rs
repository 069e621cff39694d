//! Arbitrary bytes read as a delayed entry's stored record (versions 1
//! and 2, the second with the notification's own callback target) never
//! make the decoder panic, and what it reads encodes back to the same
//! entry.
//!
//! The check itself is `checks::record_decode`, which the stable corpus
//! replay (`engine/tests/fuzz_corpus.rs`) runs too.

#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::record_decode(data));
