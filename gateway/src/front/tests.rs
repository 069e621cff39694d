use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use super::Front;
use crate::Gateway;
use crate::auth::Verifier;
use crate::client_addr::ClientAddrs;
use crate::config::Config;

const SECRET: &str = "test-secret-test-secret-test-secret!";
const API_KEY: &str = "test-api-key";

/// A standalone gateway's front with no SockJS service, whose hyper side
/// answers every request 418: a request answered otherwise took a fast
/// path. The gateway serves until the token fires.
async fn front_without_sockjs() -> (SocketAddr, CancellationToken, tempfile::TempDir) {
    let data = tempfile::tempdir().unwrap();
    let mut config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: data.path().to_owned(),
        api_keys: vec![API_KEY.into()],
        ..Config::default()
    };
    config.auth.jwt_secret = Some(SECRET.into());
    config.validate().unwrap();
    let shutdown = CancellationToken::new();
    let verifier = Verifier::hs256(SECRET.as_bytes(), 0);
    let gateway = Gateway::new(config, verifier, None, shutdown.clone()).unwrap();
    let shared = Arc::clone(gateway.shared());
    let router = Router::new().fallback(|| async { StatusCode::IM_A_TEAPOT });
    let clients = Arc::new(ClientAddrs::new(shared.config.proxy.clone(), None));
    let front = Arc::new(Front::new(Arc::clone(&shared), router, None, clients));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(crate::server::serve(
        listener,
        front,
        shutdown.clone(),
        shared.tracker.clone(),
    ));
    (addr, shutdown, data)
}

/// Send `request` on a new connection and read the answer's head.
async fn answer_head(addr: SocketAddr, request: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(
            stream.read(&mut byte).await.unwrap(),
            1,
            "answer ended early"
        );
        head.push(byte[0]);
    }
    String::from_utf8(head).unwrap()
}

/// The `/ws` upgrade and the direct publish path do not depend on a SockJS
/// service; without one, a streaming receiver's request is hyper's.
#[tokio::test]
async fn the_fast_paths_work_without_sockjs() {
    let (addr, shutdown, _data) = front_without_sockjs().await;

    let upgrade = "GET /ws HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                   Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
    let head = answer_head(addr, upgrade).await;
    assert!(
        head.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
        "{head}"
    );

    let body = r#"{"users":["u1"],"event":"e","payload":{"n":1}}"#;
    let publish = format!(
        "POST /v1/notifications HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer {API_KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let head = answer_head(addr, &publish).await;
    assert!(head.starts_with("HTTP/1.1 202 "), "{head}");

    let stream =
        "POST /sockjs/000/abc/xhr_streaming HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n";
    let head = answer_head(addr, stream).await;
    assert!(head.starts_with("HTTP/1.1 418 "), "{head}");

    shutdown.cancel();
}
