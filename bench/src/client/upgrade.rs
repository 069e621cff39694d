//! The client side of the WebSocket opening handshake (RFC 6455 section 4.1), done here rather
//! than by `tokio_tungstenite::client_async`.
//!
//! Why: tungstenite reads the HTTP response into a 4 KiB buffer and then keeps that very
//! allocation as the connection's frame read buffer, whatever `read_buffer_size` says. For a
//! bench that holds 19,000 idle sessions per process, that is 4 KiB per session for nothing.
//! Doing the (small) HTTP exchange ourselves and building the stream with
//! `WebSocketStream::from_raw_socket` gives each session exactly
//! [`crate::client::session::websocket::READ_BUFFER_BYTES`].
//!
//! The response check is pure ([`parse_response`]) and tested on raw bytes.
//!
//! STOMP over WebSocket offers the `v1x.stomp` subprotocols and wants one chosen; the SockJS
//! websocket transport offers none (the STOMP frames travel inside SockJS frames) and then
//! accepts none.

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::client::generate_key;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

/// Longest HTTP response head we accept; a real 101 is a few hundred bytes.
pub(crate) const MAX_RESPONSE_HEAD: usize = 8 * 1024;

/// Why an upgrade failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum UpgradeError {
    /// The server answered with another status than 101.
    #[error("http {0}")]
    Status(u16),
    #[error("malformed response")]
    Malformed,
    #[error("response head over {MAX_RESPONSE_HEAD} bytes")]
    HeadTooLong,
    #[error("missing or wrong {0} header")]
    Header(&'static str),
    #[error("server chose no subprotocol")]
    NoSubprotocol,
    #[error("server chose subprotocol {0:?}, which was not offered")]
    UnofferedSubprotocol(String),
    #[error("connection closed during the upgrade")]
    Closed,
    #[error("io {0:?}")]
    Io(std::io::ErrorKind),
}

/// A successful upgrade response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Upgraded {
    /// Bytes of the response head, including the blank line.
    pub(crate) head_len: usize,
    /// The subprotocol the server chose (always one of those offered; `None` if none was).
    pub(crate) subprotocol: Option<String>,
}

/// The upgrade request for `path` on `host` (the `Host` header value, with port), offering
/// `subprotocols` (comma-separated) if any.
pub(crate) fn request(host: &str, path: &str, key: &str, subprotocols: Option<&str>) -> String {
    let offer = subprotocols
        .map(|p| format!("Sec-WebSocket-Protocol: {p}\r\n"))
        .unwrap_or_default();
    format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {key}\r\n{offer}\r\n"
    )
}

/// Checks the response to an upgrade request sent with `key` offering `subprotocols`
/// (comma-separated; `None`: no offer). `Ok(None)`: the head is not complete yet.
pub(crate) fn parse_response(
    input: &[u8],
    key: &str,
    subprotocols: Option<&str>,
) -> Result<Option<Upgraded>, UpgradeError> {
    let Some(end) = input.windows(4).position(|w| w == b"\r\n\r\n") else {
        if input.len() > MAX_RESPONSE_HEAD {
            return Err(UpgradeError::HeadTooLong);
        }
        return Ok(None);
    };
    let head_len = end + 4;
    if head_len > MAX_RESPONSE_HEAD {
        return Err(UpgradeError::HeadTooLong);
    }
    let head = std::str::from_utf8(&input[..end]).map_err(|_| UpgradeError::Malformed)?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().ok_or(UpgradeError::Malformed)?;
    let mut parts = status_line.split_whitespace();
    if !parts.next().is_some_and(|v| v.starts_with("HTTP/1.")) {
        return Err(UpgradeError::Malformed);
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or(UpgradeError::Malformed)?;
    if status != 101 {
        return Err(UpgradeError::Status(status));
    }

    let mut upgrade_ok = false;
    let mut connection_ok = false;
    let mut accept_ok = false;
    let mut subprotocol = None;
    let expected_accept = derive_accept_key(key.as_bytes());
    for line in lines {
        let (name, value) = line.split_once(':').ok_or(UpgradeError::Malformed)?;
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "upgrade" => upgrade_ok = value.eq_ignore_ascii_case("websocket"),
            "connection" => {
                connection_ok = value
                    .split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
            }
            "sec-websocket-accept" => accept_ok = value == expected_accept,
            "sec-websocket-protocol" => subprotocol = Some(value.to_owned()),
            _ => {}
        }
    }
    if !upgrade_ok {
        return Err(UpgradeError::Header("Upgrade"));
    }
    if !connection_ok {
        return Err(UpgradeError::Header("Connection"));
    }
    if !accept_ok {
        return Err(UpgradeError::Header("Sec-WebSocket-Accept"));
    }
    match (subprotocols, subprotocol) {
        (Some(_), None) => Err(UpgradeError::NoSubprotocol),
        (Some(offer), Some(chosen)) if !offer.split(',').any(|p| p.trim() == chosen) => {
            Err(UpgradeError::UnofferedSubprotocol(chosen))
        }
        (None, Some(chosen)) => Err(UpgradeError::UnofferedSubprotocol(chosen)),
        (_, subprotocol) => Ok(Some(Upgraded {
            head_len,
            subprotocol,
        })),
    }
}

/// Upgrades `tcp` to a WebSocket: sends the request, checks the response, and builds the stream
/// with `config` (any bytes that arrived after the response head are kept for it).
pub(crate) async fn upgrade(
    mut tcp: TcpStream,
    host: &str,
    path: &str,
    subprotocols: Option<&str>,
    config: WebSocketConfig,
) -> Result<WebSocketStream<TcpStream>, UpgradeError> {
    let io = |e: std::io::Error| UpgradeError::Io(e.kind());
    let key = generate_key();
    tcp.write_all(request(host, path, &key, subprotocols).as_bytes())
        .await
        .map_err(io)?;

    // Temporary: freed when the upgrade is done.
    let mut buffer = Vec::with_capacity(512);
    let upgraded = loop {
        if let Some(upgraded) = parse_response(&buffer, &key, subprotocols)? {
            break upgraded;
        }
        let mut chunk = [0u8; 512];
        let n = tcp.read(&mut chunk).await.map_err(io)?;
        if n == 0 {
            return Err(UpgradeError::Closed);
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let leftover = &buffer[upgraded.head_len..];
    let ws = if leftover.is_empty() {
        WebSocketStream::from_raw_socket(tcp, Role::Client, Some(config)).await
    } else {
        let mut part = Vec::with_capacity(leftover.len().max(config.read_buffer_size));
        part.extend_from_slice(leftover);
        WebSocketStream::from_partially_read(tcp, part, Role::Client, Some(config)).await
    };
    Ok(ws)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
    const OFFER: Option<&str> = Some("v12.stomp, v11.stomp, v10.stomp");

    fn response(extra: &str) -> String {
        format!(
            "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\
             sec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n{extra}\r\n"
        )
    }

    #[test]
    fn request_has_the_handshake_headers() {
        let r = request("127.0.0.1:8080", "/ws", KEY, OFFER);
        assert!(r.starts_with("GET /ws HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"));
        assert!(r.contains("\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"));
        assert!(r.contains("\r\nSec-WebSocket-Protocol: v12.stomp, v11.stomp, v10.stomp\r\n"));
        assert!(r.contains("\r\nSec-WebSocket-Version: 13\r\n"));
        assert!(r.ends_with("\r\n\r\n"));
    }

    #[test]
    fn accepts_a_good_response() {
        let r = response("Sec-WebSocket-Protocol: v12.stomp\r\n");
        let mut bytes = r.clone().into_bytes();
        bytes.extend_from_slice(b"\x81\x00");
        assert_eq!(
            parse_response(&bytes, KEY, OFFER),
            Ok(Some(Upgraded {
                head_len: r.len(),
                subprotocol: Some("v12.stomp".into())
            }))
        );
    }

    #[test]
    fn without_an_offer_no_subprotocol_is_accepted() {
        let r = request("127.0.0.1:8080", "/sockjs/000/abc/websocket", KEY, None);
        assert!(!r.contains("Sec-WebSocket-Protocol"));
        assert!(r.ends_with("Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"));
        assert_eq!(
            parse_response(response("").as_bytes(), KEY, None),
            Ok(Some(Upgraded {
                head_len: response("").len(),
                subprotocol: None
            }))
        );
        assert_eq!(
            parse_response(
                response("Sec-WebSocket-Protocol: v12.stomp\r\n").as_bytes(),
                KEY,
                None
            ),
            Err(UpgradeError::UnofferedSubprotocol("v12.stomp".into()))
        );
    }

    #[test]
    fn incomplete_head_needs_more() {
        let r = response("Sec-WebSocket-Protocol: v12.stomp\r\n");
        assert_eq!(
            parse_response(&r.as_bytes()[..r.len() - 1], KEY, OFFER),
            Ok(None)
        );
        assert_eq!(parse_response(b"", KEY, OFFER), Ok(None));
    }

    #[test]
    fn rejects_bad_responses() {
        assert_eq!(
            parse_response(
                b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n",
                KEY,
                OFFER
            ),
            Err(UpgradeError::Status(401))
        );
        assert_eq!(
            parse_response(b"SSH-2.0\r\n\r\n", KEY, OFFER),
            Err(UpgradeError::Malformed)
        );
        assert_eq!(
            parse_response(response("").as_bytes(), KEY, OFFER),
            Err(UpgradeError::NoSubprotocol)
        );
        assert_eq!(
            parse_response(
                response("Sec-WebSocket-Protocol: mqtt\r\n").as_bytes(),
                KEY,
                OFFER
            ),
            Err(UpgradeError::UnofferedSubprotocol("mqtt".into()))
        );
        let wrong_key = response("Sec-WebSocket-Protocol: v12.stomp\r\n")
            .replace("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", "AAAA");
        assert_eq!(
            parse_response(wrong_key.as_bytes(), KEY, OFFER),
            Err(UpgradeError::Header("Sec-WebSocket-Accept"))
        );
        let no_upgrade =
            response("Sec-WebSocket-Protocol: v12.stomp\r\n").replace("upgrade: websocket\r\n", "");
        assert_eq!(
            parse_response(no_upgrade.as_bytes(), KEY, OFFER),
            Err(UpgradeError::Header("Upgrade"))
        );
        assert_eq!(
            parse_response(&vec![b'x'; MAX_RESPONSE_HEAD + 1], KEY, OFFER),
            Err(UpgradeError::HeadTooLong)
        );
    }

    #[tokio::test]
    async fn upgrades_against_tungstenite_server() {
        use futures_util::{SinkExt as _, StreamExt as _};
        use tokio_tungstenite::tungstenite::Message;
        use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
        use tokio_tungstenite::tungstenite::http::HeaderValue;

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (s, _) = listener.accept().await.unwrap();
            // The callback's signature is tungstenite's.
            #[allow(clippy::result_large_err)]
            let cb = |_: &Request, mut resp: Response| {
                resp.headers_mut().insert(
                    "Sec-WebSocket-Protocol",
                    HeaderValue::from_static("v11.stomp"),
                );
                Ok(resp)
            };
            let mut ws = tokio_tungstenite::accept_hdr_async(s, cb).await.unwrap();
            // Send right away, so the client may read it together with the response head.
            ws.send(Message::text("hello")).await.unwrap();
            let echo = ws.next().await.unwrap().unwrap();
            assert_eq!(echo, Message::text("back"));
        });
        let tcp = TcpStream::connect(addr).await.unwrap();
        let mut ws = upgrade(
            tcp,
            &addr.to_string(),
            "/ws",
            OFFER,
            WebSocketConfig::default(),
        )
        .await
        .unwrap();
        assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("hello"));
        ws.send(Message::text("back")).await.unwrap();
        server.await.unwrap();
    }
}
