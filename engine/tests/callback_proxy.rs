//! Callbacks never go through a proxy named by the environment: the proxy
//! would resolve the destination itself, past the client's destination
//! check. The test runs itself again as a child process with the proxy
//! variables set (the environment of a running process is not changed).

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use herald_engine::callback::client::{Client, ClientConfig, NoEvents, Request};
use herald_engine::callback::destination::Class;

/// Set in the child: the proxy's address.
const CHILD: &str = "HERALD_TEST_PROXY_CHILD";
const TEST: &str = "a_proxy_from_the_environment_is_not_used";

#[test]
fn a_proxy_from_the_environment_is_not_used() {
    if std::env::var_os(CHILD).is_none() {
        // A "proxy" that takes connections and never answers: a request
        // sent through it would time out.
        let proxy = TcpListener::bind("127.0.0.1:0").unwrap();
        proxy.set_nonblocking(true).unwrap();
        let proxy_url = format!("http://{}", proxy.local_addr().unwrap());
        let mut child = std::process::Command::new(std::env::current_exe().unwrap());
        child.args([TEST, "--exact", "--nocapture"]).env(CHILD, "1");
        for name in [
            "HTTP_PROXY",
            "http_proxy",
            "HTTPS_PROXY",
            "https_proxy",
            "ALL_PROXY",
        ] {
            child.env(name, &proxy_url);
        }
        let out = child
            .env_remove("NO_PROXY")
            .env_remove("no_proxy")
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{log}");
        assert!(log.contains("1 passed"), "the child ran no test: {log}");
        let untouched = proxy.accept().map(|_| ()).map_err(|e| e.kind());
        assert_eq!(
            untouched,
            Err(std::io::ErrorKind::WouldBlock),
            "the proxy was connected to"
        );
        return;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let receiver = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = receiver.local_addr().unwrap();
        let app = axum::Router::new().route("/hook", axum::routing::post(|| async { "OK" }));
        tokio::spawn(async move { axum::serve(receiver, app).await.unwrap() });

        let client = Client::new(
            ClientConfig {
                allowed: vec![Class::Loopback],
                ..ClientConfig::default()
            },
            Arc::new(NoEvents),
        )
        .unwrap();
        let answer = client
            .send(
                Request {
                    method: http::Method::POST,
                    url: url::Url::parse(&format!("http://{addr}/hook")).unwrap(),
                    headers: http::HeaderMap::new(),
                    body: Bytes::from_static(b"{}"),
                    timeout: Duration::from_secs(5),
                },
                0,
            )
            .await
            .expect("the receiver answered directly");
        assert_eq!((answer.status, &answer.body[..]), (200, &b"OK"[..]));
    });
}
