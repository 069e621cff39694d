//! How bench sessions reach the gateway: STOMP straight over WebSocket (`/ws`), or over SockJS
//! (its websocket or its xhr-streaming transport); and how they reach the peers of
//! `herald-bench compare`: a plain WebSocket per channel (Nchan), STOMP to a broker (RabbitMQ
//! Web STOMP), Socket.IO, or SockJS frames without STOMP (sockjs-node).

use clap::ValueEnum;

/// A session transport (`--transport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Transport {
    /// STOMP over WebSocket at the URL (`/ws`), subprotocols `v1x.stomp`.
    #[value(name = "websocket")]
    WebSocket,
    /// SockJS websocket transport: `{url}/{server}/{session}/websocket`, SockJS frames over
    /// WebSocket text messages.
    #[value(name = "sockjs-websocket")]
    SockJsWebSocket,
    /// SockJS xhr-streaming transport: a `POST {url}/{server}/{session}/xhr_streaming` response
    /// held open to receive, `POST .../xhr_send` to send.
    #[value(name = "xhr-streaming")]
    XhrStreaming,
    /// A plain WebSocket to `{url}/{user}`, no subprotocol and no STOMP: open once upgraded,
    /// every message one notification (Nchan's websocket subscriber, a channel per user).
    #[value(name = "raw-websocket")]
    RawWebSocket,
    /// STOMP over WebSocket to a broker (RabbitMQ Web STOMP) at the URL, subprotocols
    /// `v1x.stomp`: `CONNECT` as `guest` to the vhost `/`, `SUBSCRIBE` to `/topic/{user}`.
    #[value(name = "broker-stomp")]
    BrokerStomp,
    /// Socket.IO 4 over its websocket transport, no STOMP:
    /// `{url}/?EIO=4&transport=websocket&channel={channel}`, open once connected to the main
    /// namespace, every `n` event one notification (the Socket.IO peer); pings answered.
    #[value(name = "socketio")]
    SocketIo,
    /// The SockJS websocket transport without STOMP:
    /// `{url}/{server}/{session}/websocket?channel={channel}`, open at the `o` frame, every
    /// message of an `a[...]` frame one notification (the sockjs-node peer).
    #[value(name = "sockjs-plain")]
    SockJsPlain,
}

impl Transport {
    /// The `--transport` value.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Transport::WebSocket => "websocket",
            Transport::SockJsWebSocket => "sockjs-websocket",
            Transport::XhrStreaming => "xhr-streaming",
            Transport::RawWebSocket => "raw-websocket",
            Transport::BrokerStomp => "broker-stomp",
            Transport::SocketIo => "socketio",
            Transport::SockJsPlain => "sockjs-plain",
        }
    }

    /// Whether sessions present a JWT (Herald's transports); the peers' sessions name their
    /// channel (or topic) instead.
    pub(crate) fn presents_jwt(self) -> bool {
        !matches!(
            self,
            Transport::RawWebSocket
                | Transport::BrokerStomp
                | Transport::SocketIo
                | Transport::SockJsPlain
        )
    }

    /// The gateway path the URL points at: the STOMP WebSocket endpoint, or the SockJS service.
    pub(crate) fn gateway_path(self) -> &'static str {
        match self {
            Transport::WebSocket => "/ws",
            Transport::SockJsWebSocket | Transport::XhrStreaming | Transport::SockJsPlain => {
                "/sockjs"
            }
            Transport::RawWebSocket => "/sub",
            Transport::BrokerStomp => "/ws",
            Transport::SocketIo => "/socket.io",
        }
    }

    /// The URL of a gateway listening on `authority` (`host:port`) for this transport.
    pub(crate) fn url(self, authority: &str) -> String {
        match self {
            Transport::WebSocket
            | Transport::RawWebSocket
            | Transport::BrokerStomp
            | Transport::SocketIo => format!("ws://{authority}{}", self.gateway_path()),
            Transport::SockJsWebSocket | Transport::XhrStreaming | Transport::SockJsPlain => {
                format!("http://{authority}{}", self.gateway_path())
            }
        }
    }
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_urls() {
        for t in Transport::value_variants() {
            assert_eq!(
                Transport::from_str(t.name(), false),
                Ok(*t),
                "{t} parses back"
            );
        }
        assert_eq!(
            Transport::WebSocket.url("127.0.0.1:8080"),
            "ws://127.0.0.1:8080/ws"
        );
        assert_eq!(
            Transport::XhrStreaming.url("127.0.0.1:8080"),
            "http://127.0.0.1:8080/sockjs"
        );
        assert_eq!(Transport::SockJsWebSocket.to_string(), "sockjs-websocket");
        assert_eq!(
            Transport::RawWebSocket.url("127.0.0.1:8080"),
            "ws://127.0.0.1:8080/sub"
        );
        assert_eq!(
            Transport::SocketIo.url("127.0.0.1:8080"),
            "ws://127.0.0.1:8080/socket.io"
        );
        assert_eq!(
            Transport::SockJsPlain.url("127.0.0.1:8080"),
            "http://127.0.0.1:8080/sockjs"
        );
    }

    #[test]
    fn only_herald_transports_present_a_jwt() {
        for t in Transport::value_variants() {
            let peer = matches!(
                t,
                Transport::RawWebSocket
                    | Transport::BrokerStomp
                    | Transport::SocketIo
                    | Transport::SockJsPlain
            );
            assert_eq!(t.presents_jwt(), !peer, "{t}");
        }
    }
}
