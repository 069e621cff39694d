//! SockJS 0.3.3 framing (<https://github.com/sockjs/sockjs-protocol>), the
//! fallback for browsers that cannot keep a WebSocket open.
//!
//! # Layout
//! - `frame`: the frames the server sends ([`OPEN`], [`HEARTBEAT`],
//!   [`encode_array`], [`encode_close`], the [`ARRAY_OPEN`]/[`ARRAY_CLOSE`]
//!   pieces for a shared body) and the usual [`close`] codes.
//! - `escape`: [`escape_into`] and [`escaped_len`], JSON string escaping
//!   with the characters SockJS requires escaped (the set and its source
//!   are in [`escape_into`]'s docs).
//! - `decode`: [`decode_messages`], what a client sends, and
//!   [`DecodeError`].
//! - `path`: [`is_valid_id`] for the server and session path segments.
//!
//! # Frame format
//! ```text
//! o                        open
//! h                        heartbeat
//! a["msg1","msg2"]         messages, each a JSON string
//! c[3000,"Go away!"]       close: code and reason
//! ```
//! The XHR transports end every frame with `\n`; the WebSocket transport
//! sends each frame as one text message. Clients send a JSON array of
//! strings (`xhr_send`) or, on the WebSocket transport, an array or a
//! single string. Herald writes a MESSAGE as [`ARRAY_OPEN`], the escaped
//! per-recipient STOMP head, the body escaped once and shared, the escaped
//! NUL (`\u0000`) and [`ARRAY_CLOSE`].

mod decode;
mod escape;
mod frame;
mod path;

pub use decode::{DecodeError, decode_messages};
pub use escape::{escape_into, escaped_len};
pub use frame::{
    ARRAY_CLOSE, ARRAY_OPEN, HEARTBEAT, OPEN, close, encode_array, encode_close, encoded_array_len,
};
pub use path::{MAX_ID_BYTES, is_valid_id};
