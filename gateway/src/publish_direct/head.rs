//! Which requests the direct publish path serves, what it reads of their
//! heads, and its answers as bytes (pure: no I/O).

use herald_engine::publish::{PublishHead, Reply};

/// The path this serves.
const PATH: &str = "/v1/notifications";

/// How a request head ended: what to do with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Bytes of the body (`Content-Length`).
    pub(crate) body_len: u64,
    /// `Connection: close`: answer, then close.
    pub(crate) close: bool,
}

/// Whether the request line names what the direct path serves:
/// `POST /v1/notifications` (any query string), HTTP/1.1.
pub(crate) fn is_publish_line(method: &str, path: &str, version: Option<u8>) -> bool {
    method == "POST"
        && version == Some(1)
        && path
            .strip_prefix(PATH)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('?'))
}

/// The plan for a parsed request, or None when hyper is to serve it
/// (anything but a publish with exactly one plain `Content-Length`: chunked
/// bodies, `Expect`, upgrades, any `Connection` but `keep-alive` or `close`,
/// a malformed or repeated length).
pub(crate) fn plan(req: &httparse::Request<'_, '_>) -> Option<Plan> {
    let path = req.path?;
    if !is_publish_line(req.method?, path, req.version) {
        return None;
    }
    // What hyper would refuse as a request target (httparse lets through
    // bytes such as `"` or `<` that `http`'s URI does not), hyper refuses.
    http::uri::PathAndQuery::try_from(path).ok()?;
    let mut body_len = None;
    let mut close = false;
    for h in req.headers.iter() {
        let name = h.name;
        if name.eq_ignore_ascii_case("content-length") {
            if body_len.is_some() || h.value.is_empty() || !h.value.iter().all(u8::is_ascii_digit) {
                return None;
            }
            body_len = Some(std::str::from_utf8(h.value).ok()?.parse().ok()?);
        } else if name.eq_ignore_ascii_case("connection") {
            if h.value.eq_ignore_ascii_case(b"close") {
                close = true;
            } else if !h.value.eq_ignore_ascii_case(b"keep-alive") {
                return None;
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding")
            || name.eq_ignore_ascii_case("expect")
            || name.eq_ignore_ascii_case("upgrade")
        {
            return None;
        }
    }
    Some(Plan {
        body_len: body_len?,
        close,
    })
}

/// What the publish handler reads of `req`'s head: each header's first
/// value that is visible ASCII, as hyper's `HeaderMap` gives it.
pub(crate) fn publish_head<'a>(req: &httparse::Request<'_, 'a>) -> PublishHead<'a> {
    let mut head = PublishHead {
        query: req.path.and_then(query_of),
        ..PublishHead::default()
    };
    let mut seen = [false; 4];
    for h in req.headers.iter() {
        let slot = if h.name.eq_ignore_ascii_case("authorization") {
            0
        } else if h.name.eq_ignore_ascii_case("x-api-key") {
            1
        } else if h.name.eq_ignore_ascii_case("content-type") {
            2
        } else if h.name.eq_ignore_ascii_case("content-length") {
            3
        } else {
            continue;
        };
        if std::mem::replace(&mut seen[slot], true) {
            continue;
        }
        let Some(value) = visible_ascii(h.value) else {
            continue;
        };
        match slot {
            0 => head.authorization = Some(value),
            1 => head.x_api_key = Some(value),
            2 => head.content_type = Some(value),
            _ => head.content_length = value.parse().ok(),
        }
    }
    head
}

/// The query string of a request target, as `http`'s URI reads it: after
/// the first `?`, up to a `#` (the fragment is not part of it).
fn query_of(target: &str) -> Option<&str> {
    let target = target.split('#').next().unwrap_or(target);
    target.split_once('?').map(|(_, q)| q)
}

/// `value` as text when every byte is visible ASCII or a tab
/// (`HeaderValue::to_str`'s rule).
fn visible_ascii(value: &[u8]) -> Option<&str> {
    value
        .iter()
        .all(|&b| b == b'\t' || (32..127).contains(&b))
        .then(|| std::str::from_utf8(value).ok())
        .flatten()
}

/// Append `reply` to `out` as an HTTP/1.1 response: the headers hyper
/// writes for axum's answer (lowercase names), `date` given.
pub(crate) fn encode_reply(out: &mut Vec<u8>, reply: &Reply, close: bool, date: &[u8]) {
    let status = reply.status;
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\ncontent-type: application/json\r\n");
    if reply.www_authenticate {
        out.extend_from_slice(b"www-authenticate: Bearer\r\n");
    }
    if let Some(secs) = reply.retry_after {
        out.extend_from_slice(b"retry-after: ");
        out.extend_from_slice(itoa::Buffer::new().format(secs).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"content-length: ");
    out.extend_from_slice(itoa::Buffer::new().format(reply.body.len()).as_bytes());
    out.extend_from_slice(b"\r\ndate: ");
    out.extend_from_slice(date);
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(&reply.body);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse<'h, 'b>(
        bytes: &'b [u8],
        headers: &'h mut [httparse::Header<'b>],
    ) -> httparse::Request<'h, 'b> {
        let mut req = httparse::Request::new(headers);
        assert!(req.parse(bytes).unwrap().is_complete());
        req
    }

    fn plan_of(head: &str) -> Option<Plan> {
        let mut headers = [httparse::EMPTY_HEADER; 16];
        plan(&parse(head.as_bytes(), &mut headers))
    }

    #[test]
    fn a_publish_with_a_length_is_served_here() {
        let p = plan_of(
            "POST /v1/notifications?user=a HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\n",
        );
        assert_eq!(
            p,
            Some(Plan {
                body_len: 12,
                close: false
            })
        );
        let p = plan_of(
            "POST /v1/notifications HTTP/1.1\r\ncontent-length: 0\r\nConnection: Close\r\n\r\n",
        );
        assert_eq!(
            p,
            Some(Plan {
                body_len: 0,
                close: true
            })
        );
        assert!(plan_of("POST /v1/notifications HTTP/1.1\r\nContent-Length: 3\r\nConnection: keep-alive\r\n\r\n").is_some());
    }

    #[test]
    fn everything_else_goes_to_hyper() {
        for head in [
            "GET /v1/notifications HTTP/1.1\r\nContent-Length: 1\r\n\r\n",
            "POST /v1/notifications/abc HTTP/1.1\r\nContent-Length: 1\r\n\r\n",
            "POST /v1/notificationsx HTTP/1.1\r\nContent-Length: 1\r\n\r\n",
            "POST /v1/notifications HTTP/1.0\r\nContent-Length: 1\r\n\r\n",
            "POST /v1/notifications HTTP/1.1\r\n\r\n",
            "POST /v1/notifications HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST /v1/notifications HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST /v1/notifications HTTP/1.1\r\nContent-Length: 1\r\nExpect: 100-continue\r\n\r\n",
            "POST /v1/notifications HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
            "POST /v1/notifications HTTP/1.1\r\nContent-Length: +1\r\n\r\n",
            "POST /v1/notifications HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
            "POST /v1/notifications HTTP/1.1\r\nContent-Length: 1\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n",
            "POST /v1/notifications HTTP/1.1\r\nContent-Length: 1\r\nConnection: keep-alive, te\r\n\r\n",
            "POST /v1/notifications?users=\"a\" HTTP/1.1\r\nContent-Length: 1\r\n\r\n",
            "POST /v1/notifications?users=<a> HTTP/1.1\r\nContent-Length: 1\r\n\r\n",
        ] {
            assert_eq!(plan_of(head), None, "{head:?}");
        }
    }

    #[test]
    fn the_head_is_read_as_a_header_map_would_give_it() {
        let bytes = b"POST /v1/notifications?user=a&topic=t HTTP/1.1\r\nX-API-Key: k2\r\nauthorization: Bearer k1\r\nAuthorization: Bearer other\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\n";
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let req = parse(bytes, &mut headers);
        let head = publish_head(&req);
        assert_eq!(head.authorization, Some("Bearer k1"));
        assert_eq!(head.x_api_key, Some("k2"));
        assert_eq!(head.content_type, Some("text/plain"));
        assert_eq!(head.content_length, Some(5));
        assert_eq!(head.query, Some("user=a&topic=t"));

        // The fragment is not part of the query.
        assert_eq!(query_of("/v1/notifications?users=a#x"), Some("users=a"));
        assert_eq!(query_of("/v1/notifications?#x"), Some(""));
        assert_eq!(query_of("/v1/notifications#x?y"), None);

        // A value that is not visible ASCII is no value (to_str fails).
        let bytes = b"POST /v1/notifications HTTP/1.1\r\nAuthorization: Bearer k\xc3\xa9\r\nContent-Length: 0\r\n\r\n";
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let req = parse(bytes, &mut headers);
        let head = publish_head(&req);
        assert_eq!(head.authorization, None);
        assert_eq!(head.query, None);
    }

    /// A head as hyper reads it: the same httparse headers into a map.
    fn header_map(req: &httparse::Request<'_, '_>) -> http::HeaderMap {
        let mut map = http::HeaderMap::new();
        for h in req.headers.iter() {
            let name = http::HeaderName::from_bytes(h.name.as_bytes()).unwrap();
            let value = http::HeaderValue::from_bytes(h.value).unwrap();
            map.append(name, value);
        }
        map
    }

    fn header_line() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let name = prop_oneof![
            Just("Authorization".to_owned()),
            Just("authorization".to_owned()),
            Just("X-Api-Key".to_owned()),
            Just("Content-Type".to_owned()),
            Just("CONTENT-TYPE".to_owned()),
            Just("Content-Length".to_owned()),
            Just("Connection".to_owned()),
            Just("Transfer-Encoding".to_owned()),
            Just("Expect".to_owned()),
            Just("Host".to_owned()),
            "[A-Za-z-]{1,12}",
        ];
        let value = prop_oneof![
            Just("Bearer k".to_owned()),
            Just("close".to_owned()),
            Just("keep-alive".to_owned()),
            Just("12".to_owned()),
            Just("text/plain".to_owned()),
            "[ -~\\t]{0,16}",
            "[0-9]{1,22}",
            proptest::collection::vec(128u8..=255, 1..4)
                .prop_map(|b| b.iter().map(|&c| char::from(c)).collect::<String>()),
        ];
        (name, value).prop_map(|(n, v)| format!("{n}: {v}\r\n"))
    }

    proptest::proptest! {
        /// Over random heads: nothing panics; what the direct path reads is
        /// what the handler reads from hyper's header map; a planned
        /// request's body length is its one `Content-Length`.
        #[test]
        fn random_heads_are_read_as_hyper_reads_them(
            line in proptest::prop_oneof![
                proptest::strategy::Just("POST /v1/notifications?users=a&event=e HTTP/1.1".to_owned()),
                proptest::strategy::Just("POST /v1/notifications HTTP/1.1".to_owned()),
                proptest::strategy::Just("POST /v1/notifications HTTP/1.0".to_owned()),
                proptest::strategy::Just("GET /v1/notifications HTTP/1.1".to_owned()),
                "POST /[a-z/?=&]{0,20} HTTP/1.1",
                "POST /v1/notifications[?#a-z=&\"<>{}|^`]{0,12} HTTP/1.1",
            ],
            headers in proptest::collection::vec(header_line(), 0..8),
        ) {
            let bytes = format!("{line}\r\n{}\r\n", headers.concat()).into_bytes();
            let mut parsed = [httparse::EMPTY_HEADER; 16];
            let mut req = httparse::Request::new(&mut parsed);
            let Ok(httparse::Status::Complete(_)) = req.parse(&bytes) else {
                return Ok(());
            };
            let planned = plan(&req);
            let head = publish_head(&req);
            let map = header_map(&req);
            let target = http::uri::PathAndQuery::try_from(req.path.unwrap());
            let query = target.as_ref().ok().and_then(|t| t.query());
            let expected = PublishHead::from_parts(&map, query);
            if target.is_err() {
                proptest::prop_assert!(planned.is_none());
            }
            proptest::prop_assert_eq!(head.authorization, expected.authorization);
            proptest::prop_assert_eq!(head.x_api_key, expected.x_api_key);
            proptest::prop_assert_eq!(head.content_type, expected.content_type);
            proptest::prop_assert_eq!(head.content_length, expected.content_length);
            if target.is_ok() {
                proptest::prop_assert_eq!(head.query, expected.query);
            }
            if let Some(p) = planned {
                proptest::prop_assert!(is_publish_line(req.method.unwrap(), req.path.unwrap(), req.version));
                proptest::prop_assert_eq!(map.get_all("content-length").iter().count(), 1);
                proptest::prop_assert_eq!(Some(p.body_len), head.content_length);
                proptest::prop_assert!(map.get("transfer-encoding").is_none() && map.get("expect").is_none());
            }
        }
    }

    #[test]
    fn a_reply_is_written_as_hyper_writes_it() {
        let reply = Reply {
            status: http::StatusCode::TOO_MANY_REQUESTS,
            retry_after: Some(3),
            www_authenticate: false,
            body: b"{}".to_vec(),
        };
        let mut out = Vec::new();
        encode_reply(&mut out, &reply, true, b"Fri, 27 Nov 2026 17:00:00 GMT");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\nretry-after: 3\r\nconnection: close\r\ncontent-length: 2\r\ndate: Fri, 27 Nov 2026 17:00:00 GMT\r\n\r\n{}"
        );
        let reply = Reply {
            status: http::StatusCode::UNAUTHORIZED,
            retry_after: None,
            www_authenticate: true,
            body: b"{\"error\":1}".to_vec(),
        };
        let mut out = Vec::new();
        encode_reply(&mut out, &reply, false, b"D");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\nwww-authenticate: Bearer\r\ncontent-length: 11\r\ndate: D\r\n\r\n{\"error\":1}"
        );
    }
}
