//! Arbitrary bytes given to the bundle `decode` never make it panic, and
//! whatever it decodes encodes to a bundle that decodes to the same
//! notifications.
//!
//! The check itself is `checks::bundle_decode`, which the stable corpus replay
//! (`protocol/tests/fuzz_corpus.rs`) runs too.

#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::bundle_decode(data));
