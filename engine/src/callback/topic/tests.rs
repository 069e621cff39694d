use serde_json::json;

use super::*;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn parse(body: Value) -> Result<Topic, TopicError> {
    Topic::from_json(&body, &[])
}

fn field_of(body: Value) -> String {
    parse(body).unwrap_err().field
}

#[test]
fn an_empty_object_is_a_topic_with_defaults() {
    let t = parse(json!({})).unwrap();
    assert!(t.callback_url.is_none() && t.recheck_url.is_none());
    assert_eq!(t.retry, Policy::TwoNPlusOne);
    assert_eq!(t.timeout_ms, DEFAULT_TIMEOUT_MS);
    assert!(t.retry_if.is_none() && t.signing_secrets.is_empty());
    assert_eq!((t.jitter_ms, t.min_interval_ms, t.merge), (0, None, None));
}

#[test]
fn every_field_is_read() {
    let t = parse(json!({
        "callback_url": "https://push.example.com/send",
        "recheck_url": "https://billing.example.com/check?x=1",
        "retry": {"delays_ms": [60000, 180000]},
        "retry_if": "{res.code}!=200 && {res.data.status}!=2 || {res.data.msg}=='failed'",
        "timeout_ms": 2500,
        "signing_secrets": [SECRET],
        "jitter_ms": 100,
        "min_interval_ms": 60000,
        "merge": true,
    }))
    .unwrap();
    assert_eq!(
        t.callback_url.as_ref().map(Url::as_str),
        Some("https://push.example.com/send")
    );
    assert_eq!(t.retry, Policy::Delays(vec![60_000, 180_000]));
    assert_eq!(t.timeout_ms, 2500);
    assert_eq!(t.signing_secrets.len(), 1);
    assert_eq!(
        (t.jitter_ms, t.min_interval_ms, t.merge),
        (100, Some(60_000), Some(true))
    );
    let cond = &t.retry_if.as_ref().unwrap().condition;
    assert!(cond.eval(500, Some(&json!({}))));
    assert!(!cond.eval(200, Some(&json!({"status": 2, "msg": "ok"}))));
}

#[test]
fn the_three_retry_forms() {
    assert_eq!(
        parse(json!({"retry": "2n+1"})).unwrap().retry,
        Policy::TwoNPlusOne
    );
    assert_eq!(
        parse(json!({"retry": {"initial_ms": 1000, "max_ms": 60000, "attempts": 8}}))
            .unwrap()
            .retry,
        Policy::Exponential {
            initial_ms: 1000,
            max_ms: 60_000,
            attempts: 8
        }
    );
    assert_eq!(
        parse(json!({"retry": {"delays_ms": []}})).unwrap().retry,
        Policy::Delays(vec![]),
        "no delays: one attempt, no retry"
    );
}

#[test]
fn bad_retries_name_their_field() {
    assert_eq!(field_of(json!({"retry": "fibonacci"})), "retry");
    assert_eq!(field_of(json!({"retry": 5})), "retry");
    assert_eq!(
        field_of(json!({"retry": {"delays_ms": [1000, -5]}})),
        "retry.delays_ms[1]"
    );
    assert_eq!(
        field_of(json!({"retry": {"delays_ms": [1000, 0]}})),
        "retry.delays_ms[1]"
    );
    assert_eq!(
        field_of(json!({"retry": {"delays_ms": [1.5]}})),
        "retry.delays_ms[0]"
    );
    assert_eq!(
        field_of(json!({"retry": {"delays_ms": "1,2"}})),
        "retry.delays_ms"
    );
    assert_eq!(
        field_of(json!({"retry": {"delays_ms": vec![1000; 100]}})),
        "retry.delays_ms",
        "100 delays are 101 attempts"
    );
    assert_eq!(
        field_of(json!({"retry": {"delays_ms": [1000], "attempts": 3}})),
        "retry"
    );
    assert_eq!(
        field_of(json!({"retry": {"initial_ms": 1000, "max_ms": 5000}})),
        "retry.attempts"
    );
    assert_eq!(
        field_of(json!({"retry": {"initial_ms": 1000, "max_ms": 5000, "attempts": 0}})),
        "retry.attempts"
    );
    assert_eq!(
        field_of(json!({"retry": {"initial_ms": 1000, "max_ms": 5000, "attempts": 101}})),
        "retry.attempts"
    );
    assert_eq!(
        field_of(json!({"retry": {"initial_ms": -1, "max_ms": 5000, "attempts": 3}})),
        "retry.initial_ms"
    );
    assert_eq!(
        field_of(json!({"retry": {"every_ms": 5}})),
        "retry.every_ms"
    );
}

#[test]
fn a_bad_condition_says_where() {
    let err = parse(json!({"retry_if": "{res.code} != 200 &&"})).unwrap_err();
    assert_eq!(err.field, "retry_if");
    assert_eq!(err.position, Some(20), "{err}");
    let err = parse(json!({"retry_if": "{res.code} = 200"})).unwrap_err();
    assert_eq!(err.field, "retry_if");
    assert!(err.position.is_some(), "{err}");
    assert_eq!(field_of(json!({"retry_if": 200})), "retry_if");
}

#[test]
fn bad_urls_are_refused_by_field() {
    let cb = |url: &str| json!({"callback_url": url});
    for url in [
        "ftp://example.com/x",
        "not a url",
        "http://",
        "http://127.0.0.1/x",
        "http://localhost:8080/",
    ] {
        assert_eq!(field_of(cb(url)), "callback_url", "{url}");
    }
    let long = format!(
        "https://example.com/{}",
        "a".repeat(destination::MAX_URL_BYTES)
    );
    let err = parse(cb(&long)).unwrap_err();
    assert_eq!(err.field, "callback_url");
    assert!(err.message.contains("limit"), "{err}");
    assert!(
        !err.message.starts_with("callback_url"),
        "the field is not repeated: {err}"
    );
    assert_eq!(
        field_of(json!({"callback_url": "https://a.example/", "recheck_url": "gopher://x/"})),
        "recheck_url"
    );
    assert_eq!(field_of(json!({"callback_url": 7})), "callback_url");
}

#[test]
fn allowed_classes_let_private_destinations_through() {
    let body = json!({"callback_url": "http://127.0.0.1:9000/cb"});
    assert!(Topic::from_json(&body, &[Class::Loopback]).is_ok());
    assert_eq!(
        Topic::from_json(&body, &[Class::Private])
            .unwrap_err()
            .field,
        "callback_url"
    );
}

#[test]
fn a_recheck_or_secrets_need_a_callback() {
    assert_eq!(
        field_of(json!({"recheck_url": "https://a.example/"})),
        "recheck_url"
    );
    assert_eq!(
        field_of(json!({"signing_secrets": [SECRET]})),
        "signing_secrets"
    );
}

#[test]
fn secrets_are_checked_one_by_one() {
    let with =
        |secrets: Value| json!({"callback_url": "https://a.example/", "signing_secrets": secrets});
    assert_eq!(
        field_of(with(json!([SECRET, "nope"]))),
        "signing_secrets[1]"
    );
    assert_eq!(field_of(with(json!([SECRET, 3]))), "signing_secrets[1]");
    assert_eq!(field_of(with(json!(SECRET))), "signing_secrets");
    assert_eq!(
        field_of(with(json!(vec![SECRET; MAX_SECRETS + 1]))),
        "signing_secrets"
    );
    assert_eq!(
        parse(with(json!([SECRET, SECRET])))
            .unwrap()
            .signing_secrets
            .len(),
        2
    );
}

#[test]
fn numbers_are_bounded() {
    assert_eq!(field_of(json!({"timeout_ms": 0})), "timeout_ms");
    assert_eq!(
        field_of(json!({"timeout_ms": MAX_TIMEOUT_MS + 1})),
        "timeout_ms"
    );
    assert_eq!(field_of(json!({"timeout_ms": -5})), "timeout_ms");
    assert_eq!(field_of(json!({"timeout_ms": "10s"})), "timeout_ms");
    assert_eq!(
        field_of(json!({"jitter_ms": MAX_SPREAD_MS + 1})),
        "jitter_ms"
    );
    assert_eq!(field_of(json!({"min_interval_ms": 1.5})), "min_interval_ms");
    assert_eq!(field_of(json!({"merge": "yes"})), "merge");
    assert_eq!(
        parse(json!({"timeout_ms": null})).unwrap().timeout_ms,
        DEFAULT_TIMEOUT_MS
    );
}

#[test]
fn unknown_fields_and_non_objects_are_refused() {
    let err = parse(json!({"callback": "https://a.example/"})).unwrap_err();
    assert_eq!(err.field, "callback");
    assert!(err.message.contains("callback_url"), "{err}");
    assert!(parse(json!([])).is_err());
    assert!(parse(json!("x")).is_err());
}

#[test]
fn the_view_hides_secrets_and_the_stored_form_round_trips() {
    let body = json!({
        "callback_url": "https://push.example.com/send",
        "recheck_url": "https://billing.example.com/check",
        "retry": {"initial_ms": 1000, "max_ms": 60000, "attempts": 8},
        "retry_if": "{status} >= 500",
        "timeout_ms": 2500,
        "signing_secrets": [SECRET],
        "jitter_ms": 5,
        "min_interval_ms": null,
        "merge": false,
    });
    let topic = parse(body.clone()).unwrap();
    let view = topic.to_json();
    assert_eq!(view["signing_secrets"], json!(1));
    assert!(!view.to_string().contains("whsec_"), "{view}");
    assert_eq!(view["retry"], body["retry"]);
    assert_eq!(view["retry_if"], body["retry_if"]);
    let stored = topic.to_stored_json();
    assert_eq!(stored, body);
    let again = parse(stored).unwrap();
    assert_eq!(again.to_stored_json(), topic.to_stored_json());
    assert_eq!(parse(json!({})).unwrap().to_json()["retry"], json!("2n+1"));
}

#[test]
fn names_are_those_a_notification_may_carry() {
    for ok in ["billing.reminder", "a", "x_y-z/1@b+c=d~e", &"n".repeat(200)] {
        assert!(check_name(ok).is_ok(), "{ok}");
    }
    for bad in ["", "a b", "a:b", "é", "a%2F", &"n".repeat(201)] {
        assert_eq!(check_name(bad).unwrap_err().field, "name", "{bad:?}");
    }
}
