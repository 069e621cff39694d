//! Arbitrary bytes, fed to the WebSocket decoder in arbitrary chunks, never
//! make it panic, every message consumes bytes, and the partial message
//! never exceeds the limit.
//!
//! The first input byte picks the message limit and the chunk size.
//!
//! The check itself is `checks::websocket_decode`, which the stable corpus replay
//! (`protocol/tests/fuzz_corpus.rs`) runs too.

#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::websocket_decode(data));
