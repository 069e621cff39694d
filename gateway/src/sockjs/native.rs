//! Streaming receivers served straight on the socket.
//!
//! A hyper connection keeps about 16 KiB of buffers for as long as it
//! streams a response, which would make an idle xhr-streaming or
//! EventSource session cost several times an idle WebSocket. So when a new
//! connection's first request is a streaming receiver of the STOMP service
//! (the front, [`crate::front`], asks [`Native::receiver`] while it looks
//! at the request head), the request head and body are read
//! ([`Native::read`]) and answered here ([`Native::stream`]), with
//! `Connection: close` and the body written from the session's frames
//! until the stream ends. A streaming request that arrives on a reused
//! keep-alive connection is served by hyper through the same session, only
//! with hyper's buffers.
//!
//! # Limits
//! The head and body must arrive within the deadline the front gives
//! (`session.header_timeout_ms` of accept); past it the connection is
//! closed without an answer, counted as `header_timeout`. A body over
//! [`MAX_DISCARD`] is answered 413 (counted as `body_too_large`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use herald_protocol::sockjs;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout_at};

use super::Service;
use super::session::{Attach, Kind, Registry};
use crate::app::Shared;
use crate::client_addr::ClientAddrs;
use crate::metrics::RefuseReason;

/// The most request-body bytes discarded before the stream starts (a
/// streaming receiver's body carries nothing); beyond, 413.
pub const MAX_DISCARD: usize = 64 * 1024;
/// After a 413, how long and how many bytes of the unread body are read
/// and discarded before closing, so the close does not reset the
/// connection and destroy the answer before the client read it.
const LINGER: Duration = Duration::from_secs(2);
const LINGER_BYTES: u64 = 1024 * 1024;

/// The streaming receivers of one SockJS service, served on the socket.
pub struct Native {
    shared: Arc<Shared>,
    registry: Arc<Registry>,
    service: Service,
    prefix: &'static str,
}

/// A streaming receiver's request, as its request line names it.
pub(crate) struct Receiver {
    kind: Kind,
    session: String,
}

/// A streaming receiver's request, read whole: what the answer needs.
pub(crate) struct Request {
    kind: Kind,
    session: String,
    head: Head,
    /// The client: the connection's, or the one a trusted proxy's
    /// `X-Forwarded-For` named.
    client: SocketAddr,
}

/// The connection a streaming request came on.
pub(crate) struct Conn {
    pub(crate) peer: SocketAddr,
    /// `peer`, or the client its PROXY header named.
    pub(crate) client: SocketAddr,
    pub(crate) clients: Arc<ClientAddrs>,
}

struct Head {
    /// Every `X-Forwarded-For` value, in order.
    forwarded_for: Vec<Vec<u8>>,
    origin: Option<String>,
    request_headers: Option<String>,
    cookie: Option<String>,
    content_length: usize,
    token: Option<String>,
}

impl Native {
    /// The native path for the service mounted at `prefix`.
    pub fn new(
        shared: Arc<Shared>,
        registry: Arc<Registry>,
        service: Service,
        prefix: &'static str,
    ) -> Self {
        Native {
            shared,
            registry,
            service,
            prefix,
        }
    }

    /// The streaming receiver a request line (`method`, `path`) opens,
    /// when it is one this service serves on the socket.
    pub(crate) fn receiver(&self, method: &str, path: &str) -> Option<Receiver> {
        let path = path.split('?').next().unwrap_or("");
        let rest = path.strip_prefix(self.prefix)?;
        let parts: Vec<&str> = rest.split('/').collect();
        let [_, server, session, transport] = parts[..] else {
            return None;
        };
        let kind = match (method, transport) {
            ("POST", "xhr_streaming") => Kind::XhrStreaming,
            ("GET", "eventsource") => Kind::Eventsource,
            _ => return None,
        };
        if !sockjs::is_valid_id(server) || !sockjs::is_valid_id(session) {
            // hyper's routes answer 404.
            return None;
        }
        Some(Receiver {
            kind,
            session: session.to_owned(),
        })
    }

    /// Consume the head of `receiver` (its `head_len` bytes were peeked)
    /// and any body, by `deadline`. None when the connection was answered
    /// (429, 413), timed out or failed: the caller closes it.
    pub(crate) async fn read(
        &self,
        stream: &mut TcpStream,
        conn: Conn,
        deadline: Instant,
        receiver: Receiver,
        head_len: usize,
    ) -> Option<Request> {
        let head = match timeout_at(deadline, read_head(stream, head_len)).await {
            Ok(Ok(h)) => h,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "streaming request head unreadable");
                return None;
            }
            Err(_) => {
                self.shared.metrics.refuse(RefuseReason::HeaderTimeout);
                tracing::debug!("streaming request head timed out; connection closed");
                return None;
            }
        };
        let client = if conn.clients.uses_forwarded_for(conn.peer) {
            let client = conn
                .clients
                .forwarded_for(conn.peer, head.forwarded_for.iter().map(Vec::as_slice));
            if let Err(retry_after) = conn.clients.admit(client.ip()) {
                tracing::debug!(client = %client, peer = %conn.peer, retry_after, "connection over the per-address rate; answered 429");
                let answer = crate::client_addr::rate_limited_answer(retry_after);
                let _ = stream.write_all(answer.as_bytes()).await;
                return None;
            }
            client
        } else {
            conn.client
        };
        if head.content_length > MAX_DISCARD {
            self.shared.metrics.refuse(RefuseReason::BodyTooLarge);
            tracing::debug!(
                content_length = head.content_length,
                "streaming request body too large; answered 413"
            );
            self.too_large(stream, &head).await;
            return None;
        }
        let discard = async {
            let mut body = (&mut *stream).take(head.content_length as u64);
            tokio::io::copy(&mut body, &mut tokio::io::sink()).await
        };
        match timeout_at(deadline, discard).await {
            Ok(Ok(n)) if n == head.content_length as u64 => {}
            Ok(Ok(_)) | Ok(Err(_)) => {
                tracing::debug!("peer closed before its request body was whole");
                return None;
            }
            Err(_) => {
                self.shared.metrics.refuse(RefuseReason::HeaderTimeout);
                tracing::debug!("streaming request body timed out; connection closed");
                return None;
            }
        }
        let Receiver { kind, session } = receiver;
        Some(Request {
            kind,
            session,
            head,
            client,
        })
    }

    /// Answer a `request` [`Native::read`] read whole, and stream the
    /// session's frames on `stream` until either end closes.
    pub(crate) async fn stream(&self, mut stream: TcpStream, request: Request) {
        let Request {
            kind,
            session,
            head,
            client,
        } = request;
        // Only the STOMP service is served natively.
        let app = || super::application::stomp(&self.shared, kind, head.token.clone(), client);
        let Some(sess) =
            self.registry
                .get_or_create(&session, kind, self.service, &self.shared, app)
        else {
            self.shared.metrics.refuse(RefuseReason::SessionLimit);
            let _ = stream
                .write_all(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=UTF-8\r\nContent-Length: 48\r\nConnection: close\r\n\r\ntoo many sessions on this gateway; retry another")
                .await;
            return;
        };
        let content_type = match kind {
            Kind::Eventsource => super::routes::EVENT_STREAM,
            _ => "application/javascript; charset=UTF-8",
        };
        let mut response = self.answer_head("200 OK", content_type, &head);
        response.push_str("\r\n");
        match kind {
            Kind::XhrStreaming => {
                response.push_str(&"h".repeat(2048));
                response.push('\n');
            }
            _ => response.push_str("\r\n"),
        }
        if stream.write_all(response.as_bytes()).await.is_err() {
            return;
        }
        // Nothing of the request is needed while the stream lives.
        drop(response);
        drop(head);
        drop(session);
        match sess.attach(kind).await {
            Attach::Refused(close) => {
                let frame: Vec<Bytes> = match kind {
                    Kind::Eventsource => vec![
                        Bytes::from_static(b"data: "),
                        close,
                        Bytes::from_static(b"\r\n\r\n"),
                    ],
                    _ => vec![close, Bytes::from_static(b"\n")],
                };
                for chunk in frame {
                    if stream.write_all(&chunk).await.is_err() {
                        return;
                    }
                }
            }
            Attach::Stream(handle) => loop {
                tokio::select! {
                    frame = handle.next() => {
                        let Some(frame) = frame else { break };
                        for chunk in frame.iter() {
                            if stream.write_all(chunk).await.is_err() {
                                return;
                            }
                        }
                    }
                    r = stream.readable() => {
                        // The client sends nothing more: readable means it
                        // closed (or misbehaves); either way the stream ends.
                        if r.is_err() || peer_closed(&stream) {
                            return;
                        }
                    }
                }
            },
        }
        let _ = stream.shutdown().await;
    }
}

impl Native {
    /// The status line and headers of an answer, up to the blank line:
    /// no caching, CORS for `head`'s origin, the cookie when the service
    /// wants one, and `Connection: close`.
    fn answer_head(&self, status: &str, content_type: &str, head: &Head) -> String {
        let mut response = String::with_capacity(512);
        response.push_str("HTTP/1.1 ");
        response.push_str(status);
        response.push_str("\r\nContent-Type: ");
        response.push_str(content_type);
        response.push_str("\r\nCache-Control: ");
        response.push_str(super::routes::NO_CACHE);
        // CORS as `routes::cors` answers it: the origin back with
        // credentials, or `*` without them when the request had none.
        response.push_str("\r\nAccess-Control-Allow-Origin: ");
        match &head.origin {
            Some(origin) => {
                response.push_str(origin);
                response.push_str("\r\nAccess-Control-Allow-Credentials: true\r\n");
            }
            None => response.push_str("*\r\n"),
        }
        if let Some(h) = &head.request_headers {
            response.push_str("Access-Control-Allow-Headers: ");
            response.push_str(h);
            response.push_str("\r\n");
        }
        if self.service.cookie_needed {
            let value = head
                .cookie
                .as_deref()
                .and_then(|c| {
                    c.split(';')
                        .find_map(|c| c.trim().strip_prefix("JSESSIONID="))
                })
                .unwrap_or("dummy");
            response.push_str("Set-Cookie: JSESSIONID=");
            response.push_str(value);
            response.push_str("; path=/\r\n");
        }
        response.push_str("Connection: close\r\n");
        response
    }

    /// Answer 413 as `xhr_send` does, then read and discard what the
    /// client still sends (up to [`LINGER`] and [`LINGER_BYTES`]) so that
    /// closing does not reset the connection under the answer.
    async fn too_large(&self, stream: &mut TcpStream, head: &Head) {
        const BODY: &str = "Payload too large.";
        let mut response =
            self.answer_head("413 Payload Too Large", "text/plain; charset=UTF-8", head);
        response.push_str(&format!("Content-Length: {}\r\n\r\n{BODY}", BODY.len()));
        if stream.write_all(response.as_bytes()).await.is_err() || stream.shutdown().await.is_err()
        {
            return;
        }
        let mut rest = stream.take(LINGER_BYTES);
        let _ =
            tokio::time::timeout(LINGER, tokio::io::copy(&mut rest, &mut tokio::io::sink())).await;
    }
}

/// Whether a readable socket is at EOF (or in error). Stray bytes are
/// discarded.
fn peer_closed(stream: &TcpStream) -> bool {
    let mut buf = [0u8; 256];
    match stream.try_read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}

/// Read the `head_len` bytes of the head the sniff saw, and what the
/// answer needs from it (the body is left unread).
async fn read_head(stream: &mut TcpStream, head_len: usize) -> std::io::Result<Head> {
    let mut buf = vec![0u8; head_len];
    stream.read_exact(&mut buf).await?;
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    req.parse(&buf)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    let find = |name: &str| {
        req.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .and_then(|h| std::str::from_utf8(h.value).ok())
            .map(str::to_owned)
    };
    // A length that is no number is taken as too large (413), not as none.
    let content_length = find("content-length")
        .map(|v| v.trim().parse().unwrap_or(usize::MAX))
        .unwrap_or(0);
    let token = req.path.and_then(|p| p.split_once('?')).and_then(|(_, q)| {
        form_urlencoded::parse(q.as_bytes())
            .find(|(k, _)| k == "token")
            .map(|(_, v)| v.into_owned())
    });
    let forwarded_for = req
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("x-forwarded-for"))
        .map(|h| h.value.to_vec())
        .collect();
    let head = Head {
        forwarded_for,
        origin: find("origin"),
        request_headers: find("access-control-request-headers"),
        cookie: find("cookie"),
        content_length,
        token,
    };
    Ok(head)
}
