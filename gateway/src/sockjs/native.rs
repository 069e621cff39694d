//! Streaming receivers served straight on the socket.
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

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use herald_protocol::sockjs;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::Service;
use super::session::{Attach, Kind, Registry};
use crate::app::Shared;
use crate::metrics::RefuseReason;

/// The longest request line and head this path reads itself.
const MAX_HEAD: usize = 8 * 1024;
/// The most request-body bytes discarded before the stream starts.
const MAX_DISCARD: usize = 64 * 1024;

/// The native streaming path of one SockJS service.
pub struct Native {
    shared: Arc<Shared>,
    registry: Arc<Registry>,
    service: Service,
    prefix: &'static str,
}

/// What [`Native::sniff`] found.
enum Sniffed {
    /// Not ours: hand the connection to hyper.
    Hyper,
    /// A streaming receiver: `kind`, session id, head length to consume.
    Stream(Kind, String, usize),
}

struct Head {
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

    /// Serve `stream` if it opens with a streaming receiver request;
    /// otherwise give it back for hyper. The stream is served from a task of
    /// its own, so it does not carry the (larger) connection task's state.
    pub async fn try_serve(
        self: &Arc<Self>,
        stream: TcpStream,
        timeout: Duration,
    ) -> Option<TcpStream> {
        self.shared.metrics.sniffing.inc();
        let sniffed = match tokio::time::timeout(timeout, self.sniff(&stream)).await {
            Ok(Ok(s)) => s,
            // Slow or broken: hyper answers (and times out) as usual.
            _ => Sniffed::Hyper,
        };
        self.shared.metrics.sniffing.dec();
        match sniffed {
            Sniffed::Hyper => Some(stream),
            Sniffed::Stream(kind, session, head_len) => {
                let this = Arc::clone(self);
                self.shared.tracker.spawn(async move {
                    this.serve(stream, kind, session, head_len).await;
                });
                None
            }
        }
    }

    async fn sniff(&self, stream: &TcpStream) -> std::io::Result<Sniffed> {
        let mut buf = vec![0u8; MAX_HEAD];
        let mut seen = 0;
        loop {
            // Waits for data; consumes nothing.
            let n = stream.peek(&mut buf).await?;
            if n == 0 {
                return Ok(Sniffed::Hyper);
            }
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut req = httparse::Request::new(&mut headers);
            match req.parse(&buf[..n]) {
                Ok(httparse::Status::Complete(len)) => {
                    let method = req.method.unwrap_or("");
                    let path = req.path.unwrap_or("");
                    return Ok(self.classify(method, path, len));
                }
                Ok(httparse::Status::Partial) if n < MAX_HEAD => {
                    // Decide early when the request line already says no.
                    if let Some(line_end) = buf[..n].iter().position(|&b| b == b'\n') {
                        let line = String::from_utf8_lossy(&buf[..line_end]);
                        let mut parts = line.split(' ');
                        let (method, path) =
                            (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
                        if matches!(self.classify(method, path, 0), Sniffed::Hyper) {
                            return Ok(Sniffed::Hyper);
                        }
                    }
                    // A head split across segments (rare): peeking again
                    // returns at once while nothing new arrived, so pause.
                    if n == seen {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    seen = n;
                }
                _ => return Ok(Sniffed::Hyper),
            }
        }
    }

    fn classify(&self, method: &str, path: &str, head_len: usize) -> Sniffed {
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

    /// Consume the head (and any body), then answer and stream.
    async fn serve(&self, mut stream: TcpStream, kind: Kind, session: String, head_len: usize) {
        let head = match read_head(&mut stream, head_len).await {
            Ok(h) => h,
            Err(e) => {
                tracing::debug!(error = %e, "streaming request head unreadable");
                return;
            }
        };
        // Only the STOMP service is served natively.
        let app = || super::application::stomp(&self.shared, kind, head.token.clone());
        let Some(sess) = self
            .registry
            .get_or_create(&session, self.service, &self.shared, app)
        else {
            self.shared.metrics.refuse(RefuseReason::SessionLimit);
            let _ = stream
                .write_all(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=UTF-8\r\nContent-Length: 48\r\nConnection: close\r\n\r\ntoo many sessions on this gateway; retry another")
                .await;
            return;
        };
        let mut response = String::with_capacity(512);
        response.push_str("HTTP/1.1 200 OK\r\nContent-Type: ");
        response.push_str(match kind {
            Kind::Eventsource => "text/event-stream; charset=UTF-8",
            _ => "application/javascript; charset=UTF-8",
        });
        response.push_str("\r\nCache-Control: ");
        response.push_str(super::routes::NO_CACHE);
        response.push_str("\r\nAccess-Control-Allow-Origin: ");
        response.push_str(
            head.origin
                .as_deref()
                .filter(|o| *o != "null")
                .unwrap_or("*"),
        );
        response.push_str("\r\nAccess-Control-Allow-Credentials: true\r\n");
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
        response.push_str("Connection: close\r\n\r\n");
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
        match sess.attach(kind) {
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

async fn read_head(stream: &mut TcpStream, head_len: usize) -> std::io::Result<Head> {
    use tokio::io::AsyncReadExt;
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
    let content_length = find("content-length")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0usize);
    let token = req.path.and_then(|p| p.split_once('?')).and_then(|(_, q)| {
        form_urlencoded::parse(q.as_bytes())
            .find(|(k, _)| k == "token")
            .map(|(_, v)| v.into_owned())
    });
    let head = Head {
        origin: find("origin"),
        request_headers: find("access-control-request-headers"),
        cookie: find("cookie"),
        content_length,
        token,
    };
    if head.content_length > MAX_DISCARD {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "streaming request body too large",
        ));
    }
    let mut rest = vec![0u8; head.content_length];
    stream.read_exact(&mut rest).await?;
    Ok(head)
}
