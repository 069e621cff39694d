//! Arbitrary bytes, fed to the STOMP decoder in arbitrary chunks, never make
//! it panic; `Ok(None)` and errors consume nothing; the buffer stays within
//! the frame limit; every 1.2 frame decoded re-encodes to itself.
//!
//! The first input byte picks the version, the limits and the chunk size.
//!
//! The check itself is `checks::stomp_decode`, which the stable corpus replay
//! (`protocol/tests/fuzz_corpus.rs`) runs too.

#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::stomp_decode(data));
