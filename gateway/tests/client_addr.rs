//! The client's address behind a trusted proxy (`[proxy]`), on a real
//! gateway: the PROXY protocol header at accept (trusted, untrusted,
//! malformed, slow, absent), `X-Forwarded-For` per request, and the
//! per-address connection rate counting the client's address, not the
//! proxy's. Untrusted peers connect from 127.0.0.2 (Linux answers the whole
//! 127/8 on loopback).

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use herald_gateway::config::Config;
use herald_gateway::metrics::{RefuseLabels, RefuseReason};
use herald_protocol::proxy::{encode_v1, encode_v2};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const PROBE: &str = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

fn refused(gw: &TestGateway, reason: RefuseReason) -> u64 {
    let (shared, _) = gw.local.as_ref().unwrap();
    shared
        .metrics
        .refused
        .get_or_create(&RefuseLabels { reason })
        .get()
}

fn trusting_loopback(protocol: bool) -> impl FnOnce(&mut Config) {
    move |c| {
        c.proxy.protocol = protocol;
        c.proxy.trusted = vec!["127.0.0.1/32".parse().unwrap()];
        // A burst of 2, then one connection per 1000 s.
        c.connection_rate.per_sec = 0.001;
        c.connection_rate.burst = 2;
    }
}

/// A connection from `source` that writes `bytes` and reads until the
/// gateway closes (a reset counts as closed); what came back.
async fn exchange(gw: &TestGateway, source: &str, bytes: &[u8]) -> String {
    let socket = TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::new(source.parse().unwrap(), 0))
        .unwrap();
    let mut s: TcpStream = socket.connect(gw.addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(WAIT, s.read_to_end(&mut out))
        .await
        .expect("the gateway answers or closes");
    String::from_utf8_lossy(&out).into_owned()
}

fn proxied(client: &str, request: &str) -> Vec<u8> {
    let source = SocketAddr::new(client.parse().unwrap(), 40000);
    let mut bytes = encode_v2(source, "127.0.0.1:8000".parse().unwrap());
    bytes.extend_from_slice(request.as_bytes());
    bytes
}

#[tokio::test]
async fn the_rate_counts_the_address_the_proxy_header_names() {
    let gw = start(trusting_loopback(true)).await;
    // Two browsers behind the proxy (127.0.0.1): each has its own burst.
    for _ in 0..2 {
        let a = exchange(&gw, "127.0.0.1", &proxied("192.0.2.1", PROBE)).await;
        assert!(a.starts_with("HTTP/1.1 200"), "{a}");
    }
    let third = exchange(&gw, "127.0.0.1", &proxied("192.0.2.1", PROBE)).await;
    assert!(third.starts_with("HTTP/1.1 429"), "{third}");
    let other = exchange(&gw, "127.0.0.1", &proxied("192.0.2.2", PROBE)).await;
    assert!(other.starts_with("HTTP/1.1 200"), "{other}");
    // v1 works too.
    let v1 = [
        encode_v1(
            "192.0.2.3:1".parse().unwrap(),
            "127.0.0.1:2".parse().unwrap(),
        ),
        PROBE.as_bytes().to_vec(),
    ]
    .concat();
    assert!(
        exchange(&gw, "127.0.0.1", &v1)
            .await
            .starts_with("HTTP/1.1 200")
    );
    // The proxy's own connections (no header: its health checks) are
    // never limited.
    for _ in 0..5 {
        let a = exchange(&gw, "127.0.0.1", PROBE.as_bytes()).await;
        assert!(a.starts_with("HTTP/1.1 200"), "{a}");
    }
    assert_eq!(refused(&gw, RefuseReason::RateLimited), 1);
}

#[tokio::test]
async fn headers_from_others_malformed_or_slow_close_the_connection() {
    let gw = start(|c| {
        c.proxy.protocol = true;
        c.proxy.trusted = vec!["127.0.0.1/32".parse().unwrap()];
        c.session.header_timeout_ms = 300;
    })
    .await;
    // An untrusted peer may not say who the client is...
    assert_eq!(
        exchange(&gw, "127.0.0.2", &proxied("192.0.2.1", PROBE)).await,
        ""
    );
    assert_eq!(refused(&gw, RefuseReason::ProxyUntrusted), 1);
    // ... but is served as itself without a header.
    assert!(
        exchange(&gw, "127.0.0.2", PROBE.as_bytes())
            .await
            .starts_with("HTTP/1.1 200")
    );
    let bad = [
        b"PROXY TCP4 192.0.2.1 127.0.0.1 99999 80\r\n".as_slice(),
        PROBE.as_bytes(),
    ]
    .concat();
    assert_eq!(exchange(&gw, "127.0.0.1", &bad).await, "");
    let mut huge = herald_protocol::proxy::V2_SIGNATURE.to_vec();
    huge.extend_from_slice(&[0x21, 0x11, 0x20, 0x00]);
    assert_eq!(exchange(&gw, "127.0.0.1", &huge).await, "");
    assert_eq!(refused(&gw, RefuseReason::ProxyMalformed), 2);
    // Half a header, then nothing: closed at the header deadline.
    let started = tokio::time::Instant::now();
    assert_eq!(exchange(&gw, "127.0.0.1", b"PROXY TCP4 192.0").await, "");
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert_eq!(refused(&gw, RefuseReason::ProxyTimeout), 1);
}

#[tokio::test]
async fn without_the_proxy_protocol_x_forwarded_for_names_the_client() {
    let gw = start(trusting_loopback(false)).await;
    let from = |xff: &str| {
        format!(
            "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: {xff}\r\nConnection: close\r\n\r\n"
        )
    };
    // The rightmost address that is not the proxy: a forged first entry
    // does not change who is counted.
    for xff in ["192.0.2.1", "6.6.6.6, 192.0.2.1"] {
        let a = exchange(&gw, "127.0.0.1", from(xff).as_bytes()).await;
        assert!(a.starts_with("HTTP/1.1 200"), "{a}");
    }
    let third = exchange(&gw, "127.0.0.1", from("7.7.7.7, 192.0.2.1").as_bytes()).await;
    assert!(third.starts_with("HTTP/1.1 429"), "{third}");
    assert!(
        exchange(&gw, "127.0.0.1", from("192.0.2.2").as_bytes())
            .await
            .starts_with("HTTP/1.1 200")
    );
    // A streaming receiver, read by the native path, is counted the same.
    let stream = "POST /sockjs/000/abcdef/xhr_streaming HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 192.0.2.1\r\nContent-Length: 0\r\n\r\n";
    let a = exchange(&gw, "127.0.0.1", stream.as_bytes()).await;
    assert!(a.starts_with("HTTP/1.1 429"), "{a}");
    // So is a WebSocket upgrade, also read by the native path.
    let upgrade = "GET /ws HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 192.0.2.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
    let a = exchange(&gw, "127.0.0.1", upgrade.as_bytes()).await;
    assert!(a.starts_with("HTTP/1.1 429"), "{a}");
    // An untrusted peer's X-Forwarded-For is ignored: it is counted as
    // itself (its burst of 2), whatever it claims.
    for _ in 0..2 {
        let a = exchange(&gw, "127.0.0.2", from("192.0.2.9").as_bytes()).await;
        assert!(a.starts_with("HTTP/1.1 200"), "{a}");
    }
    let a = exchange(&gw, "127.0.0.2", from("192.0.2.10").as_bytes()).await;
    assert!(a.starts_with("HTTP/1.1 429"), "{a}");
    // A PROXY header is no HTTP: nothing is served.
    let a = exchange(&gw, "127.0.0.1", &proxied("192.0.2.5", PROBE)).await;
    assert!(!a.contains(" 200 "), "{a}");
    assert_eq!(refused(&gw, RefuseReason::RateLimited), 4);
}
