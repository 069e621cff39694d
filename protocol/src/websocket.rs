//! The server side of RFC 6455 WebSocket framing (<https://www.rfc-editor.org/rfc/rfc6455>).
//!
//! # Layout
//! - `handshake`: [`GUID`] and [`accept_key`] for the HTTP upgrade.
//! - `frame`: [`OpCode`], [`Message`] and the [`close_code`] numbers.
//! - `decode`: [`Decoder`], incremental decoding of masked client frames
//!   with reassembly of fragmented messages, and [`WsError`].
//! - `encode`: unmasked server frames ([`encode_header`], [`encode_frame`],
//!   [`encode_close`]) and masked client frames for tests
//!   ([`encode_masked_frame`]).
//!
//! # Frame format
//! ```text
//! byte 0: FIN RSV1 RSV2 RSV3 opcode(4)
//! byte 1: MASK len7            len7 126 => 2-byte length, 127 => 8-byte length
//! [extended length] [4-byte mask key if MASK] payload
//! ```
//! No extensions are negotiated, so RSV bits must be zero.

mod decode;
mod encode;
mod frame;
mod handshake;

pub use decode::{Decoder, WsError};
pub use encode::{
    MAX_HEADER_LEN, encode_close, encode_frame, encode_header, encode_masked_frame, header_len,
};
pub use frame::{Message, OpCode, close_code};
pub use handshake::{GUID, accept_key};
