use super::*;

fn text(s: &str) -> AMQPValue {
    AMQPValue::LongString(s.into())
}

fn strings(values: &[&str]) -> AMQPValue {
    AMQPValue::FieldArray(values.iter().map(|v| text(v)).collect::<Vec<_>>().into())
}

/// A valid publication's headers: scope user, one user, an event.
fn base() -> FieldTable {
    let mut t = FieldTable::default();
    t.insert("users".into(), strings(&["alice"]));
    t.insert("event".into(), text("chat.message"));
    t
}

fn props(headers: FieldTable) -> BasicProperties {
    BasicProperties::default()
        .with_message_id("m-1".into())
        .with_content_type("application/json".into())
        .with_headers(headers)
}

fn parse(p: &BasicProperties, body: &'static [u8]) -> Result<Notification, Rejection> {
    from_amqp(p, body, &Limits::default(), || "generated".into())
}

fn with(name: &str, value: AMQPValue) -> BasicProperties {
    let mut t = base();
    t.insert(name.into(), value);
    props(t)
}

fn without(name: &str) -> BasicProperties {
    let mut t = base().inner().clone();
    t.remove(name);
    props(t.into())
}

#[track_caller]
fn rejected(p: &BasicProperties, body: &'static [u8], field: &str) -> Rejection {
    let r = parse(p, body).expect_err("should be refused");
    assert_eq!(r.field, field, "{r:?}");
    assert!(
        r.reason.starts_with(&format!("{field}: ")),
        "the reason names the header: {r:?}"
    );
    r
}

#[test]
fn a_minimal_publication_gets_the_defaults() {
    let p = BasicProperties::default().with_headers(base());
    let n = parse(&p, b"\x00\x01").unwrap();
    assert_eq!(n.id, "generated");
    assert_eq!(n.scope, Scope::User);
    assert_eq!(n.users, ["alice"]);
    assert_eq!(n.event, "chat.message");
    assert_eq!(n.content_type, DEFAULT_CONTENT_TYPE);
    assert_eq!(&n.payload[..], b"\x00\x01");
    assert!(n.topic.is_none() && n.ttl.is_none());
}

#[test]
fn every_header_is_read() {
    let mut t = FieldTable::default();
    t.insert("scope".into(), text("client"));
    t.insert("clients".into(), strings(&["acme", "beta"]));
    t.insert("sites".into(), strings(&["eu"]));
    t.insert("users".into(), strings(&[]));
    t.insert("event".into(), text("deploy.reload"));
    t.insert("topic".into(), text("ops"));
    t.insert("ttl-ms".into(), AMQPValue::LongInt(5000));
    t.insert("x-trace-id".into(), AMQPValue::Boolean(true));
    let n = parse(&props(t), b"{}").unwrap();
    assert_eq!(n.id, "m-1");
    assert_eq!(n.scope, Scope::Client);
    assert_eq!(n.clients, ["acme", "beta"]);
    assert_eq!(n.sites, ["eu"]);
    assert!(n.users.is_empty());
    assert_eq!(n.topic.as_deref(), Some("ops"));
    assert_eq!(n.ttl, Some(Duration::from_secs(5)));
    assert_eq!(n.content_type, "application/json");
    assert!(n.payload_is_utf8);
}

#[test]
fn byte_arrays_of_utf8_are_strings() {
    let p = with(
        "users",
        AMQPValue::FieldArray(vec![AMQPValue::ByteArray(b"bob".to_vec().into())].into()),
    );
    assert_eq!(parse(&p, b"").unwrap().users, ["bob"]);
}

#[test]
fn every_integer_type_is_a_ttl() {
    for v in [
        AMQPValue::ShortShortInt(7),
        AMQPValue::ShortShortUInt(7),
        AMQPValue::ShortInt(7),
        AMQPValue::ShortUInt(7),
        AMQPValue::LongInt(7),
        AMQPValue::LongUInt(7),
        AMQPValue::LongLongInt(7),
    ] {
        let n = parse(&with("ttl-ms", v), b"").unwrap();
        assert_eq!(n.ttl, Some(Duration::from_millis(7)));
    }
}

#[test]
fn round_trip_through_to_amqp() {
    let mut t = FieldTable::default();
    t.insert("scope".into(), text("global"));
    t.insert("sites".into(), strings(&["eu", "us"]));
    t.insert("event".into(), text("deploy.reload"));
    t.insert("topic".into(), text("ops"));
    t.insert("ttl-ms".into(), AMQPValue::LongLongInt(60_000));
    let original = parse(&props(t), b"{\"v\":1}").unwrap();
    let (p, body) = to_amqp(&original);
    assert_eq!(p.delivery_mode(), &Some(PERSISTENT));
    let back = from_amqp_bytes(&p, body, &Limits::default(), || unreachable!()).unwrap();
    assert_eq!(back, original);

    // Scope user with users and clients, binary payload, no topic or TTL.
    let mut t = base();
    t.insert("clients".into(), strings(&["acme"]));
    let original = parse(&props(t), b"\xff\x00").unwrap_err();
    assert_eq!(original.field, "body", "application/json must be UTF-8");
    let p = BasicProperties::default()
        .with_message_id("bin-1".into())
        .with_content_type("image/png".into())
        .with_headers(base());
    let original = parse(&p, b"\xff\x00").unwrap();
    assert!(!original.payload_is_utf8);
    let (p, body) = to_amqp(&original);
    let back = from_amqp_bytes(&p, body, &Limits::default(), || unreachable!()).unwrap();
    assert_eq!(back, original);
    assert!(!back.payload_is_utf8);
}

#[test]
fn a_delivery_body_keeps_no_slack() {
    // A body assembled from several frames: the Vec grew past its length.
    let mut data = Vec::with_capacity(16);
    data.extend_from_slice(&[1; 10]);
    data.extend_from_slice(&[2; 20]);
    assert!(data.capacity() > data.len());
    let body = body_bytes(data);
    assert_eq!(body.len(), 30);
    let owned = body.try_into_mut().expect("the only handle");
    assert_eq!(owned.capacity(), 30, "the slack is given back");
    // An exact Vec is taken as it is, without a copy.
    let exact = vec![3; 8];
    let at = exact.as_ptr();
    assert_eq!(body_bytes(exact).as_ptr(), at);
}

#[test]
fn the_payload_is_shared_not_copied() {
    let body = Bytes::from(b"{}".to_vec());
    let n = from_amqp_bytes(
        &props(base()),
        body.clone(),
        &Limits::default(),
        String::new,
    )
    .unwrap();
    assert_eq!(n.payload.as_ptr(), body.as_ptr());
    let (_, forwarded) = to_amqp(&n);
    assert_eq!(forwarded.as_ptr(), body.as_ptr());
}

#[test]
fn wrong_header_types_name_the_header() {
    let r = rejected(&with("users", text("alice")), b"", "users");
    assert!(r.reason.contains("array of strings"), "{r:?}");
    let r = rejected(
        &with(
            "users",
            AMQPValue::FieldArray(vec![text("a"), AMQPValue::LongInt(2)].into()),
        ),
        b"",
        "users",
    );
    assert!(r.reason.contains("entry 1 is an integer"), "{r:?}");
    rejected(&with("clients", AMQPValue::Boolean(true)), b"", "clients");
    rejected(&with("sites", AMQPValue::LongInt(3)), b"", "sites");
    rejected(&with("scope", AMQPValue::LongInt(1)), b"", "scope");
    rejected(&with("event", strings(&["a"])), b"", "event");
    rejected(&with("topic", AMQPValue::Double(1.0)), b"", "topic");
    let r = rejected(&with("ttl-ms", text("5000")), b"", "ttl-ms");
    assert!(r.reason.contains("integer"), "{r:?}");
    rejected(&with("ttl-ms", AMQPValue::Double(5000.0)), b"", "ttl-ms");
    rejected(&with("ttl-ms", AMQPValue::LongInt(-1)), b"", "ttl-ms");
    rejected(&with("ttl-ms", AMQPValue::LongInt(0)), b"", "ttl-ms");
    rejected(
        &with("ttl-ms", AMQPValue::LongLongInt(i64::MAX)),
        b"",
        "ttl-ms",
    );
    rejected(
        &with("event", AMQPValue::LongString(b"\xff".to_vec().into())),
        b"",
        "event",
    );
    for r in [
        parse(&with("users", text("alice")), b""),
        parse(&with("ttl-ms", text("1")), b""),
    ] {
        assert_eq!(r.unwrap_err().kind, RejectReason::InvalidField);
    }
}

#[test]
fn unknown_scope_is_refused() {
    let r = rejected(&with("scope", text("everyone")), b"", "scope");
    assert!(r.reason.contains("everyone"), "{r:?}");
    // The reason quotes the input, within bounds.
    let huge = "é".repeat(100_000);
    let r = rejected(&with("scope", text(&huge)), b"", "scope");
    assert!(r.reason.len() <= MAX_REASON_BYTES, "{}", r.reason.len());
    assert!(r.reason.ends_with("..."));
}

#[test]
fn missing_event_is_refused() {
    let r = rejected(&without("event"), b"", "event");
    assert_eq!(
        r.reason,
        "event: the header is required (or a topic header: the event defaults to it)"
    );
    rejected(&with("event", text("has space")), b"", "event");
    // No headers at all.
    rejected(&BasicProperties::default(), b"", "event");
}

#[test]
fn scope_needs_its_recipients() {
    rejected(&without("users"), b"", "users");
    rejected(&with("scope", text("client")), b"", "clients");
}

#[test]
fn oversized_payload_is_too_large() {
    let limits = Limits {
        max_payload_bytes: 4,
        ..Limits::default()
    };
    let r = from_amqp(&props(base()), b"12345", &limits, String::new).unwrap_err();
    assert_eq!(r.field, "body");
    assert_eq!(r.kind, RejectReason::TooLarge);
    assert!(r.reason.contains("limit is 4"), "{r:?}");
}

#[test]
fn text_payload_must_be_utf8() {
    let p = props(base()).with_content_type("text/plain; charset=utf-8".into());
    let r = rejected(&p, b"caf\xe9", "body");
    assert!(r.reason.contains("UTF-8"), "{r:?}");
    assert_eq!(r.kind, RejectReason::InvalidField);
}

#[test]
fn too_many_users_is_refused_before_copying() {
    let many: Vec<String> = (0..51).map(|i| format!("u{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let r = rejected(&with("users", strings(&many)), b"", "users");
    assert!(r.reason.contains("limit is 50"), "{r:?}");
    let r = rejected(&with("users", strings(&[""])), b"", "users");
    assert!(r.reason.contains("1 to 256 bytes"), "{r:?}");
}

#[test]
fn timing_headers_are_read() {
    let p = with("delay-ms", AMQPValue::LongInt(1000));
    assert_eq!(delay_from_amqp(&p).unwrap().delay_ms, Some(1000));
    let p = with("deliver-at", AMQPValue::LongLongInt(1_800_000_000_000));
    assert_eq!(
        delay_from_amqp(&p).unwrap().deliver_at,
        Some(DeliverAt::Epoch(1_800_000_000_000))
    );
    let p = with(
        "deliver-at",
        AMQPValue::LongString("2027-01-15T08:00:00Z".into()),
    );
    assert_eq!(
        delay_from_amqp(&p).unwrap().deliver_at,
        Some(DeliverAt::Rfc3339("2027-01-15T08:00:00Z".into()))
    );
    let p = with("when-online", AMQPValue::Boolean(true));
    assert!(delay_from_amqp(&p).unwrap().when_online);
    assert!(!delay_from_amqp(&props(base())).unwrap().is_delayed());
    // The notification itself parses as before.
    assert!(from_amqp(&p, b"", &Limits::default(), || "id".into()).is_ok());
}

#[test]
fn bad_timing_headers_name_the_header() {
    for (name, value, words) in [
        ("delay-ms", AMQPValue::LongString("soon".into()), "integer"),
        ("deliver-at", AMQPValue::Boolean(true), "RFC 3339"),
        (
            "when-online",
            AMQPValue::LongString("yes".into()),
            "boolean",
        ),
    ] {
        let r = delay_from_amqp(&with(name, value)).unwrap_err();
        assert_eq!(r.field, name);
        assert!(r.reason.contains(words), "{r:?}");
        assert_eq!(r.kind, RejectReason::InvalidField);
    }
}

#[test]
fn callback_headers_are_read() {
    assert_eq!(
        target_from_amqp(&props(base())).unwrap(),
        TargetRequest::default()
    );
    let mut t = base();
    t.insert("callback-url".into(), text("https://push.example.com/x"));
    t.insert(
        "recheck-url".into(),
        AMQPValue::ByteArray(b"https://billing.example.com/check".to_vec().into()),
    );
    t.insert("browsers".into(), text("false"));
    let r = target_from_amqp(&props(t)).unwrap();
    assert_eq!(
        r,
        TargetRequest {
            callback_url: Some("https://push.example.com/x".into()),
            recheck_url: Some("https://billing.example.com/check".into()),
            browsers: Some(false),
        }
    );
    for (value, browsers) in [
        (text("true"), true),
        (AMQPValue::Boolean(false), false),
        (AMQPValue::Boolean(true), true),
    ] {
        let r = target_from_amqp(&with("browsers", value)).unwrap();
        assert_eq!(r.browsers, Some(browsers));
    }
}

#[test]
fn bad_callback_headers_name_the_header() {
    for (name, value, words) in [
        ("callback-url", AMQPValue::LongInt(7), "string"),
        ("recheck-url", strings(&["x"]), "string"),
        ("browsers", text("no"), "true or false"),
        ("browsers", text("TRUE"), "true or false"),
        ("browsers", AMQPValue::LongInt(0), "boolean"),
    ] {
        let r = target_from_amqp(&with(name, value)).unwrap_err();
        assert_eq!(r.field, name);
        assert!(r.reason.starts_with(&format!("{name}: ")), "{r:?}");
        assert!(r.reason.contains(words), "{r:?}");
        assert_eq!(r.kind, RejectReason::InvalidField);
    }
    for (field, header) in [
        ("callback_url", "callback-url"),
        ("recheck_url", "recheck-url"),
        ("browsers", "browsers"),
    ] {
        assert_eq!(target_header(field), header);
    }
}

#[test]
fn cancel_messages_name_their_id() {
    assert_eq!(cancel_from_amqp(&props(base())), None);
    let cancel = BasicProperties::default().with_type(CANCEL_TYPE.into());
    let r = cancel_from_amqp(&cancel).unwrap().unwrap_err();
    assert_eq!(r.field, "message_id");
    let ok = cancel.clone().with_message_id("n-1".into());
    assert_eq!(cancel_from_amqp(&ok), Some(Ok("n-1".to_owned())));
    let bad = cancel.with_message_id("a b".into());
    assert!(cancel_from_amqp(&bad).unwrap().is_err());
}

#[test]
fn bad_properties_are_named() {
    let p = props(base()).with_message_id("has space".into());
    rejected(&p, b"", "message_id");
    let p = props(base()).with_message_id("".into());
    rejected(&p, b"", "message_id");
    let p = props(base()).with_content_type("".into());
    rejected(&p, b"", "content_type");
}

#[test]
fn dead_letter_keeps_the_original_and_adds_the_reason() {
    let mut t = base();
    t.insert("users".into(), text("alice"));
    let original = props(t.clone())
        .with_correlation_id("c-9".into())
        .with_priority(3);
    let r = parse(&original, b"").unwrap_err();
    let dead = dead_letter_properties(&original, &r, "chat.room.7");
    assert_eq!(dead.message_id(), original.message_id());
    assert_eq!(dead.correlation_id(), original.correlation_id());
    assert_eq!(dead.priority(), &Some(3));
    let h = dead.headers().as_ref().unwrap().inner();
    assert_eq!(h.get("users"), Some(&text("alice")));
    assert_eq!(h.get(headers::ERROR), Some(&text(&r.reason)));
    assert_eq!(h.get(headers::FIELD), Some(&text("users")));
    assert_eq!(h.get(headers::ROUTING_KEY), Some(&text("chat.room.7")));
    // A publication without headers gets a table.
    let dead = dead_letter_properties(&BasicProperties::default(), &r, "");
    assert!(
        dead.headers()
            .as_ref()
            .unwrap()
            .contains_key(headers::ERROR)
    );
}

#[test]
fn short_strings_never_panic() {
    assert_eq!(short("abc").as_str(), "abc");
    let long = "é".repeat(200);
    let s = short(&long);
    assert!(s.as_str().len() <= 255);
    assert!(long.starts_with(s.as_str()));
}

#[test]
fn acceptance_travels_to_the_edges_and_not_from_backends() {
    let mut original = parse(&props(base()), b"{}").unwrap();
    assert_eq!(
        original.accepted.unix_micros(),
        None,
        "a backend's header is not read"
    );
    original.accepted = Accepted::from_unix_micros(1_700_000_000_123_456);
    let (p, _) = to_amqp(&original);
    assert_eq!(
        accepted_from_amqp(&p).unix_micros(),
        Some(1_700_000_000_123_456)
    );
    assert_eq!(accepted_from_amqp(&props(base())).unix_micros(), None);

    let mut later = original.clone();
    later.accepted = Accepted::from_unix_micros(1_700_000_000_124_456);
    let batch = vec![std::sync::Arc::new(original), std::sync::Arc::new(later)];
    let (p, body) = bundle_to_amqp(&batch);
    let mut back = herald_protocol::bundle::decode(body).unwrap();
    let table = bundle_accepted(&p).expect("a bundle carries its table");
    assert!(herald_protocol::bundle::apply_accepted(table, &mut back));
    assert_eq!(back[1].accepted.unix_micros(), Some(1_700_000_000_124_456));
    // Nothing known: no header at all, as an older router sends.
    let unknown = vec![std::sync::Arc::new(parse(&props(base()), b"{}").unwrap())];
    assert!(bundle_accepted(&bundle_to_amqp(&unknown).0).is_none());
}

#[test]
fn only_a_forwarded_notification_may_carry_a_tenants_id() {
    let p = BasicProperties::default()
        .with_message_id("invoice-77:eu".into())
        .with_headers(base());
    let body = Bytes::from_static(b"{}");
    let refused = from_amqp_bytes(&p, body.clone(), &Limits::default(), || unreachable!());
    assert_eq!(refused.unwrap_err().field, "message_id");
    let n = forwarded_from_amqp_bytes(&p, body, &Limits::default(), || unreachable!()).unwrap();
    assert_eq!(n.id, "invoice-77:eu");
}

#[test]
fn headers_a_client_did_not_read_are_the_reason_it_is_refused() {
    let mut t = FieldTable::default();
    t.insert(
        crate::wire::nesting::REJECTED_HEADER.into(),
        text("field table nested deeper than 32 levels"),
    );
    let p = BasicProperties::default()
        .with_message_id("poison-1".into())
        .with_headers(t);
    let r = from_amqp_bytes(
        &p,
        Bytes::from_static(b"{}"),
        &Limits::default(),
        || unreachable!(),
    )
    .unwrap_err();
    assert_eq!(r.field, "headers");
    assert_eq!(
        r.reason,
        "headers: not read: field table nested deeper than 32 levels"
    );
}

/// Without an `event` header the topic is the event; with neither, the
/// event is missing. No `scope`, `users` or `clients` and a callback: a
/// delay-queue job (scope global, browsers false); without a callback,
/// the missing users are refused.
#[test]
fn a_topic_and_a_body_is_a_job_when_it_calls_back() {
    let mut h = FieldTable::default();
    h.insert("topic".into(), text("job"));
    let p = props(h.clone());
    let limits = Limits::default();
    let (n, target) = publication_from_amqp_bytes(
        &p,
        Bytes::from_static(b"{}"),
        &limits,
        || "x".into(),
        |t| t == Some("job"),
    )
    .unwrap();
    assert_eq!((n.event.as_str(), n.scope), ("job", Scope::Global));
    assert_eq!(target.browsers, Some(false));
    let err = publication_from_amqp_bytes(&p, Bytes::new(), &limits, || "x".into(), |_| false)
        .unwrap_err();
    assert_eq!(err.field, "users", "{err:?}");
    // Its own callback-url makes it a job too; browsers true asks for
    // recipients.
    let mut own = h.clone();
    own.insert("callback-url".into(), text("https://push.example.com/x"));
    let (n, _) = publication_from_amqp_bytes(
        &props(own.clone()),
        Bytes::new(),
        &limits,
        || "x".into(),
        |_| false,
    )
    .unwrap();
    assert_eq!(n.scope, Scope::Global);
    own.insert("browsers".into(), AMQPValue::Boolean(true));
    let err =
        publication_from_amqp_bytes(&props(own), Bytes::new(), &limits, || "x".into(), |_| false)
            .unwrap_err();
    assert_eq!(err.field, "users", "{err:?}");
}
