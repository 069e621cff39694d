//! Opcodes, messages and close codes.

use bytes::Bytes;

use crate::utf8::Utf8Bytes;

/// A frame's opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpCode {
    /// 0x0: continues a fragmented message.
    Continuation,
    /// 0x1: starts a text (UTF-8) message.
    Text,
    /// 0x2: starts a binary message.
    Binary,
    /// 0x8: close the connection (control).
    Close,
    /// 0x9: ping (control).
    Ping,
    /// 0xA: pong, the answer to a ping (control).
    Pong,
}

impl OpCode {
    /// The 4-bit wire value.
    pub fn as_u8(self) -> u8 {
        match self {
            OpCode::Continuation => 0x0,
            OpCode::Text => 0x1,
            OpCode::Binary => 0x2,
            OpCode::Close => 0x8,
            OpCode::Ping => 0x9,
            OpCode::Pong => 0xA,
        }
    }

    /// The opcode for a 4-bit wire value; `None` for reserved values.
    pub fn from_u8(value: u8) -> Option<OpCode> {
        Some(match value {
            0x0 => OpCode::Continuation,
            0x1 => OpCode::Text,
            0x2 => OpCode::Binary,
            0x8 => OpCode::Close,
            0x9 => OpCode::Ping,
            0xA => OpCode::Pong,
            _ => return None,
        })
    }

    /// Whether this is a control opcode (close, ping, pong).
    pub fn is_control(self) -> bool {
        self.as_u8() & 0x8 != 0
    }
}

/// A complete message from the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// A text message, proven UTF-8.
    Text(Utf8Bytes),
    /// A binary message.
    Binary(Bytes),
    /// A ping; answer with a pong carrying the same payload.
    Ping(Bytes),
    /// A pong.
    Pong(Bytes),
    /// A close, with its code and reason if the payload had them.
    Close(Option<(u16, String)>),
}

/// Close codes (RFC 6455 section 7.4.1) Herald sends or checks.
pub mod close_code {
    /// The purpose of the connection is fulfilled.
    pub const NORMAL: u16 = 1000;
    /// The server is going down or the browser navigated away.
    pub const GOING_AWAY: u16 = 1001;
    /// The peer broke the protocol.
    pub const PROTOCOL_ERROR: u16 = 1002;
    /// A data type the endpoint cannot accept (e.g. binary where text is expected).
    pub const UNSUPPORTED_DATA: u16 = 1003;
    /// A text message was not UTF-8.
    pub const INVALID_PAYLOAD: u16 = 1007;
    /// A message violated the server's policy.
    pub const POLICY_VIOLATION: u16 = 1008;
    /// A message was too big to process.
    pub const MESSAGE_TOO_BIG: u16 = 1009;
    /// The server hit an unexpected condition.
    pub const INTERNAL_ERROR: u16 = 1011;

    /// Whether a peer may send `code` in a close frame: 1000-1003,
    /// 1007-1011 and 3000-4999. (1004-1006 and 1015 are reserved or only
    /// reported locally; 1012-1014 were registered after RFC 6455 and are
    /// not accepted.)
    pub fn is_valid_received(code: u16) -> bool {
        matches!(code, 1000..=1003 | 1007..=1011 | 3000..=4999)
    }
}

/// XORs `payload` with the 4-byte `mask`, eight bytes at a time.
pub(super) fn apply_mask(payload: &mut [u8], mask: [u8; 4]) {
    let [a, b, c, d] = mask;
    let wide = u64::from_ne_bytes([a, b, c, d, a, b, c, d]);
    let mut chunks = payload.chunks_exact_mut(8);
    for chunk in &mut chunks {
        let mut word = [0; 8];
        word.copy_from_slice(chunk);
        chunk.copy_from_slice(&(u64::from_ne_bytes(word) ^ wide).to_ne_bytes());
    }
    // The remainder starts at a multiple of 8, so the mask phase is 0.
    for (byte, m) in chunks.into_remainder().iter_mut().zip(mask.iter().cycle()) {
        *byte ^= m;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opcodes_round_trip() {
        for op in [
            OpCode::Continuation,
            OpCode::Text,
            OpCode::Binary,
            OpCode::Close,
            OpCode::Ping,
            OpCode::Pong,
        ] {
            assert_eq!(OpCode::from_u8(op.as_u8()), Some(op));
            assert_eq!(op.is_control(), op.as_u8() >= 8);
        }
        for reserved in [3, 4, 5, 6, 7, 0xB, 0xC, 0xD, 0xE, 0xF] {
            assert_eq!(OpCode::from_u8(reserved), None);
        }
    }

    #[test]
    fn masking_matches_the_bytewise_definition() {
        let mask = [0x12, 0x34, 0x56, 0x78];
        for len in 0..40 {
            let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut fast = data.clone();
            apply_mask(&mut fast, mask);
            let slow: Vec<u8> = data
                .iter()
                .enumerate()
                .map(|(i, b)| b ^ mask[i % 4])
                .collect();
            assert_eq!(fast, slow);
        }
    }

    #[test]
    fn received_close_codes() {
        for ok in [1000, 1001, 1002, 1003, 1007, 1011, 3000, 4999] {
            assert!(close_code::is_valid_received(ok), "{ok}");
        }
        for bad in [0, 999, 1004, 1005, 1006, 1012, 1015, 2999, 5000, u16::MAX] {
            assert!(!close_code::is_valid_received(bad), "{bad}");
        }
    }
}
