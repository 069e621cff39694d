//! Arbitrary bytes given to the SockJS `decode_messages` never make it
//! panic; only an empty input is `Empty`; allowing a single string only
//! widens what is accepted; decoded messages re-encode (`encode_array`) to
//! a frame that decodes to them again; and UTF-8 input, escaped with
//! `escape_into`, decodes back to itself with `escaped_len` exact.

#![no_main]

use bytes::BytesMut;
use herald_protocol::sockjs::{
    DecodeError, decode_messages, encode_array, encoded_array_len, escape_into, escaped_len,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let strict = decode_messages(data, false);
    let loose = decode_messages(data, true);
    if data.is_empty() {
        assert_eq!(strict, Err(DecodeError::Empty));
        assert_eq!(loose, Err(DecodeError::Empty));
        return;
    }
    assert_ne!(strict, Err(DecodeError::Empty));
    assert_ne!(loose, Err(DecodeError::Empty));
    if strict.is_ok() {
        assert_eq!(loose, strict);
    }
    if let Ok(messages) = &loose {
        let refs: Vec<&str> = messages.iter().map(String::as_str).collect();
        let mut out = BytesMut::new();
        encode_array(&refs, &mut out);
        assert_eq!(out.len(), encoded_array_len(&refs));
        assert_eq!(decode_messages(&out[1..], false).as_ref(), Ok(messages));
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let mut out = BytesMut::from(&b"\""[..]);
        escape_into(text, &mut out);
        assert_eq!(out.len() - 1, escaped_len(text));
        out.extend_from_slice(b"\"");
        assert_eq!(decode_messages(&out, true), Ok(vec![text.to_owned()]));
    }
});
