use amq_protocol::protocol::BasicProperties;
use amq_protocol::protocol::basic::{gen_properties, parse_properties};
use amq_protocol::types::generation::gen_field_table;
use amq_protocol::types::{AMQPValue, FieldArray, FieldTable, LongString};

use super::*;

fn nested(levels: usize) -> Vec<u8> {
    hostile_table(levels)
}

fn encoded(table: &FieldTable) -> Vec<u8> {
    match gen_field_table(table)(Vec::new().into()) {
        Ok(ctx) => ctx.write,
        Err(e) => panic!("{e:?}"),
    }
}

fn herald_like() -> FieldTable {
    let mut t = FieldTable::default();
    t.insert(
        "event".into(),
        AMQPValue::LongString(LongString::from("invoice")),
    );
    let users: Vec<AMQPValue> = (0..100)
        .map(|i| AMQPValue::LongString(LongString::from(format!("u{i}"))))
        .collect();
    t.insert(
        "users".into(),
        AMQPValue::FieldArray(FieldArray::from(users)),
    );
    t.insert("ttl-ms".into(), AMQPValue::LongLongInt(60_000));
    t.insert("flag".into(), AMQPValue::Boolean(true));
    let mut inner = FieldTable::default();
    inner.insert("x".into(), AMQPValue::Double(1.5));
    t.insert("nested".into(), AMQPValue::FieldTable(inner));
    t
}

#[test]
fn a_table_within_the_bounds_is_measured_as_the_codec_reads_it() {
    let bytes = encoded(&herald_like());
    let mut with_rest = bytes.clone();
    with_rest.extend_from_slice(b"rest");
    assert_eq!(scan_table(&with_rest, Bounds::default()), Ok(bytes.len()));
    assert_eq!(
        scan_table(&nested(32), Bounds::default()),
        Ok(nested(32).len())
    );
}

#[test]
fn depth_and_field_count_are_bounded() {
    assert_eq!(
        scan_table(&nested(33), Bounds::default()),
        Err(Refusal::TooDeep { max: 32 })
    );
    // 100,000 levels: far more than would overflow a 2 MiB stack in the
    // codec; refused after 32 without recursion.
    assert_eq!(
        scan_table(&nested(100_000), Bounds::default()),
        Err(Refusal::TooDeep { max: 32 })
    );
    let few = Bounds {
        max_depth: 32,
        max_fields: 50,
    };
    assert_eq!(
        scan_table(&encoded(&herald_like()), few),
        Err(Refusal::TooManyFields { max: 50 })
    );
}

#[test]
fn bad_lengths_and_types_are_malformed_never_a_panic() {
    let good = encoded(&herald_like());
    for cut in 0..good.len() {
        // Shorter than its own length: refused, not read past.
        let r = scan_table(&good[..cut], Bounds::default());
        assert!(matches!(r, Err(Refusal::Malformed(_))), "cut {cut}: {r:?}");
    }
    let mut unknown = nested(2);
    unknown[6] = b'?';
    assert!(matches!(
        scan_table(&unknown, Bounds::default()),
        Err(Refusal::Malformed(_))
    ));
}

fn header_payload(properties: &BasicProperties) -> Vec<u8> {
    let mut out = vec![0, 60, 0, 0];
    out.extend_from_slice(&42u64.to_be_bytes());
    match gen_properties(properties)(out.into()) {
        Ok(ctx) => ctx.write,
        Err(e) => panic!("{e:?}"),
    }
}

#[test]
fn a_header_within_the_bounds_is_left_alone() {
    let p = BasicProperties::default()
        .with_content_type("application/json".into())
        .with_headers(herald_like())
        .with_message_id("m-1".into());
    assert_eq!(
        defuse_header(&header_payload(&p), Bounds::default()),
        Ok(None)
    );
    let plain = BasicProperties::default().with_message_id("m-1".into());
    assert_eq!(
        defuse_header(&header_payload(&plain), Bounds::default()),
        Ok(None)
    );
}

#[test]
fn a_header_too_deep_is_replaced_by_the_reason_and_the_rest_kept() {
    let p = BasicProperties::default()
        .with_content_type("application/json".into())
        .with_content_encoding("identity".into())
        .with_headers(FieldTable::default())
        .with_message_id("poison-1".into())
        .with_type("herald.bundle".into());
    let template = header_payload(&p);
    // Splice a 1,500-level table in place of the empty one (4 zero bytes
    // after the two short strings).
    let at = 14 + 1 + "application/json".len() + 1 + "identity".len();
    assert_eq!(&template[at..at + 4], &[0, 0, 0, 0]);
    let mut poison = template[..at].to_vec();
    poison.extend_from_slice(&nested(1_500));
    poison.extend_from_slice(&template[at + 4..]);

    let defused = defuse_header(&poison, Bounds::default()).unwrap().unwrap();
    let (rest, read) = parse_properties(&defused[12..]).unwrap();
    assert!(rest.is_empty());
    assert_eq!(read.message_id().as_ref().unwrap().as_str(), "poison-1");
    assert_eq!(read.kind().as_ref().unwrap().as_str(), "herald.bundle");
    assert_eq!(
        read.content_type().as_ref().unwrap().as_str(),
        "application/json"
    );
    let headers = read.headers().as_ref().unwrap();
    assert_eq!(headers.inner().len(), 1);
    match headers.inner().get(REJECTED_HEADER) {
        Some(AMQPValue::LongString(why)) => {
            assert_eq!(why.to_string(), "field table nested deeper than 32 levels")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn only_methods_a_client_receives_pass_and_connection_start_is_bounded() {
    // basic.deliver, connection.tune: fine.
    assert_eq!(check_method(&[0, 60, 0, 60, 0], Bounds::default()), Ok(()));
    assert_eq!(check_method(&[0, 10, 0, 30], Bounds::default()), Ok(()));
    // queue.declare (a table of arguments): never sent to a client.
    assert_eq!(
        check_method(&[0, 50, 0, 10], Bounds::default()),
        Err(Refusal::Unexpected {
            class: 50,
            method: 10
        })
    );
    let start = |table: &[u8]| {
        let mut p = vec![0, 10, 0, 10, 0, 9];
        p.extend_from_slice(table);
        p.extend_from_slice(&[0, 0, 0, 5]);
        p.extend_from_slice(b"PLAIN");
        p.extend_from_slice(&[0, 0, 0, 5]);
        p.extend_from_slice(b"en_US");
        p
    };
    assert_eq!(
        check_method(&start(&encoded(&herald_like())), Bounds::default()),
        Ok(())
    );
    assert_eq!(
        check_method(&start(&nested(3_000)), Bounds::default()),
        Err(Refusal::TooDeep { max: 32 })
    );
}
