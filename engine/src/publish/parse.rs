//! Turning a request body into notifications.
//!
//! JSON (`Content-Type: application/json`): one object, or an array of
//! objects for a batch. Any other content type: the body is the payload,
//! and the envelope fields come from the query string.

use std::time::Duration;

use bytes::Bytes;
use herald_protocol::envelope::{Notification, Scope};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::error::ApiError;
use super::query::{field_in_message, raw_params};
use crate::callback::target::TargetRequest;
use crate::schedule::timing::{DelayRequest, DeliverAt};

/// A parsed publication: the notification, what it asks about timing, and
/// its own callback settings (checked later, against the topics in force).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Publication {
    pub(crate) notification: Notification,
    pub(crate) delay: DelayRequest,
    pub(crate) target: TargetRequest,
    /// It names no recipients (no `scope`, `users` or `clients`): if it
    /// calls back, it is a delay-queue job ([`Publication::as_job`]).
    pub(crate) unaddressed: bool,
}

impl Publication {
    /// Make an unaddressed publication that calls back (its own
    /// `callback_url`, or its topic's: `calls_back`) a delay-queue job, as
    /// the delay services of the field reports take it (topic, body,
    /// delay): its callback alone, no browser (`browsers` false unless
    /// given; given true, the missing recipients are refused as usual),
    /// its scope `global` with `browsers` false, so it reaches nobody's
    /// mailbox. Whether it became one.
    pub(crate) fn as_job(&mut self, calls_back: bool) -> bool {
        if !self.unaddressed || !calls_back || self.target.browsers == Some(true) {
            return false;
        }
        self.target.browsers = Some(false);
        self.notification.scope = Scope::Global;
        true
    }
}

/// The event of a publication that gives none: its topic's name (a
/// delay-queue job is a topic and a body), else the field is missing.
fn event_or_topic(
    event: Option<String>,
    topic: Option<&String>,
    field: String,
) -> Result<String, ApiError> {
    event.or_else(|| topic.cloned()).ok_or_else(|| {
        ApiError::invalid(
            field,
            "missing: name the event, or give a topic (the event defaults to it)",
        )
    })
}

/// `deliver_at` in JSON: RFC 3339 text, or epoch seconds or ms ([`DeliverAt::Epoch`]).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum JsonDeliverAt {
    Ms(i64),
    Text(String),
}

/// One publication in the JSON form.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonPublication {
    id: Option<String>,
    scope: Option<String>,
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    clients: Vec<String>,
    #[serde(default)]
    sites: Vec<String>,
    event: Option<String>,
    topic: Option<String>,
    payload: Option<Box<RawValue>>,
    ttl_ms: Option<u64>,
    delay_ms: Option<i64>,
    deliver_at: Option<JsonDeliverAt>,
    when_online: Option<bool>,
    callback_url: Option<String>,
    recheck_url: Option<String>,
    browsers: Option<bool>,
}

/// A `deliver_at` from a query string: digits (epoch seconds or ms) or RFC 3339.
fn query_deliver_at(v: String) -> DeliverAt {
    let digits = v.strip_prefix('-').unwrap_or(&v);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        match v.parse() {
            Ok(ms) => DeliverAt::Epoch(ms),
            Err(_) => DeliverAt::Rfc3339(v),
        }
    } else {
        DeliverAt::Rfc3339(v)
    }
}

fn parse_scope(scope: Option<String>, field: &str) -> Result<Scope, ApiError> {
    match scope {
        None => Ok(Scope::User),
        Some(s) => s
            .parse::<Scope>()
            .map_err(|e| ApiError::invalid(field, e.to_string())),
    }
}

fn ttl(ms: Option<u64>) -> Option<Duration> {
    ms.map(Duration::from_millis)
}

/// Where in a batch a field sits: `users` or `[3].users`.
fn at(index: Option<usize>, field: &str) -> String {
    match index {
        Some(i) => format!("[{i}].{field}"),
        None => field.to_owned(),
    }
}

fn from_json(
    p: JsonPublication,
    index: Option<usize>,
    new_id: &mut dyn FnMut() -> String,
) -> Result<Publication, ApiError> {
    let delay = DelayRequest {
        delay_ms: p.delay_ms,
        deliver_at: p.deliver_at.map(|d| match d {
            JsonDeliverAt::Ms(ms) => DeliverAt::Epoch(ms),
            JsonDeliverAt::Text(t) => DeliverAt::Rfc3339(t),
        }),
        when_online: p.when_online.unwrap_or(false),
    };
    let payload = match p.payload {
        Some(raw) => Bytes::copy_from_slice(raw.get().as_bytes()),
        None => Bytes::from_static(b"null"),
    };
    let unaddressed = p.scope.is_none() && p.users.is_empty() && p.clients.is_empty();
    let event = event_or_topic(p.event, p.topic.as_ref(), at(index, "event"))?;
    let notification = Notification {
        id: p.id.unwrap_or_else(new_id),
        scope: parse_scope(p.scope, &at(index, "scope"))?,
        users: p.users,
        clients: p.clients,
        sites: p.sites,
        event,
        topic: p.topic,
        content_type: "application/json".into(),
        payload,
        payload_is_utf8: true,
        ttl: ttl(p.ttl_ms),
        encodings: Default::default(),
        accepted: Default::default(),
    };
    Ok(Publication {
        notification,
        delay,
        target: TargetRequest {
            callback_url: p.callback_url,
            recheck_url: p.recheck_url,
            browsers: p.browsers,
        },
        unaddressed,
    })
}

fn json_error(err: serde_path_to_error::Error<serde_json::Error>, batch: bool) -> ApiError {
    let path = err.path().to_string();
    let inner = err.into_inner();
    match inner.classify() {
        serde_json::error::Category::Data => {
            let field = if path == "." { String::new() } else { path };
            let field = if batch || field.is_empty() {
                field
            } else {
                field.trim_start_matches('.').to_owned()
            };
            let message = inner.to_string();
            // serde names a missing or repeated field only in the message.
            let field = if field.is_empty() || field.ends_with(']') {
                field_in_message(&message)
                    .map(|m| format!("{field}{}{m}", if field.is_empty() { "" } else { "." }))
                    .unwrap_or(field)
            } else {
                field
            };
            ApiError::invalid(field, message)
        }
        _ => ApiError::malformed(format!("the body is not valid JSON: {inner}")),
    }
}

/// Parse a JSON body: one publication object, or an array of them.
pub(crate) fn parse_json(
    body: &[u8],
    max_batch: usize,
    new_id: &mut dyn FnMut() -> String,
) -> Result<Vec<Publication>, ApiError> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    match first {
        Some(b'[') => {
            let de = &mut serde_json::Deserializer::from_slice(body);
            let list: Vec<JsonPublication> =
                serde_path_to_error::deserialize(de).map_err(|e| json_error(e, true))?;
            if list.is_empty() {
                return Err(ApiError::invalid("", "the batch is empty"));
            }
            if list.len() > max_batch {
                return Err(ApiError::too_large(
                    None,
                    format!(
                        "the batch has {} notifications; the limit is {max_batch}",
                        list.len()
                    ),
                ));
            }
            list.into_iter()
                .enumerate()
                .map(|(i, p)| from_json(p, Some(i), new_id))
                .collect()
        }
        Some(b'{') => {
            let de = &mut serde_json::Deserializer::from_slice(body);
            let p: JsonPublication =
                serde_path_to_error::deserialize(de).map_err(|e| json_error(e, false))?;
            Ok(vec![from_json(p, None, new_id)?])
        }
        Some(_) => Err(ApiError::malformed(
            "the body must be a JSON object (one notification) or array (a batch)",
        )),
        None => Err(ApiError::malformed("the body is empty")),
    }
}

fn split_list(v: Option<String>) -> Vec<String> {
    v.map(|s| {
        s.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    })
    .unwrap_or_default()
}

/// Build a notification from a raw body and its query-string fields.
/// `payload` is kept as given: the caller gives it an allocation of its own
/// length, never a slice of a request's buffer
/// ([`RequestBody::into_payload`](super::RequestBody::into_payload)).
pub(crate) fn parse_raw(
    query: Option<&str>,
    content_type: &str,
    payload: Bytes,
    new_id: &mut dyn FnMut() -> String,
) -> Result<Publication, ApiError> {
    let params = raw_params(query)?;
    let unaddressed = params.scope.is_none()
        && params.users.as_deref().is_none_or(str::is_empty)
        && params.clients.as_deref().is_none_or(str::is_empty);
    let event = event_or_topic(params.event, params.topic.as_ref(), "event".to_owned())?;
    let delay = DelayRequest {
        delay_ms: params.delay_ms,
        deliver_at: params.deliver_at.map(query_deliver_at),
        when_online: params.when_online.unwrap_or(false),
    };
    let notification = Notification {
        id: params.id.unwrap_or_else(new_id),
        scope: parse_scope(params.scope, "scope")?,
        users: split_list(params.users),
        clients: split_list(params.clients),
        sites: split_list(params.sites),
        event,
        topic: params.topic,
        content_type: content_type.to_owned(),
        // Kept as given: the caller gave it an allocation of its own
        // length (`RequestBody::into_payload`).
        payload,
        payload_is_utf8: false,
        ttl: ttl(params.ttl_ms),
        encodings: Default::default(),
        accepted: Default::default(),
    };
    Ok(Publication {
        notification,
        delay,
        target: TargetRequest {
            callback_url: params.callback_url,
            recheck_url: params.recheck_url,
            browsers: params.browsers,
        },
        unaddressed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> impl FnMut() -> String {
        let mut n = 0;
        move || {
            n += 1;
            format!("gen-{n}")
        }
    }

    #[test]
    fn single_object_keeps_payload_bytes_verbatim() {
        let body = br#"{"users":["a"],"event":"chat.message","payload": {"b": [1, 2]}}"#;
        let v = parse_json(body, 10, &mut ids()).unwrap();
        assert_eq!(v.len(), 1);
        let n = &v[0].notification;
        assert_eq!(&n.payload[..], br#"{"b": [1, 2]}"#);
        assert_eq!(n.id, "gen-1");
        assert_eq!(n.scope, Scope::User);
        assert!(!v[0].delay.is_delayed());
    }

    #[test]
    fn batch_errors_name_the_index() {
        let body = br#"[{"users":["a"],"event":"e"},{"users":"a","event":"e"}]"#;
        let err = parse_json(body, 10, &mut ids()).unwrap_err();
        assert_eq!(err.code, "invalid_field");
        assert_eq!(err.field.as_deref(), Some("[1].users"), "{err:?}");
    }

    #[test]
    fn missing_event_is_named() {
        let err = parse_json(br#"{"users":["a"]}"#, 10, &mut ids()).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("event"), "{err:?}");
        let err = parse_json(br#"[{"users":["a"]}]"#, 10, &mut ids()).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("[0].event"), "{err:?}");
    }

    /// A delay-queue job: no event (the topic is), no recipients; it is a
    /// job once it calls back, and not when it asks for browsers.
    #[test]
    fn a_topic_and_a_body_is_unaddressed_and_becomes_a_job_when_it_calls_back() {
        let v = parse_json(
            br#"{"topic":"job","payload":{},"delay_ms":300}"#,
            10,
            &mut ids(),
        )
        .unwrap();
        let mut p = v[0].clone();
        assert_eq!(p.notification.event, "job");
        assert!(p.unaddressed);
        assert!(!p.clone().as_job(false), "no callback: no job");
        assert!(p.as_job(true));
        assert_eq!(
            (p.notification.scope, p.target.browsers),
            (Scope::Global, Some(false))
        );
        let raw = parse_raw(
            Some("topic=job&delay_ms=5"),
            "text/plain",
            Bytes::new(),
            &mut ids(),
        )
        .unwrap();
        assert!(raw.unaddressed && raw.notification.event == "job");
        for addressed in [
            r#"{"topic":"job","users":["a"]}"#,
            r#"{"topic":"job","scope":"user"}"#,
            r#"{"topic":"job","clients":["c"]}"#,
        ] {
            let v = parse_json(addressed.as_bytes(), 10, &mut ids()).unwrap();
            assert!(!v[0].unaddressed, "{addressed}");
        }
        let mut browsers = parse_json(br#"{"topic":"job","browsers":true}"#, 10, &mut ids())
            .unwrap()
            .remove(0);
        assert!(
            !browsers.as_job(true),
            "browsers asked for: recipients needed"
        );
    }

    /// Found by schemathesis-style probing: a field given twice was
    /// refused with `"field": ""` (or `"[1]"` in a batch), naming nothing.
    #[test]
    fn a_repeated_field_is_named() {
        let err = parse_json(br#"{"event":"a","event":"b"}"#, 10, &mut ids()).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("event"), "{err:?}");
        let body = br#"[{"users":["a"],"event":"e"},{"event":"a","event":"b"}]"#;
        let err = parse_json(body, 10, &mut ids()).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("[1].event"), "{err:?}");
        let err = parse_raw(
            Some("event=e&users=a&users=b"),
            "text/plain",
            Bytes::new(),
            &mut ids(),
        )
        .unwrap_err();
        assert_eq!(
            (err.status, err.field.as_deref()),
            (http::StatusCode::UNPROCESSABLE_ENTITY, Some("users")),
            "{err:?}"
        );
    }

    #[test]
    fn unknown_field_and_bad_scope_are_422() {
        let err = parse_json(br#"{"event":"e","userz":[]}"#, 10, &mut ids()).unwrap_err();
        assert_eq!(err.status, http::StatusCode::UNPROCESSABLE_ENTITY);
        let err = parse_json(br#"{"event":"e","scope":"all"}"#, 10, &mut ids()).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("scope"));
    }

    #[test]
    fn syntax_errors_are_400() {
        for body in [&br#"{"event":"#[..], b"", b"42", br#"[{"event":"e"},"#] {
            let err = parse_json(body, 10, &mut ids()).unwrap_err();
            assert_eq!(
                err.status,
                http::StatusCode::BAD_REQUEST,
                "{body:?} {err:?}"
            );
        }
    }

    #[test]
    fn batch_limit_is_413() {
        let err = parse_json(br#"[{"event":"e"},{"event":"e"}]"#, 1, &mut ids()).unwrap_err();
        assert_eq!(err.status, http::StatusCode::PAYLOAD_TOO_LARGE);
    }

    #[test]
    fn raw_body_takes_fields_from_query() {
        let n = parse_raw(
            Some("scope=client&clients=acme,%20beta&event=deploy.reload&ttl_ms=5000"),
            "text/plain",
            Bytes::from_static(b"hello"),
            &mut ids(),
        )
        .unwrap()
        .notification;
        assert_eq!(n.scope, Scope::Client);
        assert_eq!(n.clients, vec!["acme", "beta"]);
        assert_eq!(n.ttl, Some(Duration::from_secs(5)));
        assert_eq!(&n.payload[..], b"hello");
        let err = parse_raw(
            Some("ttl_ms=x&event=e"),
            "text/plain",
            Bytes::new(),
            &mut ids(),
        )
        .unwrap_err();
        assert_eq!(err.field.as_deref(), Some("ttl_ms"), "{err:?}");
        let err = parse_raw(None, "text/plain", Bytes::new(), &mut ids()).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("event"));
    }

    #[test]
    fn timing_fields_in_json_and_query() {
        let body = br#"[{"users":["a"],"event":"e","delay_ms":1500},
            {"users":["a"],"event":"e","deliver_at":"2027-01-15T08:00:00Z","when_online":true},
            {"users":["a"],"event":"e","deliver_at":1800000000000}]"#;
        let v = parse_json(body, 10, &mut ids()).unwrap();
        assert_eq!(v[0].delay.delay_ms, Some(1500));
        assert_eq!(
            v[1].delay.deliver_at,
            Some(DeliverAt::Rfc3339("2027-01-15T08:00:00Z".into()))
        );
        assert!(v[1].delay.when_online);
        assert_eq!(
            v[2].delay.deliver_at,
            Some(DeliverAt::Epoch(1_800_000_000_000))
        );
        let err = parse_json(br#"{"event":"e","delay_ms":"soon"}"#, 10, &mut ids()).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("delay_ms"), "{err:?}");
        let raw = |q| parse_raw(Some(q), "text/plain", Bytes::new(), &mut ids());
        let p = raw("event=e&deliver_at=1800000000000&when_online=true").unwrap();
        assert_eq!(
            p.delay.deliver_at,
            Some(DeliverAt::Epoch(1_800_000_000_000))
        );
        assert!(p.delay.when_online);
        let p = raw("event=e&deliver_at=2027-01-15T08:00:00%2B01:00").unwrap();
        assert_eq!(
            p.delay.deliver_at,
            Some(DeliverAt::Rfc3339("2027-01-15T08:00:00+01:00".into()))
        );
        assert_eq!(raw("event=e&delay_ms=-5").unwrap().delay.delay_ms, Some(-5));
    }

    #[test]
    fn callback_fields_in_json_and_query() {
        let body = br#"[{"users":["a"],"event":"e","callback_url":"https://push.example.com/x",
            "recheck_url":"https://billing.example.com/check","browsers":false},
            {"users":["a"],"event":"e","callback_url":null}]"#;
        let v = parse_json(body, 10, &mut ids()).unwrap();
        assert_eq!(
            v[0].target,
            TargetRequest {
                callback_url: Some("https://push.example.com/x".into()),
                recheck_url: Some("https://billing.example.com/check".into()),
                browsers: Some(false),
            }
        );
        assert_eq!(v[1].target, TargetRequest::default());
        let raw = |q| parse_raw(Some(q), "text/plain", Bytes::new(), &mut ids());
        let p =
            raw("event=e&callback_url=https%3A%2F%2Fpush.example.com%2Fx%3Fa%3D1&browsers=true")
                .unwrap();
        assert_eq!(
            p.target.callback_url.as_deref(),
            Some("https://push.example.com/x?a=1")
        );
        assert_eq!(p.target.browsers, Some(true));
        assert_eq!(
            raw("event=e&recheck_url=https://a.example/")
                .unwrap()
                .target
                .recheck_url
                .as_deref(),
            Some("https://a.example/")
        );
    }

    #[test]
    fn callback_fields_of_the_wrong_type_are_named() {
        for (body, field) in [
            (&br#"{"event":"e","callback_url":7}"#[..], "callback_url"),
            (br#"{"event":"e","recheck_url":["x"]}"#, "recheck_url"),
            (br#"{"event":"e","browsers":"no"}"#, "browsers"),
            (
                br#"[{"event":"e"},{"event":"e","browsers":0}]"#,
                "[1].browsers",
            ),
        ] {
            let err = parse_json(body, 10, &mut ids()).unwrap_err();
            assert_eq!(err.status, http::StatusCode::UNPROCESSABLE_ENTITY);
            assert_eq!(err.field.as_deref(), Some(field), "{err:?}");
        }
        let err = parse_raw(
            Some("event=e&browsers=maybe"),
            "text/plain",
            Bytes::new(),
            &mut ids(),
        )
        .unwrap_err();
        assert_eq!(err.field.as_deref(), Some("browsers"), "{err:?}");
    }
}
