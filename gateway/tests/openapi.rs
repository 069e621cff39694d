//! `GET /v1/openapi.json` on a real standalone gateway: it serves the
//! document cut down to a standalone gateway's operations, and every
//! operation in it reaches a handler (no documented operation falls
//! through to the "no such endpoint" 404 or a 405). The other direction,
//! every registered route documented, is checked from the sources
//! (`http.rs`'s tests, and the engine's for the publish API).

mod common;

use herald_engine::openapi::{METHODS, Surface, document};
use serde_json::{Value, json};

#[tokio::test]
async fn a_standalone_gateway_serves_its_document_and_every_operation_in_it() {
    let gw = common::start(|_| {}).await;
    let http = reqwest::Client::new();
    let r = http
        .get(format!("http://{}/v1/openapi.json", gw.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/json");
    let served: Value = r.json().await.unwrap();
    let expected = document(Surface {
        publish: true,
        delayed: true,
        gateway: true,
        demo: false,
    });
    assert_eq!(served, expected);
    assert!(served["paths"]["/v1/topics/{name}"]["put"].is_object());
    assert!(
        served["paths"]["/"].is_null(),
        "no demo page without dev mode"
    );

    let fallback = json!({"error": {"code": "not_found", "message": "no such endpoint"}});
    let mut probed = 0;
    for (path, item) in served["paths"].as_object().unwrap() {
        let concrete = path
            .split('/')
            .map(|s| if s.starts_with('{') { "x" } else { s })
            .collect::<Vec<_>>()
            .join("/");
        for method in METHODS {
            if !item[method].is_object() {
                continue;
            }
            let m = reqwest::Method::from_bytes(method.to_ascii_uppercase().as_bytes()).unwrap();
            let r = http
                .request(m, format!("http://{}{concrete}", gw.addr))
                .bearer_auth(common::API_KEY)
                .header("content-type", "application/json")
                .body("{}")
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            // Streaming receivers answer 200 and keep going: the head is
            // enough, the body is not read.
            let body: Value = if status == 200 && concrete.starts_with("/sockjs/x/") {
                Value::Null
            } else {
                r.json().await.unwrap_or(Value::Null)
            };
            assert_ne!(status, 405, "{method} {path}");
            assert!(
                !(status == 404 && body == fallback),
                "{method} {path} has no route"
            );
            probed += 1;
        }
    }
    assert!(probed >= 25, "{probed} operations probed");
}

/// Found probing the contract: a path parameter that is not UTF-8 once
/// percent-decoded got axum's plain-text 400 (`Invalid URL: ...`), not
/// the JSON error naming the parameter that every other bad input gets.
#[tokio::test]
async fn a_path_parameter_that_is_not_utf8_is_a_json_422_naming_it() {
    let gw = common::start(|_| {}).await;
    let http = reqwest::Client::new();
    for (method, path, field) in [
        ("GET", "/v1/notifications/%C0%80", "id"),
        ("DELETE", "/v1/notifications/%FF", "id"),
        ("POST", "/v1/notifications/%FF/retry", "id"),
        ("POST", "/v1/users/%FF/online", "uid"),
        ("GET", "/v1/topics/%FF", "name"),
        ("PUT", "/v1/topics/%FF", "name"),
        ("DELETE", "/v1/topics/%FF", "name"),
    ] {
        let r = http
            .request(
                reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
                format!("http://{}{path}", gw.addr),
            )
            .bearer_auth(common::API_KEY)
            .header("content-type", "application/json")
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 422, "{method} {path}");
        assert_eq!(r.headers()["content-type"], "application/json");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "invalid_field", "{method} {path}");
        assert_eq!(body["error"]["field"], field, "{method} {path}: {body}");
    }
    // Still after the key: without one it is a 401 like everything else.
    let r = http
        .get(format!("http://{}/v1/notifications/%FF", gw.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

/// Found probing the contract: a field given twice, in the JSON body or
/// the query string, was refused with `"field": ""`, naming nothing.
#[tokio::test]
async fn a_repeated_field_is_named_in_the_json_error() {
    let gw = common::start(|_| {}).await;
    let http = reqwest::Client::new();
    let r = http
        .post(format!("http://{}/v1/notifications", gw.addr))
        .bearer_auth(common::API_KEY)
        .header("content-type", "application/json")
        .body(r#"[{"users":["a"],"event":"e"},{"users":["a"],"event":"a","event":"b"}]"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["field"], "[1].event", "{body}");
    let r = http
        .get(format!("http://{}/v1/topics?limit=1&limit=2", gw.addr))
        .bearer_auth(common::API_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["field"], "limit", "{body}");
}

/// The operator's console on a standalone gateway: the page revalidated
/// (`no-cache`, a 304 for its `ETag`), its assets under versioned names
/// with their content types and a year's `Cache-Control`, and the key
/// check it logs in with (`GET /v1/operator`: 200 for an admin key, 401
/// for a wrong one). Edges do not serve it (`edge.rs`).
#[tokio::test]
async fn the_console_is_served_with_its_cache_headers() {
    let gw = common::start(|_| {}).await;
    let http = reqwest::Client::new();
    let url = |p: &str| format!("http://{}{p}", gw.addr);
    let r = http.get(url("/console")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/html; charset=utf-8");
    assert_eq!(r.headers()["cache-control"], "no-cache");
    let etag = r.headers()["etag"].to_str().unwrap().to_owned();
    let html = r.text().await.unwrap();
    let r = http
        .get(url("/console"))
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 304);
    // The names the page refers to, in the page's own words.
    let names: Vec<&str> = html
        .split("console/assets/")
        .skip(1)
        .map(|rest| &rest[..rest.find('"').unwrap()])
        .collect();
    let mut types: Vec<String> = Vec::new();
    for name in &names {
        let r = http
            .get(url(&format!("/console/assets/{name}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{name}");
        assert_eq!(
            r.headers()["cache-control"],
            "public, max-age=31536000, immutable",
            "{name}"
        );
        types.push(r.headers()["content-type"].to_str().unwrap().to_owned());
    }
    types.sort();
    types.dedup();
    assert_eq!(
        types,
        [
            "image/svg+xml",
            "text/css; charset=utf-8",
            "text/javascript; charset=utf-8"
        ]
    );
    let r = http
        .get(url("/v1/operator"))
        .bearer_auth(common::API_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["delayed"], true, "{body}");
    assert_eq!(
        body["ops"],
        json!(["publish", "status", "cancel", "admin", "metrics"])
    );
    let r = http
        .get(url("/v1/operator"))
        .bearer_auth("not-the-key")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unauthorized");
}
