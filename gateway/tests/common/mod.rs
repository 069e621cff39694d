//! Test harness: a real gateway on 127.0.0.1:0, clients that speak STOMP
//! over WebSocket with tokio-tungstenite (an independent implementation),
//! and a raw client for malformed input.

#![allow(dead_code, unreachable_pub)]

pub mod gated_root;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::BytesMut;
use futures_util::{SinkExt, StreamExt};
use herald_gateway::Gateway;
use herald_gateway::app::Shared;
use herald_gateway::auth::{Claims, Verifier, sign_hs256};
use herald_gateway::config::Config;
use herald_protocol::stomp::{self, Decoded, Frame, Limits, Version};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tokio_util::sync::CancellationToken;

pub const SECRET: &str = "test-secret-test-secret-test-secret!";
pub const API_KEY: &str = "test-api-key";
/// Upper bound on any wait in these tests; a wait that hits it is a failure.
pub const WAIT: Duration = Duration::from_secs(10);

/// Start the herald-gateway binary on an ephemeral 127.0.0.1 port with the
/// test secret and API key, JSON logs, and `args` (data dir, config, ...);
/// return it and the address it logs. Its log is drained in a thread so it
/// never blocks on a full pipe.
pub fn spawn_gateway_binary(args: &[&std::ffi::OsStr]) -> (std::process::Child, SocketAddr) {
    let (child, addr, _log) = spawn_gateway_binary_logged(args);
    (child, addr)
}

/// Like [`spawn_gateway_binary`], with every later log line (JSON) sent to
/// the returned receiver.
pub fn spawn_gateway_binary_logged(
    args: &[&std::ffi::OsStr],
) -> (
    std::process::Child,
    SocketAddr,
    std::sync::mpsc::Receiver<serde_json::Value>,
) {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_herald-gateway"))
        .args(args)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--jwt-secret",
            SECRET,
            "--api-key",
            API_KEY,
            "--log-format",
            "json",
        ])
        // Accepted publications are logged at DEBUG.
        .env("RUST_LOG", "info,herald_engine::publish=debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("gateway exited before listening")
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        if let Some(a) = v["fields"]["addr"].as_str() {
            break a.parse().unwrap();
        }
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            // Nobody listening is fine: the pipe is drained either way.
            let _ = tx.send(serde_json::from_str(&line).unwrap_or_default());
        }
    });
    (child, addr, rx)
}

/// The wall clock in epoch ms, as the gateway fixes due times.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

pub struct TestGateway {
    pub addr: SocketAddr,
    /// The in-process gateway's state and task; None for a gateway running
    /// in another process.
    pub local: Option<(Arc<Shared>, JoinHandle<()>)>,
    pub shutdown: CancellationToken,
    /// The data directory of an in-process gateway (removed on drop).
    pub data: Option<tempfile::TempDir>,
}

pub async fn start(tweak: impl FnOnce(&mut Config)) -> TestGateway {
    let data = tempfile::tempdir().expect("a temp data dir");
    let mut config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: data.path().to_owned(),
        api_keys: vec![API_KEY.into()],
        shutdown_grace_ms: 2000,
        ..Config::default()
    };
    config.auth.jwt_secret = Some(SECRET.into());
    tweak(&mut config);
    config.validate().expect("test config is valid");
    let listener = tokio::net::TcpListener::bind(config.listen).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let verifier = Verifier::hs256(SECRET.as_bytes(), 0);
    let gateway =
        Gateway::new(config, verifier, None, shutdown.clone()).expect("the gateway starts");
    let shared = Arc::clone(gateway.shared());
    let task = tokio::spawn(gateway.serve(listener));
    TestGateway {
        addr,
        local: Some((shared, task)),
        shutdown,
        data: Some(data),
    }
}

pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

pub fn token(user: &str, client: Option<&str>, site: Option<&str>) -> String {
    sign_hs256(
        SECRET.as_bytes(),
        &Claims {
            sub: user.into(),
            client: client.map(Into::into),
            site: site.map(Into::into),
            exp: now_secs() + 600,
        },
    )
}

impl TestGateway {
    /// A handle on a gateway running in another process.
    pub fn remote(addr: SocketAddr) -> TestGateway {
        TestGateway {
            addr,
            local: None,
            shutdown: CancellationToken::new(),
            data: None,
        }
    }

    pub fn ws_url(&self) -> String {
        format!("ws://{}/ws", self.addr)
    }

    pub async fn publish(&self, body: serde_json::Value) -> (u16, serde_json::Value) {
        let r = reqwest::Client::new()
            .post(format!("http://{}/v1/notifications", self.addr))
            .bearer_auth(API_KEY)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(serde_json::Value::Null))
    }

    /// `GET path`: the status and the JSON body (Null when not JSON).
    pub async fn get_json(&self, path: &str) -> (u16, serde_json::Value) {
        let r = reqwest::get(format!("http://{}{path}", self.addr))
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(serde_json::Value::Null))
    }

    /// The status code of `GET /v1/notifications/{id}`.
    pub async fn status_code(&self, id: &str) -> u16 {
        reqwest::Client::new()
            .get(format!("http://{}/v1/notifications/{id}", self.addr))
            .bearer_auth(API_KEY)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }

    /// A notification's status (`GET /v1/notifications/{id}` with the API
    /// key): 200 asserted.
    pub async fn status_of(&self, id: &str) -> serde_json::Value {
        let r = reqwest::Client::new()
            .get(format!("http://{}/v1/notifications/{id}", self.addr))
            .bearer_auth(API_KEY)
            .send()
            .await
            .unwrap();
        let code = r.status().as_u16();
        let body: serde_json::Value = r.json().await.unwrap_or_default();
        assert_eq!(code, 200, "{body}");
        body
    }

    /// Poll `GET path` until it answers `status`, failing after [`WAIT`].
    pub async fn until_status(&self, path: &str, status: u16) -> serde_json::Value {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let (got, body) = self.get_json(path).await;
            if got == status {
                return body;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{path} answered {got} {body}, never {status}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Poll `/metrics` until `series` reads `value`; fails after `WAIT`.
    pub async fn until_metric(&self, series: &str, value: f64) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if sample(&self.metrics().await, series) == Some(value) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{series} never reached {value}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn metrics(&self) -> String {
        reqwest::get(format!("http://{}/metrics", self.addr))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// Connect and send CONNECT with `headers`; returns the client and the
    /// server's answer (CONNECTED or ERROR).
    pub async fn connect_with(&self, headers: &[(&str, &str)]) -> (StompClient, Frame) {
        let mut client = StompClient::open(&self.ws_url()).await;
        let mut h = vec![("accept-version", "1.2"), ("host", "herald")];
        h.extend_from_slice(headers);
        client.send(stomp::Command::Connect, &h).await;
        let answer = client.next_frame().await.expect("an answer to CONNECT");
        (client, answer)
    }

    /// Like [`Self::session`], over a socket with a 4 KiB receive buffer,
    /// so a client that stops reading backs up into the gateway quickly.
    pub async fn slow_session(&self, token: &str) -> StompClient {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let stream = socket.connect(self.addr).await.unwrap();
        let mut req = self.ws_url().into_client_request().unwrap();
        req.headers_mut()
            .insert("Sec-WebSocket-Protocol", "v12.stomp".parse().unwrap());
        let (ws, _) = tokio_tungstenite::client_async(req, MaybeTlsStream::Plain(stream))
            .await
            .unwrap();
        let mut c = StompClient::from_ws(ws);
        c.send(
            stomp::Command::Connect,
            &[("accept-version", "1.2"), ("passcode", token)],
        )
        .await;
        let answer = c.next_frame().await.unwrap();
        assert_eq!(answer.command, stomp::Command::Connected);
        c.connected = Some(answer);
        c.subscribe("s", &[]).await;
        c
    }

    /// A connected, subscribed client for `token`.
    pub async fn session(&self, token: &str) -> StompClient {
        let (mut c, answer) = self.connect_with(&[("passcode", token)]).await;
        assert_eq!(answer.command, stomp::Command::Connected, "{answer:?}");
        c.connected = Some(answer);
        c.subscribe("sub-0", &[]).await;
        c
    }
}

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

pub struct StompClient {
    pub ws: Ws,
    buf: BytesMut,
    pub connected: Option<Frame>,
    pub close_code: Option<u16>,
    /// Longest wait for a frame ([`WAIT`] unless a test knows better).
    pub wait: Duration,
}

impl StompClient {
    pub async fn open(url: &str) -> StompClient {
        let mut req = url.into_client_request().unwrap();
        req.headers_mut()
            .insert("Sec-WebSocket-Protocol", "v12.stomp".parse().unwrap());
        let (ws, resp) = tokio_tungstenite::connect_async(req).await.unwrap();
        assert_eq!(
            resp.headers()
                .get("Sec-WebSocket-Protocol")
                .map(|v| v.to_str().unwrap()),
            Some("v12.stomp")
        );
        StompClient {
            ws,
            buf: BytesMut::new(),
            connected: None,
            close_code: None,
            wait: WAIT,
        }
    }

    pub fn from_ws(ws: Ws) -> StompClient {
        StompClient {
            ws,
            buf: BytesMut::new(),
            connected: None,
            close_code: None,
            wait: WAIT,
        }
    }

    pub async fn send(&mut self, command: stomp::Command, headers: &[(&str, &str)]) {
        let mut out = BytesMut::new();
        stomp::encode_frame(command, headers, b"", Version::V1_2, &mut out);
        self.send_raw_text(std::str::from_utf8(&out).unwrap()).await;
    }

    pub async fn send_raw_text(&mut self, text: &str) {
        self.ws.send(Message::text(text)).await.unwrap();
    }

    pub async fn subscribe(&mut self, id: &str, extra: &[(&str, &str)]) {
        let receipt = format!("r-{id}");
        let mut h = vec![
            ("id", id),
            ("destination", "/user/notifications"),
            ("receipt", receipt.as_str()),
        ];
        h.extend_from_slice(extra);
        self.send(stomp::Command::Subscribe, &h).await;
        let f = self.next_frame().await.expect("RECEIPT");
        assert_eq!(f.command, stomp::Command::Receipt, "{f:?}");
        assert_eq!(f.header("receipt-id"), Some(receipt.as_str()));
    }

    /// The next STOMP frame (heart-beats skipped), or None when the
    /// connection closed. Panics after [`Self::wait`].
    pub async fn next_frame(&mut self) -> Option<Frame> {
        tokio::time::timeout(self.wait, self.next_frame_inner())
            .await
            .expect("timed out waiting for a frame")
    }

    async fn next_frame_inner(&mut self) -> Option<Frame> {
        let limits = Limits {
            max_frame_bytes: 16 << 20,
            ..Limits::default()
        };
        loop {
            match stomp::decode(&mut self.buf, Version::V1_2, &limits).unwrap() {
                Some(Decoded::Frame(f)) => return Some(f),
                Some(Decoded::Heartbeat) => continue,
                None => {}
            }
            match self.ws.next().await {
                Some(Ok(Message::Text(t))) => self.buf.extend_from_slice(t.as_bytes()),
                Some(Ok(Message::Binary(b))) => self.buf.extend_from_slice(&b),
                Some(Ok(Message::Close(c))) => {
                    self.close_code = c.map(|c| u16::from(c.code));
                    return None;
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return None,
            }
        }
    }

    /// The next MESSAGE frame; fails on anything else.
    pub async fn message(&mut self) -> Frame {
        let f = self.next_frame().await.expect("a MESSAGE");
        assert_eq!(f.command, stomp::Command::Message, "{f:?}");
        f
    }

    /// Read until the server closes; returns the close code.
    pub async fn closed(&mut self) -> Option<u16> {
        while self.next_frame().await.is_some() {}
        self.close_code
    }
}

pub fn epoch_of(connected: &Frame) -> String {
    connected.header("epoch").unwrap().to_owned()
}

/// Send a message to `user` and return its id.
pub async fn notify(gw: &TestGateway, user: &str, event: &str) -> String {
    let (status, body) = gw
        .publish(serde_json::json!({"users": [user], "event": event, "payload": {"n": 1}}))
        .await;
    assert_eq!(status, 202, "{body}");
    body["ids"][0].as_str().unwrap().to_owned()
}

/// Read a Prometheus sample (`name{labels}` exactly as rendered).
pub fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// The in-process gateway's `slow_consumer` count.
pub fn slow_consumers(gw: &TestGateway) -> u64 {
    let (shared, _) = gw.local.as_ref().expect("an in-process gateway");
    shared
        .metrics
        .dropped
        .get_or_create(&herald_gateway::metrics::DropLabels {
            reason: herald_gateway::metrics::DropReason::SlowConsumer,
        })
        .get()
}
