//! Arbitrary bytes, fed to the STOMP decoder in arbitrary chunks, never make
//! it panic; `Ok(None)` and errors consume nothing; the buffer stays within
//! the frame limit; every 1.2 frame decoded re-encodes to itself.
//!
//! The first input byte picks the version, the limits and the chunk size.

#![no_main]

use bytes::BytesMut;
use herald_protocol::stomp::{self, Decoded, Frame, Limits, Version};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let version = match control % 3 {
        0 => Version::V1_0,
        1 => Version::V1_1,
        _ => Version::V1_2,
    };
    let limits = if control & 0x04 != 0 {
        Limits {
            max_frame_bytes: 128,
            max_headers: 4,
            max_header_bytes: 32,
        }
    } else {
        Limits::default()
    };
    let chunk = usize::from(control >> 3) + 1;

    let mut buf = BytesMut::new();
    for piece in rest.chunks(chunk) {
        buf.extend_from_slice(piece);
        loop {
            let before = buf.len();
            match stomp::decode(&mut buf, version, &limits) {
                Ok(Some(item)) => {
                    assert!(buf.len() < before);
                    if let Decoded::Frame(frame) = item {
                        check_reencode(&frame, version);
                    }
                }
                Ok(None) => {
                    assert_eq!(buf.len(), before);
                    assert!(buf.len() <= limits.max_frame_bytes);
                    break;
                }
                Err(_) => {
                    assert_eq!(buf.len(), before);
                    return;
                }
            }
        }
    }
});

fn check_reencode(frame: &Frame, version: Version) {
    if version != Version::V1_2 || !frame.command.escapes_headers() {
        return;
    }
    let mut out = BytesMut::new();
    stomp::encode(frame, version, &mut out);
    let roomy = Limits {
        max_frame_bytes: usize::MAX,
        max_headers: usize::MAX,
        max_header_bytes: usize::MAX,
    };
    let mut expected = frame.clone();
    if !frame.body.is_empty() && frame.header("content-length").is_none() {
        expected
            .headers
            .push(("content-length".into(), frame.body.len().to_string()));
    }
    assert_eq!(
        stomp::decode(&mut out, version, &roomy),
        Ok(Some(Decoded::Frame(expected)))
    );
    assert!(out.is_empty());
}
