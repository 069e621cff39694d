//! [`WriteDeadline`]: writes that fail once one has been waiting for the
//! socket longer than the deadline.
//!
//! A client that sends requests and never reads their answers fills the
//! socket's buffers; the server's next write then waits for it forever, and
//! the connection with its buffers stays. Here the wait is bounded: a
//! write, flush or shutdown that stays pending for the deadline, without
//! the peer taking a single byte meanwhile, fails with `TimedOut` (counted
//! once), and so does every write after it; the server then drops the
//! connection. A connection with nothing to write is not affected, however
//! long it is idle, and a slow reader that keeps taking bytes is never
//! cut.
//!
//! What an upgraded connection (a WebSocket) does after its handshake is
//! its session's business: the gateway takes the socket out of the wrapper
//! ([`WriteDeadline::into_inner`]) at the upgrade, and the session's own
//! slow-consumer rules apply from there.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// An IO whose writes fail once one made no progress for the deadline.
#[derive(Debug)]
pub struct WriteDeadline<T> {
    io: T,
    limit: Duration,
    /// Set while a write is waiting for the socket: when it fails. Kept
    /// (and reset) from one wait to the next; made at the first.
    stall: Option<Pin<Box<Sleep>>>,
    /// Whether a write is waiting now (`stall` runs).
    waiting: bool,
    /// The deadline passed: every write fails from here on.
    expired: bool,
    timeouts: Counter,
}

impl<T> WriteDeadline<T> {
    /// `io` whose writes may wait `limit` at most; a timeout counted in
    /// `timeouts`.
    pub fn new(io: T, limit: Duration, timeouts: Counter) -> Self {
        WriteDeadline {
            io,
            limit,
            stall: None,
            waiting: false,
            expired: false,
            timeouts,
        }
    }

    /// The IO itself, no longer bounded.
    pub fn into_inner(self) -> T {
        self.io
    }

    /// The IO itself.
    pub fn get_ref(&self) -> &T {
        &self.io
    }

    /// Pass on what the IO answered a write (flush, shutdown): ready is
    /// progress; pending starts the wait, or fails once it has lasted the
    /// deadline.
    fn bound<R>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<R>>,
    ) -> Poll<io::Result<R>> {
        if polled.is_ready() {
            self.waiting = false;
            return polled;
        }
        let deadline = Instant::now() + self.limit;
        let stall = match &mut self.stall {
            Some(stall) if self.waiting => stall,
            Some(stall) => {
                stall.as_mut().reset(deadline);
                stall
            }
            None => self
                .stall
                .insert(Box::pin(tokio::time::sleep_until(deadline))),
        };
        self.waiting = true;
        ready!(stall.as_mut().poll(cx));
        self.expired = true;
        self.timeouts.inc();
        tracing::debug!(
            write_timeout_ms = self.limit.as_millis() as u64,
            "the peer took no answer bytes in time; connection closed"
        );
        Poll::Ready(Err(self.timed_out()))
    }

    fn timed_out(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "the peer took no bytes for {} ms (http.write_timeout_ms)",
                self.limit.as_millis()
            ),
        )
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteDeadline<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.expired {
            return Poll::Ready(Err(self.timed_out()));
        }
        let this = &mut *self;
        let polled = Pin::new(&mut this.io).poll_write(cx, buf);
        this.bound(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.expired {
            return Poll::Ready(Err(self.timed_out()));
        }
        let this = &mut *self;
        let polled = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.bound(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.expired {
            return Poll::Ready(Err(self.timed_out()));
        }
        let this = &mut *self;
        let polled = Pin::new(&mut this.io).poll_flush(cx);
        this.bound(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.expired {
            return Poll::Ready(Err(self.timed_out()));
        }
        let this = &mut *self;
        let polled = Pin::new(&mut this.io).poll_shutdown(cx);
        this.bound(cx, polled)
    }
}

/// A listener for `axum::serve` whose connections come wrapped in
/// [`WriteDeadline`].
#[derive(Debug)]
pub struct DeadlineListener {
    listener: tokio::net::TcpListener,
    deadlines: super::Deadlines,
}

impl DeadlineListener {
    /// Accept on `listener`, wrapping each connection by `deadlines`.
    pub fn new(listener: tokio::net::TcpListener, deadlines: super::Deadlines) -> Self {
        DeadlineListener {
            listener,
            deadlines,
        }
    }
}

impl axum::serve::Listener for DeadlineListener {
    type Io = WriteDeadline<tokio::net::TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, addr) = axum::serve::Listener::accept(&mut self.listener).await;
        (self.deadlines.wrap(io), addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// What an in-memory pipe holds before its writer waits.
    const PIPE: usize = 64 * 1024;

    #[tokio::test(start_paused = true)]
    async fn a_write_nobody_takes_fails_at_the_deadline_and_is_counted_once() {
        let (_client, server) = tokio::io::duplex(PIPE);
        let counter = Counter::default();
        let limit = Duration::from_millis(100);
        let mut server = WriteDeadline::new(server, limit, counter.clone());
        let started = Instant::now();
        let error = server.write_all(&[0u8; 2 * PIPE]).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), limit);
        assert_eq!(counter.get(), 1);
        // Every write after it fails too, without counting again.
        let again = server.write_all(b"x").await.unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::TimedOut);
        assert!(server.flush().await.is_err());
        assert_eq!(counter.get(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_reader_that_keeps_taking_bytes_is_not_cut() {
        let (mut client, server) = tokio::io::duplex(PIPE);
        let counter = Counter::default();
        let mut server = WriteDeadline::new(server, Duration::from_millis(500), counter.clone());
        let total = 100 * PIPE;
        let writer = tokio::spawn(async move {
            server.write_all(&vec![7u8; total]).await?;
            server.shutdown().await
        });
        // The reader empties the pipe every 400 ms: the writer waits each
        // time, never as long as the deadline. 40 s in all.
        let mut got = 0;
        let mut buf = vec![0u8; PIPE];
        loop {
            tokio::time::sleep(Duration::from_millis(400)).await;
            match client.read(&mut buf).await.unwrap() {
                0 => break,
                n => got += n,
            }
        }
        writer.await.unwrap().unwrap();
        assert_eq!(got, total);
        assert_eq!(counter.get(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_with_nothing_to_write_is_not_affected() {
        let (mut client, server) = tokio::io::duplex(PIPE);
        let counter = Counter::default();
        let mut server = WriteDeadline::new(server, Duration::from_millis(100), counter.clone());
        // Idle far longer than the deadline, then a write that fits.
        tokio::time::sleep(Duration::from_secs(60)).await;
        server.write_all(b"late").await.unwrap();
        server.flush().await.unwrap();
        let mut got = [0u8; 4];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"late");
        assert_eq!(counter.get(), 0);
    }
}
