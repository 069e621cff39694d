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
    let (body, headers) = parse_field_table(data).ok()?;
    let properties = BasicProperties::default()
        .with_type(PRESENCE_TYPE.into())
        .with_headers(headers);
    Some(
        PresenceReport::from_amqp(&properties, body)
            .map_err(|r| format!("{}: {}", r.field, r.reason)),
    )
}

/// Bytes from a broker, as an edge's root link reads them
/// (`herald_amqp::wire`): frames taken one by one until the bytes run out
/// or are refused, deliveries put together with a 4 KiB body bound. No
/// panic; every frame taken consumes bytes; every method read writes back
/// to a frame that reads again as the same method; no delivery comes out
/// above the bound.
pub(crate) fn wire_frames(data: &[u8]) {
    use amq_protocol::protocol::AMQPClass;
    use amq_protocol::protocol::basic::AMQPMethod;
    use bytes::BytesMut;
    use herald_amqp::wire::delivery::{Assembled, Assembler};
    use herald_amqp::wire::frame::{Frame, decode, put_method};

    const MAX: u32 = 4096;
    let mut buf = BytesMut::from(data);
    let mut assembler = Assembler::new(u64::from(MAX));
    loop {
        let before = buf.len();
        let frame = match decode(&mut buf, MAX) {
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
            assert!(d.body.len() as u64 <= u64::from(MAX));
        }
    }
}
