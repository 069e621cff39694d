//! A keep-alive HTTP/1.1 connection to Herald's HTTP API: `POST /v1/notifications` with an API
//! key, `PUT /v1/topics/{name}`, `GET /metrics`. The request is written by hand and the response read with the bench's
//! own parser ([`crate::client::http`]: head, then a body delimited by `Content-Length`, chunked, or
//! the connection's close), so the bench needs no HTTP client crate and each publishing
//! connection is one socket and one buffer.
//!
//! A connection that the server closed (or that failed) is opened again at the next request;
//! the caller decides whether to retry.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use super::http::{self, BodyLength, Chunk, ChunkedDecoder};

/// Largest response body read (a `202` for 1,000 notifications is about 120 KB; `/metrics` a
/// few KB).
const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
/// One request, from writing it to the end of its response.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// A response: status and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
}

/// One keep-alive connection to `addr`.
pub(crate) struct ApiConnection {
    addr: SocketAddr,
    api_key: String,
    stream: Option<TcpStream>,
    buffer: Vec<u8>,
}

impl ApiConnection {
    pub(crate) fn new(addr: SocketAddr, api_key: &str) -> Self {
        Self {
            addr,
            api_key: api_key.to_owned(),
            stream: None,
            buffer: Vec::with_capacity(64 * 1024),
        }
    }

    /// `POST path` with a JSON body.
    pub(crate) async fn post_json(&mut self, path: &str, body: &[u8]) -> std::io::Result<Response> {
        self.post(path, "application/json", body).await
    }

    /// `POST path` with a body of `content_type` (a raw payload, its envelope in `path`'s
    /// query string).
    pub(crate) async fn post(
        &mut self,
        path: &str,
        content_type: &str,
        body: &[u8],
    ) -> std::io::Result<Response> {
        self.send("POST", path, content_type, body).await
    }

    /// `PUT path` with a JSON body.
    pub(crate) async fn put_json(&mut self, path: &str, body: &[u8]) -> std::io::Result<Response> {
        self.send("PUT", path, "application/json", body).await
    }

    async fn send(
        &mut self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &[u8],
    ) -> std::io::Result<Response> {
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\
             Content-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
            self.addr,
            self.api_key,
            body.len()
        );
        self.request(head.as_bytes(), body).await
    }

    /// `GET path`.
    pub(crate) async fn get(&mut self, path: &str) -> std::io::Result<Response> {
        let head = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\r\n",
            self.addr, self.api_key
        );
        self.request(head.as_bytes(), &[]).await
    }

    async fn request(&mut self, head: &[u8], body: &[u8]) -> std::io::Result<Response> {
        let outcome = tokio::time::timeout(REQUEST_TIMEOUT, self.exchange(head, body)).await;
        let result = match outcome {
            Ok(r) => r,
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no response within {REQUEST_TIMEOUT:?}"),
            )),
        };
        if result.is_err() {
            // Whatever state the connection is in, the next request starts afresh.
            self.stream = None;
        }
        result
    }

    async fn exchange(&mut self, head: &[u8], body: &[u8]) -> std::io::Result<Response> {
        let stream = match &mut self.stream {
            Some(s) => s,
            None => {
                let s = TcpStream::connect(self.addr).await?;
                s.set_nodelay(true)?;
                self.buffer.clear();
                self.stream.insert(s)
            }
        };
        stream.write_all(head).await?;
        if !body.is_empty() {
            stream.write_all(body).await?;
        }
        let parsed = loop {
            match http::parse_head(&self.buffer).map_err(invalid)? {
                Some(h) => break h,
                None => read_more(stream, &mut self.buffer).await?,
            }
        };
        self.buffer.drain(..parsed.len);
        let body = match parsed.body {
            BodyLength::None => Vec::new(),
            BodyLength::Fixed(n) => {
                let n = usize::try_from(n)
                    .ok()
                    .filter(|&n| n <= MAX_BODY_BYTES)
                    .ok_or_else(|| invalid(format!("response body of {n} bytes")))?;
                while self.buffer.len() < n {
                    read_more(stream, &mut self.buffer).await?;
                }
                self.buffer.drain(..n).collect()
            }
            BodyLength::Chunked => {
                let mut decoder = ChunkedDecoder::default();
                let mut out = Vec::new();
                loop {
                    let (used, chunk) = decoder.decode(&self.buffer).map_err(invalid)?;
                    let ended = match chunk {
                        Chunk::Data(d) => {
                            out.extend_from_slice(d);
                            false
                        }
                        Chunk::End => true,
                        Chunk::NeedMore => {
                            self.buffer.drain(..used);
                            read_more(stream, &mut self.buffer).await?;
                            continue;
                        }
                    };
                    self.buffer.drain(..used);
                    if out.len() > MAX_BODY_BYTES {
                        return Err(invalid("chunked response body too large"));
                    }
                    if ended {
                        break out;
                    }
                }
            }
            BodyLength::UntilClose => {
                let mut chunk = [0u8; 16 * 1024];
                loop {
                    let n = stream.read(&mut chunk).await?;
                    if n == 0 {
                        break;
                    }
                    self.buffer.extend_from_slice(&chunk[..n]);
                    if self.buffer.len() > MAX_BODY_BYTES {
                        return Err(invalid("response body too large"));
                    }
                }
                std::mem::take(&mut self.buffer)
            }
        };
        if !parsed.keep_alive {
            self.stream = None;
        }
        Ok(Response {
            status: parsed.status,
            body,
        })
    }
}

async fn read_more(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> std::io::Result<()> {
    let mut chunk = [0u8; 16 * 1024];
    let n = stream.read(&mut chunk).await?;
    if n == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the server closed the connection",
        ));
    }
    buffer.extend_from_slice(&chunk[..n]);
    Ok(())
}

fn invalid(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// A server that answers each request on one connection in turn with the given responses,
    /// and records what it read.
    async fn stand_in(
        responses: Vec<&'static [u8]>,
    ) -> (SocketAddr, tokio::task::JoinHandle<Vec<u8>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            for r in responses {
                let mut buf = [0u8; 4096];
                // Read until the end of a request head (bodies here are small and arrive with it).
                loop {
                    let n = s.read(&mut buf).await.unwrap();
                    seen.extend_from_slice(&buf[..n]);
                    if n == 0 || seen.windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
                s.write_all(r).await.unwrap();
            }
            seen
        });
        (addr, task)
    }

    #[tokio::test]
    async fn keeps_the_connection_for_fixed_and_chunked_bodies() {
        let (addr, server) = stand_in(vec![
            b"HTTP/1.1 202 Accepted\r\ncontent-length: 2\r\n\r\n{}",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        ])
        .await;
        let mut c = ApiConnection::new(addr, "k3y");
        let r = c.post_json("/v1/notifications", b"[1]").await.unwrap();
        assert_eq!(
            r,
            Response {
                status: 202,
                body: b"{}".to_vec()
            }
        );
        let r = c.get("/metrics").await.unwrap();
        assert_eq!(
            r,
            Response {
                status: 200,
                body: b"abcde".to_vec()
            }
        );
        let seen = String::from_utf8(server.await.unwrap()).unwrap();
        assert!(
            seen.starts_with("POST /v1/notifications HTTP/1.1\r\n"),
            "{seen}"
        );
        assert!(seen.contains("Authorization: Bearer k3y\r\n"));
        assert!(seen.contains("Content-Type: application/json\r\nContent-Length: 3\r\n\r\n[1]"));
        assert!(seen.contains("GET /metrics HTTP/1.1\r\n"));
    }

    #[tokio::test]
    async fn a_closed_connection_is_an_error_and_the_next_request_reconnects() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            // The first connection is closed without an answer; the second gets one.
            let (s, _) = listener.accept().await.unwrap();
            drop(s);
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await.unwrap();
            s.write_all(b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-length: 0\r\n\r\n")
                .await
                .unwrap();
        });
        let mut c = ApiConnection::new(addr, "k");
        assert!(c.get("/metrics").await.is_err());
        let r = c.get("/metrics").await.unwrap();
        assert_eq!(r.status, 503);
        assert!(c.stream.is_none(), "connection: close is honoured");
        server.await.unwrap();
    }
}
