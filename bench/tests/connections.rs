//! `herald-bench connections` end to end, against a stand-in STOMP-over-WebSocket server that
//! lives in this test process (the real gateway is tested with the real gateway; this checks
//! the bench's own plumbing: workers, source addresses, handshakes, failure counting, report,
//! exit codes).

use std::process::Stdio;
use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
use tokio_tungstenite::tungstenite::http::HeaderValue;

const SECRET: &str = "test-secret";

#[derive(serde::Deserialize)]
struct Claims {
    sub: String,
    client: String,
}

/// Serves the gateway's STOMP handshake. Users whose id ends in `-7` get an `ERROR` frame.
async fn stand_in_gateway() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                // The callback's signature is tungstenite's.
                #[allow(clippy::result_large_err)]
                let callback = |req: &Request, mut resp: Response| {
                    let offered = req
                        .headers()
                        .get("Sec-WebSocket-Protocol")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default();
                    assert!(offered.contains("v12.stomp"), "offered {offered:?}");
                    assert_eq!(req.uri().path(), "/ws");
                    resp.headers_mut().insert(
                        "Sec-WebSocket-Protocol",
                        HeaderValue::from_static("v12.stomp"),
                    );
                    Ok(resp)
                };
                let Ok(mut ws) = tokio_tungstenite::accept_hdr_async(stream, callback).await else {
                    return;
                };
                while let Some(Ok(msg)) = ws.next().await {
                    let Message::Text(text) = msg else { continue };
                    let text = text.as_str();
                    let reply = if text.starts_with("CONNECT\n") {
                        let passcode = text
                            .lines()
                            .find_map(|l| l.strip_prefix("passcode:"))
                            .unwrap_or_default();
                        let claims = jsonwebtoken::decode::<Claims>(
                            passcode,
                            &DecodingKey::from_secret(SECRET.as_bytes()),
                            &Validation::new(Algorithm::HS256),
                        );
                        match claims {
                            Ok(c) if !c.claims.sub.ends_with("-7") => {
                                assert!(c.claims.client.starts_with("bench-co-"));
                                format!(
                                    "CONNECTED\nversion:1.2\nheart-beat:0,0\nsession:s\nuser-name:{}\nepoch:1\nseq:0\n\n\0",
                                    c.claims.sub
                                )
                            }
                            _ => {
                                let _ = ws
                                    .send(Message::text("ERROR\nmessage:rejected\n\n\0"))
                                    .await;
                                let _ = ws.close(None).await;
                                return;
                            }
                        }
                    } else if text.starts_with("SUBSCRIBE\n") {
                        assert!(text.contains("\ndestination:/user/notifications\n"));
                        // Receipt and a heart-beat in separate messages, a MESSAGE after.
                        let _ = ws
                            .send(Message::text("RECEIPT\nreceipt-id:r-0\n\n\0"))
                            .await;
                        "MESSAGE\nsubscription:sub-0\nseq:1\n\n{}\0".to_owned()
                    } else {
                        continue;
                    };
                    if ws.send(Message::text(reply)).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

async fn bench(args: &[&str]) -> (Option<i32>, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_herald-bench"))
        .args(args)
        .stdin(Stdio::null())
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), out)
        .await
        .expect("bench finished in time")
        .expect("bench ran");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opens_sessions_over_two_workers_and_counts_failures() {
    let addr = stand_in_gateway().await;
    let url = format!("ws://{addr}/ws");
    let pid = std::process::id().to_string();
    let (code, stdout, stderr) = bench(&[
        "connections",
        "--url",
        &url,
        "--sessions",
        "60",
        "--processes",
        "2",
        "--jwt-secret",
        SECRET,
        "--gateway-pid",
        &pid,
        "--concurrency",
        "8",
        "--json",
    ])
    .await;
    // Each worker has 30 sessions; session 7 of each is refused.
    assert_eq!(code, Some(1), "stdout: {stdout}\nstderr: {stderr}");
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(report["sessions_requested"], 60);
    assert_eq!(report["sessions_opened"], 58);
    assert_eq!(report["sessions_failed"], 2);
    assert_eq!(report["failures"]["stomp error: rejected"], 2);
    assert_eq!(report["processes"], 2);
    assert_eq!(report["gateway_pid"], std::process::id());
    assert!(report["rss_before_bytes"].as_u64().unwrap() > 0);
    assert!(report["connect_rate"].as_f64().unwrap() > 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_open_exits_zero_with_a_text_report() {
    let addr = stand_in_gateway().await;
    let url = format!("ws://{addr}/ws");
    // Sessions 0..=6 only, so nobody is refused.
    let (code, stdout, stderr) = bench(&[
        "connections",
        "--url",
        &url,
        "--sessions",
        "7",
        "--jwt-secret",
        SECRET,
        "--source-addrs",
        "127.0.0.9",
    ])
    .await;
    assert_eq!(code, Some(0), "stdout: {stdout}\nstderr: {stderr}");
    assert!(
        stdout.contains("7 opened, 0 failed (of 7, over 1 process)"),
        "{stdout}"
    );
    assert!(stdout.contains("not measured"), "{stdout}");
}

#[tokio::test]
async fn a_herald_transport_needs_the_secret_and_a_peer_transport_does_not() {
    let run = |transport: &'static str| async move {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_herald-bench"))
            .args(["connections", "--sessions", "1", "--transport", transport])
            // Nothing listens there: a peer's session fails to connect, after the checks.
            .args(["--url", "ws://127.0.0.1:9/sub", "--handshake-timeout", "5"])
            .env_remove("HERALD_BENCH_JWT_SECRET")
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap()
    };
    let out = run("websocket").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--jwt-secret"), "{stderr}");
    let out = run("raw-websocket").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 failed"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[tokio::test]
async fn refuses_too_many_sessions_per_process() {
    let (code, _, stderr) = bench(&[
        "connections",
        "--sessions",
        "40000",
        "--processes",
        "2",
        "--jwt-secret",
        SECRET,
    ])
    .await;
    assert_eq!(code, Some(2));
    assert!(stderr.contains("over the limit of 19000"), "{stderr}");
}

#[tokio::test]
async fn nothing_listening_fails_every_session_by_reason() {
    // Bind then drop to get a port nobody listens on.
    let port = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("ws://127.0.0.1:{port}/ws");
    let (code, stdout, stderr) = bench(&[
        "connections",
        "--url",
        &url,
        "--sessions",
        "5",
        "--jwt-secret",
        SECRET,
        "--json",
    ])
    .await;
    assert_eq!(code, Some(1), "stderr: {stderr}");
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(report["sessions_failed"], 5);
    assert_eq!(report["failures"]["connect: ConnectionRefused"], 5);
}
