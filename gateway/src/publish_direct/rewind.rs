//! A connection handed to hyper with the bytes the direct path already
//! read put back in front of it.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// `prefix`, then whatever `stream` reads; writes go to `stream`.
#[derive(Debug)]
pub struct Rewind {
    prefix: Bytes,
    stream: TcpStream,
}

impl Rewind {
    /// Read `prefix` before `stream`.
    pub(crate) fn new(prefix: Bytes, stream: TcpStream) -> Self {
        Rewind { prefix, stream }
    }

    /// What is left of the prefix, and the stream.
    pub fn into_parts(self) -> (Bytes, TcpStream) {
        (self.prefix, self.stream)
    }
}

impl AsyncRead for Rewind {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.prefix.is_empty() {
            let n = this.prefix.len().min(buf.remaining());
            buf.put_slice(&this.prefix[..n]);
            this.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Rewind {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn the_prefix_is_read_before_the_stream() {
        let (mut client, server, _) = crate::test_support::loopback_pair().await;
        client.write_all(b" world").await.unwrap();
        client.shutdown().await.unwrap();
        let mut rewind = Rewind::new(Bytes::from_static(b"hello"), server);
        let mut small = [0u8; 3];
        rewind.read_exact(&mut small).await.unwrap();
        assert_eq!(&small, b"hel");
        let mut rest = Vec::new();
        rewind.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"lo world");
        rewind.write_all(b"answer").await.unwrap();
        let (prefix, _) = rewind.into_parts();
        assert!(prefix.is_empty());
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.unwrap();
        assert_eq!(answer, b"answer");
    }
}
