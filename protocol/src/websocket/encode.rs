//! Server frames (unmasked, RFC 6455 5.1) and masked client frames for tests.

use bytes::{BufMut, BytesMut};

use super::OpCode;
use super::frame::apply_mask;

/// Longest close reason: a control payload is at most 125 bytes, two of
/// which are the code.
const MAX_CLOSE_REASON: usize = 123;

/// Server frame header (FIN set, unmasked) for a payload of `len` bytes: 2,
/// 4 or 10 bytes.
///
/// Herald writes the header and the start of a STOMP frame, then a shared
/// body, so the payload itself is written by the caller. `out` may be a
/// `BytesMut` or a slice of exactly [`header_len`] bytes.
pub fn encode_header(opcode: OpCode, len: usize, out: &mut impl BufMut) {
    write_header(true, opcode, None, len, out);
}

/// Longest server frame header.
pub const MAX_HEADER_LEN: usize = 10;

/// Bytes of the server frame header for a payload of `len` bytes.
pub fn header_len(len: usize) -> usize {
    match len {
        0..=125 => 2,
        126..=0xFFFF => 4,
        _ => MAX_HEADER_LEN,
    }
}

/// A whole unmasked server frame.
pub fn encode_frame(opcode: OpCode, payload: &[u8], out: &mut BytesMut) {
    out.reserve(10 + payload.len());
    encode_header(opcode, payload.len(), out);
    out.extend_from_slice(payload);
}

/// A close frame with code and reason (reason truncated at a char boundary
/// to fit 123 bytes).
///
/// Codes 1005, 1006 and 1015 must not be sent; that is the caller's
/// responsibility.
pub fn encode_close(code: u16, reason: &str, out: &mut BytesMut) {
    let mut end = reason.len().min(MAX_CLOSE_REASON);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let reason = &reason.as_bytes()[..end];
    encode_header(OpCode::Close, 2 + reason.len(), out);
    out.put_u16(code);
    out.extend_from_slice(reason);
}

/// A masked client frame, as a browser would send it: for tests and
/// fuzzing. `fin` false makes a non-final fragment.
pub fn encode_masked_frame(
    fin: bool,
    opcode: OpCode,
    payload: &[u8],
    mask: [u8; 4],
    out: &mut BytesMut,
) {
    out.reserve(14 + payload.len());
    write_header(fin, opcode, Some(mask), payload.len(), out);
    let start = out.len();
    out.extend_from_slice(payload);
    apply_mask(&mut out[start..], mask);
}

fn write_header(
    fin: bool,
    opcode: OpCode,
    mask: Option<[u8; 4]>,
    len: usize,
    out: &mut impl BufMut,
) {
    out.put_u8(u8::from(fin) << 7 | opcode.as_u8());
    let mask_bit = if mask.is_some() { 0x80 } else { 0 };
    match len {
        0..=125 => out.put_u8(mask_bit | len as u8),
        126..=0xFFFF => {
            out.put_u8(mask_bit | 126);
            out.put_u16(len as u16);
        }
        _ => {
            out.put_u8(mask_bit | 127);
            out.put_u64(len as u64);
        }
    }
    if let Some(mask) = mask {
        out.put_slice(&mask);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(len: usize) -> Vec<u8> {
        let mut out = BytesMut::new();
        encode_header(OpCode::Binary, len, &mut out);
        out.to_vec()
    }

    #[test]
    fn header_sizes() {
        assert_eq!(header(0), [0x82, 0]);
        assert_eq!(header(125), [0x82, 125]);
        assert_eq!(header(126), [0x82, 126, 0, 126]);
        assert_eq!(header(0xFFFF), [0x82, 126, 0xFF, 0xFF]);
        assert_eq!(header(0x10000), [0x82, 127, 0, 0, 0, 0, 0, 1, 0, 0]);
        for len in [0, 125, 126, 0xFFFF, 0x10000] {
            assert_eq!(header_len(len), header(len).len(), "{len}");
            // Into a slice of exactly that length, as into a buffer.
            let mut slot = [0u8; MAX_HEADER_LEN];
            let mut rest = &mut slot[..header_len(len)];
            encode_header(OpCode::Binary, len, &mut rest);
            assert!(rest.is_empty());
            assert_eq!(&slot[..header_len(len)], &header(len)[..]);
        }
    }

    #[test]
    fn whole_frames() {
        let mut out = BytesMut::new();
        encode_frame(OpCode::Text, b"hi", &mut out);
        assert_eq!(&out[..], b"\x81\x02hi");
    }

    #[test]
    fn close_reason_is_truncated_at_a_char_boundary() {
        let mut out = BytesMut::new();
        encode_close(1000, "bye", &mut out);
        assert_eq!(&out[..], b"\x88\x05\x03\xe8bye");

        // 122 ASCII bytes then a 2-byte char: the char would end at 124.
        let reason = format!("{}é", "a".repeat(122));
        out.clear();
        encode_close(1009, &reason, &mut out);
        assert_eq!(out[1], 2 + 122);
        assert_eq!(&out[4..], "a".repeat(122).as_bytes());
    }

    #[test]
    fn masked_frames() {
        let mut out = BytesMut::new();
        // RFC 6455 5.7: a masked "Hello".
        encode_masked_frame(
            true,
            OpCode::Text,
            b"Hello",
            [0x37, 0xfa, 0x21, 0x3d],
            &mut out,
        );
        assert_eq!(
            &out[..],
            [
                0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58
            ]
        );
        out.clear();
        encode_masked_frame(
            false,
            OpCode::Continuation,
            &[0; 300],
            [1, 2, 3, 4],
            &mut out,
        );
        assert_eq!(&out[..4], [0x00, 0xFE, 1, 44]);
    }
}
