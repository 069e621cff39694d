//! STOMP 1.0, 1.1 and 1.2 frames (<https://stomp.github.io/stomp-specification-1.2.html>).
//!
//! # Layout
//! - `version`: [`Version`] and its negotiation (`accept-version`, the
//!   WebSocket subprotocols `v10.stomp` .. `v12.stomp`).
//! - `frame`: [`Command`] and [`Frame`], a decoded frame.
//! - `decode`: [`decode`], incremental and bounded by [`Limits`].
//! - `encode`: [`encode_head`], [`encode_frame`], [`encode`] and
//!   [`escape_into`], writing into a `BytesMut`.
//! - `heartbeat`: the `heart-beat` header and [`negotiate_heartbeat`].
//!
//! # Wire format
//! ```text
//! COMMAND EOL
//! (name:value EOL)*     escaped per version, except CONNECT/STOMP/CONNECTED
//! EOL
//! body NUL              content-length bytes if given, else up to the first NUL
//! ```
//! EOL is `\n` or `\r\n`. A lone EOL where a frame could start is a heart-beat.

mod decode;
mod encode;
mod frame;
mod heartbeat;
mod version;

pub use decode::{DecodeError, Decoded, Limits, decode};
pub use encode::{
    encode, encode_frame, encode_head, encode_head_start, encode_header_lines, escape_into,
};
pub use frame::{Command, Frame};
pub use heartbeat::{HeartBeat, HeartBeatError, negotiate_heartbeat};
pub use version::Version;

/// Header names Herald reads or writes, as the STOMP specification spells them.
pub mod headers {
    /// CONNECT/STOMP: versions the client accepts, e.g. `1.1,1.2`.
    pub const ACCEPT_VERSION: &str = "accept-version";
    /// CONNECTED: the version chosen by the server.
    pub const VERSION: &str = "version";
    /// CONNECT/STOMP and CONNECTED: `cx,cy` heart-beat intervals in ms.
    pub const HEART_BEAT: &str = "heart-beat";
    /// Byte length of the body.
    pub const CONTENT_LENGTH: &str = "content-length";
    /// MIME type of the body.
    pub const CONTENT_TYPE: &str = "content-type";
    /// CONNECT/STOMP: the virtual host.
    pub const HOST: &str = "host";
    /// CONNECT/STOMP: the user name.
    pub const LOGIN: &str = "login";
    /// CONNECT/STOMP: the password (Herald: a token).
    pub const PASSCODE: &str = "passcode";
    /// CONNECTED: the server name.
    pub const SERVER: &str = "server";
    /// CONNECTED: the session id.
    pub const SESSION: &str = "session";
    /// SUBSCRIBE/UNSUBSCRIBE/MESSAGE: the subscription id.
    pub const ID: &str = "id";
    /// SUBSCRIBE/SEND/MESSAGE: the destination.
    pub const DESTINATION: &str = "destination";
    /// MESSAGE: the subscription the message is for.
    pub const SUBSCRIPTION: &str = "subscription";
    /// SUBSCRIBE: `auto`, `client` or `client-individual`.
    pub const ACK: &str = "ack";
    /// Any client frame: ask for a RECEIPT carrying this id.
    pub const RECEIPT: &str = "receipt";
    /// RECEIPT: the id the client asked for.
    pub const RECEIPT_ID: &str = "receipt-id";
    /// ERROR: a short description.
    pub const MESSAGE: &str = "message";
}
