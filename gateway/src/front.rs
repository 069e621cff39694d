//! The front room: where each new connection goes, decided from its first
//! request's head before anything of it is read.
//!
//! A hyper connection keeps about 16 KiB of buffers for as long as it
//! lives, and its request and response maps, routing and upgrade hand-off
//! cost on every request. So once the accept loop ([`crate::server`]) knows
//! a connection's client, the front peeks at its request head (`MSG_PEEK`,
//! nothing is consumed; [`sniff`]) and sorts it ([`sorting`]) to one of:
//!
//! - the direct publish path ([`crate::publish_direct`]): a first
//!   `POST /v1/notifications`, when this gateway serves the publish API
//!   (standalone);
//! - the native WebSocket upgrade ([`crate::ws::native`]): a `GET /ws`;
//! - a SockJS streaming receiver (xhr-streaming, EventSource) of the STOMP
//!   service, served on the socket ([`crate::sockjs::native`]); the SockJS
//!   module says which paths those are;
//! - hyper ([`hyper_conn`]): everything else, untouched, as HTTP/1.1 with
//!   upgrades, and whatever the paths above leave (a refused upgrade, a
//!   later request on a connection the publish path served).
//!
//! The first three do not depend on each other: without a SockJS service
//! the other two still take their connections. A request on a reused
//! keep-alive connection is hyper's, whatever it is.
//!
//! # Limits
//! Sniffing waits on readiness ([`sniff`]): a half-sent head costs nothing
//! until more bytes or the peer's FIN arrive, and a peer that closes
//! mid-head is dropped at once. The head must arrive within
//! `session.header_timeout_ms` of accept, the same deadline hyper is given
//! for the rest of a connection it takes; past it the connection is closed
//! without an answer, counted as `header_timeout`. A head over
//! [`MAX_HEAD`] bytes, or one httparse cannot read, is hyper's to answer.
//!
//! The connections being sniffed (and a streaming receiver's, until its
//! head and body are read) are bounded by `session.max_sniffing`, and
//! those of one client address by `session.max_sniffing_per_address`
//! ([`slots`]). Over a bound, a new connection is still taken in and a
//! half-read head makes room: its address's oldest when the address has its
//! whole share (`sniff_address_shed`), else the oldest of all
//! (`sniff_shed`). The shed connection is answered 503 (`Retry-After: 1`,
//! after what it sent is read off, so the close does not reset the answer)
//! and closed. So a client that opens half heads as fast as it can, renewing
//! them before their header timeout, only ever competes with itself, and
//! every new connection, `/healthz` and `/readyz` included, is read at
//! once: refusing the newest instead, as the front once did, let one such
//! client have every new connection answered 503. The client address is
//! the one a trusted proxy's PROXY header names; a trusted proxy's own
//! connections (its health checks; every connection when it names clients
//! in `X-Forwarded-For`, which is inside the head) have no share and count
//! against `session.max_sniffing` only.
//!
//! `[http]` ([`herald_engine::deadline`]) on the direct publish path and
//! hyper alike: an answer the client takes no byte of for
//! `http.write_timeout_ms` closes the connection (`write_timeout`; a
//! WebSocket upgraded through hyper leaves this at the upgrade), and a
//! request body slower than `http.body_min_bytes_per_sec` after
//! `http.body_grace_ms` is answered 408 and closed (`body_timeout`).
//!
//! Per-address connection rates (`[connection_rate]`) are applied here
//! too: to the connection's client before it is sorted, or, for a trusted
//! proxy that names clients in `X-Forwarded-For`, to the client its first
//! request names, on whichever path reads that request.

mod hyper_conn;
mod slots;
pub(crate) mod sniff;
mod sorting;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use herald_engine::deadline::Deadlines;
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout_at};
use tokio_util::sync::CancellationToken;

use self::hyper_conn::{HttpConn, refuse_rate_limited, serve_http};
use self::slots::{Client, Shed, SniffSlots};
use self::sorting::{Sniffed, decide};
use crate::app::Shared;
use crate::client_addr::ClientAddrs;
use crate::metrics::{Metrics, RefuseReason};
use crate::sockjs::native::Native;

/// The longest request head the front looks at; a longer one is hyper's.
pub const MAX_HEAD: usize = 8 * 1024;
/// The answer to a connection shed to make room for a newer one.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=UTF-8\r\nContent-Length: 54\r\nRetry-After: 1\r\nConnection: close\r\n\r\ntoo many connections sending their request head; retry";

/// Where new connections go, and what they are allowed on the way.
pub struct Front {
    shared: Arc<Shared>,
    /// Every route, for what hyper serves.
    router: Router,
    /// The SockJS service whose streaming receivers are served on the
    /// socket. The configuration always mounts one (`/sockjs`); without
    /// one, those requests are hyper's and nothing else changes.
    sockjs: Option<Arc<Native>>,
    /// `session.header_timeout_ms`: from accept to a whole request head
    /// (and a PROXY header before it), whether the front or hyper reads
    /// it. The front counts its timeouts; hyper's are not counted, because
    /// hyper ends an idle keep-alive connection with the same error, which
    /// is no refusal.
    header_timeout: Duration,
    /// The client's address behind trusted proxies (`[proxy]`) and new
    /// connections per client address (`[connection_rate]`, when on: a
    /// connection over it is answered 429 and closed).
    clients: Arc<ClientAddrs>,
    /// `session.max_sniffing` and `session.max_sniffing_per_address`.
    slots: SniffSlots,
    /// `[http]`: how long an answer may wait for its client, and how fast
    /// a request body must come, on the direct publish path and hyper's.
    deadlines: Deadlines,
}

/// How reading from a connection not yet sorted ended.
enum Interrupted<T> {
    /// It was not: what the read gave.
    No(T),
    /// Shed to make room for a newer connection.
    Shed(Shed),
    /// The gateway began shutting down.
    ShuttingDown,
}

/// A connection [`Front::sort`] gives back, nothing of it read.
enum Handed {
    /// For hyper.
    Hyper(TcpStream),
    /// For the direct publish path ([`crate::publish_direct`]).
    Publish(TcpStream),
}

impl Front {
    /// The front of a gateway serving `router`, with the native streaming
    /// receivers of `sockjs` when it is mounted.
    pub fn new(
        shared: Arc<Shared>,
        router: Router,
        sockjs: Option<Arc<Native>>,
        clients: Arc<ClientAddrs>,
    ) -> Self {
        let session = &shared.config.session;
        let slots = SniffSlots::new(
            session.max_sniffing,
            session.max_sniffing_per_address,
            shared.metrics.sniffing.clone(),
        );
        let deadlines = Deadlines::new(&shared.config.http, shared.metrics.deadline_counters());
        Front {
            header_timeout: Duration::from_millis(shared.config.session.header_timeout_ms),
            router: deadlines.bound_bodies(router),
            deadlines,
            shared,
            sockjs,
            clients,
            slots,
        }
    }

    /// `session.header_timeout_ms`.
    pub fn header_timeout(&self) -> Duration {
        self.header_timeout
    }

    /// The clients' addresses and rates.
    pub fn clients(&self) -> &Arc<ClientAddrs> {
        &self.clients
    }

    /// Where refusals are counted.
    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    /// Serve a new connection from `peer` whose client is `client` (`peer`
    /// itself, or what its PROXY header said), its request head due by
    /// `deadline`, until it ends or `shutdown` fires (see
    /// [`crate::server::serve`]).
    pub async fn serve(
        &self,
        stream: TcpStream,
        peer: SocketAddr,
        client: SocketAddr,
        deadline: Instant,
        shutdown: CancellationToken,
    ) {
        let clients = &self.clients;
        // Requests from a trusted proxy name their client in
        // X-Forwarded-For: the rate applies to the first request's.
        let per_request = clients.uses_forwarded_for(peer);
        if !per_request && let Err(retry_after) = clients.admit(client.ip()) {
            tracing::debug!(client = %client, peer = %peer, retry_after, "connection over the per-address rate; answered 429");
            refuse_rate_limited(stream, retry_after, self.header_timeout).await;
            return;
        }
        // hyper's connection: `header_timeout` for each head (what the
        // look at the first request left of the deadline, or the whole
        // timeout after the direct publish path).
        let conn = |header_timeout| HttpConn {
            peer,
            client,
            clients: Arc::clone(clients),
            per_request,
            header_timeout,
            deadlines: &self.deadlines,
        };
        let left = |deadline: Instant| {
            deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1))
        };
        match self.sort(stream, peer, client, deadline).await {
            Some(Handed::Hyper(stream)) => {
                serve_http(stream, self.router.clone(), conn(left(deadline)), shutdown).await;
            }
            Some(Handed::Publish(stream)) => {
                let Some(api) = self.publish_api() else {
                    return;
                };
                let timeout = self.header_timeout;
                let limits = crate::publish_direct::Limits {
                    header_timeout: timeout,
                    deadlines: &self.deadlines,
                };
                if let Some(rest) =
                    crate::publish_direct::serve(api, stream, limits, &shutdown).await
                {
                    serve_http(rest, self.router.clone(), conn(timeout), shutdown).await;
                }
            }
            None => {}
        }
    }

    /// Serve `stream` if its first request is a `/ws` upgrade or a
    /// streaming receiver; otherwise give it back for hyper or the direct
    /// publish path. A streaming receiver is served from a task of its own,
    /// so it does not carry the (larger) connection task's state. None when
    /// the connection was served, refused, timed out at `deadline`, or
    /// closed by its peer before its head was whole.
    async fn sort(
        &self,
        stream: TcpStream,
        peer: SocketAddr,
        client: SocketAddr,
        deadline: Instant,
    ) -> Option<Handed> {
        let clients = &self.clients;
        // A trusted proxy's own connection is no one client's.
        let share = (!clients.is_trusted(client.ip())).then(|| Client::of(client.ip()));
        let mut permit = self.slots.take(share);
        let mut buf = vec![0u8; MAX_HEAD];
        // The per-address rate of a proxy's clients is checked on the first
        // request's X-Forwarded-For, which only hyper's path reads.
        let publish = self.publish_api().is_some()
            && !(clients.uses_forwarded_for(peer) && clients.rate_limited());
        let sockjs = self.sockjs.as_ref();
        // A connection that has sent nothing when shutdown starts has no
        // request in flight: it must not hold the drain for the deadline
        // (a browser's preconnected socket, say).
        let sniff = tokio::select! {
            r = timeout_at(deadline, sniff::peek_until(&stream, &mut buf, |bytes| decide(bytes, publish, sockjs))) => Interrupted::No(r),
            why = permit.shed() => Interrupted::Shed(why),
            _ = self.shared.shutdown.cancelled() => Interrupted::ShuttingDown,
        };
        let sniff = match sniff {
            Interrupted::No(sniff) => sniff,
            Interrupted::Shed(why) => {
                answer_shed(&self.shared.metrics, stream, why);
                return None;
            }
            Interrupted::ShuttingDown => {
                tracing::debug!(
                    "shutting down before the request head was whole; connection closed"
                );
                return None;
            }
        };
        let sniffed = match sniff {
            Ok(Ok(Some(s))) => s,
            Ok(Ok(None)) => {
                tracing::debug!("peer closed before its request head was whole");
                return None;
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "connection failed before its request head was whole");
                return None;
            }
            Err(_) => {
                self.shared.metrics.refuse(RefuseReason::HeaderTimeout);
                tracing::debug!("request head timed out; connection closed");
                return None;
            }
        };
        match sniffed {
            Sniffed::Hyper => Some(Handed::Hyper(stream)),
            Sniffed::Publish => Some(Handed::Publish(stream)),
            Sniffed::Upgrade(head_len) => {
                // The head is whole and buffered: nothing more is awaited
                // from the peer.
                drop(permit);
                let conn = crate::ws::native::Conn {
                    peer,
                    client,
                    clients,
                };
                crate::ws::native::serve(&self.shared, stream, buf, head_len, conn, deadline)
                    .await
                    .map(Handed::Hyper)
            }
            Sniffed::Stream(sockjs, receiver, head_len) => {
                let sockjs = Arc::clone(sockjs);
                let conn = crate::sockjs::native::Conn {
                    peer,
                    client,
                    clients: Arc::clone(clients),
                };
                let metrics = Arc::clone(&self.shared.metrics);
                self.shared.tracker.spawn(async move {
                    let (mut stream, mut permit) = (stream, permit);
                    // The body may still be on its way: it can be shed.
                    let read = tokio::select! {
                        r = sockjs.read(&mut stream, conn, deadline, receiver, head_len) => Interrupted::No(r),
                        why = permit.shed() => Interrupted::Shed(why),
                    };
                    let request = match read {
                        Interrupted::No(Some(request)) => request,
                        Interrupted::No(None) | Interrupted::ShuttingDown => return,
                        Interrupted::Shed(why) => {
                            answer_shed(&metrics, stream, why);
                            return;
                        }
                    };
                    // The request is read: from here on it is a session's
                    // receiver.
                    drop(permit);
                    sockjs.stream(stream, request).await;
                });
                None
            }
        }
    }

    /// The publish API, when this gateway serves it (standalone).
    fn publish_api(&self) -> Option<&herald_engine::publish::PublishApi> {
        match &self.shared.mode {
            crate::app::Mode::Standalone { engine } => Some(&engine.publish),
            _ => None,
        }
    }
}

/// Answer a connection shed to make room 503, and close it. What it sent
/// so far (at most a head and a streaming receiver's body) is read off
/// first: closing a socket with unread bytes resets the connection, and the
/// reset could destroy the answer before the peer read it. Nothing is
/// awaited: the reads take what is buffered, and the answer is one send on
/// the plain socket (tokio's try_write would skip it while the socket's
/// first writable event is pending), which fits its send buffer.
fn answer_shed(metrics: &Metrics, stream: TcpStream, why: Shed) {
    use std::io::{Read, Write};
    metrics.refuse(why.reason());
    tracing::debug!(reason = ?why, "request head shed to make room for a newer connection; answered 503");
    let Ok(mut socket) = stream.into_std() else {
        return;
    };
    let mut sink = [0u8; 4096];
    let mut drained = 0;
    while drained < MAX_HEAD + crate::sockjs::native::MAX_DISCARD {
        match socket.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
    let _ = socket.write(BUSY);
}

#[cfg(test)]
mod tests;
