//! Arbitrary bytes given to the SockJS `decode_messages` never make it
//! panic; only an empty input is `Empty`; allowing a single string only
//! widens what is accepted; decoded messages re-encode (`encode_array`) to
//! a frame that decodes to them again; and UTF-8 input, escaped with
//! `escape_into`, decodes back to itself with `escaped_len` exact.
//!
//! The check itself is `checks::sockjs_decode`, which the stable corpus replay
//! (`protocol/tests/fuzz_corpus.rs`) runs too.

#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::sockjs_decode(data));
