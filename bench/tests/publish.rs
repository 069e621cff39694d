//! `herald-bench publish` end to end, on a small scale, against the real standalone
//! `herald-gateway` (the workspace's build beside this bench's binary, or
//! `HERALD_GATEWAY_BIN`): every request is answered `202`, the figures add up, and the A/B
//! form pairs the two binaries round by round.

use std::process::Command;

use serde_json::Value;

mod common;

use common::gateway_bin;

fn publish(extra: &[&str]) -> Value {
    let gateway = gateway_bin();
    let output = Command::new(env!("CARGO_BIN_EXE_herald-bench"))
        .arg("publish")
        .arg("--gateway-bin")
        .arg(&gateway)
        .args(extra)
        .arg("--json")
        .output()
        .expect("herald-bench runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{}\n{stderr}", output.status);
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn pipelined_raw_requests_are_all_accepted_and_paired_with_a_baseline() {
    let gateway = gateway_bin();
    let report = publish(&[
        "--baseline-gateway-bin",
        gateway.to_str().unwrap(),
        "--notifications",
        "3000",
        "--warmup",
        "300",
        "--connections",
        "3",
        "--depth",
        "4",
        "--rounds",
        "2",
    ]);
    assert_eq!(report["complete"], true, "{report}");
    let runs = report["runs"].as_array().unwrap();
    let order: Vec<(&str, u64)> = runs
        .iter()
        .map(|r| (r["label"].as_str().unwrap(), r["round"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        order,
        [
            ("herald", 1),
            ("baseline", 1),
            ("baseline", 2),
            ("herald", 2)
        ],
        "A B, then B A"
    );
    for r in runs {
        assert_eq!(r["notifications"], 3000, "{r}");
        assert_eq!(r["requests"], 3000, "{r}");
        assert_eq!(r["refused"], 0, "{r}");
        assert!(r["server_cpu_seconds"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert_eq!(report["cpu_ratios"].as_array().unwrap().len(), 2);
}

#[test]
fn json_batches_count_every_notification() {
    let report = publish(&[
        "--body",
        "json",
        "--batch",
        "50",
        "--notifications",
        "5000",
        "--warmup",
        "500",
        "--rounds",
        "1",
    ]);
    assert_eq!(report["complete"], true, "{report}");
    let run = &report["runs"][0];
    assert_eq!(run["notifications"], 5000, "{run}");
    assert_eq!(run["requests"], 100, "{run}");
    assert_eq!(
        report["cpu_ratios"],
        Value::Array(vec![]),
        "no baseline, no ratio"
    );
}

#[test]
fn bad_arguments_are_refused_with_every_problem_named() {
    let output = Command::new(env!("CARGO_BIN_EXE_herald-bench"))
        .args(["publish", "--gateway-bin", "/nonexistent", "--batch", "10"])
        .output()
        .expect("herald-bench runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--body json"), "{stderr}");
}
