//! `GET /v1/openapi.json` on a router with Redis, against the real
//! RabbitMQ and Redis: it serves the document cut down to a router's
//! operations (the publish API, delayed notifications, topics, probes), and
//! every operation in it reaches a handler. The other direction, every
//! registered route documented, is checked from the sources.

mod harness;

use harness::*;
use herald_amqp::Topology;
use herald_engine::openapi::{METHODS, Surface, document};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_serves_its_document_and_every_operation_in_it() {
    let topology = Topology::with_suffix(&suffix());
    let broker = Broker::connect(topology.clone()).await;
    let prefix = format!(
        "herald-test{}",
        topology.exchange.trim_start_matches("herald")
    );
    let _redis = RedisPrefix(prefix.clone());
    let router = Router::start(&topology, |c| {
        c.redis.url = Some(redis_url());
        c.redis.prefix = prefix.clone();
    })
    .await;
    router.wait_ready().await;

    let r = router
        .http
        .get(router.url("/v1/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/json");
    let served: Value = r.json().await.unwrap();
    let expected = document(Surface {
        publish: true,
        delayed: true,
        gateway: false,
        demo: false,
    });
    assert_eq!(served, expected);
    assert!(served["paths"]["/v1/stats"]["get"].is_object());

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
            let r = router
                .http
                .request(m, router.url(&concrete))
                .bearer_auth(API_KEY)
                .header("content-type", "application/json")
                .body("{}")
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let body: Value = r.json().await.unwrap_or(Value::Null);
            assert_ne!(status, 405, "{method} {path}");
            assert!(
                !(status == 404 && body == fallback),
                "{method} {path} has no route"
            );
            probed += 1;
        }
    }
    assert!(probed >= 12, "{probed} operations probed");
    // A method no route takes is a JSON 405, as on the gateway.
    let r = router
        .http
        .patch(router.url("/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "method_not_allowed");

    // The operator's console, as the standalone gateway serves it: the
    // page revalidated, its assets versioned and cached for long.
    let r = router
        .http
        .get(router.url("/console"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/html; charset=utf-8");
    assert_eq!(r.headers()["cache-control"], "no-cache");
    let html = r.text().await.unwrap();
    let assets = herald_engine::console::build();
    for a in &assets.assets {
        assert!(html.contains(&a.name), "{}", a.name);
        let r = router
            .http
            .get(router.url(&format!("/console/assets/{}", a.name)))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{}", a.name);
        assert_eq!(r.headers()["content-type"], a.content_type);
        assert_eq!(
            r.headers()["cache-control"],
            herald_engine::console::ASSET_CACHE
        );
    }
    let r = router
        .http
        .get(router.url("/v1/operator"))
        .bearer_auth(API_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["delayed"], true, "{body}");
    let r = router
        .http
        .get(router.url("/v1/operator"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    router.stop().await;
    broker.cleanup().await;
}
