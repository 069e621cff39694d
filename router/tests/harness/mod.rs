//! Test harness for the router against the real RabbitMQ (127.0.0.1:5672,
//! guest/guest, or `HERALD_TEST_AMQP_URL`): a backend publishing with lapin,
//! an edge stand-in reading the edges exchange through its own queue, and
//! the router itself, in-process.

#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use herald_amqp::Topology;
use herald_amqp::envelope::{BUNDLE_TYPE, forwarded_from_amqp_bytes};
use herald_protocol::envelope::Notification;
use herald_router::config::Config;
use herald_router::{presence_intake, stats_intake};
use lapin::options::{
    BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, QueueBindOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use tokio_util::sync::CancellationToken;

pub const API_KEY: &str = "test-key";

/// The notifications a message on the edges exchange carries: one, or a
/// bundle's (`type` `herald.bundle`), in order.
pub fn notifications_of(d: &lapin::message::Delivery) -> Vec<Notification> {
    let bundled = d
        .properties
        .kind()
        .as_ref()
        .is_some_and(|k| k.as_str() == BUNDLE_TYPE);
    if bundled {
        herald_protocol::bundle::decode(d.data.clone().into()).unwrap()
    } else {
        // As an edge reads it: an id may be a tenant's (`id:tenant`).
        let limits = herald_protocol::envelope::Limits::default();
        let body = bytes::Bytes::copy_from_slice(&d.data);
        vec![forwarded_from_amqp_bytes(&d.properties, body, &limits, || panic!("no id")).unwrap()]
    }
}

pub fn amqp_url() -> String {
    std::env::var("HERALD_TEST_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

pub fn suffix() -> String {
    format!(".test-{:012x}", rand::random::<u64>() >> 16)
}

pub fn text(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s))
}

pub fn strings(values: &[&str]) -> AMQPValue {
    AMQPValue::FieldArray(values.iter().map(|v| text(v)).collect::<Vec<_>>().into())
}

pub fn header_text(p: &BasicProperties, name: &str) -> Option<String> {
    match p.headers().as_ref()?.inner().get(name)? {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        _ => None,
    }
}

/// The Redis the delayed-store tests use (`HERALD_TEST_REDIS_URL` to change it).
pub fn redis_url() -> String {
    std::env::var("HERALD_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/0".into())
}

/// The wall clock in epoch ms, as the router fixes due times.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A test's Redis key prefix; its keys (and only those) are removed when dropped.
pub struct RedisPrefix(pub String);

impl Drop for RedisPrefix {
    fn drop(&mut self) {
        if let Ok(client) = redis::Client::open(redis_url())
            && let Ok(mut c) = client.get_connection()
        {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(format!("{}:*", self.0))
                .query(&mut c)
                .unwrap_or_default();
            for chunk in keys.chunks(500) {
                let _: Result<(), _> = redis::cmd("DEL").arg(chunk).query(&mut c);
            }
        }
    }
}

/// A test's connection to the broker: a backend publishing to the router's
/// exchange, and an edge reading the edges exchange through `edge_queue`.
pub struct Broker {
    pub connection: Connection,
    pub channel: Channel,
    pub topology: Topology,
    pub edge_queue: String,
    pub cleaned: bool,
}

impl Broker {
    pub async fn connect(topology: Topology) -> Broker {
        let connection = Connection::connect(
            &amqp_url(),
            ConnectionProperties::default().with_connection_name("herald-router-tests".into()),
        )
        .await
        .unwrap_or_else(|e| {
            panic!(
                "RabbitMQ is not reachable at {} ({e}); start it with `rabbitmq-server -detached`",
                amqp_url()
            )
        });
        let channel = connection.create_channel().await.unwrap();
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .unwrap();
        // Declare what the router will declare (idempotent), so the edge
        // queue can be bound, and presence reports queued, before the
        // router is up.
        topology.declare(&channel).await.unwrap();
        topology
            .declare_presence(&channel, presence_intake::QUEUE_MAX_LENGTH)
            .await
            .unwrap();
        topology
            .declare_stats(&channel, stats_intake::QUEUE_MAX_LENGTH)
            .await
            .unwrap();
        let edge_queue = format!("{}.edge", topology.edges_exchange);
        channel
            .queue_declare(
                edge_queue.as_str().into(),
                QueueDeclareOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        channel
            .queue_bind(
                edge_queue.as_str().into(),
                topology.edges_exchange.as_str().into(),
                "".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        Broker {
            connection,
            channel,
            topology,
            edge_queue,
            cleaned: false,
        }
    }

    /// Publish as a backend would, and wait for the broker's confirm.
    pub async fn publish(
        &self,
        routing_key: &str,
        properties: BasicProperties,
        body: &[u8],
    ) -> bool {
        let confirm = self
            .channel
            .basic_publish(
                self.topology.exchange.as_str().into(),
                routing_key.into(),
                BasicPublishOptions::default(),
                body,
                properties,
            )
            .await
            .unwrap()
            .await
            .unwrap();
        confirm.is_ack()
    }

    /// Take `n` messages from `queue`, waiting up to `timeout` for them.
    pub async fn take(
        &self,
        queue: &str,
        n: usize,
        timeout: Duration,
    ) -> Vec<lapin::message::Delivery> {
        let deadline = Instant::now() + timeout;
        let mut got = Vec::new();
        while got.len() < n {
            match self
                .channel
                .basic_get(queue.into(), BasicGetOptions { no_ack: true })
                .await
                .unwrap()
            {
                Some(m) => got.push(m.delivery),
                None if Instant::now() > deadline => {
                    panic!("{queue}: got {} of {n} messages in {timeout:?}", got.len())
                }
                None => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
        got
    }

    /// Take messages from `queue` until they hold `n` notifications (a
    /// bundle holds several), waiting up to `timeout`. Each comes with
    /// the properties of the message that carried it.
    pub async fn take_notifications(
        &self,
        queue: &str,
        n: usize,
        timeout: Duration,
    ) -> Vec<(Notification, BasicProperties)> {
        let deadline = Instant::now() + timeout;
        let mut got = Vec::new();
        while got.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            for d in self.take(queue, 1, left).await {
                got.extend(
                    notifications_of(&d)
                        .into_iter()
                        .map(|n| (n, d.properties.clone())),
                );
            }
        }
        got
    }

    /// Messages ready in `queue` (after the router has closed its
    /// connection, unacked ones are ready again, so 0 means all were acked).
    pub async fn ready(&self, queue: &str) -> u32 {
        self.channel
            .queue_declare(
                queue.into(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .unwrap()
            .message_count()
    }

    /// Delete the test's queues and exchanges.
    pub async fn cleanup(mut self) {
        delete(&self.channel, &self.topology, &self.edge_queue)
            .await
            .unwrap();
        self.cleaned = true;
        let _ = self.connection.close(200, "OK".into()).await;
    }
}

pub async fn delete(channel: &Channel, topology: &Topology, edge_queue: &str) -> lapin::Result<()> {
    channel
        .queue_delete(edge_queue.into(), QueueDeleteOptions::default())
        .await?;
    topology.delete(channel).await
}

impl Drop for Broker {
    /// A test that failed still removes its names from the shared broker
    /// (on a connection of its own: the test's runtime is unwinding).
    fn drop(&mut self) {
        if self.cleaned {
            return;
        }
        let topology = self.topology.clone();
        let edge_queue = self.edge_queue.clone();
        let cleanup = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let c = Connection::connect(&amqp_url(), ConnectionProperties::default()).await?;
                let channel = c.create_channel().await?;
                delete(&channel, &topology, &edge_queue).await?;
                let _ = c.close(200, "OK".into()).await;
                Ok::<_, lapin::Error>(())
            })
        });
        if let Ok(Err(e)) = cleanup.join() {
            eprintln!("cleanup of {:?} failed: {e}", self.topology);
        }
    }
}

/// An in-process router (`herald_router::server::run`) on 127.0.0.1:0.
pub struct Router {
    pub addr: SocketAddr,
    pub connection_name: String,
    pub shutdown: CancellationToken,
    pub task: Option<tokio::task::JoinHandle<()>>,
    pub http: reqwest::Client,
}

impl Drop for Router {
    /// A failed test stops its router at once, before the topology is
    /// deleted (a running router would declare it again).
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Router {
    pub async fn start(topology: &Topology, tune: impl FnOnce(&mut Config)) -> Router {
        let connection_name = format!("herald-router{}", topology.exchange);
        let mut config = Config {
            api_keys: vec![API_KEY.into()],
            shutdown_grace_ms: 5_000,
            ..Config::default()
        };
        config.amqp.url = amqp_url();
        config.amqp.connection_name = connection_name.clone();
        config.amqp.topology = topology.clone();
        config.amqp.reconnect_initial_ms = 50;
        config.amqp.reconnect_max_ms = 500;
        tune(&mut config);
        config.validate().unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let store = herald_router::server::connect_store(&config)
            .await
            .expect("the delayed store connects");
        let api_keys = herald_engine::api_key::ApiKeys::from_set(
            config.api_key_set().expect("the API keys load"),
        );
        let task = tokio::spawn(herald_router::server::run(
            config,
            listener,
            shutdown.clone(),
            store,
            api_keys,
        ));
        Router {
            addr,
            connection_name,
            shutdown,
            task: Some(task),
            http: reqwest::Client::new(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// `GET path`: the status (0 when refused) and the JSON body (Null
    /// when not JSON).
    pub async fn get_json(&self, path: &str) -> (u16, serde_json::Value) {
        match self.http.get(self.url(path)).send().await {
            Ok(r) => {
                let status = r.status().as_u16();
                (status, r.json().await.unwrap_or(serde_json::Value::Null))
            }
            Err(_) => (0, serde_json::Value::Null),
        }
    }

    /// The status of `/readyz`.
    pub async fn readiness(&self) -> u16 {
        self.get_json("/readyz").await.0
    }

    /// Poll `GET path` until it answers `status`, failing after 10 s.
    pub async fn until_status(&self, path: &str, status: u16) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (got, body) = self.get_json(path).await;
            if got == status {
                return body;
            }
            assert!(
                Instant::now() < deadline,
                "{path} answered {got} {body}, never {status}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Wait until `/readyz` answers 200: connected, topology declared.
    pub async fn wait_ready(&self) {
        self.until_status("/readyz", 200).await;
    }

    pub async fn metrics(&self) -> String {
        self.http
            .get(self.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// The metrics page once it holds every one of `lines`. Counters
    /// the router moves after a broker confirm can trail what a test
    /// sees in a queue, so a test asking for exact counts waits for
    /// them (up to 10 s) instead of reading the page once.
    pub async fn metrics_showing(&self, lines: &[&str]) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let m = self.metrics().await;
            if lines.iter().all(|l| m.contains(l)) {
                return m;
            }
            let missing: Vec<&&str> = lines.iter().filter(|l| !m.contains(*l)).collect();
            assert!(Instant::now() < deadline, "never showed {missing:?}\n{m}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The value of the metric line starting with `series`.
    pub async fn metric(&self, series: &str) -> f64 {
        let text = self.metrics().await;
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or(0.0)
    }

    pub async fn stop(mut self) {
        self.shutdown.cancel();
        let task = self.task.take().expect("running");
        tokio::time::timeout(Duration::from_secs(15), task)
            .await
            .expect("the router stops within its grace period")
            .unwrap();
    }
}

/// A TCP forwarder to `target` that can be switched off: while off it
/// drops every new connection and cuts the ones it forwards, as a server
/// that went away would look to its clients.
pub struct Gate {
    pub addr: SocketAddr,
    on: std::sync::Arc<tokio::sync::watch::Sender<bool>>,
    task: tokio::task::JoinHandle<()>,
}

impl Gate {
    pub async fn start(target: &str, on: bool) -> Gate {
        let target: SocketAddr = target.parse().unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let on = std::sync::Arc::new(tokio::sync::watch::Sender::new(on));
        let state = std::sync::Arc::clone(&on);
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let mut rx = state.subscribe();
                if !*rx.borrow_and_update() {
                    continue; // dropped
                }
                tokio::spawn(async move {
                    let Ok(mut server) = tokio::net::TcpStream::connect(target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = rx.wait_for(|on| !*on) => {}
                    }
                });
            }
        });
        Gate { addr, on, task }
    }

    pub fn set(&self, on: bool) {
        self.on.send_replace(on);
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Close the router's connection from the broker side, as a broker restart
/// or a network failure would (only this router's: other suites share the
/// broker).
pub async fn close_connection_from_broker(connection_name: &str) {
    let needle = format!("{{\"connection_name\",\"{connection_name}\"}}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = tokio::process::Command::new("rabbitmqctl")
            .args([
                "list_connections",
                "-q",
                "--no-table-headers",
                "pid",
                "client_properties",
            ])
            .output()
            .await
            .expect("rabbitmqctl (run the tests as root on the broker's machine)");
        let listing = String::from_utf8_lossy(&out.stdout);
        let pids: Vec<&str> = listing
            .lines()
            .filter(|l| l.contains(&needle))
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        if !pids.is_empty() {
            for pid in pids {
                let status = tokio::process::Command::new("rabbitmqctl")
                    .args(["close_connection", pid, "test"])
                    .output()
                    .await
                    .unwrap();
                assert!(status.status.success(), "{status:?}");
            }
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no connection named {connection_name}: {listing}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn publication(id: &str, headers: FieldTable) -> BasicProperties {
    BasicProperties::default()
        .with_message_id(id.into())
        .with_content_type("application/json".into())
        .with_delivery_mode(2)
        .with_headers(headers)
}
