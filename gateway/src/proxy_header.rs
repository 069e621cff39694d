//! The PROXY protocol header at the start of a connection (`[proxy]
//! protocol = true`): who the client is, as a trusted proxy says.
//!
//! The accept loop calls [`read`] before anything else reads the socket.
//! It peeks (nothing is consumed until a header is whole, so a connection
//! without one reaches the HTTP side untouched) and waits on readiness,
//! within the connection's header deadline (`session.header_timeout_ms`
//! from accept, the same deadline its request head then has). The header
//! is parsed by the pure [`herald_protocol::proxy::parse`].
//!
//! - From a trusted peer: a header names the client (v2 `LOCAL` and v1
//!   `UNKNOWN` name none: the peer's own address stays); no header is a
//!   direct connection (the proxy's health checks, a local probe).
//! - From any other peer a header is refused: nobody else may say who the
//!   client is.
//! - A malformed header, one over [`MAX_HEADER`] bytes, or one begun but
//!   not whole by the deadline, is refused. (A connection that sends
//!   nothing by then is closed and counted as `header_timeout`, as the
//!   front ([`crate::front`]) counts a request head that never came.)
//!
//! A refused connection is closed without an answer, logged with the peer
//! and the reason, and counted in `herald_connections_refused_total`
//! (`proxy_untrusted`, `proxy_malformed`, `proxy_timeout`).

use std::net::SocketAddr;

use herald_protocol::proxy::{self, Addresses, Detected, ProxyError};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout_at};

use crate::front::sniff::peek_until;
use crate::metrics::RefuseReason;

/// The longest PROXY header accepted. HAProxy's v2 header is 28 bytes for
/// IPv4 and 52 for IPv6; with every optional TLV it can add (ALPN,
/// authority, unique id, TLS details) it stays well under 1 KiB. The
/// buffer a connection holds while its header arrives is this size.
pub const MAX_HEADER: usize = 1024;

/// Bytes that always tell a header from anything else ([`proxy::detect`]
/// decides within the v2 signature's 12).
const DETECT_LEN: usize = 16;

/// Why a connection was refused.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// A PROXY header from a peer not in `proxy.trusted`.
    #[error("PROXY header from an untrusted peer")]
    Untrusted,
    /// A malformed or oversized header.
    #[error("{0}")]
    Malformed(ProxyError),
    /// The header was not whole by the deadline.
    #[error("PROXY header not whole within session.header_timeout_ms")]
    Timeout,
    /// Nothing at all arrived by the deadline: no PROXY header was begun,
    /// so this is the request head's timeout, counted as the front
    /// counts it (`header_timeout`).
    #[error("nothing sent within session.header_timeout_ms")]
    Silent,
    /// The peer closed, or the socket failed, before a header was whole:
    /// nothing to answer, not counted.
    #[error("connection ended before its PROXY header was whole")]
    Ended,
}

impl Refusal {
    /// The metric label, None when not counted.
    pub fn reason(&self) -> Option<RefuseReason> {
        match self {
            Refusal::Untrusted => Some(RefuseReason::ProxyUntrusted),
            Refusal::Malformed(_) => Some(RefuseReason::ProxyMalformed),
            Refusal::Timeout => Some(RefuseReason::ProxyTimeout),
            Refusal::Silent => Some(RefuseReason::HeaderTimeout),
            Refusal::Ended => None,
        }
    }
}

/// What the first bytes of a connection held.
enum Seen {
    /// No header: a direct connection.
    Direct,
    /// A whole header from a trusted peer.
    Header(proxy::Header),
}

/// Read the PROXY header of a connection from `peer` if it has one, by
/// `deadline`; the client's address, or why the connection is refused.
pub async fn read(
    stream: &mut TcpStream,
    peer: SocketAddr,
    trusted: bool,
    deadline: Instant,
) -> Result<SocketAddr, Refusal> {
    // An untrusted peer's first bytes only need telling apart from a
    // header (12 bytes decide); a trusted one's may be a whole header.
    let mut buf = vec![0u8; if trusted { MAX_HEADER } else { DETECT_LEN }];
    // Whether anything arrived: a connection that sends nothing by the
    // deadline (a speculative browser connection) is no slow header.
    let started = std::sync::atomic::AtomicBool::new(false);
    let decide = |bytes: &[u8]| -> Option<Result<Seen, Refusal>> {
        started.store(true, std::sync::atomic::Ordering::Relaxed);
        match proxy::detect(bytes) {
            Detected::NeedMore => return None,
            Detected::NotProxy => return Some(Ok(Seen::Direct)),
            Detected::Proxy if !trusted => return Some(Err(Refusal::Untrusted)),
            Detected::Proxy => {}
        }
        match proxy::parse(bytes, MAX_HEADER) {
            Ok(Some(header)) => Some(Ok(Seen::Header(header))),
            // The buffer is MAX_HEADER long and parse never needs more.
            Ok(None) => None,
            Err(e) => Some(Err(Refusal::Malformed(e))),
        }
    };
    let seen = match timeout_at(deadline, peek_until(stream, &mut buf, decide)).await {
        Err(_) if started.load(std::sync::atomic::Ordering::Relaxed) => {
            return Err(Refusal::Timeout);
        }
        Err(_) => return Err(Refusal::Silent),
        Ok(Err(_)) | Ok(Ok(None)) => return Err(Refusal::Ended),
        Ok(Ok(Some(decided))) => decided?,
    };
    let header = match seen {
        Seen::Direct => return Ok(peer),
        Seen::Header(h) => h,
    };
    // Consume exactly the header: the request behind it stays unread.
    let consumed = timeout_at(deadline, stream.read_exact(&mut buf[..header.len])).await;
    match consumed {
        Err(_) => return Err(Refusal::Timeout),
        Ok(Err(_)) => return Err(Refusal::Ended),
        Ok(Ok(_)) => {}
    }
    Ok(match header.addresses {
        Addresses::Tcp { source, .. } => SocketAddr::new(source.ip().to_canonical(), source.port()),
        Addresses::Unknown => peer,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::AsyncWriteExt;

    use super::*;
    use crate::test_support::loopback_pair;

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    #[tokio::test]
    async fn a_trusted_header_names_the_client_and_leaves_the_request() {
        let (mut client, mut server, peer) = loopback_pair().await;
        let source: SocketAddr = "192.0.2.7:51234".parse().unwrap();
        let header = proxy::encode_v2(source, "127.0.0.1:8000".parse().unwrap());
        // Split across two writes: the reader waits for the rest.
        client.write_all(&header[..10]).await.unwrap();
        let rest = [&header[10..], b"GET / HTTP/1.1\r\n"].concat();
        let writer = tokio::spawn(async move {
            tokio::task::yield_now().await;
            client.write_all(&rest).await.unwrap();
            client
        });
        assert_eq!(read(&mut server, peer, true, soon()).await.unwrap(), source);
        let _client = writer.await.unwrap();
        let mut line = [0u8; 16];
        server.read_exact(&mut line).await.unwrap();
        assert_eq!(&line, b"GET / HTTP/1.1\r\n");
    }

    #[tokio::test]
    async fn no_header_is_a_direct_connection_and_nothing_is_consumed() {
        let (mut client, mut server, peer) = loopback_pair().await;
        client.write_all(b"PUT /x HTTP/1.1\r\n").await.unwrap();
        assert_eq!(read(&mut server, peer, true, soon()).await.unwrap(), peer);
        let mut line = [0u8; 3];
        server.read_exact(&mut line).await.unwrap();
        assert_eq!(&line, b"PUT");
    }

    #[tokio::test]
    async fn untrusted_malformed_and_slow_headers_are_refused() {
        let (mut client, mut server, peer) = loopback_pair().await;
        client
            .write_all(b"PROXY TCP4 6.6.6.6 127.0.0.1 1 2\r\n")
            .await
            .unwrap();
        let r = read(&mut server, peer, false, soon()).await;
        assert!(matches!(r, Err(Refusal::Untrusted)), "{r:?}");

        let (mut client, mut server, peer) = loopback_pair().await;
        client
            .write_all(b"PROXY TCP4 6.6.6.6 127.0.0.1 99999 2\r\n")
            .await
            .unwrap();
        let r = read(&mut server, peer, true, soon()).await;
        assert!(matches!(r, Err(Refusal::Malformed(_))), "{r:?}");

        let (mut client, mut server, peer) = loopback_pair().await;
        let mut huge = proxy::V2_SIGNATURE.to_vec();
        huge.extend_from_slice(&[0x21, 0x11, 0x10, 0x00]);
        client.write_all(&huge).await.unwrap();
        let r = read(&mut server, peer, true, soon()).await;
        assert!(
            matches!(r, Err(Refusal::Malformed(ProxyError::TooLong { .. }))),
            "{r:?}"
        );

        let (mut client, mut server, peer) = loopback_pair().await;
        client.write_all(b"PROXY TCP4 6.6.").await.unwrap();
        let deadline = Instant::now() + Duration::from_millis(50);
        let r = read(&mut server, peer, true, deadline).await;
        assert!(matches!(r, Err(Refusal::Timeout)), "{r:?}");
        assert_eq!(r.unwrap_err().reason(), Some(RefuseReason::ProxyTimeout));

        let (client, mut server, peer) = loopback_pair().await;
        drop(client);
        let r = read(&mut server, peer, true, soon()).await;
        assert!(matches!(r, Err(Refusal::Ended)), "{r:?}");

        let (_silent, mut server, peer) = loopback_pair().await;
        let deadline = Instant::now() + Duration::from_millis(50);
        let r = read(&mut server, peer, true, deadline).await;
        assert!(matches!(r, Err(Refusal::Silent)), "{r:?}");
        assert_eq!(r.unwrap_err().reason(), Some(RefuseReason::HeaderTimeout));
    }
}
