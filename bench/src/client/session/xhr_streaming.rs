//! STOMP over the SockJS xhr-streaming transport.
//!
//! Receiving: `POST {prefix}/{server}/{session}/xhr_streaming` (empty body). The response stays
//! open; its body (chunked, or until close for HTTP/1.0) is a prelude of 2048 `h` and `\n`,
//! then `o\n`, then one SockJS frame per line: `a[...]` arrays of STOMP frames, `h`
//! heartbeats, `c[code,"reason"]`. The server ends a response once it has sent
//! `sockjs.streaming_limit_bytes` (128 KiB), so that browsers can free what they buffered; the
//! session then opens the next one (on the same connection when it may be kept alive), whose
//! body starts with its own prelude and no `o`.
//!
//! Sending: `POST {prefix}/{server}/{session}/xhr_send` with the body `["<STOMP frame>"]`,
//! answered `204`. All the sessions of a worker send on [`SEND_CONNECTIONS`] shared keep-alive
//! connections ([`SendPool`]), so a session costs one socket (its stream) and the worker stays
//! within its file descriptor budget.
//!
//! Memory per open session: the socket, a [`Stream`] of about a hundred bytes (a chunked
//! decoder's state, an empty line buffer), and the hold task. Reads go through a stack buffer
//! taken only once the socket is readable, so an idle session holds no read buffer.

use std::io::ErrorKind;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use tokio::time::{Instant, timeout, timeout_at};
use tokio_util::sync::CancellationToken;

use super::{Counters, Failure, FrameReader, Link, Stage, Target, connect_tcp, is_reset};
use crate::client::http::{self, BodyLength, Chunk, ChunkedDecoder};
use crate::client::sockjs::{self, LineBuffer};

/// Keep-alive connections per worker for `xhr_send` (see the module docs).
pub(crate) const SEND_CONNECTIONS: usize = 1;
/// Bytes read from a socket at a time (a stack buffer, not kept between reads).
const READ_BYTES: usize = 2048;
/// Content type of `xhr_send` bodies, as SockJS clients send them.
const SEND_CONTENT_TYPE: &str = "text/plain;charset=UTF-8";

/// How the current response's body ends.
#[derive(Debug)]
enum Body {
    Chunked(ChunkedDecoder),
    Fixed(u64),
    UntilClose,
    /// The response is over: open the next one.
    Ended,
}

/// The receiving side of one xhr-streaming session.
#[derive(Debug)]
pub(crate) struct Stream {
    target: Arc<Target>,
    /// `{prefix}/{server}/{session}`.
    session: Box<str>,
    tcp: TcpStream,
    body: Body,
    lines: LineBuffer,
    /// Whether the connection may carry the next xhr_streaming request once this one ends.
    keep_alive: bool,
}

impl Stream {
    /// Sends the xhr_streaming request on the current connection and reads the response head;
    /// what came after the head goes to the body.
    async fn start_response(&mut self, stage: Stage) -> Result<(), Failure> {
        let request = http::post_request(
            &self.target.host_header,
            &format!("{}/xhr_streaming", self.session),
            SEND_CONTENT_TYPE,
            b"",
        );
        self.tcp
            .write_all(&request)
            .await
            .map_err(|e| Failure::io(stage, &e))?;
        let (head, rest) = read_head(&mut self.tcp, stage).await?;
        if head.status != 200 {
            return Err(Failure::StreamHttp(head.status));
        }
        self.body = match head.body {
            BodyLength::Chunked => Body::Chunked(ChunkedDecoder::default()),
            BodyLength::Fixed(n) => Body::Fixed(n),
            BodyLength::UntilClose => Body::UntilClose,
            BodyLength::None => {
                return Err(Failure::HttpProtocol(
                    "xhr_streaming response without a body".into(),
                ));
            }
        };
        self.keep_alive = head.keep_alive;
        self.lines.start_response();
        self.feed(&rest)
    }

    /// The current response has ended: opens the next one, on a new connection if this one
    /// may not be reused.
    async fn reopen(&mut self, stage: Stage) -> Result<(), Failure> {
        if !self.keep_alive {
            self.tcp = connect_tcp(self.target.addr, self.target.source).await?;
        }
        self.start_response(stage).await
    }

    fn body_ended(&self) -> bool {
        matches!(self.body, Body::Ended)
    }

    /// Takes body bytes off the wire encoding and into the line buffer.
    fn feed(&mut self, mut bytes: &[u8]) -> Result<(), Failure> {
        let sockjs_err = |e: sockjs::SockJsError| Failure::SockJs(e.to_string());
        match &mut self.body {
            Body::Chunked(decoder) => loop {
                let (used, chunk) = decoder
                    .decode(bytes)
                    .map_err(|e| Failure::HttpProtocol(e.to_string()))?;
                bytes = &bytes[used..];
                match chunk {
                    Chunk::Data(data) => self.lines.push(data).map_err(sockjs_err)?,
                    Chunk::NeedMore => return Ok(()),
                    Chunk::End => {
                        self.body = Body::Ended;
                        return Ok(());
                    }
                }
            },
            Body::Fixed(remaining) => {
                let take = bytes
                    .len()
                    .min(usize::try_from(*remaining).unwrap_or(usize::MAX));
                *remaining -= take as u64;
                let ended = *remaining == 0;
                self.lines.push(&bytes[..take]).map_err(sockjs_err)?;
                if ended {
                    self.body = Body::Ended;
                }
                Ok(())
            }
            Body::UntilClose => self.lines.push(bytes).map_err(sockjs_err),
            // Bytes after the end of a response that was not asked for: ignore them.
            Body::Ended => Ok(()),
        }
    }

    /// Waits until the socket has bytes and reads what is there into the body.
    async fn read_some(&mut self, stage: Stage) -> Result<(), Failure> {
        loop {
            self.tcp
                .readable()
                .await
                .map_err(|e| Failure::io(stage, &e))?;
            let mut buf = [0u8; READ_BYTES];
            match self.tcp.try_read(&mut buf) {
                Ok(0) if matches!(self.body, Body::UntilClose) => {
                    // An HTTP/1.0-style response ends with the connection.
                    self.body = Body::Ended;
                    self.keep_alive = false;
                    return Ok(());
                }
                Ok(0) => return Err(Failure::Closed(stage)),
                Ok(n) => return self.feed(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(Failure::io(stage, &e)),
            }
        }
    }

    /// The next SockJS frame, opening the next response when one ends.
    async fn next_frame(&mut self, stage: Stage) -> Result<sockjs::Frame, Failure> {
        let sockjs_err = |e: sockjs::SockJsError| Failure::SockJs(e.to_string());
        loop {
            if let Some(line) = self.lines.next_frame().map_err(sockjs_err)? {
                return sockjs::parse(line).map_err(sockjs_err);
            }
            if self.body_ended() {
                self.reopen(stage).await?;
            } else {
                self.read_some(stage).await?;
            }
        }
    }

    /// Counts the complete frames received (see [`sockjs::count_stomp_frames`]). `Ok(true)`:
    /// a close frame came.
    fn count_frames(&mut self, frames: &AtomicU64) -> Result<bool, Failure> {
        while let Some(line) = self
            .lines
            .next_frame()
            .map_err(|e| Failure::SockJs(e.to_string()))?
        {
            if line.first() == Some(&b'c') {
                return Ok(true);
            }
            frames.fetch_add(sockjs::count_stomp_frames(line), Ordering::Relaxed);
        }
        self.lines.compact();
        Ok(false)
    }
}

impl Link for Stream {
    async fn send_frame(&mut self, frame: &str, stage: Stage) -> Result<(), Failure> {
        let path = format!("{}/xhr_send", self.session);
        let target = self.target.clone();
        target
            .xhr_sends
            .send(&target, &path, &sockjs::encode(&[frame]), stage)
            .await
    }

    async fn receive(&mut self, buffer: &mut Vec<u8>, stage: Stage) -> Result<(), Failure> {
        loop {
            match self.next_frame(stage).await? {
                sockjs::Frame::Messages(messages) => {
                    for m in messages {
                        buffer.extend_from_slice(m.as_bytes());
                    }
                    return Ok(());
                }
                sockjs::Frame::Heartbeat => {}
                sockjs::Frame::Open => return Err(Failure::SockJs("second open frame".into())),
                sockjs::Frame::Close { code, reason } => {
                    return Err(Failure::SockJsClosed { code, reason });
                }
            }
        }
    }
}

/// Reads a response head from `tcp`; returns it with the bytes that followed it.
async fn read_head(tcp: &mut TcpStream, stage: Stage) -> Result<(http::Head, Vec<u8>), Failure> {
    let mut input = Vec::with_capacity(512);
    loop {
        let mut buf = [0u8; READ_BYTES];
        let n = tcp
            .read(&mut buf)
            .await
            .map_err(|e| Failure::io(stage, &e))?;
        if n == 0 {
            return Err(Failure::Closed(stage));
        }
        input.extend_from_slice(&buf[..n]);
        if let Some(head) =
            http::parse_head(&input).map_err(|e| Failure::HttpProtocol(e.to_string()))?
        {
            let rest = input.split_off(head.len);
            return Ok((head, rest));
        }
    }
}

/// Opens one session: the stream, `o`, then the STOMP handshake through `xhr_send`; returns it
/// once the subscription is live (RECEIPT received).
pub(crate) async fn open(target: Arc<Target>, token: &str) -> Result<Stream, Failure> {
    let deadline = Instant::now() + target.handshake_timeout;
    let tcp = timeout_at(deadline, connect_tcp(target.addr, target.source))
        .await
        .map_err(|_| Failure::Timeout(Stage::Tcp))??;
    let session = format!("{}{}", target.path, sockjs::new_session_path()).into_boxed_str();
    let mut stream = Stream {
        target,
        session,
        tcp,
        body: Body::Ended,
        lines: LineBuffer::default(),
        keep_alive: true,
    };
    let mut frames = FrameReader::new(Stage::Stream);
    timeout_at(deadline, async {
        stream.start_response(Stage::Stream).await?;
        frames.stage = Stage::Open;
        match stream.next_frame(Stage::Open).await? {
            sockjs::Frame::Open => {}
            sockjs::Frame::Close { code, reason } => {
                return Err(Failure::SockJsClosed { code, reason });
            }
            other => return Err(Failure::SockJs(format!("expected o, got {other:?}"))),
        }
        let pipelined = stream.target.pipelined;
        super::stomp_handshake(
            &mut stream,
            super::Login::Jwt(token),
            &mut frames,
            pipelined,
        )
        .await
    })
    .await
    .map_err(|_| Failure::Timeout(frames.stage))??;
    stream.lines.compact();
    Ok(stream)
}

/// Keeps an open session until `cancel`: reads the stream (so the server never sees a stuck
/// reader), counts frames, and opens the next response whenever one ends. A close frame, an
/// error, or a failed reopen counts the session as dropped. Closing is dropping the connection:
/// xhr-streaming has no close handshake, the server times the session out.
pub(crate) async fn hold(mut stream: Stream, cancel: CancellationToken, counters: Arc<Counters>) {
    let dropped = loop {
        match stream.count_frames(&counters.frames_received) {
            Ok(false) => {}
            Ok(true) | Err(_) => break true,
        }
        if stream.body_ended() {
            let limit = stream.target.handshake_timeout;
            match timeout(limit, stream.reopen(Stage::Stream)).await {
                Ok(Ok(())) => continue,
                Ok(Err(_)) | Err(_) => break true,
            }
        }
        tokio::select! {
            biased;
            () = cancel.cancelled() => break false,
            read = stream.read_some(Stage::Receipt) => if read.is_err() {
                break true;
            },
        }
    };
    if dropped {
        counters.dropped.fetch_add(1, Ordering::Relaxed);
    }
}

/// The keep-alive connections a worker's sessions send their frames on. Each send takes one
/// connection (round robin) for its request and response, so sends on one connection are
/// serial; on loopback one connection carries tens of thousands of sends per second.
#[derive(Debug)]
pub(crate) struct SendPool {
    connections: Vec<Mutex<Option<TcpStream>>>,
    next: AtomicUsize,
}

/// How one request on a pool connection went wrong.
enum SendError {
    /// The connection was closed before the response began: a kept-alive connection the server
    /// has let go, worth one retry on a new connection.
    Stale,
    Failed(Failure),
}

impl SendPool {
    pub(crate) fn new(connections: usize) -> Self {
        Self {
            connections: (0..connections.max(1)).map(|_| Mutex::new(None)).collect(),
            next: AtomicUsize::new(0),
        }
    }

    /// `POST path` with `body` to the target; `Ok` when answered 204.
    pub(crate) async fn send(
        &self,
        target: &Target,
        path: &str,
        body: &str,
        stage: Stage,
    ) -> Result<(), Failure> {
        let index = self.next.fetch_add(1, Ordering::Relaxed) % self.connections.len();
        let mut slot = self.connections[index].lock().await;
        let request = http::post_request(
            &target.host_header,
            path,
            SEND_CONTENT_TYPE,
            body.as_bytes(),
        );
        let mut retried = false;
        loop {
            let reused = slot.is_some();
            let conn = match slot.as_mut() {
                Some(conn) => conn,
                None => slot.insert(connect_tcp(target.addr, target.source).await?),
            };
            match exchange(conn, &request, stage).await {
                Ok((status, reusable)) => {
                    if !reusable {
                        *slot = None;
                    }
                    return if status == 204 {
                        Ok(())
                    } else {
                        Err(Failure::SendHttp(status))
                    };
                }
                Err(SendError::Stale) if reused && !retried => {
                    *slot = None;
                    retried = true;
                }
                Err(SendError::Stale) => {
                    *slot = None;
                    return Err(Failure::Closed(stage));
                }
                Err(SendError::Failed(failure)) => {
                    *slot = None;
                    return Err(failure);
                }
            }
        }
    }
}

/// One request and its response head on `conn`. Returns the status and whether the connection
/// can carry the next request: only after a bodiless response that allows it (any other
/// response means the session failed anyway, so its body is not worth reading).
async fn exchange(
    conn: &mut TcpStream,
    request: &[u8],
    stage: Stage,
) -> Result<(u16, bool), SendError> {
    if conn.write_all(request).await.is_err() {
        return Err(SendError::Stale);
    }
    let mut input = Vec::new();
    loop {
        let mut buf = [0u8; 512];
        let n = match conn.read(&mut buf).await {
            Ok(n) => n,
            Err(e) if input.is_empty() && is_reset(e.kind()) => return Err(SendError::Stale),
            Err(e) => return Err(SendError::Failed(Failure::io(stage, &e))),
        };
        if n == 0 {
            return Err(if input.is_empty() {
                SendError::Stale
            } else {
                SendError::Failed(Failure::Closed(stage))
            });
        }
        input.extend_from_slice(&buf[..n]);
        match http::parse_head(&input) {
            Ok(Some(head)) => {
                let reusable =
                    head.keep_alive && head.body == BodyLength::None && input.len() == head.len;
                return Ok((head.status, reusable));
            }
            Ok(None) => {}
            Err(e) => return Err(SendError::Failed(Failure::HttpProtocol(e.to_string()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::net::TcpListener;

    /// Reads one request (head and `Content-Length` body) from `s`; returns (request line, body).
    async fn read_request(s: &mut TcpStream) -> Option<(String, String)> {
        let mut input = Vec::new();
        let mut buf = [0u8; 1024];
        loop {
            if let Some(end) = input.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8(input[..end].to_vec()).unwrap();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("Content-Length: "))
                    .unwrap()
                    .parse()
                    .unwrap();
                while input.len() < end + 4 + length {
                    let n = s.read(&mut buf).await.ok()?;
                    if n == 0 {
                        return None;
                    }
                    input.extend_from_slice(&buf[..n]);
                }
                let body = String::from_utf8(input[end + 4..end + 4 + length].to_vec()).unwrap();
                let line = head.lines().next().unwrap().to_owned();
                return Some((line, body));
            }
            let n = s.read(&mut buf).await.ok()?;
            if n == 0 {
                return None;
            }
            input.extend_from_slice(&buf[..n]);
        }
    }

    fn chunk(data: &str) -> String {
        format!("{:x}\r\n{data}\r\n", data.len())
    }

    /// A stand-in SockJS server for one xhr-streaming session. The first streaming response
    /// carries the prelude, `o`, and the STOMP replies as the sends arrive; after the RECEIPT
    /// it ends (as a server does at its byte limit); the second, on the same connection, has a
    /// prelude and a heartbeat, then a close frame. The sends share one connection, which the
    /// server closes after the first send to check the pool reconnects.
    #[tokio::test]
    async fn handshake_reopen_and_close_against_a_stand_in() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (sends_tx, mut sends_rx) = tokio::sync::mpsc::channel::<String>(4);
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let (line, body) = read_request(&mut stream).await.unwrap();
            assert!(line.starts_with("POST /sockjs/"), "{line}");
            assert!(line.ends_with("/xhr_streaming HTTP/1.1"), "{line}");
            assert_eq!(body, "");
            let session = line
                .trim_start_matches("POST ")
                .trim_end_matches("/xhr_streaming HTTP/1.1")
                .to_owned();
            let head = "HTTP/1.1 200 OK\r\nContent-Type: application/javascript;charset=UTF-8\r\n\
                        Transfer-Encoding: chunked\r\n\r\n";
            let prelude = format!("{}\n", "h".repeat(2048));
            let mut out = head.to_owned();
            out.push_str(&chunk(&prelude));
            out.push_str(&chunk("o\n"));
            stream.write_all(out.as_bytes()).await.unwrap();

            // Sends: CONNECT on one connection, which is then closed; SUBSCRIBE on a new one.
            let mut kept = Vec::new();
            for (i, reply) in [
                r#"a["CONNECTED\nversion:1.2\n\n\u0000"]"#,
                r#"a["RECEIPT\nreceipt-id:r-0\n\n\u0000"]"#,
            ]
            .into_iter()
            .enumerate()
            {
                let (mut send, _) = listener.accept().await.unwrap();
                let (line, body) = read_request(&mut send).await.unwrap();
                assert_eq!(line, format!("POST {session}/xhr_send HTTP/1.1"));
                sends_tx.send(body).await.unwrap();
                let connection = if i == 0 { "Connection: close\r\n" } else { "" };
                send.write_all(format!("HTTP/1.1 204 No Content\r\n{connection}\r\n").as_bytes())
                    .await
                    .unwrap();
                // Split a frame over two chunks.
                let frame = format!("{reply}\n");
                let (a, b) = frame.split_at(10);
                stream
                    .write_all(format!("{}{}", chunk(a), chunk(b)).as_bytes())
                    .await
                    .unwrap();
                if i == 1 {
                    // Limit reached: end the response; keep the send connection open.
                    stream.write_all(b"0\r\n\r\n").await.unwrap();
                    kept.push(send);
                }
            }

            let (line, _) = read_request(&mut stream).await.unwrap();
            assert_eq!(line, format!("POST {session}/xhr_streaming HTTP/1.1"));
            let mut out = head.to_owned();
            out.push_str(&chunk(&prelude));
            out.push_str(&chunk("h\n"));
            stream.write_all(out.as_bytes()).await.unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
            stream
                .write_all(chunk("c[3000,\"Go away!\"]\n").as_bytes())
                .await
                .unwrap();
            let _ = stream.read(&mut [0u8; 16]).await;
        });

        let target = Arc::new(Target {
            transport: crate::client::transport::Transport::XhrStreaming,
            host_header: addr.to_string(),
            path: "/sockjs".into(),
            addr,
            source: None,
            handshake_timeout: Duration::from_secs(10),
            pipelined: false,
            xhr_sends: SendPool::new(1),
        });
        let stream = open(target, "tok").await.unwrap();
        let connect = sends_rx.recv().await.unwrap();
        let connect: Vec<String> = serde_json::from_str(&connect).unwrap();
        assert!(connect[0].starts_with("CONNECT\n") && connect[0].contains("\npasscode:tok\n"));
        let subscribe = sends_rx.recv().await.unwrap();
        assert!(subscribe.starts_with(r#"["SUBSCRIBE\n"#), "{subscribe}");

        let counters = Arc::new(Counters::default());
        hold(stream, CancellationToken::new(), counters.clone()).await;
        assert_eq!(
            counters.dropped.load(Ordering::Relaxed),
            1,
            "the close frame ends it"
        );
        assert_eq!(
            counters.frames_received.load(Ordering::Relaxed),
            1,
            "one heartbeat"
        );
        server.await.unwrap();
    }

    #[tokio::test]
    async fn a_refused_stream_is_a_failure_by_status() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            read_request(&mut s).await.unwrap();
            s.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                .await
                .unwrap();
        });
        let target = Arc::new(Target {
            transport: crate::client::transport::Transport::XhrStreaming,
            host_header: addr.to_string(),
            path: "/nothing".into(),
            addr,
            source: None,
            handshake_timeout: Duration::from_secs(10),
            pipelined: false,
            xhr_sends: SendPool::new(1),
        });
        assert_eq!(
            open(target, "tok").await.unwrap_err(),
            Failure::StreamHttp(404)
        );
    }
}
