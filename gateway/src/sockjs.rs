//! SockJS 0.3 under `/sockjs`: the fallbacks for browsers and proxies that
//! break WebSocket. STOMP runs over every transport unchanged.
//!
//! # Layout
//! - [`routes`]: the HTTP surface of one SockJS service (`/info`, the
//!   greeting, `/{server}/{session}/{transport}`, `/websocket`), CORS and
//!   cache headers.
//! - [`application`]: what a session of the HTTP transports runs: STOMP,
//!   or a test-suite app; chosen by the routes per service.
//! - [`pending`]: which transport receives ([`pending::Kind`]) and the
//!   messages waiting for a receiver ([`pending::Pending`]).
//! - [`session`]: a session of the HTTP transports: its registry, its
//!   driver task (running an [`application::Application`]), and the
//!   receiver slot that xhr-streaming, xhr-polling and EventSource requests
//!   take in turn.
//! - [`native`]: xhr-streaming and EventSource receivers served straight on
//!   the socket (no hyper buffers) when they open a connection: which
//!   request lines those are, for the front ([`crate::front`]) that sorts
//!   new connections, and how they are read and answered.
//! - [`test_apps`]: the echo and close apps of the test-suite services,
//!   over WebSocket and as HTTP applications (test mode only); [`routes`]
//!   runs them instead of the STOMP session on the test services.
//!
//! The SockJS WebSocket transport is [`crate::session::websocket`] with SockJS
//! framing ([`crate::session::sockjs_frame`]): it needs no session registry,
//! the socket is the session. Dependencies go one way: this module uses
//! `session` (the core, the SockJS framing of its writes, the WebSocket
//! shell); `session` knows nothing of this one.
//!
//! # Services
//! `/sockjs` carries STOMP. With `sockjs.test_endpoints`, the services the
//! SockJS protocol test suite expects are mounted too: `/echo`, `/close`,
//! `/disabled_websocket_echo`, `/cookie_needed_echo`.

pub mod application;
pub mod native;
pub mod pending;
pub mod routes;
pub mod session;
pub mod test_apps;

/// What a SockJS service runs on its sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum App {
    /// Herald: STOMP.
    Stomp,
    /// Test suite: echo every message back.
    Echo,
    /// Test suite: close every session at once with `c[3000,"Go away!"]`.
    Close,
}

/// One SockJS service: where it is mounted and how it behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Service {
    /// The application.
    pub app: App,
    /// Whether the websocket transport is offered.
    pub websocket: bool,
    /// Whether `/info` says `cookie_needed` and a `JSESSIONID` cookie is set.
    pub cookie_needed: bool,
    /// Bytes after which a streaming response ends.
    pub streaming_limit_bytes: usize,
}
