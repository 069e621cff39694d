//! lapin's connections, with every frame bounded before lapin reads it.
//!
//! lapin parses frames with the recursive codec [`crate::wire::nesting`]
//! guards against, on a thread of its own: one message with headers
//! nested a few thousand levels deep aborts a router, and aborts it again
//! on every restart while the message is queued. lapin has no hook between
//! the socket and its parser, but it takes its sockets from the runtime it
//! is given. So lapin connects through [`runtime`]: tokio's, whose TCP
//! streams are [`GuardedStream`]s. A guarded stream reads the broker's
//! bytes frame by frame and hands lapin:
//! - a method frame whole, once [`nesting::check_method`] passed it, or an
//!   error that fails the connection with the reason (a `connection.start`
//!   nested too deep: a hostile broker);
//! - a content header whose `headers` are over the bounds with those
//!   headers replaced by [`nesting::REJECTED_HEADER`] and the reason
//!   ([`nesting::defuse_header`]): the consumer dead-letters it;
//! - bodies and heartbeats as they come, without holding them.
//!
//! `amqps://` connections run TLS above the TCP stream, where these bytes
//! are ciphertext: they are not guarded.

use std::fmt;
use std::future::Future;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use async_rs::traits::Reactor;
use async_rs::util::RuntimeParts;
use async_rs::{Runtime, Tokio};
use bytes::{Buf, BytesMut};
use futures_util::io::{AsyncRead, AsyncWrite};
use futures_util::stream::Stream;

use crate::wire::nesting::{self, Bounds};

/// The runtime a guarded lapin connection runs on.
pub type GuardedRuntime = Runtime<RuntimeParts<Tokio, Guarded>>;

/// tokio's runtime for lapin, its TCP streams guarded.
pub fn runtime() -> GuardedRuntime {
    Runtime::new(RuntimeParts::new(
        Tokio::current(),
        Guarded(Tokio::current()),
    ))
}

/// tokio's reactor, but for the streams it connects: [`GuardedStream`]s.
#[derive(Clone, Debug)]
pub struct Guarded(Tokio);

impl Reactor for Guarded {
    type TcpStream = GuardedStream<<Tokio as Reactor>::TcpStream>;
    type Sleep = <Tokio as Reactor>::Sleep;

    /// Not offered: lapin connects through `tcp_connect_addr`, and a socket
    /// registered here would bypass the guard.
    fn register<H: Read + Write + Send + 'static>(
        &self,
        _socket: H,
    ) -> io::Result<impl AsyncRead + AsyncWrite + Send + Unpin + 'static> {
        Err::<futures_util::io::Cursor<Vec<u8>>, _>(io::Error::other(
            "a guarded runtime registers no foreign sockets",
        ))
    }

    fn sleep(&self, dur: Duration) -> Self::Sleep {
        self.0.sleep(dur)
    }

    fn interval(&self, dur: Duration) -> impl Stream<Item = Instant> + Send + 'static {
        self.0.interval(dur)
    }

    fn tcp_connect_addr(
        &self,
        addr: SocketAddr,
    ) -> impl Future<Output = io::Result<Self::TcpStream>> + Send + 'static {
        let inner = self.0.tcp_connect_addr(addr);
        async move { inner.await.map(GuardedStream::new) }
    }
}

/// The largest frame a guarded stream holds whole (a method or a content
/// header; bodies pass without being held): far above any `frame_max`
/// lapin negotiates (128 KiB), so only a broker that lies meets it.
pub const MAX_HELD_FRAME: usize = 16 << 20;

const METHOD: u8 = 1;
const HEADER: u8 = 2;
/// Type, channel, size.
const HEAD: usize = 7;
/// Bytes asked of the socket at a time.
const READ_CHUNK: usize = 16 * 1024;

/// A broker's stream, read frame by frame (see the module docs).
pub struct GuardedStream<S> {
    inner: S,
    /// Read from the broker, not yet handed on.
    raw: BytesMut,
    /// Checked, for lapin.
    out: BytesMut,
    /// Bytes of the current frame still to pass through as they are (a
    /// body or a heartbeat).
    pass: usize,
    /// Everything passes: the broker answered with a protocol header, or
    /// the stream ended.
    through: bool,
    /// No frame seen yet.
    first: bool,
    bounds: Bounds,
}

impl<S> fmt::Debug for GuardedStream<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuardedStream")
            .field("raw", &self.raw.len())
            .field("out", &self.out.len())
            .finish_non_exhaustive()
    }
}

impl<S> GuardedStream<S> {
    /// `inner`, guarded with the default bounds.
    pub fn new(inner: S) -> Self {
        GuardedStream {
            inner,
            raw: BytesMut::new(),
            out: BytesMut::new(),
            pass: 0,
            through: false,
            first: true,
            bounds: Bounds::default(),
        }
    }

    /// Move what `raw` holds of whole frames (and of passing ones) to
    /// `out`, checked. An error fails the connection.
    fn sort(&mut self) -> io::Result<()> {
        loop {
            if self.through {
                let rest = self.raw.split();
                self.out.extend_from_slice(&rest);
                return Ok(());
            }
            if self.pass > 0 {
                let n = self.pass.min(self.raw.len());
                let passing = self.raw.split_to(n);
                self.out.extend_from_slice(&passing);
                self.pass -= n;
                if self.pass > 0 || self.raw.is_empty() {
                    return Ok(());
                }
                continue;
            }
            if self.first && self.raw.first() == Some(&b'A') {
                // A protocol header: the broker refuses our version, and
                // lapin says so.
                self.through = true;
                continue;
            }
            if self.raw.len() < HEAD {
                return Ok(());
            }
            self.first = false;
            let kind = self.raw[0];
            let size = u32::from_be_bytes([self.raw[3], self.raw[4], self.raw[5], self.raw[6]]);
            let whole = HEAD + size as usize + 1;
            if !matches!(kind, METHOD | HEADER) {
                // Bodies, heartbeats, and types lapin refuses on its own.
                self.pass = whole;
                continue;
            }
            if whole > MAX_HELD_FRAME {
                return Err(refused(format!(
                    "a frame of {whole} bytes, above {MAX_HELD_FRAME}"
                )));
            }
            if self.raw.len() < whole {
                return Ok(());
            }
            let frame = self.raw.split_to(whole);
            let payload = &frame[HEAD..whole - 1];
            if kind == METHOD {
                nesting::check_method(payload, self.bounds)
                    .map_err(|why| refused(why.to_string()))?;
                self.out.extend_from_slice(&frame);
                continue;
            }
            match nesting::defuse_header(payload, self.bounds) {
                Ok(Some(defused)) => {
                    tracing::warn!(
                        channel = u16::from_be_bytes([frame[1], frame[2]]),
                        "a delivery's headers are over the bounds: replaced by {}",
                        nesting::REJECTED_HEADER
                    );
                    self.out.extend_from_slice(&frame[..3]);
                    self.out
                        .extend_from_slice(&(defused.len() as u32).to_be_bytes());
                    self.out.extend_from_slice(&defused);
                    self.out.extend_from_slice(&frame[whole - 1..]);
                }
                // Within bounds, or not a header lapin can read at all (it
                // refuses that without recursion).
                Ok(None) | Err(_) => self.out.extend_from_slice(&frame),
            }
        }
    }
}

fn refused(why: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("AMQP frame refused before it was read: {why}"),
    )
}

impl<S: AsyncRead + Unpin> AsyncRead for GuardedStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        loop {
            if !this.out.is_empty() {
                let n = buf.len().min(this.out.len());
                buf[..n].copy_from_slice(&this.out[..n]);
                this.out.advance(n);
                return Poll::Ready(Ok(n));
            }
            let start = this.raw.len();
            this.raw.resize(start + READ_CHUNK, 0);
            let read = Pin::new(&mut this.inner).poll_read(cx, &mut this.raw[start..]);
            let n = match read {
                Poll::Ready(Ok(n)) => n,
                other => {
                    this.raw.truncate(start);
                    return other;
                }
            };
            this.raw.truncate(start + n);
            if n == 0 {
                // The end: whatever is left goes on as it is (lapin reports
                // the cut frame), then the end itself.
                if this.raw.is_empty() {
                    return Poll::Ready(Ok(0));
                }
                this.through = true;
            }
            this.sort()?;
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for GuardedStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_close(cx)
    }
}

#[cfg(test)]
mod tests;
