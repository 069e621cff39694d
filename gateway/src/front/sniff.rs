//! Looking at a new connection's first bytes without consuming them, on
//! readiness. (How many connections may be looked at at once is
//! [`super::slots`]'s.)
//!
//! A peek returns at once while anything is buffered, so "peek again" is no
//! way to wait for the rest of a head split across segments. Instead each
//! peek that decides nothing also reports `WouldBlock` to tokio, which
//! clears the socket's readiness: the task sleeps until the kernel reports
//! the next segment or the peer's FIN, never on a timer. A peer that closed
//! (or reset) before its head was whole ends the sniff at once.

use std::io;
use std::task::{Context, Poll, Waker};

use tokio::io::{Interest, ReadBuf};
use tokio::net::TcpStream;

/// Peek at `stream` into `buf` until `decide` decides on the bytes that
/// arrived so far; `decide` must decide once `buf` is full. Returns None
/// when the peer closed or reset before a decision. Wakes only when the
/// socket has news (see the module docs); the caller bounds the time.
pub(crate) async fn peek_until<T>(
    stream: &TcpStream,
    buf: &mut [u8],
    mut decide: impl FnMut(&[u8]) -> Option<T>,
) -> io::Result<Option<T>> {
    let mut seen = 0;
    loop {
        let ready = stream.ready(Interest::READABLE).await?;
        let step = stream.try_io(Interest::READABLE, || {
            let n = peek_now(stream, buf)?;
            if n == 0 {
                return Ok(None);
            }
            if n > seen {
                seen = n;
                if let Some(decided) = decide(&buf[..n]) {
                    return Ok(Some(decided));
                }
            }
            if ready.is_read_closed() {
                // Everything before the FIN is buffered and was not enough.
                return Ok(None);
            }
            // Undecided: tokio clears the readiness it saw (unless news came
            // meanwhile) and the next `ready` waits for the next segment.
            Err(io::ErrorKind::WouldBlock.into())
        });
        match step {
            Ok(decided) => return Ok(decided),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
}

/// One non-blocking peek: what is buffered now, `WouldBlock` if nothing.
fn peek_now(stream: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    let mut cx = Context::from_waker(Waker::noop());
    let mut read = ReadBuf::new(buf);
    match stream.poll_peek(&mut cx, &mut read) {
        Poll::Ready(r) => r,
        Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::loopback_pair;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn a_head_in_pieces_is_decided_once_whole() {
        let (mut client, server, _) = loopback_pair().await;
        let sniff = tokio::spawn(async move {
            let mut buf = [0u8; 64];
            let mut calls = 0;
            let decided = peek_until(&server, &mut buf, |b| {
                calls += 1;
                b.ends_with(b"\r\n\r\n").then_some(b.len())
            })
            .await
            .unwrap();
            (decided, calls)
        });
        client.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        client.flush().await.unwrap();
        tokio::task::yield_now().await;
        client.write_all(b"\r\n").await.unwrap();
        let (decided, calls) = sniff.await.unwrap();
        assert_eq!(decided, Some(18));
        // Called for new bytes only, never for the same prefix twice.
        assert!(calls <= 2, "{calls}");
    }

    #[tokio::test]
    async fn a_peer_that_closes_mid_head_ends_the_sniff() {
        let (mut client, server, _) = loopback_pair().await;
        client.write_all(b"POST /x HTTP/1.1\r\n").await.unwrap();
        client.shutdown().await.unwrap();
        let mut buf = [0u8; 64];
        let decided = peek_until(&server, &mut buf, |_| None::<()>).await.unwrap();
        assert_eq!(decided, None);
    }
}
