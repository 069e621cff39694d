//! Arbitrary bytes, fed to the WebSocket decoder in arbitrary chunks, never
//! make it panic, every message consumes bytes, and the partial message
//! never exceeds the limit.
//!
//! The first input byte picks the message limit and the chunk size.

#![no_main]

use bytes::BytesMut;
use herald_protocol::websocket::Decoder;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let max = if control & 1 != 0 { 64 } else { 1 << 16 };
    let chunk = usize::from(control >> 1) + 1;

    let mut decoder = Decoder::new(max);
    let mut buf = BytesMut::new();
    for piece in rest.chunks(chunk) {
        buf.extend_from_slice(piece);
        loop {
            let before = buf.len();
            match decoder.decode(&mut buf) {
                Ok(Some(_)) => assert!(buf.len() < before),
                Ok(None) => break,
                Err(_) => return,
            }
            assert!(decoder.buffered() <= max);
        }
    }
});
