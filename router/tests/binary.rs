//! The `herald-router` binary: configuration errors, and SIGTERM against
//! the real RabbitMQ (127.0.0.1:5672 or `HERALD_TEST_AMQP_URL`).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_herald-router");

#[test]
fn a_bad_configuration_lists_every_problem_and_exits_78() {
    let dir = std::env::temp_dir().join(format!("herald-router-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.toml");
    std::fs::write(
        &file,
        "[amqp]\nurl = \"http://x\"\nprefetch = 0\n[amqp.topology]\nedges_exchange = \"herald\"\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .arg("--config")
        .arg(&file)
        .env_remove("HERALD_ROUTER_API_KEYS")
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(out.status.code(), Some(78), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    for words in [
        "api_keys",
        "amqp.url",
        "amqp.prefetch",
        "must all be different exchanges",
    ] {
        assert!(err.contains(words), "{words}: {err}");
    }
    assert_eq!(
        err.lines().filter(|l| l.starts_with("  - ")).count(),
        4,
        "{err}"
    );

    let out = Command::new(BIN)
        .args(["--config", "/nonexistent/router.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78));
}

#[test]
fn check_config_says_ok_or_lists_the_problems_and_version_names_the_commit() {
    let ok = Command::new(BIN)
        .args(["--check-config", "--api-key", "k"])
        .output()
        .unwrap();
    assert_eq!(ok.status.code(), Some(0), "{ok:?}");
    let said = String::from_utf8_lossy(&ok.stdout);
    assert!(said.contains("configuration OK"), "{said}");
    let bad = Command::new(BIN)
        .arg("--check-config")
        .env_remove("HERALD_ROUTER_API_KEYS")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(78), "{bad:?}");
    assert!(String::from_utf8_lossy(&bad.stderr).contains("api_keys"));
    let version = Command::new(BIN).arg("--version").output().unwrap();
    let version = String::from_utf8_lossy(&version.stdout);
    assert!(
        version.starts_with(concat!(
            "herald-router ",
            env!("CARGO_PKG_VERSION"),
            " (commit "
        )),
        "{version}"
    );
}

#[test]
fn sigterm_closes_the_broker_connection_and_exits_0() {
    let suffix = format!(".test-{:012x}", rand::random::<u64>() >> 16);
    let dir = std::env::temp_dir().join(format!("herald-router{suffix}"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("router.toml");
    let t = herald_amqp::Topology::with_suffix(&suffix);
    std::fs::write(
        &file,
        format!(
            "listen = \"127.0.0.1:0\"\napi_keys = [\"k\"]\n[amqp]\nurl = \"{}\"\n[amqp.topology]\nexchange = \"{}\"\nqueue = \"{}\"\ndead_exchange = \"{}\"\ndead_queue = \"{}\"\nedges_exchange = \"{}\"\n",
            std::env::var("HERALD_TEST_AMQP_URL")
                .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into()),
            t.exchange,
            t.queue,
            t.dead_exchange,
            t.dead_queue,
            t.edges_exchange
        ),
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .arg("--config")
        .arg(&file)
        .env("RUST_LOG", "info")
        .stderr(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Logs go to stdout (tracing's fmt writer).
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut log = String::new();
    while !log.contains("consuming publications") {
        assert!(Instant::now() < deadline, "never consumed: {log}");
        match lines.next() {
            Some(Ok(line)) => {
                log.push_str(&line);
                log.push('\n');
            }
            _ => panic!("exited early: {log}"),
        }
    }
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "still running after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    for line in lines.map_while(Result::ok) {
        log.push_str(&line);
        log.push('\n');
    }
    std::fs::remove_dir_all(&dir).unwrap();
    cleanup(&t);
    assert_eq!(status.code(), Some(0), "{log}");
    for words in [
        "SIGTERM",
        "stopping the AMQP intake",
        "in-flight forwards finished",
        "closed the broker connection",
    ] {
        assert!(log.contains(words), "{words}: {log}");
    }
}

/// Remove the topology the router declared.
fn cleanup(t: &herald_amqp::Topology) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let url = std::env::var("HERALD_TEST_AMQP_URL")
            .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into());
        let c = lapin::Connection::connect(&url, lapin::ConnectionProperties::default())
            .await
            .unwrap();
        let channel = c.create_channel().await.unwrap();
        t.delete(&channel).await.unwrap();
        let _ = c.close(200, "OK".into()).await;
    });
}

#[test]
fn print_config_shows_the_environment_without_its_secrets() {
    let out = Command::new(BIN)
        .arg("--print-config")
        .env_clear()
        .env("HERALD_ROUTER_API_KEYS", "api-key-from-the-environment")
        .env(
            "HERALD_ROUTER_AMQP__URL",
            "amqp://herald:password-from-the-environment@127.0.0.1:5672/%2f",
        )
        .env("HERALD_ROUTER_AMQP__PREFETCH", "32")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("prefetch = 32"), "{text}");
    assert!(
        text.contains("amqp://herald:<redacted>@127.0.0.1:5672/%2f"),
        "{text}"
    );
    assert!(!text.contains("from-the-environment"), "{text}");
}
