//! The browser client (`gateway/js`, `@herald/client`) as the gateway
//! serves it.
//!
//! | route | what | `Cache-Control` |
//! |---|---|---|
//! | `GET /js/herald.<hash>.js` | the minified module | `public, max-age=31536000, immutable`, `ETag` |
//! | `GET /js/herald.<hash>.js.map` | its source map (the readable source inside) | the same |
//! | `GET /js/herald.js` | the readable module, as written | `no-cache`, `ETag` (a revalidation is a 304); `Link` names the hashed one |
//!
//! `<hash>` is the first 16 hex digits of the SHA-256 of the minified code:
//! a new client has a new name, so a cache (the browser's, Varnish, a CDN)
//! may keep a hashed name for a year and never ask again; a name that is
//! not this build's is a 404. Pages the gateway renders (the demo page)
//! import the hashed name; `/js/herald.js` keeps working for pages written
//! against it, revalidated on each load.
//!
//! The minified files are committed under `gateway/js/dist/` (made by
//! `npm run build` in `gateway/js`: terser, pinned), so building the gateway
//! needs no Node; `gateway/js/test/build.test.js` fails when they are not
//! the build of the current source, and this module's tests when the map
//! does not carry `gateway/js/src/herald.js` as it is.

use std::sync::OnceLock;

use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// The module as written: `GET /js/herald.js`.
pub const SOURCE: &str = include_str!("../js/src/herald.js");
/// The minified module, ending in its `sourceMappingURL` line.
const MINIFIED: &str = include_str!("../js/dist/herald.min.js");
/// Its source map.
const MAP: &str = include_str!("../js/dist/herald.min.js.map");

/// `Cache-Control` of the hashed names: a year, never revalidated.
pub const IMMUTABLE: &str = "public, max-age=31536000, immutable";
/// `Cache-Control` of `/js/herald.js`: revalidate every time (a 304).
pub const REVALIDATE: &str = "no-cache";

const JAVASCRIPT: &str = "text/javascript; charset=utf-8";

/// The client of this build: names and `ETag`s (computed once).
#[derive(Debug)]
pub struct Client {
    /// `herald.<hash>.js`.
    pub minified_name: String,
    /// `herald.<hash>.js.map`.
    pub map_name: String,
    /// The hashed files' `ETag`: `"<hash>"`.
    pub minified_etag: String,
    /// `/js/herald.js`'s `ETag`: the SHA-256 of the source, 16 hex digits.
    pub source_etag: String,
}

/// The name the minified file's last line gives its map:
/// `//# sourceMappingURL=herald.<hash>.js.map`.
fn map_name_of(minified: &str) -> Option<&str> {
    let last = minified.trim_end().rsplit('\n').next()?;
    let name = last.strip_prefix("//# sourceMappingURL=")?;
    let hash = name.strip_prefix("herald.")?.strip_suffix(".js.map")?;
    (hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit())).then_some(name)
}

fn short_hash(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// This build's client.
pub fn client() -> &'static Client {
    static CLIENT: OnceLock<Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        // The build script writes the line; a test checks it parses, so
        // this fallback (the hash of the whole file) is never used.
        let map_name = map_name_of(MINIFIED)
            .map(str::to_owned)
            .unwrap_or_else(|| format!("herald.{}.js.map", short_hash(MINIFIED.as_bytes())));
        let minified_name = map_name.trim_end_matches(".map").to_owned();
        let hash = &minified_name["herald.".len()..minified_name.len() - ".js".len()];
        Client {
            minified_etag: format!("\"{hash}\""),
            source_etag: format!("\"{}\"", short_hash(SOURCE.as_bytes())),
            minified_name,
            map_name,
        }
    })
}

/// `/js/herald.<hash>.js`, this build's: for pages to import.
pub fn minified_path() -> String {
    format!("/js/{}", client().minified_name)
}

fn fresh(headers: &HeaderMap, etag: &str) -> bool {
    headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"))
}

fn answer(
    headers: &HeaderMap,
    etag: &str,
    cache: &'static str,
    content_type: &'static str,
    body: &'static str,
    link: Option<String>,
) -> Response {
    let mut common = vec![
        (header::CACHE_CONTROL, HeaderValue::from_static(cache)),
        (
            header::ETAG,
            HeaderValue::from_str(etag).unwrap_or(HeaderValue::from_static("\"\"")),
        ),
    ];
    if let Some(link) = link.and_then(|l| HeaderValue::from_str(&l).ok()) {
        common.push((header::LINK, link));
    }
    let mut response = if fresh(headers, etag) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (
            [
                (header::CONTENT_TYPE, content_type),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            ],
            body,
        )
            .into_response()
    };
    response.headers_mut().extend(common);
    response
}

/// `GET /js/herald.js`: the readable module, revalidated on each use; its
/// `Link` header names the hashed, minified one.
pub async fn source(headers: HeaderMap) -> Response {
    let c = client();
    let link = format!(
        "<{}>; rel=\"alternate\"; type=\"text/javascript\"",
        minified_path()
    );
    answer(
        &headers,
        &c.source_etag,
        REVALIDATE,
        JAVASCRIPT,
        SOURCE,
        Some(link),
    )
}

/// `GET /js/{file}`: this build's minified module or its source map.
pub async fn hashed(Path(file): Path<String>, headers: HeaderMap) -> Response {
    let c = client();
    if file == c.minified_name {
        answer(
            &headers,
            &c.minified_etag,
            IMMUTABLE,
            JAVASCRIPT,
            MINIFIED,
            None,
        )
    } else if file == c.map_name {
        answer(
            &headers,
            &c.minified_etag,
            IMMUTABLE,
            "application/json",
            MAP,
            None,
        )
    } else {
        herald_engine::publish::ApiError::not_found(format!(
            "no {file:?} in this build: the client is /js/herald.js (its Link header names \
             this build's hashed file)"
        ))
        .into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_minified_file_names_its_map_by_the_hash_of_its_code() {
        let name = map_name_of(MINIFIED)
            .expect("gateway/js/dist/herald.min.js ends in its sourceMappingURL line");
        let code = &MINIFIED[..MINIFIED.trim_end().rfind('\n').unwrap()];
        assert_eq!(
            name,
            format!("herald.{}.js.map", short_hash(code.as_bytes()))
        );
        assert_eq!(client().minified_name, name.trim_end_matches(".map"));
    }

    #[test]
    fn the_source_map_carries_the_current_source() {
        let map: serde_json::Value = serde_json::from_str(MAP).unwrap();
        assert_eq!(map["file"], client().minified_name.as_str());
        assert_eq!(map["sources"], serde_json::json!(["herald.js"]));
        assert!(
            map["sourcesContent"][0].as_str() == Some(SOURCE),
            "gateway/js/dist is not the build of gateway/js/src/herald.js: run `npm run build` in gateway/js"
        );
    }

    async fn body(r: Response) -> String {
        let bytes = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    fn header_of(r: &Response, name: header::HeaderName) -> &str {
        r.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    #[tokio::test]
    async fn the_hashed_files_are_immutable_with_an_etag() {
        let c = client();
        let r = hashed(Path(c.minified_name.clone()), HeaderMap::new()).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(
            header_of(&r, header::CACHE_CONTROL),
            "public, max-age=31536000, immutable"
        );
        assert_eq!(
            header_of(&r, header::CONTENT_TYPE),
            "text/javascript; charset=utf-8"
        );
        assert_eq!(header_of(&r, header::ETAG), c.minified_etag);
        let text = body(r).await;
        assert!(
            text.len() < SOURCE.len() / 2,
            "minified: {} of {} bytes",
            text.len(),
            SOURCE.len()
        );
        assert!(text.ends_with(&format!("//# sourceMappingURL={}\n", c.map_name)));

        let mut asks = HeaderMap::new();
        asks.insert(
            header::IF_NONE_MATCH,
            HeaderValue::from_str(&c.minified_etag).unwrap(),
        );
        let r = hashed(Path(c.minified_name.clone()), asks.clone()).await;
        assert_eq!(r.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(header_of(&r, header::ETAG), c.minified_etag);
        assert!(body(r).await.is_empty());

        let r = hashed(Path(c.map_name.clone()), HeaderMap::new()).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(header_of(&r, header::CONTENT_TYPE), "application/json");
        assert_eq!(header_of(&r, header::CACHE_CONTROL), IMMUTABLE);
        assert_eq!(body(r).await, MAP);

        let r = hashed(Path("herald.0123456789abcdef.js".into()), HeaderMap::new()).await;
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn the_unhashed_name_is_the_source_revalidated_and_names_the_hashed_one() {
        let c = client();
        let r = source(HeaderMap::new()).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(header_of(&r, header::CACHE_CONTROL), "no-cache");
        assert_eq!(header_of(&r, header::ETAG), c.source_etag);
        assert_eq!(
            header_of(&r, header::LINK),
            format!(
                "</js/{}>; rel=\"alternate\"; type=\"text/javascript\"",
                c.minified_name
            )
        );
        assert_eq!(body(r).await, SOURCE);
        let mut asks = HeaderMap::new();
        asks.insert(
            header::IF_NONE_MATCH,
            HeaderValue::from_str(&format!("\"other\", {}", c.source_etag)).unwrap(),
        );
        assert_eq!(source(asks).await.status(), StatusCode::NOT_MODIFIED);
    }

    #[test]
    fn map_names() {
        assert_eq!(
            map_name_of("x\n//# sourceMappingURL=herald.0123456789abcdef.js.map\n"),
            Some("herald.0123456789abcdef.js.map")
        );
        assert_eq!(
            map_name_of("x\n//# sourceMappingURL=herald.01.js.map\n"),
            None
        );
        assert_eq!(map_name_of("x"), None);
    }
}
