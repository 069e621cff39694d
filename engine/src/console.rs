//! The operator's web console at `/console`, served by `herald-router` and
//! by the standalone gateway (wherever the publish API is).
//!
//! | route | what | `Cache-Control` |
//! |---|---|---|
//! | `GET /console` | the page | `no-cache` (with an `ETag`: a revalidation is a 304) |
//! | `GET /console/` | 308 to `/console` | |
//! | `GET /console/assets/{file}` | a versioned asset (`console.3f2a9c1b.js`) | `public, max-age=31536000, immutable` |
//!
//! The assets are compiled in (`engine/console/`: plain HTML, CSS and
//! JavaScript, no build step) and nothing is fetched from elsewhere at run
//! time. Each asset is named with the first 8 bytes of its SHA-256, so a
//! cache in front (Varnish) may keep it for days: a new build has new
//! names, which the `no-cache` page points at. A name that is not this
//! build's is a 404.
//!
//! The page holds no key and no data: the operator types an API key with
//! the `admin` operation into its login form, the page keeps it in
//! `sessionStorage` and sends it to the `/v1` API as `Authorization:
//! Bearer KEY`, like any client (`GET /v1/operator` says whose key it is:
//! [`crate::publish`]). The page's `Content-Security-Policy` allows only
//! its own origin's scripts, styles and API.

use std::sync::OnceLock;

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};

/// Where the page is served.
pub const PATH: &str = "/console";

/// `Cache-Control` of the versioned assets: a year, never revalidated.
pub const ASSET_CACHE: &str = "public, max-age=31536000, immutable";

/// `Cache-Control` of the page: revalidate every time (its `ETag` makes
/// that a 304), so a new build's asset names are seen at once.
pub const PAGE_CACHE: &str = "no-cache";

/// What the page may load and call: its own origin only.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'";

const PAGE: &str = include_str!("../console/index.html");

/// The assets as written: the name the page refers to (`{{console.js}}` in
/// `index.html`), the content and its type.
const SOURCES: [(&str, &[u8], &str); 3] = [
    (
        "console.css",
        include_bytes!("../console/console.css"),
        "text/css; charset=utf-8",
    ),
    (
        "console.js",
        include_bytes!("../console/console.js"),
        "text/javascript; charset=utf-8",
    ),
    (
        "icon.svg",
        include_bytes!("../console/icon.svg"),
        "image/svg+xml",
    ),
];

/// One asset under its versioned name.
#[derive(Debug)]
pub struct Asset {
    /// `console.3f2a9c1b.js`.
    pub name: String,
    /// The bytes.
    pub body: &'static [u8],
    /// Its `Content-Type`.
    pub content_type: &'static str,
}

/// The page with its assets' versioned names filled in, its `ETag`, and
/// the assets.
#[derive(Debug)]
pub struct Build {
    /// The page's HTML.
    pub page: String,
    /// The page's `ETag` (quoted).
    pub etag: String,
    /// The assets.
    pub assets: Vec<Asset>,
}

fn short_hash(bytes: &[u8]) -> String {
    Sha256::digest(bytes)[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `console.js` named for `body`: `console.<hash>.js`.
fn versioned(name: &str, body: &[u8]) -> String {
    let hash = short_hash(body);
    match name.rsplit_once('.') {
        Some((stem, ext)) => format!("{stem}.{hash}.{ext}"),
        None => format!("{name}.{hash}"),
    }
}

/// The console of this build (computed once).
pub fn build() -> &'static Build {
    static BUILD: OnceLock<Build> = OnceLock::new();
    BUILD.get_or_init(|| {
        let mut page = PAGE.to_owned();
        let mut assets = Vec::with_capacity(SOURCES.len());
        for (name, body, content_type) in SOURCES {
            let versioned = versioned(name, body);
            page = page.replace(&format!("{{{{{name}}}}}"), &versioned);
            assets.push(Asset {
                name: versioned,
                body,
                content_type,
            });
        }
        let etag = format!("\"{}\"", short_hash(page.as_bytes()));
        Build { page, etag, assets }
    })
}

/// The console's routes.
pub fn routes() -> Router {
    Router::new()
        .route("/console", get(page))
        .route("/console/", get(slash))
        .route("/console/assets/{file}", get(asset))
}

async fn page(headers: HeaderMap) -> Response {
    let build = build();
    page_response(&headers, &build.etag, CSP, build.page.clone())
}

/// An HTML page served from the binary (the console's, the API
/// reference's): `304` when the request's `If-None-Match` names `etag`,
/// else `page` under the policy `csp`, revalidated on every load
/// ([`PAGE_CACHE`]), never sniffed, no referrer.
pub(crate) fn page_response(
    headers: &HeaderMap,
    etag: &str,
    csp: &'static str,
    page: String,
) -> Response {
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    let common = [
        (header::CACHE_CONTROL, HeaderValue::from_static(PAGE_CACHE)),
        (
            header::ETAG,
            HeaderValue::from_str(etag).unwrap_or(HeaderValue::from_static("\"\"")),
        ),
    ];
    if fresh {
        return (StatusCode::NOT_MODIFIED, common).into_response();
    }
    (
        common,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            ),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(csp),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (
                header::REFERRER_POLICY,
                HeaderValue::from_static("no-referrer"),
            ),
        ],
        page,
    )
        .into_response()
}

async fn slash() -> Redirect {
    Redirect::permanent(PATH)
}

async fn asset(Path(file): Path<String>) -> Response {
    match build().assets.iter().find(|a| a.name == file) {
        Some(a) => (
            [
                (header::CONTENT_TYPE, a.content_type),
                (header::CACHE_CONTROL, ASSET_CACHE),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            ],
            a.body,
        )
            .into_response(),
        None => crate::publish::ApiError::not_found(format!(
            "no console asset {file:?} in this build (asset names change with every build: reload /console)"
        ))
        .into_response(),
    }
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

    async fn body(r: Response) -> String {
        use http_body_util::BodyExt;
        String::from_utf8(r.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
    }

    #[tokio::test]
    async fn the_page_is_revalidated_and_names_this_build_s_assets() {
        let r = get("/console", &[]).await;
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, header::CONTENT_TYPE), "text/html; charset=utf-8");
        assert_eq!(header(&r, header::CACHE_CONTROL), "no-cache");
        assert!(header(&r, header::CONTENT_SECURITY_POLICY).contains("connect-src 'self'"));
        let etag = header(&r, header::ETAG).to_owned();
        let html = body(r).await;
        assert!(!html.contains("{{"), "every placeholder is filled: {html}");
        for a in &build().assets {
            assert!(
                html.contains(&format!("console/assets/{}", a.name)),
                "{}",
                a.name
            );
        }
        let r = get("/console", &[("if-none-match", &etag)]).await;
        assert_eq!(r.status(), 304);
        assert_eq!(header(&r, header::CACHE_CONTROL), "no-cache");
    }

    #[tokio::test]
    async fn assets_are_versioned_typed_and_cached_for_long() {
        let names: Vec<&str> = build().assets.iter().map(|a| a.name.as_str()).collect();
        for (file, kind) in [
            ("console.", "text/css; charset=utf-8"),
            ("console.", "text/javascript; charset=utf-8"),
            ("icon.", "image/svg+xml"),
        ] {
            let ext = match kind {
                k if k.starts_with("text/css") => ".css",
                k if k.starts_with("text/javascript") => ".js",
                _ => ".svg",
            };
            let name = names
                .iter()
                .find(|n| n.starts_with(file) && n.ends_with(ext))
                .unwrap();
            // stem.<16 hex>.ext
            let hash = &name[file.len()..name.len() - ext.len()];
            assert_eq!(hash.len(), 16, "{name}");
            assert!(hash.bytes().all(|b| b.is_ascii_hexdigit()), "{name}");
            let r = get(&format!("/console/assets/{name}"), &[]).await;
            assert_eq!(r.status(), 200, "{name}");
            assert_eq!(header(&r, header::CONTENT_TYPE), kind);
            assert_eq!(header(&r, header::CACHE_CONTROL), ASSET_CACHE);
            assert!(!body(r).await.is_empty());
        }
        let r = get("/console/assets/console.js", &[]).await;
        assert_eq!(r.status(), 404, "the unversioned name is not served");
        assert!(body(r).await.contains("\"not_found\""));
        let r = get("/console/", &[]).await;
        assert_eq!(r.status(), 308);
        assert_eq!(header(&r, header::LOCATION), "/console");
    }

    #[test]
    fn nothing_is_loaded_from_another_origin() {
        let b = build();
        // Every src and href of the page is this server's (an asset or an anchor).
        for attr in ["src=\"", "href=\""] {
            for rest in b.page.split(attr).skip(1) {
                let target = &rest[..rest.find('"').unwrap()];
                assert!(
                    target.starts_with("console/assets/") || target.starts_with('#'),
                    "{attr}{target}"
                );
            }
        }
        // The script names SVG's XML namespace, which is not fetched.
        let script = std::str::from_utf8(SOURCES[1].1)
            .unwrap()
            .replace("'http://www.w3.org/2000/svg'", "");
        let style = std::str::from_utf8(SOURCES[0].1).unwrap();
        assert!(
            !script.contains("://"),
            "the script calls only its own origin"
        );
        assert!(!style.contains("url("), "the style loads nothing");
    }
}
