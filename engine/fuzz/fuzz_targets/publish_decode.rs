//! Arbitrary bodies given to the HTTP publish API's decoding (JSON, one
//! notification or a batch; or a raw payload with its fields in the query
//! string) never make it panic, and what it accepts is valid.
//!
//! The check itself is `checks::publish_decode`, which the stable corpus
//! replay (`engine/tests/fuzz_corpus.rs`) runs too.

#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::publish_decode(data));
