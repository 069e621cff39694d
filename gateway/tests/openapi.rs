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
