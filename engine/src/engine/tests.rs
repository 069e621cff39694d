//! The front door assembles the same engine whatever the parts: the
//! routes, tasks and metric families each kind of part brings.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use tower::ServiceExt;

use super::*;
use crate::link::LinkFuture;
use crate::presence::PresenceFuture;
use crate::presence::view::{ClientCount, ClientPage, UserPresence, ViewFuture};
use crate::schedule::store::embedded::EmbeddedStore;
use herald_protocol::envelope::Notification;

/// A link that takes everything and sends it nowhere.
struct Nowhere;

impl Link for Nowhere {
    fn publish(&self, _batch: Vec<Arc<Notification>>) -> LinkFuture<'_> {
        Box::pin(async { Ok(()) })
    }
}

/// Nobody is online.
struct Nobody;

impl Presence for Nobody {
    fn online<'a>(&'a self, who: &'a [crate::presence::Asked]) -> PresenceFuture<'a> {
        Box::pin(std::future::ready(vec![false; who.len()]))
    }
}

impl PresenceView for Nobody {
    fn user<'a>(&'a self, user: &'a str, _site: Option<&'a str>) -> ViewFuture<'a, UserPresence> {
        let p = UserPresence {
            user: user.to_owned(),
            online: false,
            since_ms: None,
            sessions: Default::default(),
            edges: Vec::new(),
        };
        Box::pin(std::future::ready(Ok(p)))
    }

    fn clients<'a>(&'a self, _after: Option<&'a str>, _limit: usize) -> ViewFuture<'a, ClientPage> {
        Box::pin(std::future::ready(Ok(ClientPage::default())))
    }

    fn client<'a>(&'a self, client: &'a str) -> ViewFuture<'a, ClientCount> {
        let c = ClientCount {
            client: client.to_owned(),
            users: 0,
            sessions: 0,
        };
        Box::pin(std::future::ready(Ok(c)))
    }
}

fn config(events_topic: Option<&str>) -> EngineConfig {
    EngineConfig {
        publish: PublishConfig::default(),
        schedule: ScheduleConfig::default(),
        callbacks: CallbackConfig::default(),
        presence: PresenceConfig {
            events_topic: events_topic.map(str::to_owned),
            ..PresenceConfig::default()
        },
        sources: &["http"],
    }
}

async fn status(routes: &Router, method: &str, uri: &str) -> StatusCode {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .body(Body::empty())
        .unwrap();
    routes.clone().oneshot(req).await.unwrap().status()
}

fn families(registry: &Registry) -> String {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text
}

#[tokio::test]
async fn without_a_store_the_engine_publishes_only() {
    let mut registry = Registry::default();
    let parts = Parts {
        link: Arc::new(Nowhere),
        durable: None,
        topics: TopicStats::default(),
    };
    let (engine, tasks) = Engine::build(config(Some("presence")), parts, &mut registry);
    assert!(engine.delayed.is_none());
    assert!(
        !engine.events.enabled(),
        "no store: no events, whatever the topic"
    );
    assert!(tasks.names().is_empty(), "{tasks:?}");
    let routes = engine.routes();
    // The publish API asks for a key; the console needs none.
    assert_eq!(
        status(&routes, "POST", "/v1/notifications").await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(status(&routes, "GET", "/console").await, StatusCode::OK);
    for absent in ["/v1/presence/clients", "/v1/topics", "/v1/notifications/x"] {
        assert_eq!(
            status(&routes, "GET", absent).await,
            StatusCode::NOT_FOUND,
            "{absent}"
        );
    }
    let text = families(&registry);
    assert!(
        text.contains("herald_notifications_accepted_total{source=\"http\"} 0"),
        "{text}"
    );
    assert!(!text.contains("herald_delayed_"), "{text}");
}

#[tokio::test]
async fn with_a_store_it_schedules_serves_presence_and_stores_events() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn crate::schedule::store::Store> =
        Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    let mut registry = Registry::default();
    let parts = Parts {
        link: Arc::new(Nowhere),
        durable: Some(Durable {
            store,
            presence: PresenceSource {
                online: Arc::new(Nobody),
                view: Arc::new(Nobody),
            },
        }),
        topics: TopicStats::default(),
    };
    let (engine, tasks) = Engine::build(config(Some("presence")), parts, &mut registry);
    assert!(engine.delayed.is_some());
    assert!(engine.events.enabled());
    assert_eq!(tasks.names(), ["scheduling", "presence-events"]);
    let routes = engine.routes();
    for served in ["/v1/presence/clients", "/v1/topics", "/v1/notifications/x"] {
        // Served, and refused for want of a key.
        assert_eq!(
            status(&routes, "GET", served).await,
            StatusCode::UNAUTHORIZED,
            "{served}"
        );
    }
    let text = families(&registry);
    for family in [
        "herald_delayed_",
        "herald_presence_events",
        "herald_presence_requests",
        "herald_callback_alerts",
    ] {
        assert!(text.contains(family), "{family} not registered: {text}");
    }
}
