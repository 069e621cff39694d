//! The client side of a browser's STOMP session: a [`session`] over a [`transport`] (raw
//! WebSocket, SockJS websocket, SockJS xhr-streaming), the WebSocket opening handshake
//! ([`upgrade`]), and the pure codecs under them ([`stomp_client`], [`sockjs`], [`http`];
//! [`socketio`] for the Socket.IO peer of `herald-bench compare`);
//! and a backend's side of Herald's HTTP API ([`api`]: a keep-alive connection publishing and
//! reading `/metrics`). It knows nothing of the commands; from [`crate::harness`] it takes
//! only the worker protocol's clock and the delayed benchmark's ids, for [`session::record`].

pub(crate) mod api;
pub(crate) mod http;
pub(crate) mod session;
pub(crate) mod socketio;
pub(crate) mod sockjs;
pub(crate) mod stomp_client;
pub(crate) mod transport;
pub(crate) mod upgrade;
