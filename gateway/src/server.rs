//! The accept loop: accept, read a PROXY header when `[proxy]` says one
//! comes, then give the connection to the front ([`crate::front`]), which
//! sorts it between the paths that serve it on the socket and hyper.
//! Graceful shutdown when the token fires.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::front::Front;
use crate::proxy_header;

/// Pause after an accept error (e.g. out of file descriptors) before trying again.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// Pending connections the kernel queues before `accept`: a burst of
/// reconnecting browsers must not overflow it (the default of 128 drops
/// SYNs and costs each client a one-second retransmit).
pub const LISTEN_BACKLOG: u32 = 4096;

/// Bind a listener with SO_REUSEADDR and a [`LISTEN_BACKLOG`] backlog.
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Serve `front`'s connections from `listener` until `shutdown` fires.
/// Connections are tracked by `tracker`; on shutdown, idle keep-alive
/// connections close and in-flight requests finish (a connection a SockJS
/// poll came on first stays open up to
/// [`crate::sockjs::session::SHUTDOWN_LINGER`] for the client's next poll).
/// The listener closes when this returns: from
/// then on new connections, `/healthz` and `/readyz` probes included, are
/// refused. That is on purpose: a balancer retries a refused connection on
/// another server (HAProxy's `retries` and `option redispatch`), where an
/// answer (even a 503) would go back to the browser.
pub async fn serve(
    listener: TcpListener,
    front: Arc<Front>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            r = listener.accept() => match r {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            },
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "set_nodelay failed");
        }
        let shutdown = shutdown.clone();
        let front = Arc::clone(&front);
        tracker.spawn(async move {
            // One header deadline per connection, counted from accept.
            let deadline = tokio::time::Instant::now() + front.header_timeout();
            let clients = front.clients();
            let mut stream = stream;
            // The client: what a trusted proxy's PROXY header says, or the
            // connection's own address.
            let client = if clients.proxy_protocol() {
                let trusted = clients.is_trusted(peer.ip());
                let read = tokio::select! {
                    r = proxy_header::read(&mut stream, peer, trusted, deadline) => r,
                    // Nothing is in flight yet: do not hold the drain.
                    _ = shutdown.cancelled() => return,
                };
                match read {
                    Ok(client) => client,
                    Err(refusal) => {
                        if let Some(reason) = refusal.reason() {
                            front.metrics().refuse(reason);
                        }
                        match refusal {
                            proxy_header::Refusal::Untrusted
                            | proxy_header::Refusal::Malformed(_)
                            | proxy_header::Refusal::Timeout => {
                                tracing::info!(peer = %peer, reason = %refusal, "connection refused: PROXY header");
                            }
                            proxy_header::Refusal::Silent | proxy_header::Refusal::Ended => {
                                tracing::debug!(peer = %peer, reason = %refusal, "connection closed before its request");
                            }
                        }
                        return;
                    }
                }
            } else {
                peer
            };
            front.serve(stream, peer, client, deadline, shutdown).await;
        });
        // Serve connections in the order they were accepted: a task spawned
        // here goes to this worker's LIFO slot, so accepting the next
        // connection first would start the later one before the earlier
        // (a SockJS poll opened after another would take its session).
        // Yielding lets the new task make its first step now.
        tokio::task::yield_now().await;
    }
    tracing::info!("stopped accepting connections");
}
