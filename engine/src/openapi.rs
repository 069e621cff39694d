//! The OpenAPI 3.1 contract of every HTTP endpoint, served at `GET
//! /v1/openapi.json` by both binaries.
//!
//! The document is written by hand in `engine/openapi.json` (the whole
//! surface: the publish API, delayed notifications, topics, the probes,
//! the gateway's own endpoints and SockJS) and compiled in. Each operation's
//! first tag says where it is served ([`Surface`]): a process serves the
//! document cut down to the operations it has in its mode, so a client (or
//! schemathesis) sees exactly what this process answers.
//!
//! A path item may carry `x-herald-route`, the axum route that serves it,
//! when that differs from the path (SockJS's transports are one route,
//! `/sockjs/{server}/{session}/{transport}`). [`drift`] compares the
//! document with the routes a source file registers; each crate's tests
//! use it so that no route goes undocumented and no documented operation
//! is left without a route.

use std::sync::Arc;

use axum::Router;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use serde_json::Value;

/// The whole document, as written.
pub const DOCUMENT: &str = include_str!("../openapi.json");

/// The path this document is served at.
pub const PATH: &str = "/v1/openapi.json";

/// What a process serves, which picks the operations of its document by
/// their first tag.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Surface {
    /// `POST /v1/notifications` (tag `publish`) and the operator's console
    /// (tag `console`: `/console`, `GET /v1/operator`): standalone and
    /// routers.
    pub publish: bool,
    /// Delayed notifications, topics and presence (tags `delayed`,
    /// `topics`, `presence`): with a delayed store (standalone always; a
    /// router keeps the edges' presence reports in its Redis).
    pub delayed: bool,
    /// The gateway's endpoints and SockJS (tags `gateway`, `sockjs`,
    /// `sockjs-transport`).
    pub gateway: bool,
    /// The demo page (tag `demo`): dev mode.
    pub demo: bool,
}

impl Surface {
    /// The tags this surface serves; `operations` always.
    pub fn tags(self) -> Vec<&'static str> {
        let mut tags = vec!["operations"];
        if self.publish {
            tags.extend(["publish", "console"]);
        }
        if self.delayed {
            tags.extend(["delayed", "topics", "presence"]);
        }
        if self.gateway {
            tags.extend(["gateway", "sockjs", "sockjs-transport"]);
        }
        if self.demo {
            tags.push("demo");
        }
        tags
    }
}

/// The HTTP methods an OpenAPI path item may hold.
pub const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// The whole document, parsed.
pub fn whole() -> Value {
    serde_json::from_str(DOCUMENT).expect("engine/openapi.json is JSON (checked by the tests)")
}

/// The document as `surface` serves it: only the operations whose first
/// tag it serves, only the paths left with one, and only those tags.
pub fn document(surface: Surface) -> Value {
    let tags = surface.tags();
    let mut doc = whole();
    doc["info"]["version"] = Value::String(env!("CARGO_PKG_VERSION").to_owned());
    if let Some(paths) = doc["paths"].as_object_mut() {
        for item in paths.values_mut() {
            if let Some(item) = item.as_object_mut() {
                item.retain(|key, op| {
                    !METHODS.contains(&key.as_str())
                        || op["tags"][0].as_str().is_some_and(|t| tags.contains(&t))
                });
            }
        }
        paths.retain(|_, item| {
            item.as_object()
                .is_some_and(|i| i.keys().any(|k| METHODS.contains(&k.as_str())))
        });
    }
    if let Some(list) = doc["tags"].as_array_mut() {
        list.retain(|t| t["name"].as_str().is_some_and(|n| tags.contains(&n)));
    }
    doc
}

/// `GET /v1/openapi.json`, serving [`document`] for `surface` (serialized
/// once, here), and the API reference page that renders it
/// ([`crate::apidocs`]: `/v1/docs`).
pub fn routes(surface: Surface) -> Router {
    let body =
        Bytes::from(serde_json::to_vec(&document(surface)).expect("a JSON value serializes"));
    let body = Arc::new(body);
    // The path spelled out (it is PATH) so that drift::registered sees it.
    Router::new()
        .route(
            "/v1/openapi.json",
            get(move || {
                let body = Bytes::clone(&body);
                async move { serve(body) }
            }),
        )
        .merge(crate::apidocs::routes())
}

/// The routes [`routes`] registers (the document and the reference page),
/// for the drift checks of the crates that merge them.
pub fn served_routes() -> drift::Routes {
    let mut routes = drift::registered(include_str!("openapi.rs"));
    routes.extend(drift::registered(include_str!("apidocs.rs")));
    routes.retain(|path, _| path.starts_with("/v1/"));
    routes
}

fn serve(body: Bytes) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

pub mod drift {
    //! The document against the routes a crate registers, for the tests
    //! of each crate: [`registered`] reads the `.route("PATH", get(..)...)`
    //! calls of a source file, [`documented`] lists the document's
    //! operations by route, and [`compare`] says what differs.

    use std::collections::{BTreeMap, BTreeSet};

    use serde_json::Value;

    use super::METHODS;

    /// A route and its methods (upper case; `ANY` for `any(..)`).
    pub type Routes = BTreeMap<String, BTreeSet<String>>;

    /// The routes registered in `source` by `.route("LITERAL", ...)`, with
    /// the methods of its method router (`get(h).post(h2)`). Routes whose
    /// path is not a string literal are left to the caller.
    pub fn registered(source: &str) -> Routes {
        let mut routes = Routes::new();
        let mut rest = source;
        while let Some(at) = rest.find(".route(") {
            rest = &rest[at + ".route(".len()..];
            let call = balanced(rest);
            let trimmed = call.trim_start();
            let Some(literal) = trimmed.strip_prefix('"') else {
                continue;
            };
            let Some(end) = literal.find('"') else {
                continue;
            };
            let path = literal[..end].to_owned();
            let handlers = &literal[end + 1..];
            let methods = routes.entry(path).or_default();
            for name in [
                "get", "put", "post", "delete", "options", "head", "patch", "any",
            ] {
                let needle = format!("{name}(");
                let mut from = 0;
                while let Some(i) = handlers[from..].find(&needle) {
                    let i = from + i;
                    let before = handlers[..i].trim_end();
                    if before.ends_with('.') || before.ends_with(',') {
                        methods.insert(name.to_ascii_uppercase());
                    }
                    from = i + needle.len();
                }
            }
        }
        routes
    }

    /// The text of a call's arguments: up to the parenthesis that closes
    /// the one just opened.
    fn balanced(text: &str) -> &str {
        let mut depth = 1usize;
        let mut in_string = false;
        let mut escaped = false;
        for (i, c) in text.char_indices() {
            if in_string {
                match (escaped, c) {
                    (true, _) => escaped = false,
                    (false, '\\') => escaped = true,
                    (false, '"') => in_string = false,
                    _ => {}
                }
                continue;
            }
            match c {
                '"' => in_string = true,
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        return &text[..i];
                    }
                }
                _ => {}
            }
        }
        text
    }

    /// The document's operations by route (`x-herald-route` or the path),
    /// keeping only those whose first tag is in `tags`.
    pub fn documented(doc: &Value, tags: &[&str]) -> Routes {
        let mut routes = Routes::new();
        let Some(paths) = doc["paths"].as_object() else {
            return routes;
        };
        for (path, item) in paths {
            let route = item["x-herald-route"].as_str().unwrap_or(path);
            for method in METHODS {
                let op = &item[method];
                if op.is_object() && op["tags"][0].as_str().is_some_and(|t| tags.contains(&t)) {
                    routes
                        .entry(route.to_owned())
                        .or_default()
                        .insert(method.to_ascii_uppercase());
                }
            }
        }
        routes
    }

    /// What differs between the routes registered and those documented;
    /// empty when they agree. A route registered with `any(..)` matches
    /// whatever methods the document gives it.
    pub fn compare(registered: &Routes, documented: &Routes) -> Vec<String> {
        let mut problems = Vec::new();
        for (route, methods) in registered {
            match documented.get(route) {
                None => problems.push(format!("route {route} is not in engine/openapi.json")),
                Some(_) if methods.contains("ANY") => {}
                Some(doc) => {
                    for m in methods.difference(doc) {
                        problems.push(format!("{m} {route} is served but not documented"));
                    }
                    for m in doc.difference(methods) {
                        problems.push(format!("{m} {route} is documented but not served"));
                    }
                }
            }
        }
        for route in documented.keys() {
            if !registered.contains_key(route) {
                problems.push(format!("{route} is documented but no route serves it"));
            }
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::drift::{Routes, compare, documented, registered};
    use super::*;

    /// Every `$ref` of the document points at something it defines.
    fn refs_resolve(doc: &Value, at: &Value, problems: &mut Vec<String>) {
        match at {
            Value::Object(map) => {
                if let Some(Value::String(r)) = map.get("$ref") {
                    let pointer = r.strip_prefix('#').unwrap_or(r);
                    if doc.pointer(pointer).is_none() {
                        problems.push(r.clone());
                    }
                }
                map.values().for_each(|v| refs_resolve(doc, v, problems));
            }
            Value::Array(list) => list.iter().for_each(|v| refs_resolve(doc, v, problems)),
            _ => {}
        }
    }

    #[test]
    fn the_document_parses_and_every_reference_resolves() {
        let doc = whole();
        assert_eq!(doc["openapi"], "3.1.0");
        let mut problems = Vec::new();
        refs_resolve(&doc, &doc, &mut problems);
        assert!(problems.is_empty(), "unresolved: {problems:?}");
        let known: Vec<&str> = doc["tags"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| t["name"].as_str())
            .collect();
        let mut ids = std::collections::BTreeSet::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for method in METHODS {
                let op = &item[method];
                if !op.is_object() {
                    continue;
                }
                let tag = op["tags"][0].as_str().unwrap_or_default();
                assert!(known.contains(&tag), "{method} {path}: tag {tag:?}");
                let id = op["operationId"].as_str().unwrap();
                assert!(ids.insert(id.to_owned()), "operationId {id} twice");
                assert!(op["responses"].is_object(), "{method} {path}: responses");
            }
        }
    }

    #[test]
    fn the_publish_api_and_this_document_register_what_is_documented() {
        let mut routes: Routes = registered(include_str!("publish.rs"));
        routes.extend(registered(include_str!("presence/api.rs")));
        routes.extend(served_routes());
        routes.extend(registered(include_str!("console.rs")));
        // What this file's tests and docs mention is not a route.
        routes.retain(|path, _| path.starts_with("/v1/") || path.starts_with("/console"));
        let doc = whole();
        let problems = compare(
            &routes,
            &documented(
                &doc,
                &["publish", "delayed", "topics", "presence", "console"],
            )
            .into_iter()
            .chain(
                documented(&doc, &["operations"])
                    .into_iter()
                    .filter(|(r, _)| served_routes().contains_key(r)),
            )
            .collect(),
        );
        assert!(problems.is_empty(), "{problems:#?}");
    }

    #[test]
    fn a_surface_serves_only_its_operations() {
        let router = document(Surface {
            publish: true,
            ..Surface::default()
        });
        let paths: Vec<&str> = router["paths"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            paths,
            [
                "/console",
                "/console/",
                "/console/assets/{file}",
                "/healthz",
                "/metrics",
                "/readyz",
                "/v1/docs",
                "/v1/docs/assets/{file}",
                "/v1/notifications",
                "/v1/openapi.json",
                "/v1/operator",
                "/v1/stats",
                "/v1/users/{uid}/disconnect"
            ]
        );
        assert!(router["paths"]["/v1/notifications"]["get"].is_null());
        assert!(router["paths"]["/v1/notifications"]["post"].is_object());
        let edge = document(Surface {
            gateway: true,
            ..Surface::default()
        });
        assert!(edge["paths"]["/v1/notifications"].is_null());
        assert!(edge["paths"]["/sockjs/info"]["get"].is_object());
        // Every process answers its stats (routers: the cluster's).
        assert!(edge["paths"]["/v1/stats"]["get"].is_object());
        assert!(edge["paths"]["/"].is_null());
        assert_eq!(edge["info"]["version"], env!("CARGO_PKG_VERSION"));
    }

    #[test]
    fn routes_are_read_from_source_with_their_methods() {
        let source = r#"
            Router::new()
                .route("/a", post(publish).get(notifications::list))
                .route(
                    "/b/{id}",
                    delete(x::cancel).get(x::get),
                )
                .route(&format!("{prefix}/"), get(greeting))
                .route("/c", any(dispatch))
        "#;
        let routes = registered(source);
        let methods = |p: &str| routes[p].iter().cloned().collect::<Vec<_>>();
        assert_eq!(methods("/a"), ["GET", "POST"]);
        assert_eq!(methods("/b/{id}"), ["DELETE", "GET"]);
        assert_eq!(methods("/c"), ["ANY"]);
        assert_eq!(routes.len(), 3);
    }
}
