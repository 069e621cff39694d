//! The properties each fuzz target checks, one function per target, shared
//! by the cargo-fuzz targets (`fuzz_targets/*.rs`, nightly) and the corpus
//! replay that runs on stable in the workspace's tests
//! (`engine/tests/fuzz_corpus.rs` replays every file of `corpus/<target>/`
//! through the function of the same name).

#![allow(dead_code)]

use bytes::Bytes;
use herald_engine::publish::PublishConfig;
use herald_engine::publish::decode::decode_body;
use herald_engine::schedule::entry::Target;
use herald_engine::schedule::record;

/// The content types a raw publication is tried with; the JSON form is
/// `application/json` (with parameters and odd case too, which must still
/// select it).
const RAW_TYPES: [&str; 4] = [
    "text/plain",
    "application/octet-stream",
    "text/plain; charset=utf-8",
    "application/xml",
];
const JSON_TYPES: [&str; 2] = ["application/json", "Application/JSON; charset=utf-8"];

/// Arbitrary bodies given to the publish API's decoding
/// (`POST /v1/notifications` without the I/O) never make it panic; what it
/// accepts passes the envelope validation again, has ids, and is within the
/// batch limit; a raw body is one notification carrying the body verbatim.
///
/// The first input byte picks the form and the content type: bit 0 clear is
/// JSON (the rest is the body), set is raw, where the rest is
/// `QUERY\nBODY` (a query that is not UTF-8 is not a request a client can
/// send, so it ends the case). The next bits pick the content type, and
/// bit 4 a batch limit of 2 instead of the default.
pub(crate) fn publish_decode(data: &[u8]) {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let mut config = PublishConfig::default();
    if control & 0x10 != 0 {
        config.max_batch = 2;
    }
    let mut ids = 0u32;
    let mut new_id = || {
        ids += 1;
        format!("generated-{ids}")
    };
    if control & 1 == 0 {
        let content_type = JSON_TYPES[usize::from(control >> 1) % JSON_TYPES.len()];
        let body = Bytes::copy_from_slice(rest);
        if let Ok(notifications) = decode_body(content_type, None, body, &config, &mut new_id) {
            assert!(!notifications.is_empty());
            assert!(notifications.len() <= config.max_batch);
            for mut n in notifications {
                assert!(!n.id.is_empty());
                assert_eq!(n.validate(&config.limits), Ok(()));
            }
        }
        // A JSON body never takes its fields from a query string.
        let body = Bytes::copy_from_slice(rest);
        let with_query = decode_body(content_type, Some("event=e"), body, &config, &mut new_id);
        assert_eq!(
            with_query.map_err(|e| e.field),
            Err(Some("query".to_owned()))
        );
    } else {
        let content_type = RAW_TYPES[usize::from(control >> 1) % RAW_TYPES.len()];
        let (query, body) = match rest.iter().position(|&b| b == b'\n') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, &[][..]),
        };
        let Ok(query) = std::str::from_utf8(query) else {
            return;
        };
        let payload = Bytes::copy_from_slice(body);
        if let Ok(notifications) =
            decode_body(content_type, Some(query), payload, &config, &mut new_id)
        {
            assert_eq!(notifications.len(), 1);
            let mut n = notifications.into_iter().next().unwrap();
            assert_eq!(&n.payload[..], body);
            assert_eq!(n.content_type, content_type);
            assert!(!n.id.is_empty());
            assert_eq!(n.validate(&config.limits), Ok(()));
        }
    }
}

/// Arbitrary bytes read as a stored record (`schedule::record::decode`,
/// which both stores apply to every entry they hold) never make it panic.
/// What decodes encodes, as the version this build writes for it (1
/// without a target of its own, else 2), to a record
/// that decodes to the same entry (its target included); a record of
/// version 1 has the default target.
pub(crate) fn record_decode(data: &[u8]) {
    let Ok(entry) = record::decode(Bytes::copy_from_slice(data)) else {
        return;
    };
    if data[0] == record::VERSION_1 {
        assert_eq!(entry.target, Target::default());
    }
    let again = record::encode(&entry);
    let version = if entry.target == Target::default() {
        record::VERSION_1
    } else {
        record::VERSION
    };
    assert_eq!(again[0], version);
    assert_eq!(record::decode(again).as_ref(), Ok(&entry));
}
