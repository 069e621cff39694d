//! The body and headers of `GET /v1/stats`, the same in the standalone
//! gateway and the routers: the query (`topics_limit`, `topics_after`),
//! the JSON (docs/stats.md), and the cache validators (`ETag` over the
//! figures, `Last-Modified` from when they were measured, a 304 for a
//! matching `If-None-Match` or a not-older `If-Modified-Since`).

use std::collections::BTreeMap;

use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::part::Totals;
use super::window::{Counts, Event, Windows};

/// Default of `topics_limit`.
pub const DEFAULT_TOPICS_LIMIT: usize = 100;
/// Largest `topics_limit`.
pub const MAX_TOPICS_LIMIT: usize = 500;
/// `Cache-Control` of a stats answer: caches keep it 15 s, may serve it
/// stale for 15 s more while they fetch a fresh one, and for 10 minutes
/// while the backends answer errors or not at all.
pub const CACHE_CONTROL: &str = "public, max-age=15, stale-while-revalidate=15, stale-if-error=600";

/// A bad query parameter: answer 422 with `field` named (the binaries
/// make it the API's JSON error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryError {
    /// The parameter at fault.
    pub field: &'static str,
    /// What it must be.
    pub message: String,
}

fn invalid(field: &'static str, message: impl Into<String>) -> QueryError {
    QueryError {
        field,
        message: message.into(),
    }
}

/// The paging of the topics list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatsQuery {
    /// Most topics in one answer.
    pub topics_limit: usize,
    /// Start after this topic name (the `next` of the previous page).
    pub topics_after: Option<String>,
}

impl StatsQuery {
    /// Read the query string; a bad parameter is a 422 naming it.
    pub fn parse(query: Option<&str>) -> Result<StatsQuery, QueryError> {
        let mut q = StatsQuery {
            topics_limit: DEFAULT_TOPICS_LIMIT,
            topics_after: None,
        };
        for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            match k.as_ref() {
                "topics_limit" => {
                    q.topics_limit = v
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=MAX_TOPICS_LIMIT).contains(n))
                        .ok_or_else(|| {
                            invalid(
                                "topics_limit",
                                format!("an integer from 1 to {MAX_TOPICS_LIMIT}"),
                            )
                        })?;
                }
                "topics_after" => {
                    if v.is_empty() || v.len() > 200 {
                        return Err(invalid(
                            "topics_after",
                            "a topic name (1 to 200 bytes), the `next` of the previous page",
                        ));
                    }
                    q.topics_after = Some(v.into_owned());
                }
                _ => {}
            }
        }
        Ok(q)
    }
}

/// A part of the cluster as the answer lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartView {
    /// `edge` or `router`.
    pub kind: String,
    /// Its id.
    pub id: String,
    /// How old its figures are, ms.
    pub age_ms: u64,
    /// Older than the stale limit: its figures are its last known ones.
    pub stale: bool,
}

/// Everything an answer is made of.
#[derive(Debug, Clone)]
pub struct Answer {
    /// `standalone` or `cluster`.
    pub mode: &'static str,
    /// Now, ms since the epoch.
    pub now_ms: u64,
    /// When the figures were measured (the freshest part), ms.
    pub measured_ms: u64,
    /// The figures.
    pub totals: Totals,
    /// The parts (cluster only).
    pub parts: Option<Vec<PartView>>,
}

fn lateness(c: &Counts) -> Value {
    let l = &c.lateness;
    let max = (l.count() > 0).then_some(l.max_ms as f64);
    json!({"p50": l.quantile(0.5), "p99": l.quantile(0.99), "max": max})
}

fn counts(c: &Counts) -> Value {
    let mut m = serde_json::Map::new();
    for e in Event::ALL {
        m.insert(e.as_str().to_owned(), json!(c.get(e)));
    }
    m.insert("lateness_ms".to_owned(), lateness(c));
    Value::Object(m)
}

fn topic(name: &str, w: &Windows) -> Value {
    json!({
        "name": name,
        "last_minute": counts(&w.last_minute),
        "last_hour": counts(&w.last_hour),
        "last_day": counts(&w.last_day),
    })
}

fn page(topics: &BTreeMap<String, Windows>, q: &StatsQuery) -> (Vec<Value>, Option<String>) {
    use std::ops::Bound;
    let start = match &q.topics_after {
        Some(a) => Bound::Excluded(a.clone()),
        None => Bound::Unbounded,
    };
    let mut items = Vec::new();
    let mut last = None;
    let mut more = false;
    for (name, w) in topics.range((start, Bound::Unbounded)) {
        if items.len() == q.topics_limit {
            more = true;
            break;
        }
        items.push(topic(name, w));
        last = Some(name.clone());
    }
    (items, if more { last } else { None })
}

/// The JSON body, and the figures the ETag is taken over (the body
/// without `generated_at` and the parts' ages).
fn body(a: &Answer, q: &StatsQuery) -> (Value, Value) {
    let t = &a.totals;
    let total: u64 = t.sessions.values().sum();
    let delivered_minute: u64 = t
        .topics
        .values()
        .map(|w| w.last_minute.get(Event::Delivered))
        .sum();
    let due = t.delayed.clone().unwrap_or_default();
    let (items, next) = page(&t.topics, q);
    let mut figures = json!({
        "mode": a.mode,
        "sessions": {"total": total, "by_transport": t.sessions},
        "mailboxes": t.mailboxes,
        "deliveries": {"total": t.deliveries, "per_second": delivered_minute as f64 / 60.0},
        "delayed": {
            "pending": due.next_minute + due.next_hour + due.next_day + due.later,
            "due": due,
        },
        "callbacks": t.callbacks,
        "topics": {"items": items, "next": next},
    });
    let mut body = figures.clone();
    if let Some(parts) = &a.parts {
        let view = |with_age: bool| -> Vec<Value> {
            parts
                .iter()
                .map(|p| {
                    let mut v = json!({"kind": p.kind, "id": p.id, "stale": p.stale});
                    if with_age {
                        v["age_ms"] = json!(p.age_ms);
                    }
                    v
                })
                .collect()
        };
        figures["parts"] = json!(view(false));
        body["parts"] = json!(view(true));
    }
    body["generated_at"] = json!(rfc3339(a.now_ms));
    (body, figures)
}

/// `ms` since the epoch as RFC 3339 with milliseconds, UTC.
pub fn rfc3339(ms: u64) -> String {
    let t = time::OffsetDateTime::UNIX_EPOCH + time::Duration::milliseconds(ms as i64);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        t.month() as u8,
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

fn not_modified(req: &HeaderMap, etag: &str, measured_ms: u64) -> bool {
    if let Some(inm) = req.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()) {
        return inm
            .split(',')
            .map(|t| t.trim().trim_start_matches("W/"))
            .any(|t| t == etag || t == "*");
    }
    let since = req
        .get(header::IF_MODIFIED_SINCE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| httpdate::parse_http_date(v).ok());
    match since {
        Some(since) => {
            let measured =
                std::time::UNIX_EPOCH + std::time::Duration::from_secs(measured_ms / 1000);
            measured <= since
        }
        None => false,
    }
}

/// The answer to `GET /v1/stats` with `query` and the request's headers.
pub fn respond(a: &Answer, q: &StatsQuery, req: &HeaderMap) -> Response {
    let (body, figures) = body(a, q);
    let digest = Sha256::digest(figures.to_string().as_bytes());
    let etag = format!(
        "\"{}\"",
        digest[..12]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    let modified = httpdate::fmt_http_date(
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(a.measured_ms),
    );
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(CACHE_CONTROL),
    );
    if let Ok(v) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, v);
    }
    if let Ok(v) = HeaderValue::from_str(&modified) {
        headers.insert(header::LAST_MODIFIED, v);
    }
    headers.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    if not_modified(req, &etag, a.measured_ms) {
        return (StatusCode::NOT_MODIFIED, headers).into_response();
    }
    (headers, axum::Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::part::{Part, Totals};
    use crate::stats::window::Rolling;

    const T0: u64 = 1_800_000_000_000;

    fn answer(names: &[&str]) -> Answer {
        let mut topics = BTreeMap::new();
        for n in names {
            let mut r = Rolling::new();
            r.record(Event::Accepted, 2, T0);
            r.record(Event::Delivered, 60, T0);
            r.lateness(7, T0);
            topics.insert((*n).to_owned(), r.windows(T0));
        }
        let p = Part {
            kind: "standalone".into(),
            id: "g".into(),
            at_ms: T0,
            sessions: [("websocket".to_owned(), 3)].into(),
            topics,
            ..Part::default()
        };
        Answer {
            mode: "standalone",
            now_ms: T0,
            measured_ms: T0,
            totals: Totals::of([&p], &|_| true),
            parts: None,
        }
    }

    async fn json(r: Response) -> Value {
        let b = http_body_util::BodyExt::collect(r.into_body())
            .await
            .unwrap()
            .to_bytes();
        serde_json::from_slice(&b).unwrap()
    }

    #[tokio::test]
    async fn the_body_has_the_agreed_shape_and_pages_topics() {
        let a = answer(&["a", "b", "c"]);
        let q = StatsQuery::parse(Some("topics_limit=2")).unwrap();
        let r = respond(&a, &q, &HeaderMap::new());
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()[header::CACHE_CONTROL], CACHE_CONTROL);
        assert!(r.headers().contains_key(header::ETAG));
        assert!(r.headers().contains_key(header::LAST_MODIFIED));
        let v = json(r).await;
        assert_eq!(v["generated_at"], "2027-01-15T08:00:00.000Z");
        assert_eq!(v["sessions"]["total"], 3);
        assert_eq!(v["deliveries"]["per_second"], 3.0);
        let items = v["topics"]["items"].as_array().unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0]["name"], "a");
        assert_eq!(items[0]["last_hour"]["accepted"], 2);
        assert_eq!(items[0]["last_minute"]["lateness_ms"]["p50"], 7.0);
        assert_eq!(v["topics"]["next"], "b");
        assert!(v.get("parts").is_none());
        let q = StatsQuery::parse(Some("topics_limit=2&topics_after=b")).unwrap();
        let v = json(respond(&a, &q, &HeaderMap::new())).await;
        assert_eq!(v["topics"]["items"][0]["name"], "c");
        assert_eq!(v["topics"]["next"], Value::Null);
    }

    #[test]
    fn bad_paging_is_refused_naming_the_field() {
        for (q, field) in [
            ("topics_limit=0", "topics_limit"),
            ("topics_limit=501", "topics_limit"),
            ("topics_limit=x", "topics_limit"),
            ("topics_after=", "topics_after"),
        ] {
            let e = StatsQuery::parse(Some(q)).unwrap_err();
            assert_eq!(e.field, field, "{q}");
        }
    }

    #[test]
    fn a_matching_validator_gets_304() {
        let a = answer(&["a"]);
        let q = StatsQuery::parse(None).unwrap();
        let r = respond(&a, &q, &HeaderMap::new());
        let etag = r.headers()[header::ETAG].clone();
        let modified = r.headers()[header::LAST_MODIFIED].clone();
        let mut h = HeaderMap::new();
        h.insert(header::IF_NONE_MATCH, etag.clone());
        let r = respond(&a, &q, &h);
        assert_eq!(r.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(r.headers()[header::ETAG], etag);
        let mut h = HeaderMap::new();
        h.insert(header::IF_MODIFIED_SINCE, modified);
        assert_eq!(respond(&a, &q, &h).status(), StatusCode::NOT_MODIFIED);
        // A later clock alone does not change the ETag; new figures do.
        let mut later = a.clone();
        later.now_ms += 5_000;
        assert_eq!(
            respond(&later, &q, &HeaderMap::new()).headers()[header::ETAG],
            etag
        );
        let other = answer(&["a", "b"]);
        assert_ne!(
            respond(&other, &q, &HeaderMap::new()).headers()[header::ETAG],
            etag
        );
    }
}
