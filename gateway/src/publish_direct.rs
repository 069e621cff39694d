//! `POST /v1/notifications` served straight on the socket, standalone.
//!
//! A publish through hyper and axum spent about half of its instructions
//! in the framework (the header map, the request's extensions, the body
//! channel, the router's boxed services; bench/reports/compare.md). When a
//! new connection's first request is a publish (the front's look at it,
//! [`crate::front`]), this loop reads the connection's
//! requests itself: each head parsed in place, the key checked before the
//! body is read, the body taken whole, the same handler's checks and
//! answer ([`herald_engine::publish::PublishApi::check_publish`] and
//! [`publish_body`](herald_engine::publish::PublishApi::publish_body)),
//! the answers of pipelined requests written together.
//!
//! It serves only the plain case ([`head::plan`]): HTTP/1.1, one
//! `Content-Length`, no `Transfer-Encoding`, `Expect` or `Upgrade`. The
//! first request that is anything else (another route, a chunked body, a
//! head too long or malformed) goes to hyper with every byte read so far
//! put back in front of the socket ([`Rewind`]), so it is answered exactly
//! as on any other connection, and so is the rest of the connection.
//!
//! # Limits
//! A head must be whole within `session.header_timeout_ms` of the last
//! answer (the first is whole before the connection comes here), or the
//! connection closes without an answer, as hyper closes an idle keep-alive
//! connection; a head over
//! [`MAX_HEAD`] bytes or [`MAX_HEADERS`] headers goes to hyper, which
//! applies its own limits. The body is read only once the key passed, up
//! to `publish.max_body_bytes` (a larger `Content-Length` is answered 413
//! at once), each read within `session.header_timeout_ms` of the one
//! before and the whole at `http.body_min_bytes_per_sec` once
//! `http.body_grace_ms` has passed since the head
//! ([`herald_engine::deadline::BodyRate`]; behind it, the answer is 408
//! `body_timeout`, as below), into a buffer of its own that grows with what arrived (by as
//! much as it holds, at least [`BODY_CHUNK`], never past the body's end),
//! which a raw notification keeps as its payload. A refusal whose body has not arrived whole is answered with
//! `connection: close`, and the connection is closed after draining what
//! the client still sends (up to [`LINGER`] and [`LINGER_BYTES`]), so that
//! the close does not reset the connection under the answer. Answers wait
//! in one buffer only while more whole requests are already read (at most
//! [`MAX_PENDING_ANSWERS`] bytes, then written); a request over
//! [`KEEP_IDLE`] bytes, or answers over it, do not leave their buffers to
//! the connection while it waits for the next. An answer the client takes
//! no byte of for `http.write_timeout_ms` (it pipelines requests and does
//! not read) closes the connection
//! ([`herald_engine::deadline::WriteDeadline`]). On shutdown a connection
//! waiting for its next head, or the rest of one, closes at once; a request being served
//! is answered with `connection: close`.

mod head;
mod rewind;

use std::cell::RefCell;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Buf, BufMut, BytesMut};
use herald_engine::deadline::{BodyRate, BodyTimedOut, Deadlines, WriteDeadline};
use herald_engine::publish::{PublishApi, Reply, RequestBody};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout, timeout_at};
use tokio_util::sync::CancellationToken;

pub(crate) use head::is_publish_line;
pub use rewind::Rewind;

/// The longest request head read here; a longer one goes to hyper.
pub const MAX_HEAD: usize = 8 * 1024;
/// The most headers a request read here may have; more go to hyper.
pub const MAX_HEADERS: usize = 32;
/// The least a body's buffer grows by when it is full (see `read_body`).
pub const BODY_CHUNK: usize = 64 * 1024;
/// Bytes asked of the socket at a time while reading a head.
const READ_CHUNK: usize = 4 * 1024;
/// The most buffer bytes kept by a connection waiting for its next request.
pub const KEEP_IDLE: usize = 16 * 1024;
/// The most answer bytes held back while pipelined requests are served.
pub const MAX_PENDING_ANSWERS: usize = 64 * 1024;
/// After a refusal whose body is still coming, how long and how many
/// bytes are drained before closing.
pub const LINGER: Duration = Duration::from_secs(2);
/// See [`LINGER`].
pub const LINGER_BYTES: u64 = 1024 * 1024;

/// The bounds of a connection on this path.
pub(crate) struct Limits<'a> {
    /// `session.header_timeout_ms`: for a head, and for each read of a body.
    pub(crate) header_timeout: Duration,
    /// `[http]`: for an answer to be taken, and for a whole body.
    pub(crate) deadlines: &'a Deadlines,
}

/// Serve publish requests on `stream` until it ends (None), or until a
/// request this path does not serve: then the connection, that request's
/// bytes put back, is returned for hyper.
pub(crate) async fn serve(
    api: &PublishApi,
    stream: TcpStream,
    limits: Limits<'_>,
    shutdown: &CancellationToken,
) -> Option<Rewind> {
    let Limits {
        header_timeout,
        deadlines,
    } = limits;
    let mut stream = deadlines.wrap(stream);
    let mut buf = BytesMut::new();
    let mut out: Vec<u8> = Vec::new();
    let mut deadline = Instant::now() + header_timeout;
    loop {
        let step = {
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut req = httparse::Request::new(&mut headers);
            match req.parse(&buf) {
                Ok(httparse::Status::Complete(head_len)) => match head::plan(&req) {
                    None => Step::Hyper,
                    Some(plan) => {
                        let publish = head::publish_head(&req);
                        let end = usize::try_from(plan.body_len)
                            .ok()
                            .and_then(|len| head_len.checked_add(len));
                        match (api.check_publish(&publish), end) {
                            (Err(reply), end) => Step::Refused { reply, end, plan },
                            // check_publish refused any length over the largest body.
                            (Ok(_), None) => Step::Hyper,
                            (Ok(admitted), Some(end)) if buf.len() >= end => {
                                // Its own copy, which the payload keeps.
                                let body = RequestBody::Owned(buf[head_len..end].to_vec());
                                let reply = api.publish_body(admitted, &publish, body).await;
                                Step::Answered { reply, end, plan }
                            }
                            (Ok(admitted), Some(end)) => Step::Body {
                                admitted,
                                head_len,
                                end,
                                plan,
                            },
                        }
                    }
                },
                Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => Step::Partial,
                // Too long, too many headers, malformed: hyper answers.
                _ => Step::Hyper,
            }
        };
        let (reply, end, close) = match step {
            Step::Partial => {
                if !flush(&mut stream, &mut out).await {
                    return None;
                }
                if out.capacity() > KEEP_IDLE {
                    // A pipelined burst's answers are not kept while the
                    // connection waits.
                    out = Vec::new();
                }
                buf.reserve(READ_CHUNK);
                let read = tokio::select! {
                    biased;
                    // No request is taken before its head is whole.
                    _ = shutdown.cancelled() => return None,
                    r = timeout_at(deadline, stream.read_buf(&mut buf)) => r,
                };
                match read {
                    Ok(Ok(n)) if n > 0 => continue,
                    Ok(Ok(_)) => tracing::debug!("publish connection closed by its client"),
                    Ok(Err(e)) => tracing::debug!(error = %e, "publish connection failed"),
                    Err(_) => tracing::debug!("no request head in time; publish connection closed"),
                }
                return None;
            }
            Step::Hyper => {
                if !flush(&mut stream, &mut out).await {
                    return None;
                }
                tracing::debug!("request not for the direct publish path; handed to hyper");
                return Some(Rewind::new(buf.freeze(), stream.into_inner()));
            }
            Step::Refused { reply, end, plan } => match end {
                Some(end) if buf.len() >= end => (reply, end, plan.close),
                _ => {
                    // The body is still coming: answer, drain, close.
                    encode(&mut out, &reply, true);
                    if flush(&mut stream, &mut out).await {
                        linger(stream).await;
                    }
                    return None;
                }
            },
            Step::Answered { reply, end, plan } => (reply, end, plan.close),
            Step::Body {
                admitted,
                head_len,
                end,
                plan,
            } => {
                if !flush(&mut stream, &mut out).await {
                    return None;
                }
                let head_whole = Instant::now();
                // The body's bytes read with the head move to its own
                // buffer; the rest are read into it, and no further: the
                // next request's bytes stay on the socket.
                let mut body = Vec::with_capacity(buf.len() - head_len);
                body.extend_from_slice(&buf[head_len..]);
                buf.truncate(head_len);
                let pace = Pace {
                    idle: header_timeout,
                    rate: deadlines.body_rate(),
                    start: head_whole,
                };
                match read_body(&mut stream, &mut body, end - head_len, pace).await {
                    BodyRead::Whole => {}
                    BodyRead::Gone => {
                        api.body_unreadable(&std::io::ErrorKind::UnexpectedEof.into());
                        return None;
                    }
                    BodyRead::TooSlow(error) => {
                        // Answered (the client is sending: it can read),
                        // then closed as any refusal before the body's end.
                        deadlines.body_timed_out();
                        tracing::debug!(error = %error, "request body too slow; answered 408");
                        encode(&mut out, &api.body_too_slow(&error), true);
                        if flush(&mut stream, &mut out).await {
                            linger(stream).await;
                        }
                        return None;
                    }
                }
                let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
                let mut req = httparse::Request::new(&mut headers);
                // The same bytes parsed the same way a moment ago.
                let Ok(httparse::Status::Complete(_)) = req.parse(&buf) else {
                    return None;
                };
                let publish = head::publish_head(&req);
                let reply = api
                    .publish_body(admitted, &publish, RequestBody::Owned(body))
                    .await;
                (reply, head_len, plan.close)
            }
        };
        if end > KEEP_IDLE {
            // A large request's allocation is not kept for the next one
            // (advancing would keep it, to be reused).
            buf = BytesMut::from(&buf[end..]);
        } else {
            buf.advance(end);
        }
        let close = close || shutdown.is_cancelled();
        encode(&mut out, &reply, close);
        if close {
            if flush(&mut stream, &mut out).await {
                let _ = stream.shutdown().await;
            }
            return None;
        }
        if out.len() >= MAX_PENDING_ANSWERS && !flush(&mut stream, &mut out).await {
            return None;
        }
        deadline = Instant::now() + header_timeout;
    }
}

/// What the bytes read so far call for.
enum Step {
    /// A head not yet whole: read more.
    Partial,
    /// Not served here: hand the connection to hyper.
    Hyper,
    /// Refused before its body: the answer, where the request ends (None
    /// when its length does not fit memory at all).
    Refused {
        reply: Reply,
        end: Option<usize>,
        plan: head::Plan,
    },
    /// Admitted; its body is still coming.
    Body {
        admitted: herald_engine::publish::Admitted,
        head_len: usize,
        end: usize,
        plan: head::Plan,
    },
    /// Served whole from what was read.
    Answered {
        reply: Reply,
        end: usize,
        plan: head::Plan,
    },
}

/// How a body must come: each read within `idle` of the one before, and
/// the whole at `rate` from `start` (when its head was whole).
struct Pace {
    idle: Duration,
    rate: BodyRate,
    start: Instant,
}

/// How reading a body ended.
#[derive(Debug)]
enum BodyRead {
    /// All of it is in the buffer.
    Whole,
    /// The client went away, or stalled for longer than a read may wait.
    Gone,
    /// The client fell behind the body's rate.
    TooSlow(BodyTimedOut),
}

/// Read until `body` holds `len` bytes and not one more, at `pace`. Memory grows
/// with what arrived, not by what the head declared: a full buffer grows by
/// as much as it holds (at least [`BODY_CHUNK`]), never past the body's
/// end, so it is grown a few times however the bytes come (the copies stay
/// linear in the body) and ends exactly as long as the body, which the
/// payload then keeps without a copy.
async fn read_body<S: AsyncRead + Unpin>(
    stream: &mut S,
    body: &mut Vec<u8>,
    len: usize,
    pace: Pace,
) -> BodyRead {
    while body.len() < len {
        if body.len() == body.capacity() {
            body.reserve_exact(body.len().max(BODY_CHUNK).min(len - body.len()));
        }
        // Never past the body's end: the next request's bytes stay on the
        // socket.
        let room = body.capacity().min(len) - body.len();
        let received = body.len() as u64;
        let due = pace.rate.deadline(pace.start, received);
        let idle = Instant::now() + pace.idle;
        match timeout_at(
            due.min(idle),
            stream.read_buf(&mut (&mut *body).limit(room)),
        )
        .await
        {
            Ok(Ok(n)) if n > 0 => {}
            Err(_) if due <= idle => return BodyRead::TooSlow(pace.rate.timed_out(received)),
            _ => return BodyRead::Gone,
        }
    }
    BodyRead::Whole
}

/// Write the answers held back; false if the connection failed (or the
/// client took none of them for `http.write_timeout_ms`).
async fn flush(stream: &mut WriteDeadline<TcpStream>, out: &mut Vec<u8>) -> bool {
    if out.is_empty() {
        return true;
    }
    let written = stream.write_all(out).await;
    out.clear();
    if let Err(e) = written {
        tracing::debug!(error = %e, "publish connection failed while answering");
        return false;
    }
    true
}

/// Close after a refusal: stop writing, drain what the client still sends
/// (bounded), so the answer is not lost to a reset.
async fn linger(mut stream: WriteDeadline<TcpStream>) {
    let _ = stream.shutdown().await;
    let mut rest = (&mut stream).take(LINGER_BYTES);
    let _ = timeout(LINGER, tokio::io::copy(&mut rest, &mut tokio::io::sink())).await;
}

fn encode(out: &mut Vec<u8>, reply: &Reply, close: bool) {
    with_date(|date| head::encode_reply(out, reply, close, date));
}

thread_local! {
    /// The `date` header value of the current second, made once a second
    /// per thread (as hyper caches it).
    static DATE: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

fn with_date<T>(f: impl FnOnce(&[u8]) -> T) -> T {
    let now = SystemTime::now();
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    DATE.with(|cell| {
        let mut cached = cell.borrow_mut();
        if cached.0 != secs {
            *cached = (secs, httpdate::fmt_http_date(now));
        }
        f(cached.1.as_bytes())
    })
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    use crate::test_support::loopback_pair;

    #[tokio::test]
    async fn a_body_is_read_to_its_end_exactly_and_into_no_spare_capacity() {
        let (mut client, mut server, _) = loopback_pair().await;
        // Longer than a chunk, so the buffer grows several times; the next
        // request's bytes follow the body in the same writes.
        let len = 3 * BODY_CHUNK + 123;
        let sent: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        // The first bytes came with the head.
        let mut body = Vec::with_capacity(5);
        body.extend_from_slice(&sent[..5]);
        let writer = tokio::spawn(async move {
            for part in sent[5..].chunks(20_000) {
                client.write_all(part).await.unwrap();
            }
            client.write_all(b"NEXT").await.unwrap();
            client
        });
        let read = read_body(&mut server, &mut body, len, pace(10)).await;
        assert!(matches!(read, BodyRead::Whole), "{read:?}");
        let _client = writer.await.unwrap();
        assert_eq!(body.len(), len);
        assert_eq!(body.capacity(), len, "no spare capacity");
        assert!(body.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
        // What follows the body is still on the socket.
        let mut next = [0u8; 4];
        server.read_exact(&mut next).await.unwrap();
        assert_eq!(&next, b"NEXT");
        let bytes = Bytes::from(body);
        assert_eq!(bytes.len(), len);
    }

    #[tokio::test]
    async fn a_body_cut_short_is_unreadable() {
        let (mut client, mut server, _) = loopback_pair().await;
        client.write_all(b"short").await.unwrap();
        drop(client);
        let mut body = Vec::new();
        let read = read_body(&mut server, &mut body, 100, pace(10)).await;
        assert!(matches!(read, BodyRead::Gone), "{read:?}");
    }

    /// Reads within `secs`, the body at 1 KiB/s after a 5 s grace.
    fn pace(secs: u64) -> Pace {
        Pace {
            idle: Duration::from_secs(secs),
            rate: BodyRate::new(Duration::from_secs(5), 1024),
            start: Instant::now(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_behind_its_rate_is_too_slow_though_each_read_is_in_time() {
        let (mut client, mut server) = tokio::io::duplex(1024);
        // A byte every 900 ms: every read well within its 1 s, the body
        // 1000 times slower than its rate.
        let writer = tokio::spawn(async move {
            loop {
                if client.write_all(b"x").await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(900)).await;
            }
        });
        let started = Instant::now();
        let mut body = Vec::new();
        let read = read_body(&mut server, &mut body, 100, pace(1)).await;
        let BodyRead::TooSlow(error) = read else {
            panic!("{read:?}");
        };
        // The 7th byte was due 5 s and 6 bytes at 1 KiB/s in; it would
        // have come at 5.4 s.
        assert_eq!(error.received, 6);
        assert!(started.elapsed() < Duration::from_millis(5_100));
        writer.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_body_is_gone_at_its_read_timeout_when_that_comes_first() {
        let (_client, mut server) = tokio::io::duplex(1024);
        let mut body = Vec::new();
        let read = read_body(&mut server, &mut body, 100, pace(1)).await;
        assert!(matches!(read, BodyRead::Gone), "{read:?}");
    }
}
