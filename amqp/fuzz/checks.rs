//! The properties each fuzz target checks, one function per target, shared
//! by the cargo-fuzz targets (`fuzz_targets/*.rs`, nightly) and the corpus
//! replay that runs on stable in the workspace's tests
//! (`amqp/tests/fuzz_corpus.rs` replays every file of `corpus/<target>/`
//! through the function of the same name).

#![allow(dead_code)]

use amq_protocol::protocol::BasicProperties;
use amq_protocol::types::parsing::parse_field_table;
use herald_amqp::presence::{MAX_REPORT_USERS, PRESENCE_TYPE, PresenceAmqp, PresenceReport};

/// A presence report as a router reads it from its queue
/// (`PresenceReport::from_amqp`): the input is an AMQP field table (the
/// message's headers, in the wire encoding: a 4-byte length, then the
/// entries), and what follows it is the body. No panic; a report read is
/// within its bounds (users per list, an edge id without a colon), and
/// what an edge would send for it (`to_amqp`, `body`) reads back the same,
/// but for what the wire form cannot say: `missed-since` in a snapshot's
/// part or for a user id over 255 bytes (an AMQP table key), and integers
/// past `i64::MAX` (the edge writes signed 64-bit integers).
pub(crate) fn presence_decode(data: &[u8]) {
    let Some(Ok(report)) = presence_read(data) else {
        return;
    };
    assert!(report.online.len() <= MAX_REPORT_USERS);
    assert!(report.offline.len() <= MAX_REPORT_USERS);
    assert!(report.detail.len() <= MAX_REPORT_USERS);
    assert!(!report.edge.is_empty() && !report.boot.is_empty() && !report.edge.contains(':'));
    if let Some(sync) = report.sync {
        assert!(1 <= sync.part && sync.part <= sync.parts);
    }
    let signed = |n: u64| n.min(i64::MAX as u64);
    let mut expected = report.clone();
    expected.seq = signed(expected.seq);
    expected.mailbox_ttl_ms = signed(expected.mailbox_ttl_ms);
    let snapshot = expected.sync.is_some();
    for u in &mut expected.detail {
        u.missed_since_ms = if snapshot || u.user.len() > 255 {
            0
        } else {
            signed(u.missed_since_ms)
        };
    }
    let again = PresenceReport::from_amqp(&report.to_amqp(), &report.body());
    assert_eq!(again, Ok(expected));
}

/// `data` read as a presence report (see [`presence_decode`]); None when
/// the headers are not a field table.
pub(crate) fn presence_read(data: &[u8]) -> Option<Result<PresenceReport, String>> {
    // Bounded before the recursive codec reads it, as the guarded socket
    // bounds what lapin reads (herald_amqp::guarded).
    herald_amqp::wire::nesting::scan_table(data, Default::default()).ok()?;
    let (body, headers) = parse_field_table(data).ok()?;
    let properties = BasicProperties::default()
        .with_type(PRESENCE_TYPE.into())
        .with_headers(headers);
    Some(
        PresenceReport::from_amqp(&properties, body)
            .map_err(|r| format!("{}: {}", r.field, r.reason)),
    )
}

/// The stack of a tokio worker thread (tokio's default, 2 MiB): what an
/// edge's link task and lapin's I/O loop read frames on. A check that reads
/// frames runs on one, so a recursion the bounds let through overflows it
/// here as it would there.
const WORKER_STACK: usize = 2 << 20;

/// The `frame_max` Herald's clients negotiate with RabbitMQ (its default).
const FRAME_MAX: u32 = 128 * 1024;

fn on_worker_stack(check: impl FnOnce() + Send) {
    std::thread::scope(|s| {
        let thread = std::thread::Builder::new()
            .stack_size(WORKER_STACK)
            .spawn_scoped(s, check)
            .expect("a thread for the check");
        if let Err(panic) = thread.join() {
            std::panic::resume_unwind(panic);
        }
    });
}

/// Bytes from a broker, as an edge's root link reads them
/// (`herald_amqp::wire`): frames up to `frame_max` taken one by one, on a
/// worker's stack, until the bytes run out or are refused, deliveries put
/// together with a 4 KiB body bound. No panic (a field table nested deeper
/// than the stack allows included: `wire::nesting` bounds it first); every
/// frame taken consumes bytes; every method read writes back to a frame
/// that reads again as the same method; no delivery comes out above the
/// bound.
pub(crate) fn wire_frames(data: &[u8]) {
    on_worker_stack(|| wire_frames_here(data));
}

fn wire_frames_here(data: &[u8]) {
    use amq_protocol::protocol::AMQPClass;
    use amq_protocol::protocol::basic::AMQPMethod;
    use bytes::BytesMut;
    use herald_amqp::wire::delivery::{Assembled, Assembler};
    use herald_amqp::wire::frame::{Frame, decode, put_method};

    const MAX_BODY: u64 = 4096;
    let mut buf = BytesMut::from(data);
    let mut assembler = Assembler::new(MAX_BODY);
    loop {
        let before = buf.len();
        let frame = match decode(&mut buf, FRAME_MAX) {
            Ok(Some(frame)) => frame,
            Ok(None) | Err(_) => return,
        };
        assert!(buf.len() < before, "a frame taken consumes bytes");
        let done = match frame {
            Frame::Method(channel, method) => {
                // Written back, it reads again as the same method: the
                // same bytes when written once more (bytes, not values:
                // a NaN in a field table is not equal to itself).
                let mut out = Vec::new();
                put_method(&mut out, channel, &method);
                let again = decode(&mut BytesMut::from(&out[..]), u32::MAX);
                let Ok(Some(Frame::Method(same_channel, same))) = again else {
                    panic!("{method:?} written back does not read: {again:?}");
                };
                let mut twice = Vec::new();
                put_method(&mut twice, same_channel, &same);
                assert_eq!(out, twice, "{method:?}");
                if let AMQPClass::Basic(AMQPMethod::Deliver(d)) = method {
                    let _ = assembler.deliver(d.delivery_tag, d.redelivered);
                }
                None
            }
            Frame::Header(_, size, properties) => assembler.header(size, properties).ok().flatten(),
            Frame::Body(_, piece) => assembler.body(&piece).ok().flatten(),
            Frame::Heartbeat => None,
        };
        if let Some(Assembled::Delivery(d)) = done {
            assert!(d.body.len() as u64 <= MAX_BODY);
        }
    }
}

/// Bytes from a broker as lapin reads them through a guarded socket
/// (`herald_amqp::guarded`, the routers' and lapin edges' links): the
/// input arrives in two pieces (split where its first byte says), goes
/// through the guard, and what comes out is parsed frame by frame with
/// lapin's own parser, on a worker's stack, until it stops. No panic, no
/// overflow; the guard hands on no more than it read plus the reasons it
/// writes in.
pub(crate) fn guarded_stream(data: &[u8]) {
    on_worker_stack(|| guarded_stream_here(data));
}

fn guarded_stream_here(data: &[u8]) {
    use std::pin::Pin;
    use std::task::{Context, Poll, Waker};

    use futures_util::io::AsyncRead;
    use herald_amqp::guarded::GuardedStream;

    /// The broker's bytes, in pieces, always ready.
    struct Pieces(Vec<Vec<u8>>);
    impl AsyncRead for Pieces {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            buf: &mut [u8],
        ) -> Poll<std::io::Result<usize>> {
            let Some(piece) = self.0.first_mut() else {
                return Poll::Ready(Ok(0));
            };
            let n = buf.len().min(piece.len());
            buf[..n].copy_from_slice(&piece[..n]);
            piece.drain(..n);
            if piece.is_empty() {
                self.0.remove(0);
            }
            Poll::Ready(Ok(n))
        }
    }

    let split = data
        .first()
        .map_or(0, |b| usize::from(*b) * 64)
        .min(data.len());
    let pieces = [&data[..split], &data[split..]]
        .into_iter()
        .filter(|p| !p.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    let mut stream = GuardedStream::new(Pieces(pieces));
    let mut cx = Context::from_waker(Waker::noop());
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match Pin::new(&mut stream).poll_read(&mut cx, &mut buf) {
            Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => break,
            Poll::Ready(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Poll::Pending => unreachable!("the pieces are always ready"),
        }
    }
    let mut rest: &[u8] = &out;
    while let Ok((after, _frame)) = amq_protocol::frame::parsing::parse_frame(rest) {
        assert!(after.len() < rest.len(), "a frame parsed consumes bytes");
        rest = after;
    }
}

/// A broker's side of the handshake, as an edge's own client meets it
/// (`Wire::open`, `herald_amqp::wire::conn`): a loopback listener reads the
/// protocol header and answers with the input, then waits for the client
/// to hang up. On a worker's stack, within 2 s: no panic, no overflow,
/// whatever the answer (Wire::open connects or says why not).
pub(crate) fn wire_handshake(data: &[u8]) {
    on_worker_stack(|| wire_handshake_here(data));
}

fn wire_handshake_here(data: &[u8]) {
    use herald_amqp::wire::{Wire, WireConfig};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback listener");
        let addr = listener.local_addr().expect("its address");
        let answer = data.to_vec();
        let broker = tokio::spawn(async move {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let mut header = [0u8; 8];
            if socket.read_exact(&mut header).await.is_err() {
                return;
            }
            let _ = socket.write_all(&answer).await;
            let mut sink = Vec::new();
            let _ = socket.read_to_end(&mut sink).await;
        });
        let config = WireConfig {
            url: format!("amqp://guest:guest@{addr}/%2f?heartbeat=0"),
            connection_name: "fuzz".to_owned(),
            max_body: 4096,
        };
        let opened =
            tokio::time::timeout(std::time::Duration::from_secs(2), Wire::open(&config)).await;
        drop(opened);
        broker.abort();
    });
}
