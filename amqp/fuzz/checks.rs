//! The properties each fuzz target checks, one function per target, shared
//! by the cargo-fuzz targets (`fuzz_targets/*.rs`, nightly) and the corpus
//! replay that runs on stable in the workspace's tests
//! (`amqp/tests/fuzz_corpus.rs` replays every file of `corpus/<target>/`
//! through the function of the same name).

#![allow(dead_code)]

use herald_amqp::presence::{MAX_REPORT_USERS, PRESENCE_TYPE, PresenceAmqp, PresenceReport};
use lapin::BasicProperties;
use lapin::types::parsing::parse_field_table;

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
