//! Streaming receivers served straight on the socket; and where a new
//! connection's first request is looked at, so that `GET /ws` upgrades are
//! served straight on it too ([`crate::ws::native`]).
//!
//! A hyper connection keeps about 16 KiB of buffers for as long as it
//! streams a response, which would make an idle xhr-streaming or
//! EventSource session cost several times an idle WebSocket. So the accept
//! loop peeks at a new connection's request line (`MSG_PEEK`, nothing is
//! consumed): when it is a streaming receiver of the `/sockjs` service, the
//! request head is read and answered here, with `Connection: close` and the
//! body written from the session's frames until the stream ends. Anything
//! else goes to hyper untouched. A streaming request that arrives on a
//! reused keep-alive connection is served by hyper through the same
//! session, only with hyper's buffers.
//!
//! # Limits
//! Sniffing waits on readiness ([`super::sniff`]): a half-sent head costs
//! nothing until more bytes or the peer's FIN arrive, and a peer that
//! closes mid-head is dropped at once. At most `session.max_sniffing`
//! connections are sniffed (and, for a streaming receiver, have their head
//! and body read) at once; the next is answered 503 before anything is read
//! and closed, counted as `sniff_limit`. Head and body must arrive within
//! `session.header_timeout_ms` of accept, the same deadline hyper is given
//! for the rest of a connection it takes; past it the connection is closed
//! without an answer, counted as `header_timeout`. A body over
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
use super::sniff::{SniffPermit, SniffSlots, peek_until};
use crate::app::Shared;
use crate::client_addr::ClientAddrs;
use crate::metrics::RefuseReason;

/// The longest request line and head this path reads itself.
const MAX_HEAD: usize = 8 * 1024;
/// The most request-body bytes discarded before the stream starts (a
/// streaming receiver's body carries nothing); beyond, 413.
pub const MAX_DISCARD: usize = 64 * 1024;
/// After a 413, how long and how many bytes of the unread body are read
/// and discarded before closing, so the close does not reset the
/// connection and destroy the answer before the client read it.
const LINGER: Duration = Duration::from_secs(2);
const LINGER_BYTES: u64 = 1024 * 1024;
/// The answer to a connection over `session.max_sniffing`.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=UTF-8\r\nContent-Length: 54\r\nRetry-After: 1\r\nConnection: close\r\n\r\ntoo many connections sending their request head; retry";

/// The native streaming path of one SockJS service.
pub struct Native {
    shared: Arc<Shared>,
    registry: Arc<Registry>,
    service: Service,
    prefix: &'static str,
    slots: SniffSlots,
}

/// What [`Native::sniff`] found.
enum Sniffed {
    /// Not ours: hand the connection to hyper.
    Hyper,
    /// A streaming receiver: `kind`, session id, head length to consume.
    Stream(Kind, String, usize),
    /// `GET /ws`, for [`crate::ws::native`]: the head's length.
    Upgrade(usize),
    /// `POST /v1/notifications`, for [`crate::publish_direct`].
    Publish,
}

/// A connection [`Native::try_serve`] gives back, nothing of it read.
pub enum Handed {
    /// For hyper.
    Hyper(TcpStream),
    /// For the direct publish path ([`crate::publish_direct`]).
    Publish(TcpStream),
}

/// The connection a streaming request came on.
struct Conn {
    peer: SocketAddr,
    client: SocketAddr,
    clients: Arc<ClientAddrs>,
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
        let slots = SniffSlots::new(
            shared.config.session.max_sniffing,
            shared.metrics.sniffing.clone(),
        );
        Native {
            shared,
            registry,
            service,
            prefix,
            slots,
        }
    }

    /// Serve `stream` if it opens with a streaming receiver request;
    /// otherwise give it back for hyper. The stream is served from a task of
    /// its own, so it does not carry the (larger) connection task's state.
    /// None when the connection was refused, timed out at `deadline`, or
    /// closed by its peer before its head was whole.
    /// `client` is the connection's client (`peer` itself, or what its
    /// PROXY header said); a request from a trusted proxy without the
    /// PROXY protocol names its client in `X-Forwarded-For` instead, and
    /// is counted against the connection rate here.
    pub async fn try_serve(
        self: &Arc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
        client: SocketAddr,
        clients: &Arc<ClientAddrs>,
        deadline: Instant,
    ) -> Option<Handed> {
        let Some(permit) = self.slots.try_acquire() else {
            self.shared.metrics.refuse(RefuseReason::SniffLimit);
            tracing::debug!("too many connections sniffing; answered 503");
            // Nothing is awaited for a refused connection. The answer is
            // one send on the plain socket: tokio's try_write would skip
            // it while the new socket's first writable event is pending,
            // and it always fits a fresh socket's send buffer.
            if let Ok(mut socket) = stream.into_std() {
                let _ = std::io::Write::write(&mut socket, BUSY);
            }
            return None;
        };
        let mut buf = vec![0u8; MAX_HEAD];
        // The per-address rate of a proxy's clients is checked on the first
        // request's X-Forwarded-For, which only hyper's path reads.
        let publish = self.publish_api().is_some()
            && !(clients.uses_forwarded_for(peer) && clients.rate_limited());
        // A connection that has sent nothing when shutdown starts has no
        // request in flight: it must not hold the drain for the deadline
        // (a browser's preconnected socket, say).
        let sniff = tokio::select! {
            r = timeout_at(deadline, self.sniff(&stream, &mut buf, publish)) => r,
            _ = self.shared.shutdown.cancelled() => {
                tracing::debug!("shutting down before the request head was whole; connection closed");
                return None;
            }
        };
        let sniffed = match sniff {
            Ok(Ok(Some(s))) => s,
            Ok(Ok(None)) => {
                tracing::debug!("peer closed before its request head was whole");
                return None;
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "connection failed before its request head was whole");
                return None;
            }
            Err(_) => {
                self.shared.metrics.refuse(RefuseReason::HeaderTimeout);
                tracing::debug!("request head timed out; connection closed");
                return None;
            }
        };
        match sniffed {
            Sniffed::Hyper => Some(Handed::Hyper(stream)),
            Sniffed::Publish => Some(Handed::Publish(stream)),
            Sniffed::Upgrade(head_len) => {
                let conn = crate::ws::native::Conn {
                    peer,
                    client,
                    clients,
                };
                crate::ws::native::serve(&self.shared, stream, buf, head_len, conn, deadline)
                    .await
                    .map(Handed::Hyper)
            }
            Sniffed::Stream(kind, session, head_len) => {
                let this = Arc::clone(self);
                let conn = Conn {
                    peer,
                    client,
                    clients: Arc::clone(clients),
                };
                self.shared.tracker.spawn(async move {
                    this.serve(stream, conn, permit, deadline, kind, session, head_len)
                        .await;
                });
                None
            }
        }
    }

    /// The publish API, when this gateway serves it (standalone).
    pub fn publish_api(&self) -> Option<&herald_engine::publish::PublishApi> {
        match &self.shared.mode {
            crate::app::Mode::Standalone { publish, .. } => Some(publish),
            _ => None,
        }
    }

    /// Wait (on readiness) until the request line or the whole head says
    /// whose the connection is; None if the peer closed first.
    /// `publish`: whether a publish may be served directly.
    async fn sniff(
        &self,
        stream: &TcpStream,
        buf: &mut [u8],
        publish: bool,
    ) -> std::io::Result<Option<Sniffed>> {
        peek_until(stream, buf, |bytes| self.decide(bytes, publish)).await
    }

    /// Whose the connection is, from its first `bytes`, if they tell.
    fn decide(&self, bytes: &[u8], publish: bool) -> Option<Sniffed> {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(bytes) {
            Ok(httparse::Status::Complete(len)) => {
                let method = req.method.unwrap_or("");
                let path = req.path.unwrap_or("");
                if publish && crate::publish_direct::is_publish_line(method, path, req.version) {
                    return Some(Sniffed::Publish);
                }
                Some(self.classify(method, path, len))
            }
            Ok(httparse::Status::Partial) if bytes.len() < MAX_HEAD => {
                // Decide early when the request line already says no.
                let line_end = bytes.iter().position(|&b| b == b'\n')?;
                let line = String::from_utf8_lossy(&bytes[..line_end]);
                let mut parts = line.split(' ');
                let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
                if publish && crate::publish_direct::is_publish_line(method, path, Some(1)) {
                    // Its version and headers are still to come.
                    return None;
                }
                matches!(self.classify(method, path, 0), Sniffed::Hyper).then_some(Sniffed::Hyper)
            }
            // Too long or malformed: hyper answers as usual.
            _ => Some(Sniffed::Hyper),
        }
    }

    fn classify(&self, method: &str, path: &str, head_len: usize) -> Sniffed {
        if crate::ws::native::is_upgrade_line(method, path) {
            return Sniffed::Upgrade(head_len);
        }
        let path = path.split('?').next().unwrap_or("");
        let Some(rest) = path.strip_prefix(self.prefix) else {
            return Sniffed::Hyper;
        };
        let parts: Vec<&str> = rest.split('/').collect();
        let [_, server, session, transport] = parts[..] else {
            return Sniffed::Hyper;
        };
        let kind = match (method, transport) {
            ("POST", "xhr_streaming") => Kind::XhrStreaming,
            ("GET", "eventsource") => Kind::Eventsource,
            _ => return Sniffed::Hyper,
        };
        if !sockjs::is_valid_id(server) || !sockjs::is_valid_id(session) {
            // hyper's routes answer 404.
            return Sniffed::Hyper;
        }
        Sniffed::Stream(kind, session.to_owned(), head_len)
    }

    /// Consume the head and any body (by `deadline`, holding `permit`
    /// meanwhile), then answer and stream.
    #[allow(clippy::too_many_arguments)]
    async fn serve(
        &self,
        mut stream: TcpStream,
        conn: Conn,
        permit: SniffPermit,
        deadline: Instant,
        kind: Kind,
        session: String,
        head_len: usize,
    ) {
        let head = match timeout_at(deadline, read_head(&mut stream, head_len)).await {
            Ok(Ok(h)) => h,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "streaming request head unreadable");
                return;
            }
            Err(_) => {
                self.shared.metrics.refuse(RefuseReason::HeaderTimeout);
                tracing::debug!("streaming request head timed out; connection closed");
                return;
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
                return;
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
            return;
        }
        let discard = async {
            let mut body = (&mut stream).take(head.content_length as u64);
            tokio::io::copy(&mut body, &mut tokio::io::sink()).await
        };
        match timeout_at(deadline, discard).await {
            Ok(Ok(n)) if n == head.content_length as u64 => {}
            Ok(Ok(_)) | Ok(Err(_)) => {
                tracing::debug!("peer closed before its request body was whole");
                return;
            }
            Err(_) => {
                self.shared.metrics.refuse(RefuseReason::HeaderTimeout);
                tracing::debug!("streaming request body timed out; connection closed");
                return;
            }
        }
        // The request is read: from here on it is a session's receiver.
        drop(permit);
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
    async fn too_large(&self, mut stream: TcpStream, head: &Head) {
        const BODY: &str = "Payload too large.";
        let mut response =
            self.answer_head("413 Payload Too Large", "text/plain; charset=UTF-8", head);
        response.push_str(&format!("Content-Length: {}\r\n\r\n{BODY}", BODY.len()));
        if stream.write_all(response.as_bytes()).await.is_err() || stream.shutdown().await.is_err()
        {
            return;
        }
        let mut rest = (&mut stream).take(LINGER_BYTES);
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
