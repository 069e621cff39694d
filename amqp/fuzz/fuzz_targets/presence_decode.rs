//! Arbitrary headers and bodies read as an edge's presence report never
//! make a router panic, and what it reads stays within the bounds and
//! reads back the same from what an edge would send.
//!
//! The check itself is `checks::presence_decode`, which the stable corpus
//! replay (`amqp/tests/fuzz_corpus.rs`) runs too.

#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::presence_decode(data));
