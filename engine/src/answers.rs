//! The HTTP answers every Herald process gives alike, whatever it serves:
//! the metrics exposition (`GET /metrics`, open or behind an API key:
//! [`MetricsAccess`]) and the JSON errors for a path nobody serves (404) or
//! a method a path does not take (405), in the publish API's error form
//! (`{"error":{"code":...,"message":...}}`).

use axum::Json;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use prometheus_client::registry::Registry;
use serde_json::json;

use crate::api_key::{ApiKeys, KeySet, Operation};
use crate::exposition::Format;
use crate::metrics::PublishMetrics;

/// Who may read `GET /metrics`. Open by default: the series name the API
/// keys (`herald_api_key_refused_total{api_key}` ...) and count every
/// site's traffic, so a deployment keeps the endpoint off its public side
/// (haproxy/haproxy.cfg.tmpl) or, with `metrics_require_key`, asks for an
/// API key allowed the `metrics` operation, checked as the publish API
/// checks its keys ([`crate::publish::authorize`]: 401 or 403, counted in
/// `herald_api_key_refused_total{operation="metrics"}`), so keys reload
/// with the others on SIGHUP. The probes (`/healthz`, `/readyz`) stay open:
/// load balancers call them without a key.
#[derive(Debug, Clone, Default)]
pub struct MetricsAccess {
    /// The keys and the refusal counter; None: open.
    keyed: Option<(ApiKeys, PublishMetrics)>,
}

impl MetricsAccess {
    /// Anyone may read the metrics.
    pub fn open() -> Self {
        MetricsAccess::default()
    }

    /// Only a key of `keys` allowed `metrics`; refusals are counted in
    /// `refusals` (registered by its owner).
    pub fn keyed(keys: ApiKeys, refusals: PublishMetrics) -> Self {
        MetricsAccess {
            keyed: Some((keys, refusals)),
        }
    }

    /// `keyed` when `require_key` (the `metrics_require_key` setting), else
    /// [`MetricsAccess::open`].
    pub fn new(require_key: bool, keys: &ApiKeys, refusals: &PublishMetrics) -> Self {
        match require_key {
            true => MetricsAccess::keyed(keys.clone(), refusals.clone()),
            false => MetricsAccess::open(),
        }
    }

    /// `GET /metrics` asked with `headers`: the exposition of `registry` in
    /// the format its `Accept` asks for ([`Format::negotiate`]), or the
    /// refusal of the key.
    pub fn answer(&self, registry: &Registry, headers: &HeaderMap) -> Response {
        if let Some((keys, refusals)) = &self.keyed
            && let Err(e) = crate::publish::authorize(keys, refusals, headers, Operation::Metrics)
        {
            return e.into_response();
        }
        let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
        metrics_as(registry, Format::negotiate(accept))
    }
}

/// The configuration problem of `metrics_require_key` with `keys`: no key
/// allows `metrics`, so nothing could scrape `/metrics`. Both binaries
/// report it with their other configuration problems (exit 78), at start
/// and on a reload (which then keeps the keys in use).
pub fn metrics_key_problem(keys: &KeySet) -> Option<String> {
    (!keys.any_may(Operation::Metrics)).then(|| {
        "metrics_require_key is on but no API key allows the operation \"metrics\": nothing could \
         scrape /metrics (add \"metrics\" to a key's ops, or give a key no ops: it may do \
         everything)"
            .to_owned()
    })
}

/// `GET /metrics`: `registry` in the OpenMetrics text format.
pub fn metrics(registry: &Registry) -> Response {
    metrics_as(registry, Format::OpenMetrics)
}

/// `registry` in `format`, with `Vary: Accept` (the format depends on it).
pub fn metrics_as(registry: &Registry, format: Format) -> Response {
    let mut body = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut body, registry) {
        tracing::error!(error = %e, "metrics encoding failed");
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
    if format == Format::PrometheusText {
        body = crate::exposition::to_prometheus_text(&body);
    }
    (
        [
            (header::CONTENT_TYPE, format.content_type()),
            (header::VARY, "accept"),
        ],
        body,
    )
        .into_response()
}

/// The router's fallback: 404 `not_found`.
pub async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({"error": {"code": "not_found", "message": "no such endpoint"}})),
    )
        .into_response()
}

/// The router's fallback for a known path: 405 `method_not_allowed`.
pub async fn method_not_allowed() -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        Json(json!({"error": {
            "code": "method_not_allowed",
            "message": "this endpoint does not take that method"
        }})),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;
    use prometheus_client::metrics::counter::Counter;

    use super::*;
    use crate::api_key::ApiKeyConfig;

    fn keys() -> ApiKeys {
        let named = [
            ApiKeyConfig {
                name: "prometheus".into(),
                key: Some("scrape-secret".into()),
                ops: Some(vec![Operation::Metrics]),
                ..ApiKeyConfig::default()
            },
            ApiKeyConfig {
                name: "billing".into(),
                key: Some("billing-secret".into()),
                ops: Some(vec![Operation::Publish]),
                ..ApiKeyConfig::default()
            },
        ];
        ApiKeys::from_set(KeySet::load(&[], &named).unwrap())
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.insert(*name, HeaderValue::from_static(value));
        }
        h
    }

    async fn body(r: Response) -> String {
        let bytes = axum::body::to_bytes(r.into_body(), usize::MAX)
            .await
            .unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    fn registry() -> Registry {
        let mut registry = Registry::default();
        let c = Counter::<u64>::default();
        c.inc();
        registry.register("herald_probe", "a series to see", c);
        registry
    }

    #[tokio::test]
    async fn open_metrics_take_no_key() {
        let r = MetricsAccess::open().answer(&registry(), &HeaderMap::new());
        assert_eq!(r.status(), StatusCode::OK);
        assert!(body(r).await.contains("herald_probe_total 1"));
        let off = MetricsAccess::new(false, &keys(), &PublishMetrics::default());
        let r = off.answer(&registry(), &HeaderMap::new());
        assert_eq!(r.status(), StatusCode::OK);
    }

    /// The format follows `Accept`: 0.0.4 text without one, OpenMetrics
    /// (with its `# EOF`) for a scraper that prefers it; `Vary: Accept`.
    #[tokio::test]
    async fn metrics_format_follows_accept() {
        let access = MetricsAccess::open();
        let r = access.answer(&registry(), &HeaderMap::new());
        assert_eq!(
            r.headers()[header::CONTENT_TYPE],
            "text/plain; version=0.0.4; charset=utf-8"
        );
        assert_eq!(r.headers()[header::VARY], "accept");
        let text = body(r).await;
        assert!(
            text.contains("# TYPE herald_probe_total counter\nherald_probe_total 1\n"),
            "{text}"
        );
        assert!(!text.contains("# EOF"), "{text}");

        let prometheus =
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        let r = access.answer(&registry(), &headers(&[("accept", prometheus)]));
        assert_eq!(
            r.headers()[header::CONTENT_TYPE],
            "application/openmetrics-text; version=1.0.0; charset=utf-8"
        );
        let text = body(r).await;
        assert!(text.contains("# TYPE herald_probe counter\n"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");

        let r = access.answer(
            &registry(),
            &headers(&[("accept", "text/plain;version=0.0.4")]),
        );
        assert!(
            r.headers()[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .starts_with("text/plain; version=0.0.4")
        );
    }

    /// With a key required: none or a wrong one is 401 (with
    /// `WWW-Authenticate: Bearer`), a key without `metrics` 403 naming its
    /// ops, each counted as the API counts its refusals; a key allowed
    /// `metrics` reads them, in either header.
    #[tokio::test]
    async fn keyed_metrics_refuse_as_the_api_does() {
        let refusals = PublishMetrics::default();
        let access = MetricsAccess::new(true, &keys(), &refusals);
        let registry = registry();

        for h in [
            headers(&[]),
            headers(&[("authorization", "Bearer wrong")]),
            headers(&[("authorization", "Basic scrape-secret")]),
        ] {
            let r = access.answer(&registry, &h);
            assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
            assert_eq!(r.headers()[header::WWW_AUTHENTICATE], "Bearer");
            assert!(body(r).await.contains(r#""code":"unauthorized""#));
        }
        let r = access.answer(&registry, &headers(&[("x-api-key", "billing-secret")]));
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        let text = body(r).await;
        assert!(
            text.contains(r#"is not allowed the operation \"metrics\" (its ops: publish)"#),
            "{text}"
        );
        for h in [
            headers(&[("authorization", "Bearer scrape-secret")]),
            headers(&[("x-api-key", "scrape-secret")]),
        ] {
            let r = access.answer(&registry, &h);
            assert_eq!(r.status(), StatusCode::OK);
            assert!(body(r).await.contains("herald_probe_total 1"));
        }

        let mut counted = Registry::default();
        refusals.register_key_refusals(&mut counted);
        let text = body(metrics(&counted)).await;
        for line in [
            r#"herald_api_key_refused_total{api_key="",operation="metrics",reason="unauthorized"} 3"#,
            r#"herald_api_key_refused_total{api_key="billing",operation="metrics",reason="forbidden"} 1"#,
        ] {
            assert!(text.contains(line), "{line}\n{text}");
        }
    }

    #[test]
    fn requiring_a_key_needs_a_key_allowed_metrics() {
        let without = KeySet::load(
            &[],
            &[ApiKeyConfig {
                name: "billing".into(),
                key: Some("billing-secret".into()),
                ops: Some(vec![Operation::Publish]),
                ..ApiKeyConfig::default()
            }],
        )
        .unwrap();
        let problem = metrics_key_problem(&without).unwrap();
        assert!(problem.contains("no API key allows the operation \"metrics\""));
        assert_eq!(
            metrics_key_problem(&KeySet::load(&["k".into()], &[]).unwrap()),
            None
        );
    }
}
