//! `herald-bench compare` end to end, on a small scale: the real standalone `herald-gateway`
//! (the workspace's build beside this bench's binary, or `HERALD_GATEWAY_BIN`), the real
//! Nchan (Debian's nginx and module), a real RabbitMQ node with Web STOMP of the run's own, and
//! real Socket.IO 4 and sockjs-node servers on Node.js (installed by `bench/peers/*/install.sh`
//! when missing), every scenario, one round: every session opens, every notification arrives,
//! and the report holds what it says.

use std::process::Command;

use serde_json::Value;

mod common;

use common::gateway_bin;

/// One of these tests at a time, across the processes nextest runs them in: each starts real
/// servers (RabbitMQ nodes among them, registering with the machine's one epmd) that share the
/// machine's cores, and two starting at once made a node's start fail in CI. The turn is a
/// Unix socket bound to an abstract name: one process holds it until the listener is dropped
/// (or the process ends, however it ends), the others poll for it.
fn one_at_a_time() -> std::os::unix::net::UnixListener {
    use std::os::linux::net::SocketAddrExt;
    let name =
        std::os::unix::net::SocketAddr::from_abstract_name("herald-bench-compare-tests").unwrap();
    loop {
        match std::os::unix::net::UnixListener::bind_addr(&name) {
            Ok(turn) => return turn,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            Err(e) => panic!("taking the turn: {e}"),
        }
    }
}

/// The systems a report ran, in order.
fn systems(report: &Value) -> Vec<&str> {
    report["systems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["system"].as_str().unwrap())
        .collect()
}

#[test]
fn compares_herald_with_every_peer() {
    let _turn = one_at_a_time();
    let out = std::env::temp_dir().join(format!("herald-compare-test-{}", std::process::id()));
    let output = Command::new(env!("CARGO_BIN_EXE_herald-bench"))
        .arg("compare")
        .arg("--gateway-bin")
        .arg(gateway_bin())
        // 1,000 sessions: enough CPU to show in /proc's 10 ms ticks for every server.
        .args(["--rounds", "1", "--idle-sessions", "1000"])
        .args(["--broadcast-sessions", "200", "--rates", "1000,4000"])
        .args(["--user-sessions", "200", "--user-rates", "300,1000"])
        .args(["--large-sessions", "50", "--large-bytes", "409600"])
        .args(["--seconds", "1", "--drain-timeout", "10", "--json"])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{}\n{stderr}", output.status);
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("compare.json")).unwrap()).unwrap();
    assert_eq!(report, written);
    assert_eq!(report["errors"], Value::Array(vec![]));

    let systems = systems(&report);
    assert_eq!(
        systems,
        ["herald", "nchan", "rabbitmq", "socketio", "sockjs"]
    );
    let version = |i: usize| report["systems"][i]["version"].as_str().unwrap().to_owned();
    assert!(version(1).contains("nginx/"), "{}", version(1));
    assert!(version(2).contains("rabbitmq-server"), "{}", version(2));
    assert!(version(3).starts_with("socket.io 4."), "{}", version(3));
    assert!(version(4).starts_with("sockjs 0."), "{}", version(4));
    assert!(version(4).contains(", node v"), "{}", version(4));

    let idle = report["idle"].as_array().unwrap();
    assert_eq!(idle.len(), 5);
    for run in idle {
        assert_eq!(run["opened"], 1000, "{run}");
        assert_eq!(run["failed"], 0, "{run}");
        assert!(run["connect_rate"].as_f64().unwrap() > 0.0, "{run}");
        assert!(run["bytes_per_session"].as_f64().unwrap() > 0.0, "{run}");
        assert!(run["server_cpu_seconds"].as_f64().unwrap() > 0.0, "{run}");
    }
    // nginx runs a master and its workers, RabbitMQ a script and its Erlang VM; Herald and
    // the Node peers one process.
    assert_eq!(idle[0]["server_processes"], 1);
    assert!(idle[1]["server_processes"].as_u64().unwrap() >= 2);
    assert!(idle[2]["server_processes"].as_u64().unwrap() >= 2);
    assert_eq!(idle[3]["server_processes"], 1);
    assert_eq!(idle[4]["server_processes"], 1);

    let steps = report["ramps"].as_array().unwrap();
    assert_eq!(steps.len(), 20);
    for step in steps {
        let rate = step["rate"].as_u64().unwrap();
        // Broadcast: 1,000 and 4,000 deliveries/s to 200 sessions are 5 and 20 publications
        // in 1 s, each to all; per user: 300 and 1,000 publications, one delivery each.
        let (publications, expected) = match step["audience"].as_str().unwrap() {
            "broadcast" => (rate / 200, rate),
            "per-user" => (rate, rate),
            other => panic!("audience {other}"),
        };
        assert_eq!(step["publications"], publications, "{step}");
        assert_eq!(step["refused"], 0, "{step}");
        assert_eq!(step["expected"], expected, "{step}");
        assert_eq!(step["delivered"], step["expected"], "{step}");
        assert_eq!(step["lost"], 0, "{step}");
        assert_eq!(step["latency"]["count"], step["delivered"], "{step}");
        assert!(step["latency"]["p50_ns"].as_u64().unwrap() > 0, "{step}");
    }

    let large = report["large"].as_array().unwrap();
    assert_eq!(large.len(), 5);
    for run in large {
        assert_eq!(run["delivered"], 50, "{run}");
        assert_eq!(run["damaged"], 0, "{run}");
        assert_eq!(run["lost"], 0, "{run}");
        assert!(run["seconds_until_all"].as_f64().unwrap() > 0.0, "{run}");
        assert!(
            run["pss_peak_bytes"].as_u64() >= run["pss_before_bytes"].as_u64(),
            "{run}"
        );
    }

    let markdown = std::fs::read_to_string(out.join("compare.md")).unwrap();
    assert!(
        markdown.contains("## One message of 409,600 B to 50 sessions"),
        "{markdown}"
    );
    assert!(
        markdown.contains(
            "| figure | herald | nchan | rabbitmq | socketio | sockjs | herald / nchan | \
             herald / rabbitmq | herald / socketio | herald / sockjs |"
        ),
        "{markdown}"
    );
    assert!(
        markdown.contains("memory per idle session, 1,000 sessions"),
        "{markdown}"
    );
    assert!(
        markdown.contains("latency p99 at 4,000 deliveries/s"),
        "{markdown}"
    );
    assert!(markdown.contains("Nchan checks no token"), "{markdown}");
    assert!(
        markdown.contains("socketio and sockjs check no token"),
        "{markdown}"
    );
    for chart in [
        "broadcast-latency-p99.svg",
        "per-user-cpu.svg",
        "idle-memory.svg",
    ] {
        let svg = std::fs::read_to_string(out.join(chart)).unwrap();
        assert!(
            svg.starts_with("<svg")
                && svg.contains(">rabbitmq</text>")
                && svg.contains(">socketio</text>")
                && svg.contains(">sockjs</text>"),
            "{chart}"
        );
        assert!(
            markdown.contains(&format!("![{chart}]({chart})")),
            "{markdown}"
        );
    }
    let _ = std::fs::remove_dir_all(&out);
}

/// The A/B form and the pipelined handshake: a baseline build (here the same binary) beside
/// Herald and RabbitMQ, idle sessions whose STOMP clients send `SUBSCRIBE` in the same message
/// as `CONNECT`: every session opens on all three, and the report says how they were opened.
#[test]
fn pipelined_sessions_open_beside_a_baseline_build() {
    let _turn = one_at_a_time();
    let gateway = gateway_bin();
    let output = Command::new(env!("CARGO_BIN_EXE_herald-bench"))
        .arg("compare")
        .arg("--gateway-bin")
        .arg(&gateway)
        .args(["--peers", "baseline,rabbitmq", "--baseline-gateway-bin"])
        .arg(&gateway)
        .args([
            "--scenarios",
            "idle",
            "--idle-sessions",
            "300",
            "--rounds",
            "1",
        ])
        .args(["--pipelined", "--json"])
        .output()
        .expect("herald-bench runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{}\n{stderr}", output.status);
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["errors"], Value::Array(vec![]));
    let systems = systems(&report);
    assert_eq!(systems, ["herald", "herald-baseline", "rabbitmq"]);
    let idle = report["idle"].as_array().unwrap();
    assert_eq!(idle.len(), 3);
    for run in idle {
        assert_eq!(run["opened"], 300, "{run}");
        assert_eq!(run["failed"], 0, "{run}");
    }
    let notes = report["unfairness"].to_string();
    assert!(notes.contains("--pipelined"), "{notes}");
    assert!(notes.contains("A B A B"), "{notes}");
}

/// The pids of `root`'s descendants whose command is `comm`.
fn descendants_named(root: u32, comm: &str) -> Vec<u32> {
    let mut parent = std::collections::HashMap::new();
    let mut name = std::collections::HashMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let ppid = stat[close + 2..]
            .split(' ')
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            parent.insert(pid, ppid);
            name.insert(pid, stat[open + 1..close].to_owned());
        }
    }
    let under = |mut pid: u32| {
        while let Some(&p) = parent.get(&pid) {
            if p == root {
                return true;
            }
            pid = p;
        }
        false
    };
    name.iter()
        .filter(|(pid, n)| n.as_str() == comm && under(**pid))
        .map(|(pid, _)| *pid)
        .collect()
}

/// SIGTERM while Nchan is measured (Herald's start fails at once here, so that Nchan comes
/// next): the bench stops nginx its own way (its master and workers all gone), still reports
/// what it has, says it was interrupted, and exits non-zero.
#[test]
fn sigterm_stops_the_server_being_measured_and_reports() {
    let _turn = one_at_a_time();
    use std::io::BufRead;
    let out = std::env::temp_dir().join(format!("herald-compare-term-{}", std::process::id()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_herald-bench"))
        .args([
            "compare",
            "--gateway-bin",
            "/bin/false",
            "--startup-timeout",
            "5",
        ])
        .args([
            "--peers",
            "nchan",
            "--scenarios",
            "broadcast",
            "--rounds",
            "1",
        ])
        .args([
            "--broadcast-sessions",
            "20",
            "--rates",
            "100",
            "--seconds",
            "600",
        ])
        .args(["--json", "--out"])
        .arg(&out)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    // Nchan is publishing: its step runs for ten minutes unless interrupted.
    loop {
        let mut line = String::new();
        let n = stderr.read_line(&mut line).unwrap();
        assert!(n > 0, "the bench ended before Nchan published:\n{seen}");
        seen.push_str(&line);
        if line.contains("nchan broadcast:") && line.contains("published") {
            break;
        }
    }
    let nginx = descendants_named(child.id(), "nginx");
    assert!(
        nginx.len() >= 2,
        "nginx's master and workers under the bench: {nginx:?}"
    );
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    // The rest of stderr, until the bench closes it by exiting.
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    let status = child.wait().unwrap();
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
    assert!(!status.success(), "{status}\n{seen}{rest}");
    assert!(rest.contains("interrupted"), "{rest}");
    for pid in &nginx {
        // Gone, or a zombie its parent has not reaped yet.
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let running = state
            .rfind(')')
            .and_then(|i| state[i + 2..].split(' ').next())
            .is_some_and(|s| s != "Z");
        assert!(!running, "nginx {pid} still runs after the bench: {state}");
    }
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let errors = report["errors"].to_string();
    assert!(errors.contains("interrupted"), "{errors}");
    assert!(
        errors.contains("herald"),
        "Herald's failed start is reported: {errors}"
    );
    let _ = std::fs::remove_dir_all(&out);
}
