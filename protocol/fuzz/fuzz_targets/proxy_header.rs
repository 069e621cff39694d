//! Arbitrary bytes given to the PROXY protocol header parser never make it
//! panic or ask for more than its limit, and what it accepts parses the
//! same from its own bytes.
//!
//! The check itself is `checks::proxy_header`, which the stable corpus replay
//! (`protocol/tests/fuzz_corpus.rs`) runs too.

#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::proxy_header(data));
