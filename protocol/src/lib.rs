//! Herald's wire formats, as pure codecs: no I/O, no async, no tokio.
//!
//! # Layout
//! - [`envelope`]: the notification a backend publishes, its field names and
//!   its validation against configured limits.
//! - [`binary`]: the compact binary form of a notification, shared by the
//!   delayed store's records and by bundles.
//! - [`bundle`]: several notifications in one message, as routers hand
//!   them to edges.
//! - [`utf8`]: [`utf8::Utf8Bytes`], bytes proven to be UTF-8 once (simdutf8)
//!   and trusted afterwards.
//! - [`stomp`]: STOMP 1.0/1.1/1.2 frames: incremental decoding with limits,
//!   encoding with per-version header escaping, heart-beat negotiation.
//! - [`websocket`]: the server side of RFC 6455 framing: handshake key,
//!   incremental decoding of masked client frames, unmasked server frame
//!   headers. Herald writes a MESSAGE as `[frame header + STOMP head]`,
//!   `[shared body]`, `[NUL]`, so the body bytes are shared by every recipient.
//! - [`sockjs`]: SockJS 0.3.3 framing for browsers without a usable
//!   WebSocket: the `o`, `h`, `a[...]` and `c[...]` frames, JSON string
//!   escaping with the characters SockJS requires escaped (byte level, so a
//!   body escaped once is shared), and decoding of what clients send.
//! - [`proxy`]: the PROXY protocol header (v1 text, v2 binary) a proxy such
//!   as HAProxy writes before a connection's first byte to name its client.
//!
//! # Decoder contract
//! Every decoder takes a `BytesMut` of received bytes and returns `Ok(None)`
//! when more bytes are needed (consuming nothing), `Ok(Some(_))` after
//! consuming exactly one item, or an error that says what was wrong. No
//! decoder lets a buffer grow past its configured limit without an error.
//! One exception: the WebSocket [`websocket::Decoder`] may consume whole
//! non-final fragments into its partial message before returning `Ok(None)`;
//! it never consumes part of a frame. [`sockjs::decode_messages`] is not
//! incremental: SockJS messages arrive whole (an `xhr_send` body, one
//! WebSocket message), bounded by the transport's own limit. Nor does
//! [`proxy::parse`] take a buffer: it reads a slice the gateway peeked at
//! and returns the header's length for the caller to consume.

pub mod binary;
pub mod bundle;
pub mod envelope;
pub mod proxy;
pub mod sockjs;
pub mod stomp;
pub mod tenant;
pub mod utf8;
pub mod websocket;
