//! `GET /ws` upgrades served straight on the socket.
//!
//! The front already looks at a new connection's request head without
//! consuming it ([`crate::front`]). When the head is a `GET /ws` upgrade
//! that [`super::check`] accepts, it is answered here: the head is read
//! off the socket into the buffer it was peeked into, `101 Switching
//! Protocols` is written from that buffer too, and the session runs on the
//! socket in a task of its own. hyper never sees the connection: no
//! connection with its buffers, no request and response maps, no routing,
//! no upgrade hand-off between two tasks. It is the same handshake [`super::accept`] answers, and the same session.
//!
//! Anything else is left to hyper, untouched (nothing was consumed), and
//! answered there as before: a refused upgrade (it says why), a request
//! with a body, HTTP/1.0, a gateway at its session limit or shutting down.
//! Behind a trusted proxy that names clients in `X-Forwarded-For`, the
//! client it names is counted against the connection rate here (429 and
//! close when over it), as hyper's first request would be.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout_at};

use super::{Handshake, Headers, check};
use crate::app::Shared;
use crate::client_addr::{ClientAddrs, rate_limited_answer};
use crate::session::websocket::{self, Framing, Upgraded};

/// Whether a complete request head's line is `GET /ws` (with any query):
/// the requests [`serve`] takes.
pub(crate) fn is_upgrade_line(method: &str, path: &str) -> bool {
    method == "GET" && path.split('?').next() == Some("/ws")
}

/// Where a connection sniffed as a `/ws` upgrade came from.
pub(crate) struct Conn<'a> {
    pub(crate) peer: SocketAddr,
    /// `peer`, or the client its PROXY header named.
    pub(crate) client: SocketAddr,
    pub(crate) clients: &'a Arc<ClientAddrs>,
}

/// What [`parse`] takes from a head it serves.
struct Accepted {
    handshake: Handshake,
    /// The client an `X-Forwarded-For` of a trusted proxy names.
    forwarded: Option<SocketAddr>,
}

/// Serve the upgrade whose head is `buf[..head_len]` (peeked, not
/// consumed), by `deadline`; or give the stream back for hyper.
pub(crate) async fn serve(
    shared: &Arc<Shared>,
    mut stream: TcpStream,
    mut buf: Vec<u8>,
    head_len: usize,
    conn: Conn<'_>,
    deadline: Instant,
) -> Option<TcpStream> {
    let Some(accepted) = parse(&buf[..head_len], &conn) else {
        return Some(stream);
    };
    let client = match accepted.forwarded {
        Some(client) => {
            if let Err(retry_after) = conn.clients.admit(client.ip()) {
                tracing::debug!(client = %client, peer = %conn.peer, retry_after, "connection over the per-address rate; answered 429");
                let _ = timeout_at(
                    deadline,
                    stream.write_all(rate_limited_answer(retry_after).as_bytes()),
                )
                .await;
                return None;
            }
            client
        }
        None => conn.client,
    };
    if shared.shutdown.is_cancelled() {
        return Some(stream);
    }
    let Some(permit) = shared.acquire_session() else {
        return Some(stream);
    };
    let Handshake {
        accept,
        subprotocol,
        token,
    } = accepted.handshake;
    // The head was only peeked: read it off the socket (it is there), then
    // write the answer from the same buffer.
    buf.truncate(head_len);
    match timeout_at(deadline, stream.read_exact(&mut buf)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "upgrade head unreadable");
            return None;
        }
        Err(_) => return None,
    }
    buf.clear();
    buf.extend_from_slice(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ",
    );
    buf.extend_from_slice(accept.as_bytes());
    if let Some(p) = subprotocol {
        buf.extend_from_slice(b"\r\nSec-WebSocket-Protocol: ");
        buf.extend_from_slice(p.as_bytes());
    }
    buf.extend_from_slice(b"\r\n\r\n");
    match timeout_at(deadline, stream.write_all(&buf)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "upgrade answer not written");
            return None;
        }
        Err(_) => return None,
    }
    drop(buf);
    let up = Upgraded {
        stream,
        leftover: Bytes::new(),
        http_token: token,
        peer: client,
        framing: Framing::Raw,
    };
    let task_shared = Arc::clone(shared);
    shared.tracker.spawn(async move {
        // The slot is the task's until it ends, however it ends.
        let _permit = permit;
        websocket::run(task_shared, up).await;
    });
    None
}

/// The handshake of a head this path serves; None leaves it to hyper.
fn parse(head: &[u8], conn: &Conn<'_>) -> Option<Accepted> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    let Ok(httparse::Status::Complete(_)) = req.parse(head) else {
        return None;
    };
    if req.version != Some(1) || !is_upgrade_line(req.method?, req.path?) {
        return None;
    }
    let query = req.path?.split_once('?').map(|(_, q)| q);
    let headers: &[httparse::Header<'_>] = req.headers;
    // A body on an upgrade is hyper's to answer.
    if headers.header("transfer-encoding").is_some()
        || headers.header("content-length").is_some_and(|v| v != b"0")
    {
        return None;
    }
    let handshake = check(headers, query).ok()?;
    let forwarded = conn.clients.uses_forwarded_for(conn.peer).then(|| {
        conn.clients
            .forwarded_for(conn.peer, headers.header_values("x-forwarded-for"))
    });
    Some(Accepted {
        handshake,
        forwarded,
    })
}
