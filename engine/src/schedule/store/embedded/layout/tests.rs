use super::*;
use herald_protocol::envelope::{Notification, Scope};

fn entry() -> Entry {
    Entry {
        notification: Notification {
            id: "n1".into(),
            scope: Scope::User,
            users: vec!["u".into()],
            clients: vec![],
            sites: vec![],
            event: "e".into(),
            topic: Some("t".into()),
            content_type: "application/json".into(),
            payload: Bytes::from_static(b"{}"),
            payload_is_utf8: true,
            ttl: None,
            encodings: Default::default(),
            accepted: Default::default(),
        },
        due_ms: 50,
        accepted_ms: 10,
        when_online: true,
        attempts: 0,
        phase: Phase::Deliver,
        fire_ms: 0,
        calls: 0,
        target: Default::default(),
    }
}

#[test]
fn live_and_final_entries_round_trip() {
    let mut s = Stored::new(entry(), 10);
    s.header.attempts = 3;
    s.header.calls = 2;
    let back = Stored::decode("n1", &s.encode("n1")).unwrap();
    assert_eq!(stored_id(&s.encode("n1")), Some("n1"));
    assert_eq!(back.header, s.header);
    let e = back.entry().unwrap();
    assert_eq!((e.attempts, e.calls), (3, 2));
    s.finish(State::Delivered, 99);
    let back = Stored::decode("n1", &s.encode("n1")).unwrap();
    assert_eq!(stored_id(&s.encode("n1")), Some("n1"), "final keeps its id");
    let status = back.status("n1");
    assert_eq!(
        (
            status.state,
            status.updated_ms,
            status.due_ms,
            status.accepted_ms
        ),
        (State::Delivered, 99, 50, 10)
    );
    assert_eq!(status.topic.as_deref(), Some("t"));
    assert!(back.entry().is_none());
    assert_eq!(back.header.calls, 2, "a final entry keeps its calls");
}

/// What format 3 wrote: `state, attempts, updated, deadline, fire`
/// (29 bytes), the id, then `rest`.
fn format_3(state: State, id: &str, rest: &[u8]) -> Vec<u8> {
    let mut out = vec![state.code()];
    out.extend(4u32.to_be_bytes());
    out.extend(10u64.to_be_bytes());
    out.extend(0u64.to_be_bytes());
    out.extend(700u64.to_be_bytes());
    out.extend((id.len() as u16).to_be_bytes());
    out.extend(id.as_bytes());
    out.extend(rest);
    out
}

#[test]
fn a_value_of_format_3_reads_with_no_calls_and_is_written_in_format_4() {
    let e = entry();
    let old = format_3(State::RetryWait, "n1", &record::encode(&e));
    assert_eq!(stored_id(&old), Some("n1"));
    let mut s = Stored::decode("n1", &old).unwrap();
    assert_eq!(
        s.header,
        Header {
            state: State::RetryWait,
            attempts: 4,
            calls: 0,
            updated: 10,
            deadline: 0,
            fire: 700,
        }
    );
    let back = s.entry().unwrap();
    assert_eq!((back.notification, back.calls), (e.notification, 0));
    s.header.calls = 1;
    let new = s.encode("n1");
    assert_eq!(new.len(), old.len() + 4, "the header gained calls");
    assert_eq!(new[0], State::RetryWait.code() | HEADER_4);
    assert_eq!(Stored::decode("n1", &new).unwrap().header, s.header);
    // A final value of format 3 (no record) reads too.
    let mut fin = 50u64.to_be_bytes().to_vec();
    fin.extend(10u64.to_be_bytes());
    fin.push(0);
    let old = format_3(State::Declined, "n1", &fin);
    let s = Stored::decode("n1", &old).unwrap();
    assert_eq!(
        (s.header.state, s.header.calls, s.status("n1").due_ms),
        (State::Declined, 0, 50)
    );
}

#[test]
fn a_dead_letter_keeps_its_body_and_retry_wait_is_the_callback_phase() {
    let mut s = Stored::new(entry(), 10);
    s.header.state = State::RetryWait;
    s.header.fire = 700;
    let back = Stored::decode("n1", &s.encode("n1")).unwrap();
    assert_eq!(back.entry().unwrap().phase, Phase::Callback);
    assert_eq!(back.status("n1").next_attempt_ms, Some(700));
    s.finish(State::Dead, 99);
    let back = Stored::decode("n1", &s.encode("n1")).unwrap();
    let e = back.entry().expect("a dead letter keeps its body");
    assert_eq!(e.notification, entry().notification);
    assert_eq!(back.status("n1").state, State::Dead);
    assert_eq!(back.status("n1").next_attempt_ms, None);
    for st in [State::Declined, State::Cancelled] {
        let mut s = Stored::new(entry(), 10);
        s.finish(st, 99);
        let back = Stored::decode("n1", &s.encode("n1")).unwrap();
        assert!(back.entry().is_none(), "{st} drops its body");
    }
}

#[test]
fn attempt_keys_sort_by_entry_then_number() {
    assert!(attempt_key(1, u32::MAX) < attempt_key(2, 0));
    assert!(attempt_key(1, 9) < attempt_key(1, 10));
    assert!(attempt_key(1, 0).starts_with(&1u64.to_be_bytes()));
    assert_eq!(attempt_number(&attempt_key(3, 77)), Some(77));
    assert_eq!(attempt_number(&[0; 11]), None);
}

#[test]
fn damaged_values_are_corrupt_not_panics() {
    let raw = Stored::new(entry(), 10).encode("n1");
    for cut in 0..raw.len() {
        let _ = Stored::decode("n1", &raw[..cut]);
        let _ = stored_id(&raw[..cut]);
    }
    assert!(matches!(
        Stored::decode("n2", &raw),
        Err(StoreError::Corrupt { .. })
    ));
    assert!(matches!(
        Stored::decode("n1", &[9; 40]),
        Err(StoreError::Corrupt { .. })
    ));
    assert!(matches!(
        Stored::decode("n1", &[HEADER_4 | 9; 40]),
        Err(StoreError::Corrupt { .. })
    ));
}

#[test]
fn keys_sort_in_time_then_id_order() {
    assert!(time_key(5, "b") < time_key(6, "a"));
    assert!(time_key(5, "a") < time_key(5, "b"));
    assert!(time_key(5, "zzz") < time_bound(5));
    assert!(time_bound(5) <= time_key(6, ""));
    assert_eq!(split_time_key(&time_key(7, "x")), Some((7, "x")));
    assert!(
        queue_key(5, 9, "a") < queue_key(5, 10, "a"),
        "seq breaks ties"
    );
    assert!(queue_key(5, u64::MAX, "z") < time_bound(5));
    assert!(queue_key(5, 2, "b") < queue_key(6, 1, "a"));
    assert_eq!(split_queue_key(&queue_key(7, 3, "x")), Some((7, 3, "x")));
    assert_eq!(split_queue_key(&[0; 15]), None);
    let p = list_prefix(Some("t"), State::Held);
    assert!(list_key(Some("t"), State::Held, 1, 0, "a") > p);
    assert!(list_key(Some("t"), State::Held, u64::MAX, u64::MAX, "zz") < prefix_end(&p));
    assert!(list_key(None, State::Held, 1, 2, "a") < list_key(None, State::Held, 1, 3, "0"));
    assert_eq!(prefix_end(&[1, 0xff]), vec![2]);
}
