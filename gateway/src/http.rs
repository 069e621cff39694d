//! The HTTP surface: routes and small handlers.
//!
//! | route | what |
//! |---|---|
//! | `GET /ws` | STOMP over WebSocket ([`crate::ws`]) |
//! | `POST /v1/notifications` | publish (from `herald-router`) |
//! | `GET /healthz` | liveness: 200 while serving (`"draining"` once shutdown starts) |
//! | `GET /readyz` | readiness: 200 when taking new sessions, else 503 with reasons ([`crate::health`]) |
//! | `GET /metrics` | Prometheus text format; with `metrics_require_key`, for an API key allowed `metrics` ([`herald_engine::answers::MetricsAccess`]) |
//! | `GET /v1/stats` | this process's figures and per-topic windows as JSON, cacheable for 15 s ([`crate::stats`]) |
//! | `GET /v1/openapi.json` | the OpenAPI document of what this gateway serves ([`herald_engine::openapi`]) |
//! | `/sockjs/...` | SockJS 0.3 ([`crate::sockjs`]) |
//! | `GET /js/herald.js` | the browser client module, as written (`no-cache`, `ETag`) ([`crate::js`]) |
//! | `GET /js/{file}` | `herald.<hash>.js` (minified, `immutable`) and its source map ([`crate::js`]) |
//! | `GET /` | the demo page (dev mode only) |
//! | `GET /console`, `/console/assets/{file}` | the operator's web console, standalone ([`herald_engine::console`]) |

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{Html, Response};
use axum::routing::get;

use crate::app::{Mode, Shared};
use crate::sockjs::native::Native;
use crate::sockjs::session::Registry;

const DEMO_PAGE: &str = include_str!("../assets/demo.html");

/// Every route of the gateway, given the publish routes, and the streaming
/// receivers of the `/sockjs` service that the front serves on the socket
/// (see [`crate::sockjs::native`], [`crate::front`]).
pub fn routes(shared: Arc<Shared>, publish: Router) -> (Router, Option<Arc<Native>>) {
    let mut router = Router::new()
        .route("/ws", get(crate::ws::upgrade))
        .route("/js/herald.js", get(crate::js::source))
        .route("/js/{file}", get(crate::js::hashed))
        .route("/healthz", get(crate::health::healthz))
        .route("/readyz", get(crate::health::readyz))
        .route("/metrics", get(metrics))
        .route("/v1/stats", get(crate::stats::get));
    if shared.dev.is_some() {
        router = router.route("/", get(demo));
    }
    let services = crate::sockjs::routes::services(&shared.config.sockjs);
    let openapi = herald_engine::openapi::routes(surface(&shared));
    let mut router = router
        .with_state(Arc::clone(&shared))
        .merge(publish)
        .merge(openapi);
    let mut native = None;
    for (prefix, service) in services {
        let registry = Arc::new(Registry::default());
        if service.app == crate::sockjs::App::Stomp {
            native = Some(Arc::new(Native::new(
                Arc::clone(&shared),
                Arc::clone(&registry),
                service,
                prefix,
            )));
        }
        router = router
            .nest(
                prefix,
                crate::sockjs::routes::router(Arc::clone(&shared), service, registry),
            )
            .route(&format!("{prefix}/"), get(crate::sockjs::routes::greeting));
    }
    let router = router
        .fallback(herald_engine::answers::not_found)
        .method_not_allowed_fallback(herald_engine::answers::method_not_allowed);
    (router, native)
}

/// What this gateway serves, for its OpenAPI document: the publish API,
/// delayed notifications and topics standalone; the demo page in dev mode.
/// (The SockJS test services of `sockjs.test_endpoints` are for the SockJS
/// suite only and are not documented.)
fn surface(shared: &Shared) -> herald_engine::openapi::Surface {
    let standalone = matches!(shared.mode, Mode::Standalone { .. });
    herald_engine::openapi::Surface {
        publish: standalone,
        delayed: standalone,
        gateway: true,
        demo: shared.dev.is_some(),
    }
}

async fn metrics(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    shared.metrics_access.answer(&shared.registry, &headers)
}

/// The demo page, importing this build's hashed client (the page is
/// compiled in: `/js/herald.js` in it is replaced once).
async fn demo() -> Html<&'static str> {
    static PAGE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    Html(PAGE.get_or_init(|| {
        DEMO_PAGE.replace(
            "'/js/herald.js'",
            &format!("'{}'", crate::js::minified_path()),
        )
    }))
}

#[cfg(test)]
mod tests {
    use herald_engine::openapi::{drift, served_routes, whole};

    #[tokio::test]
    async fn the_demo_page_imports_this_builds_hashed_client() {
        let page = super::demo().await.0;
        let hashed = crate::js::minified_path();
        assert!(
            page.contains(&format!("from '{hashed}'")),
            "{hashed} not imported"
        );
        assert!(!page.contains("'/js/herald.js'"));
    }

    /// Every route this file and the SockJS service register is in
    /// engine/openapi.json under a tag a gateway serves, and every such
    /// operation has its route (the publish API's are checked in the
    /// engine).
    #[test]
    fn the_gateway_registers_what_its_openapi_document_says() {
        let mut routes = drift::registered(include_str!("http.rs"));
        // The SockJS service is nested under /sockjs.
        for (path, methods) in drift::registered(include_str!("sockjs/routes.rs")) {
            let full = match path.as_str() {
                "/" => "/sockjs".to_owned(),
                p => format!("/sockjs{p}"),
            };
            routes.entry(full).or_default().extend(methods);
        }
        // Registered from variables, which `registered` does not read: the
        // greeting with a trailing slash (`{prefix}/`), and the document
        // and its reference page (merged from herald_engine::openapi::routes).
        routes
            .entry("/sockjs/".to_owned())
            .or_default()
            .insert("GET".to_owned());
        routes.extend(served_routes());
        let documented = drift::documented(
            &whole(),
            &[
                "operations",
                "gateway",
                "sockjs",
                "sockjs-transport",
                "demo",
            ],
        );
        let problems = drift::compare(&routes, &documented);
        assert!(problems.is_empty(), "{problems:#?}");
    }
}
