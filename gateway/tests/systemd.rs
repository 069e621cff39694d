//! systemd's readiness protocol (`Type=notify`) with the real binary: a
//! Unix datagram socket stands in for systemd's, named by `$NOTIFY_SOCKET`.
//! `READY=1` comes once the port accepts and, for an edge, once a root link
//! is up (against the real RabbitMQ on 127.0.0.1:5672, behind a gate);
//! `STOPPING=1` comes at SIGTERM.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::gated_root::GatedRoot;
use common::*;
use tokio::net::UnixDatagram;

/// The next datagram on `socket`, failing after [`WAIT`].
async fn next_state(socket: &UnixDatagram) -> String {
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(WAIT, socket.recv(&mut buf))
        .await
        .expect("no notification within the wait")
        .unwrap();
    String::from_utf8(buf[..n].to_vec()).unwrap()
}

/// Datagrams until one carrying `line` (e.g. `READY=1`), which is returned.
async fn until_state(socket: &UnixDatagram, line: &str) -> String {
    loop {
        let state = next_state(socket).await;
        if state.lines().any(|l| l == line) {
            return state;
        }
    }
}

/// The gateway binary with `NOTIFY_SOCKET=notify` and `env`, on a free
/// 127.0.0.1 port; its address, from its "listening" log line.
fn spawn(notify: &Path, data: &Path, env: &[(&str, &str)]) -> (Child, SocketAddr) {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(env!("CARGO_BIN_EXE_herald-gateway"))
        .args(["--listen", "127.0.0.1:0", "--jwt-secret", SECRET])
        .args(["--api-key", API_KEY, "--log-format", "json", "--data-dir"])
        .arg(data)
        .env("NOTIFY_SOCKET", notify)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let addr = loop {
        let line = lines.next().expect("exited before listening").unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        if let Some(a) = v["fields"]["addr"].as_str() {
            break a.parse().unwrap();
        }
    };
    // Drain the rest so the pipe never fills.
    std::thread::spawn(move || lines.map_while(Result::ok).for_each(drop));
    (child, addr)
}

/// SIGTERM; the process must announce `STOPPING=1` and exit 0.
async fn stop(mut child: Child, socket: &UnixDatagram) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let stopping = until_state(socket, "STOPPING=1").await;
    assert!(
        stopping.contains("STATUS=herald-gateway: draining"),
        "{stopping}"
    );
    let exit = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(exit.success(), "{exit}");
}

#[tokio::test]
async fn a_standalone_gateway_is_ready_once_it_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify");
    let socket = UnixDatagram::bind(&path).unwrap();
    let (child, addr) = spawn(&path, &dir.path().join("data"), &[]);
    let ready = next_state(&socket).await;
    assert_eq!(ready, "READY=1\nSTATUS=herald-gateway: ready");
    // Ready means the port takes connections now: no retry.
    let gw = TestGateway::remote(addr);
    let (status, body) = gw.get_json("/readyz").await;
    assert_eq!((status, body["status"].as_str()), (200, Some("ready")));
    stop(child, &socket).await;
}

#[tokio::test]
async fn an_edge_is_ready_only_once_linked_to_a_root() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify");
    let socket = UnixDatagram::bind(&path).unwrap();
    let root = GatedRoot::start().await;
    let id = format!("test-{}", rand::random::<u32>());
    let exchange = format!("herald.edges.test-{}", rand::random::<u32>());
    let (child, addr) = spawn(
        &path,
        &dir.path().join("data"),
        &[
            ("HERALD_ROOTS", root.url.as_str()),
            ("HERALD_EDGE_ID", id.as_str()),
            ("HERALD_EDGE__EXCHANGE", exchange.as_str()),
            ("HERALD_EDGE__QUEUE_EXPIRES_SECS", "60"),
            ("HERALD_EDGE__RECONNECT_INITIAL_MS", "50"),
            ("HERALD_EDGE__RECONNECT_MAX_MS", "200"),
        ],
    );
    // Listening, but its only root is unreachable: systemd hears why it is
    // not ready, not READY=1.
    let first = next_state(&socket).await;
    assert_eq!(first, "STATUS=herald-gateway: not ready: no root link");
    let gw = TestGateway::remote(addr);
    let (status, body) = gw.get_json("/readyz").await;
    assert_eq!(status, 503, "{body}");
    // The root comes up: READY=1 follows the link, and /readyz agrees at
    // once.
    root.switch_on();
    let ready = next_state(&socket).await;
    assert_eq!(ready, "READY=1\nSTATUS=herald-gateway: ready");
    let (status, body) = gw.get_json("/readyz").await;
    assert_eq!((status, body["status"].as_str()), (200, Some("ready")));
    stop(child, &socket).await;
    cleanup(&id, &exchange).await;
}

/// Delete what the edge declared on the broker.
async fn cleanup(id: &str, exchange: &str) {
    let conn = lapin::Connection::connect(
        "amqp://guest:guest@127.0.0.1:5672/%2f",
        lapin::ConnectionProperties::default(),
    )
    .await
    .unwrap();
    let channel = conn.create_channel().await.unwrap();
    let _ = channel
        .queue_delete(
            format!("herald.edge.{id}").as_str().into(),
            Default::default(),
        )
        .await;
    let _ = channel
        .exchange_delete(exchange.into(), Default::default())
        .await;
    let _ = conn.close(0, "done".into()).await;
}
