//! Browser sessions.
//!
//! # Layout
//! - [`core`]: the transport-independent session: STOMP decoding, actions,
//!   outbox pulls, heart-beat timing; writes through a [`core::Sink`],
//!   reaches the gateway only through a [`host::Host`].
//! - [`host`]: what a session needs of the gateway (verify a token, attach
//!   to and resume a mailbox, report presence, metrics, limits).
//! - [`permit`]: session slots; a [`permit::SessionPermit`] gives its
//!   slot back when dropped.
//! - [`sockjs_frame`]: STOMP frames as escaped SockJS strings, the payload
//!   escaped once per notification.
//! - [`stomp`]: the STOMP session state machine, sans I/O: frames in,
//!   actions out (connect, subscribe, unsubscribe, disconnect, fail).
//! - [`writer`]: the bytes a session writes: STOMP frames in WebSocket
//!   frames, a MESSAGE as per-recipient head + shared body + NUL.
//! - [`websocket`]: the async shell for STOMP over a raw WebSocket: owns the
//!   TCP stream, holds no read buffer while idle, writes vectored from shared
//!   `Bytes`, heart-beats, shutdown.

pub mod core;
pub mod host;
pub mod permit;
pub mod sockjs_frame;
pub mod stomp;
pub mod websocket;
pub mod writer;
