//! Alerts end to end, against real receivers on 127.0.0.1: a local HTTP
//! server for the Slack-compatible webhook, `aiosmtpd` (from PyPI, in the
//! workspace's `.venv`, which `scripts/test.sh` installs from
//! `tests/python/requirements.txt`) for mail, and a `redis-server` of the
//! test's own that is killed and started again for the store watch.
//!
//! Dead letters are raised with [`Alerts::dead_letter`], as the callback
//! sender does. Nothing here waits for time: every condition is polled
//! against a deadline.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use herald_engine::callback::alert::config::{AlertsConfig, SmtpTls};
use herald_engine::callback::alert::metrics::AlertMetrics;
use herald_engine::callback::alert::{Alerts, DeadLetter, QUEUE};
use herald_engine::schedule::config::ScheduleConfig;
use herald_engine::schedule::metrics::DelayedMetrics;
use herald_engine::schedule::service::Delayed;
use herald_engine::schedule::store::redis::{RedisConfig, RedisStore};
use herald_engine::schedule::topics::Topics;
use herald_engine::task::Task;
use prometheus_client::registry::Registry;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Longest any expected event may take on a loaded machine.
const TIMEOUT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------
// Helpers.

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the engine crate sits in the workspace")
        .to_owned()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "herald-{tag}-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Poll `f` until it returns `Some`, or panic after [`TIMEOUT`].
async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The Prometheus text of `metrics`.
fn exposition(metrics: &AlertMetrics) -> String {
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
    out
}

/// `herald_callback_alerts_total{kind,channel,outcome}`, 0 when absent.
fn count(metrics: &AlertMetrics, kind: &str, channel: &str, outcome: &str) -> u64 {
    let key = format!(
        "herald_callback_alerts_total{{kind=\"{kind}\",channel=\"{channel}\",outcome=\"{outcome}\"}} "
    );
    exposition(metrics)
        .lines()
        .find_map(|l| l.strip_prefix(&key).map(|v| v.trim().parse().unwrap()))
        .unwrap_or(0)
}

/// An `aiosmtpd` server on a free loopback port, keeping what it receives
/// in a Maildir; killed on drop.
struct Smtp {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Smtp {
    fn start() -> Smtp {
        let python = workspace_root().join(".venv/bin/python");
        assert!(
            python.is_file(),
            "{} is missing: run scripts/test.sh once (it creates .venv and installs \
             tests/python/requirements.txt, aiosmtpd included), or: python3 -m venv .venv && \
             .venv/bin/pip install -r tests/python/requirements.txt",
            python.display()
        );
        let dir = temp_dir("smtp");
        for _ in 0..5 {
            let port = free_port();
            let log = std::fs::File::create(dir.join("aiosmtpd.log")).unwrap();
            let mut child = Command::new(&python)
                .args(["-m", "aiosmtpd", "-n", "-l"])
                .arg(format!("127.0.0.1:{port}"))
                .args(["-c", "aiosmtpd.handlers.Mailbox"])
                .arg(dir.join("maildir"))
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .expect("start aiosmtpd");
            let deadline = Instant::now() + TIMEOUT;
            while Instant::now() < deadline {
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return Smtp { child, port, dir };
                }
                if child.try_wait().unwrap().is_some() {
                    break; // the port was taken in between, or aiosmtpd is missing
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!(
            "aiosmtpd did not start (is it in .venv? pip install -r tests/python/requirements.txt):\n{}",
            std::fs::read_to_string(dir.join("aiosmtpd.log")).unwrap_or_default()
        );
    }

    /// Every mail received so far, line ends `\n`, quoted-printable soft
    /// breaks undone.
    fn mails(&self) -> Vec<String> {
        let Ok(dir) = std::fs::read_dir(self.dir.join("maildir/new")) else {
            return Vec::new();
        };
        dir.filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
            .map(|m| m.replace("\r\n", "\n").replace("=\n", ""))
            .collect()
    }

    /// The first mail containing every one of `parts`.
    async fn mail_with(&self, parts: &[&str]) -> String {
        eventually(&format!("a mail with {parts:?}"), || {
            let found = self
                .mails()
                .into_iter()
                .find(|m| parts.iter().all(|p| m.contains(p)));
            async move { found }
        })
        .await
    }
}

impl Drop for Smtp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A webhook receiver on 127.0.0.1: `POST /hook` takes JSON (and refuses
/// anything that is not `application/json`); `POST /fail` answers 500.
/// Every body received comes out of the channel, `/fail`'s too.
async fn webhook_receiver() -> (String, mpsc::Receiver<Value>) {
    let (tx, rx) = mpsc::channel(64);
    async fn hook(State(tx): State<mpsc::Sender<Value>>, Json(v): Json<Value>) -> StatusCode {
        let _ = tx.send(v).await;
        StatusCode::OK
    }
    async fn fail(State(tx): State<mpsc::Sender<Value>>, Json(v): Json<Value>) -> StatusCode {
        let _ = tx.send(v).await;
        StatusCode::INTERNAL_SERVER_ERROR
    }
    let app = axum::Router::new()
        .route("/hook", axum::routing::post(hook))
        .route("/fail", axum::routing::post(fail))
        .with_state(tx);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, rx)
}

/// The next webhook text, within [`TIMEOUT`].
async fn next_text(rx: &mut mpsc::Receiver<Value>) -> String {
    let v = tokio::time::timeout(TIMEOUT, rx.recv())
        .await
        .expect("a webhook POST in time")
        .expect("the receiver runs");
    let obj = v.as_object().expect("a JSON object");
    assert_eq!(obj.len(), 1, "only \"text\": {v}");
    obj["text"].as_str().expect("text is a string").to_owned()
}

/// Alerts to `webhook` and to `smtp` (no TLS: a local relay), at most one
/// message per kind per second; their task spawned until `shutdown`.
fn alerts(
    webhook: Option<String>,
    smtp: Option<&Smtp>,
    after_ms: u64,
    shutdown: &CancellationToken,
) -> (Alerts, AlertMetrics) {
    let config = AlertsConfig {
        webhook_url: webhook,
        smtp_host: smtp.map(|_| "127.0.0.1".to_owned()),
        smtp_port: smtp.map_or(587, |s| s.port),
        smtp_tls: SmtpTls::None,
        mail_from: smtp.map(|_| "Herald <herald@example.com>".to_owned()),
        mail_to: smtp
            .map(|_| {
                vec![
                    "ops@example.com".to_owned(),
                    "oncall@example.com".to_owned(),
                ]
            })
            .unwrap_or_default(),
        min_interval_ms: 1_000,
        store_unavailable_after_ms: after_ms,
        ..AlertsConfig::default()
    };
    assert_eq!(config.problems(), Vec::<String>::new());
    let metrics = AlertMetrics::default();
    let alerts = Alerts::new(&config, metrics.clone());
    let task = alerts.task().expect("a webhook or mail is set");
    assert!(alerts.task().is_none(), "the task is given once");
    tokio::spawn(Box::new(task).run(shutdown.clone()));
    (alerts, metrics)
}

fn dead(id: &str) -> DeadLetter {
    DeadLetter {
        id: id.into(),
        topic: Some("billing".into()),
        reason: "HTTP 500 Internal Server Error".into(),
        attempts: 10,
    }
}

// ---------------------------------------------------------------------------
// Dead letters.

/// The first dead letter goes out at once to both channels; the seven
/// that follow within the interval come as one summary when it is over,
/// the first five itemised and the rest counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_mailed_and_posted_and_a_flood_is_summarised() {
    let smtp = Smtp::start();
    let (base, mut posts) = webhook_receiver().await;
    let shutdown = CancellationToken::new();
    let (alerts, metrics) = alerts(Some(format!("{base}/hook")), Some(&smtp), 0, &shutdown);

    alerts.dead_letter(dead("n-1"));
    let text = next_text(&mut posts).await;
    assert_eq!(
        text,
        "Herald: notification n-1 (topic billing) is dead after 10 attempts: HTTP 500 Internal Server Error"
    );
    let mail = smtp
        .mail_with(&["Subject: Herald: dead letter n-1", &text])
        .await;
    assert!(mail.contains("From: Herald <herald@example.com>"), "{mail}");
    assert!(
        mail.contains("To: ops@example.com, oncall@example.com"),
        "{mail}"
    );

    for i in 2..=8 {
        alerts.dead_letter(dead(&format!("n-{i}")));
    }
    let summary = next_text(&mut posts).await;
    assert!(
        summary.starts_with("Herald: 7 dead letters since "),
        "{summary}"
    );
    for i in 2..=6 {
        assert!(summary.contains(&format!("- notification n-{i} (topic billing)")));
    }
    assert!(!summary.contains("n-7"), "only the first five are listed");
    assert!(
        summary.contains("\nand 2 more dead letters since "),
        "{summary}"
    );
    smtp.mail_with(&["Subject: Herald: 7 dead letters", "and 2 more dead letters"])
        .await;

    eventually("every dead letter counted as sent on both channels", || {
        let done = ["webhook", "mail"]
            .iter()
            .all(|c| count(&metrics, "dead_letter", c, "sent") == 8);
        async move { done.then_some(()) }
    })
    .await;
    assert_eq!(count(&metrics, "dead_letter", "log", "sent"), 8);
    assert_eq!(
        smtp.mails().len(),
        2,
        "one mail each: the first, the summary"
    );
    shutdown.cancel();
}

/// A webhook that answers 500 is counted as failed, once: no retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_send_is_logged_and_counted() {
    let (base, mut posts) = webhook_receiver().await;
    let shutdown = CancellationToken::new();
    let (alerts, metrics) = alerts(Some(format!("{base}/fail")), None, 0, &shutdown);
    alerts.dead_letter(dead("n-1"));
    next_text(&mut posts).await;
    eventually("the failure counted", || {
        let n = count(&metrics, "dead_letter", "webhook", "failed");
        async move { (n == 1).then_some(()) }
    })
    .await;
    assert_eq!(count(&metrics, "dead_letter", "webhook", "sent"), 0);
    shutdown.cancel();
}

/// Raising never blocks: with the task not running, the queue takes
/// [`QUEUE`] alerts and the rest are dropped and counted, each still
/// logged.
#[tokio::test]
async fn a_full_queue_drops_the_newest_and_counts_them() {
    let config = AlertsConfig {
        webhook_url: Some("http://127.0.0.1:9/hook".into()),
        ..AlertsConfig::default()
    };
    let metrics = AlertMetrics::default();
    let alerts = Alerts::new(&config, metrics.clone());
    for i in 0..QUEUE + 7 {
        alerts.dead_letter(dead(&format!("n-{i}")));
    }
    assert_eq!(metrics.dropped.get(), 7);
    assert_eq!(
        count(&metrics, "dead_letter", "log", "sent"),
        QUEUE as u64 + 7
    );
    assert!(exposition(&metrics).contains("herald_callback_alerts_dropped_total 7"));
}

// ---------------------------------------------------------------------------
// The store watch: Redis down, then back.

/// A redis-server on a free loopback port, no persistence; killed on drop.
struct Redis {
    child: Option<Child>,
    port: u16,
}

impl Redis {
    fn start() -> Redis {
        let mut r = Redis {
            child: None,
            port: free_port(),
        };
        r.spawn();
        r
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed (Debian: redis-server)");
        self.child = Some(child);
        let deadline = Instant::now() + TIMEOUT;
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The field report mailed when Redis was down: a maintenance round that
/// fails raises "unavailable" once (here at once: `after_ms` 0), more
/// failed rounds raise nothing more, and the first round that works again
/// raises "available again".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_is_mailed_once_and_so_is_its_recovery() {
    let smtp = Smtp::start();
    let (base, mut posts) = webhook_receiver().await;
    let shutdown = CancellationToken::new();
    let (alerts, metrics) = alerts(Some(format!("{base}/hook")), Some(&smtp), 0, &shutdown);
    let mut redis = Redis::start();
    let store = RedisStore::connect(RedisConfig {
        prefix: format!("herald-alerts-{:08x}", rand::random::<u32>()),
        connect_timeout: Duration::from_millis(500),
        response_timeout: Duration::from_millis(500),
        operation_timeout: Duration::from_secs(1),
        ..RedisConfig::single(format!("redis://127.0.0.1:{}", redis.port))
    })
    .await
    .expect("connect to the test's Redis");
    let schedule = ScheduleConfig::default();
    let topics = Topics::new(&schedule, Vec::new());
    let delayed = Delayed::with_topics(
        schedule,
        Arc::new(store),
        topics,
        DelayedMetrics::default(),
        alerts.clone(),
    );
    delayed.maintenance_round().await;
    assert_eq!(count(&metrics, "store_unavailable", "log", "sent"), 0);

    redis.kill9();
    delayed.maintenance_round().await;
    let text = next_text(&mut posts).await;
    assert!(
        text.starts_with("Herald: the delayed-notification store has been failing since "),
        "{text}"
    );
    smtp.mail_with(&[
        "Subject: Herald: delayed store unavailable",
        "has been failing since",
    ])
    .await;
    delayed.maintenance_round().await;
    assert_eq!(
        count(&metrics, "store_unavailable", "log", "sent"),
        1,
        "still down: no second alert"
    );

    redis.spawn();
    eventually("a round that works again", || {
        let delayed = delayed.clone();
        let metrics = metrics.clone();
        async move {
            delayed.maintenance_round().await;
            (count(&metrics, "store_recovered", "log", "sent") == 1).then_some(())
        }
    })
    .await;
    let text = next_text(&mut posts).await;
    assert!(
        text.starts_with("Herald: the delayed-notification store is available again at "),
        "{text}"
    );
    smtp.mail_with(&["Subject: Herald: delayed store available again"])
        .await;
    eventually("both store alerts counted as sent", || {
        let done = ["webhook", "mail"].iter().all(|c| {
            count(&metrics, "store_unavailable", c, "sent") == 1
                && count(&metrics, "store_recovered", c, "sent") == 1
        });
        async move { done.then_some(()) }
    })
    .await;
    shutdown.cancel();
}
