//! How bench sessions reach the gateway: STOMP straight over WebSocket (`/ws`), or over SockJS
//! (its websocket or its xhr-streaming transport); and how they reach a peer that speaks no
//! STOMP (`herald-bench compare`): a plain WebSocket per channel, as Nchan's subscriber takes.

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
}

impl Transport {
    /// The `--transport` value.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Transport::WebSocket => "websocket",
            Transport::SockJsWebSocket => "sockjs-websocket",
            Transport::XhrStreaming => "xhr-streaming",
            Transport::RawWebSocket => "raw-websocket",
        }
    }

    /// Whether sessions speak STOMP (and so present a JWT); a raw WebSocket session names its
    /// channel instead.
    pub(crate) fn speaks_stomp(self) -> bool {
        self != Transport::RawWebSocket
    }

    /// The gateway path the URL points at: the STOMP WebSocket endpoint, or the SockJS service.
    pub(crate) fn gateway_path(self) -> &'static str {
        match self {
            Transport::WebSocket => "/ws",
            Transport::SockJsWebSocket | Transport::XhrStreaming => "/sockjs",
            Transport::RawWebSocket => "/sub",
        }
    }

    /// The URL of a gateway listening on `authority` (`host:port`) for this transport.
    pub(crate) fn url(self, authority: &str) -> String {
        match self {
            Transport::WebSocket | Transport::RawWebSocket => {
                format!("ws://{authority}{}", self.gateway_path())
            }
            Transport::SockJsWebSocket | Transport::XhrStreaming => {
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
    }

    #[test]
    fn only_raw_websocket_speaks_no_stomp() {
        for t in Transport::value_variants() {
            assert_eq!(t.speaks_stomp(), *t != Transport::RawWebSocket, "{t}");
        }
    }
}
