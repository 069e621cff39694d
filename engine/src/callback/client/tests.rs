//! The client against a real HTTP server on loopback (allowed here, as
//! `callbacks.allow_private_networks` does).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use tokio::sync::Notify;

use super::*;

#[derive(Default)]
struct Seen {
    requests: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    release: Notify,
    entered: Notify,
}

async fn echo(State(seen): State<Arc<Seen>>, headers: HeaderMap, body: Bytes) -> impl IntoResponse {
    seen.requests.fetch_add(1, Ordering::SeqCst);
    let topic = headers
        .get("herald-topic")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (
        StatusCode::OK,
        format!("{topic}:{}", String::from_utf8_lossy(&body)),
    )
}

async fn slow(State(seen): State<Arc<Seen>>) -> &'static str {
    seen.requests.fetch_add(1, Ordering::SeqCst);
    // Never answers before the client gives up.
    std::future::pending::<()>().await;
    "late"
}

async fn big(State(seen): State<Arc<Seen>>) -> Vec<u8> {
    seen.requests.fetch_add(1, Ordering::SeqCst);
    vec![b'x'; 1 << 20]
}

async fn redirect(State(seen): State<Arc<Seen>>) -> impl IntoResponse {
    seen.requests.fetch_add(1, Ordering::SeqCst);
    (
        StatusCode::FOUND,
        [("location", "http://10.0.0.1/internal")],
        "",
    )
}

async fn busy(State(seen): State<Arc<Seen>>) -> impl IntoResponse {
    seen.requests.fetch_add(1, Ordering::SeqCst);
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [("retry-after", "7")],
        "busy",
    )
}

async fn hold(State(seen): State<Arc<Seen>>) -> &'static str {
    seen.requests.fetch_add(1, Ordering::SeqCst);
    let now = seen.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    seen.max_in_flight.fetch_max(now, Ordering::SeqCst);
    seen.entered.notify_one();
    seen.release.notified().await;
    seen.in_flight.fetch_sub(1, Ordering::SeqCst);
    "done"
}

async fn server() -> (SocketAddr, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let app = Router::new()
        .route("/echo", post(echo))
        .route("/slow", get(slow))
        .route("/big", get(big))
        .route("/redirect", get(redirect))
        .route("/busy", post(busy))
        .route("/hold", get(hold))
        .with_state(Arc::clone(&seen));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, seen)
}

fn client(config: ClientConfig) -> Client {
    Client::new(config, Arc::new(NoEvents)).unwrap()
}

fn loopback() -> ClientConfig {
    ClientConfig {
        allowed: vec![Class::Loopback],
        ..ClientConfig::default()
    }
}

fn get_req(url: String) -> Request {
    Request {
        method: http::Method::GET,
        url: Url::parse(&url).unwrap(),
        headers: http::HeaderMap::new(),
        body: Bytes::new(),
        timeout: Duration::from_secs(5),
    }
}

#[tokio::test]
async fn a_post_carries_its_body_and_headers_and_the_answer_comes_back() {
    let (addr, seen) = server().await;
    let mut headers = http::HeaderMap::new();
    headers.insert("herald-topic", "billing".parse().unwrap());
    let answer = client(loopback())
        .send(
            Request {
                method: http::Method::POST,
                headers,
                body: Bytes::from_static(b"{\"n\":1}"),
                ..get_req(format!("http://{addr}/echo"))
            },
            0,
        )
        .await
        .unwrap();
    assert_eq!(answer.status, 200);
    assert_eq!(&answer.body[..], b"billing:{\"n\":1}");
    assert!(!answer.truncated);
    assert_eq!(seen.requests.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_host_that_does_not_answer_times_out() {
    let (addr, _) = server().await;
    let failure = client(loopback())
        .send(
            Request {
                timeout: Duration::from_millis(200),
                ..get_req(format!("http://{addr}/slow"))
            },
            0,
        )
        .await
        .unwrap_err();
    assert_eq!(failure, Failure::Timeout(200));
}

#[tokio::test]
async fn a_body_is_read_up_to_the_bound() {
    let (addr, _) = server().await;
    let c = client(ClientConfig {
        max_body_bytes: 1000,
        ..loopback()
    });
    let answer = c
        .send(get_req(format!("http://{addr}/big")), 0)
        .await
        .unwrap();
    assert_eq!((answer.body.len(), answer.truncated), (1000, true));
}

#[tokio::test]
async fn a_redirect_is_the_answer_never_followed() {
    let (addr, _) = server().await;
    let answer = client(loopback())
        .send(get_req(format!("http://{addr}/redirect")), 0)
        .await
        .unwrap();
    assert_eq!(answer.status, 302);
}

#[tokio::test]
async fn loopback_is_refused_by_address_and_by_name_unless_allowed() {
    let (addr, seen) = server().await;
    let closed = client(ClientConfig::default());
    let by_ip = closed
        .send(get_req(format!("http://{addr}/big")), 0)
        .await
        .unwrap_err();
    assert!(
        matches!(&by_ip, Failure::Refused(why) if why.contains("loopback")),
        "{by_ip:?}"
    );
    // A name is resolved, and what it resolves to is checked before any
    // connection: localhost is 127.0.0.1 (and ::1).
    let by_name = closed
        .send(get_req(format!("http://localhost:{}/big", addr.port())), 0)
        .await
        .unwrap_err();
    assert!(
        matches!(&by_name, Failure::Refused(why) if why.contains("localhost") && why.contains("loopback")),
        "{by_name:?}"
    );
    assert_eq!(
        seen.requests.load(Ordering::SeqCst),
        0,
        "nothing reached the server"
    );
    let allowed = client(loopback())
        .send(get_req(format!("http://localhost:{}/big", addr.port())), 0)
        .await;
    assert!(allowed.is_ok(), "{allowed:?}");
}

#[tokio::test]
async fn a_failing_host_is_paused_then_tried_again() {
    let (addr, seen) = server().await;
    let c = client(ClientConfig {
        breaker: BreakerConfig {
            threshold: 2,
            cooldown_ms: 1_000,
            ..BreakerConfig::default()
        },
        ..loopback()
    });
    let post = || Request {
        method: http::Method::POST,
        ..get_req(format!("http://{addr}/busy"))
    };
    let first = c.send(post(), 10_000).await.unwrap();
    assert_eq!(
        (first.status, first.retry_after.as_deref()),
        (503, Some("7"))
    );
    c.send(post(), 10_000).await.unwrap();
    assert_eq!(c.paused_hosts(), 1);
    let paused = c.send(post(), 10_500).await.unwrap_err();
    assert!(
        matches!(paused, Failure::Paused { until_ms, .. } if until_ms >= 11_000),
        "{paused:?}"
    );
    assert_eq!(
        seen.requests.load(Ordering::SeqCst),
        2,
        "the paused call never left"
    );
    // After the cooldown one trial goes (and fails again here).
    let trial = c.send(post(), 20_000).await.unwrap();
    assert_eq!(trial.status, 503);
    assert_eq!(seen.requests.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn requests_to_one_host_are_limited() {
    let (addr, seen) = server().await;
    let c = client(ClientConfig {
        per_host: 2,
        ..loopback()
    });
    let calls: Vec<_> = (0..4)
        .map(|_| {
            let c = c.clone();
            let url = format!("http://{addr}/hold");
            tokio::spawn(async move { c.send(get_req(url), 0).await })
        })
        .collect();
    // Two enter; the other two wait for a slot. Release them one by one.
    for _ in 0..4 {
        seen.entered.notified().await;
        seen.release.notify_one();
    }
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap().status, 200);
    }
    assert_eq!(seen.requests.load(Ordering::SeqCst), 4);
    assert_eq!(seen.max_in_flight.load(Ordering::SeqCst), 2);
}
