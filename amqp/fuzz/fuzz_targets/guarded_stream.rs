//! See `checks::guarded_stream` (amqp/fuzz/checks.rs), which the stable corpus replay
//! (`amqp/tests/fuzz_corpus.rs`) runs too.

#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::guarded_stream(data));
