//! The API reference page at `/v1/docs`: the process's own OpenAPI
//! document (`/v1/openapi.json`, [`crate::openapi`]) rendered by Redoc,
//! served by every process beside the document.
//!
//! | route | what | `Cache-Control` |
//! |---|---|---|
//! | `GET /v1/docs` | the page | `no-cache` (with an `ETag`: a revalidation is a 304) |
//! | `GET /v1/docs/assets/{file}` | Redoc's bundle under a versioned name (`redoc.standalone.3f2a9c1b….js`) | `public, max-age=31536000, immutable` |
//!
//! Nothing is fetched from elsewhere: Redoc's standalone bundle (the npm
//! package `redoc`, MIT) is committed in `engine/apidocs/` and compiled
//! in. `scripts/vendor-redoc.sh` takes it from npm (`npm pack`, the
//! tarball checked against the integrity recorded in
//! `engine/apidocs/VENDORED`) and records its SHA-256, which this module's
//! tests check; CI's `scripts/vendor-redoc.sh --check` compares the
//! committed bytes with the package's again. A commit rather than a
//! build-time download keeps `cargo build` free of npm and the network.
//! The page's `Content-Security-Policy` allows only this origin, plus what
//! Redoc needs to run: inline styles (it injects its own) and a `blob:`
//! worker (its search index).

use std::sync::OnceLock;

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};

/// Where the page is served.
pub const PATH: &str = "/v1/docs";

/// `Cache-Control` of the versioned bundle: a year, never revalidated.
const ASSET_CACHE: &str = crate::console::ASSET_CACHE;

/// What the page may load and run: its own origin, Redoc's inline styles
/// and its search worker.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; connect-src 'self'; worker-src blob:; form-action 'none'; frame-ancestors 'none'; base-uri 'none'";

const PAGE: &str = include_str!("../apidocs/index.html");

/// Redoc's standalone bundle, as npm ships it.
const REDOC: &[u8] = include_bytes!("../apidocs/redoc.standalone.js");

/// The page, its `ETag` and the bundle's versioned name.
struct Build {
    page: String,
    etag: String,
    bundle: String,
}

fn short_hash(bytes: &[u8]) -> String {
    Sha256::digest(bytes)[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn build() -> &'static Build {
    static BUILD: OnceLock<Build> = OnceLock::new();
    BUILD.get_or_init(|| {
        let bundle = format!("redoc.standalone.{}.js", short_hash(REDOC));
        let page = PAGE.replace("{{redoc.standalone.js}}", &bundle);
        let etag = format!("\"{}\"", short_hash(page.as_bytes()));
        Build { page, etag, bundle }
    })
}

/// The page's routes.
pub fn routes() -> Router {
    Router::new()
        .route("/v1/docs", get(page))
        .route("/v1/docs/assets/{file}", get(asset))
}

async fn page(headers: HeaderMap) -> Response {
    let build = build();
    crate::console::page_response(&headers, &build.etag, CSP, build.page.clone())
}

async fn asset(Path(file): Path<String>) -> Response {
    if file == build().bundle {
        return (
            [
                (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
                (header::CACHE_CONTROL, ASSET_CACHE),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            ],
            REDOC,
        )
            .into_response();
    }
    crate::publish::ApiError::not_found(format!(
        "no API reference asset {file:?} in this build (asset names change with every build: reload {PATH})"
    ))
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    async fn get(uri: &str, headers: &[(&str, &str)]) -> Response {
        let mut req = axum::http::Request::get(uri);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        routes()
            .oneshot(req.body(axum::body::Body::empty()).unwrap())
            .await
            .unwrap()
    }

    fn header(r: &Response, name: header::HeaderName) -> &str {
        r.headers()
            .get(name)
            .map(|v| v.to_str().unwrap())
            .unwrap_or("")
    }

    async fn body(r: Response) -> Vec<u8> {
        use http_body_util::BodyExt;
        r.into_body().collect().await.unwrap().to_bytes().to_vec()
    }

    /// The committed bundle is the one scripts/vendor-redoc.sh took from
    /// npm and recorded in engine/apidocs/VENDORED.
    #[test]
    fn the_bundle_is_the_vendored_one() {
        let vendored = include_str!("../apidocs/VENDORED");
        let field = |name: &str| {
            vendored
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{name} = ")))
                .unwrap_or_else(|| panic!("VENDORED has no {name}"))
                .to_owned()
        };
        let sum: String = Sha256::digest(REDOC)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(sum, field("sha256"), "run scripts/vendor-redoc.sh");
        let version = field("version");
        let banner =
            std::str::from_utf8(include_bytes!("../apidocs/redoc.standalone.js.LICENSE.txt"))
                .unwrap();
        assert!(
            banner.contains(&format!("Version: \"{version}\"")),
            "the bundle's license banner names redoc {version}"
        );
    }

    #[tokio::test]
    async fn the_page_points_at_the_document_and_this_build_s_bundle() {
        let r = get("/v1/docs", &[]).await;
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, header::CONTENT_TYPE), "text/html; charset=utf-8");
        assert_eq!(header(&r, header::CACHE_CONTROL), "no-cache");
        let csp = header(&r, header::CONTENT_SECURITY_POLICY).to_owned();
        assert!(csp.contains("script-src 'self';"), "{csp}");
        let etag = header(&r, header::ETAG).to_owned();
        let html = String::from_utf8(body(r).await).unwrap();
        assert!(html.contains(r#"spec-url="/v1/openapi.json""#), "{html}");
        let bundle = &build().bundle;
        assert!(
            html.contains(&format!(r#"src="/v1/docs/assets/{bundle}""#)),
            "{html}"
        );
        // Nothing from another origin: every src and href is this server's.
        for attr in ["src=\"", "href=\""] {
            for rest in html.split(attr).skip(1) {
                let target = &rest[..rest.find('"').unwrap()];
                assert!(target.starts_with("/v1/"), "{attr}{target}");
            }
        }
        let r = get("/v1/docs", &[("if-none-match", &etag)]).await;
        assert_eq!(r.status(), 304);
    }

    #[tokio::test]
    async fn the_bundle_is_served_versioned_and_cached_for_long() {
        let name = &build().bundle;
        let hash = &name["redoc.standalone.".len()..name.len() - ".js".len()];
        assert_eq!(hash.len(), 16, "{name}");
        let r = get(&format!("/v1/docs/assets/{name}"), &[]).await;
        assert_eq!(r.status(), 200);
        assert_eq!(
            header(&r, header::CONTENT_TYPE),
            "text/javascript; charset=utf-8"
        );
        assert_eq!(header(&r, header::CACHE_CONTROL), ASSET_CACHE);
        assert_eq!(body(r).await, REDOC);
        let r = get("/v1/docs/assets/redoc.standalone.js", &[]).await;
        assert_eq!(r.status(), 404, "the unversioned name is not served");
        assert!(
            String::from_utf8(body(r).await)
                .unwrap()
                .contains("\"not_found\"")
        );
    }
}
