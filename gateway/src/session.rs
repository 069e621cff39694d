//! Browser sessions.
//!
//! # Layout
//! - [`core`]: the transport-independent session: STOMP decoding, actions,
//!   outbox pulls, heart-beat timing; writes through a [`core::Sink`],
//!   reaches the gateway only through a [`host::Host`].
//! - [`host`]: what a session needs of the gateway (verify a token, attach
//!   to and resume a mailbox, report presence, metrics, limits).
//! - [`message_head`]: a MESSAGE's headers per recipient, on the stack
//!   (every framing writes them in this order).
//! - [`sockjs_frame`]: STOMP frames as escaped SockJS strings, the payload
//!   escaped once per notification; the sink of the SockJS websocket
//!   transport.
//! - [`stomp`]: the STOMP session state machine, sans I/O: frames in,
//!   actions out (connect, subscribe, unsubscribe, disconnect, fail).
//! - [`writer`]: the bytes a session writes: STOMP frames in WebSocket
//!   frames, a MESSAGE as per-recipient head + shared body + NUL.
//! - [`websocket`]: the async shell for STOMP over a WebSocket (raw or
//!   SockJS-framed): owns the TCP stream, holds no read buffer while idle,
//!   writes vectored from shared `Bytes`, heart-beats, shutdown.
//!
//! This module depends on no transport module: [`crate::sockjs`],
//! [`crate::ws`] and [`crate::http`] build on it. It runs STOMP only; the SockJS test-suite
//! apps are dispatched by the SockJS routes.

pub mod core;
pub mod host;
pub mod message_head;
pub mod sockjs_frame;
pub mod stomp;
pub mod websocket;
pub mod writer;
