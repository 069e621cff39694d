//! Arbitrary bytes from a broker, read by an edge's root link
//! (`herald_amqp::wire`): frames and deliveries, never a panic, never a
//! delivery above the body bound.
//!
//! The check itself is `checks::wire_frames`, which the stable corpus
//! replay (`amqp/tests/fuzz_corpus.rs`) runs too.

#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::wire_frames(data));
