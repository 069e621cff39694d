//! One sample of the deployment: every process's RSS, open descriptors and threads (`/proc`),
//! the Herald processes' own gauges (`/metrics`), Redis (`INFO memory`, `DBSIZE`) and each
//! root's queues (`rabbitmqctl list_queues`).
//!
//! A sample is a flat map of series names to values; a name is `group/member` (the group is
//! one panel of the plot: `rss_mib/edge1`, `fds/router2`, `redis/dbsize`). A source that does
//! not answer leaves its series out of that sample (and says so once per sample on stderr):
//! a gap in a series, not a zero that would bend its slope.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use crate::client::api::ApiConnection;
use crate::harness::rss::parse_status_bytes;

/// How long one rabbitmqctl call may take.
const RABBITMQCTL_TIMEOUT: Duration = Duration::from_secs(60);
const MIB: f64 = 1024.0 * 1024.0;

/// Series name -> value.
pub(crate) type Values = BTreeMap<String, f64>;

/// A process to watch.
#[derive(Debug, Clone)]
pub(crate) struct Process {
    pub(crate) name: String,
    pub(crate) pid: u32,
}

/// RSS (MiB), open descriptors and threads of `p`, into `out`; false if it is gone.
pub(crate) fn sample_process(p: &Process, out: &mut Values) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", p.pid)) else {
        return false;
    };
    if let Some(rss) = parse_status_bytes(&status, "VmRSS") {
        out.insert(format!("rss_mib/{}", p.name), rss as f64 / MIB);
    }
    if let Some(threads) = status_number(&status, "Threads") {
        out.insert(format!("threads/{}", p.name), threads as f64);
    }
    if let Ok(dir) = std::fs::read_dir(format!("/proc/{}/fd", p.pid)) {
        out.insert(format!("fds/{}", p.name), dir.count() as f64);
    }
    true
}

/// A plain number field of `/proc/PID/status` (`Threads:\t12`).
pub(crate) fn status_number(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().parse().ok())
}

/// The sum of every `herald_*` gauge over its labels, from Prometheus text.
pub(crate) fn gauges(text: &str) -> BTreeMap<String, f64> {
    let mut kinds: BTreeMap<&str, bool> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            if let (Some(name), Some(kind)) = (parts.next(), parts.next()) {
                kinds.insert(name, kind == "gauge");
            }
        }
    }
    let mut out = BTreeMap::new();
    for line in text.lines() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let name = &line[..name_end];
        if !name.starts_with("herald_") || kinds.get(name) != Some(&true) {
            continue;
        }
        let Some(value) = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        *out.entry(name.to_owned()).or_insert(0.0) += value;
    }
    out
}

/// The `herald_*` gauges of the process at `addr` (`GET /metrics`).
pub(crate) async fn metrics(
    addr: SocketAddr,
    api_key: &str,
) -> Result<BTreeMap<String, f64>, String> {
    let mut conn = ApiConnection::new(addr, api_key);
    let r = conn
        .get("/metrics")
        .await
        .map_err(|e| format!("GET http://{addr}/metrics: {e}"))?;
    if r.status != 200 {
        return Err(format!("GET http://{addr}/metrics: {}", r.status));
    }
    Ok(gauges(&String::from_utf8_lossy(&r.body)))
}

/// `used_memory` (MiB) and `DBSIZE` of the Redis at `url`.
pub(crate) async fn redis(url: &str, out: &mut Values) -> Result<(), String> {
    let client = redis::Client::open(url).map_err(|e| format!("redis {url}: {e}"))?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| format!("redis {url}: {e}"))?;
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut conn)
        .await
        .map_err(|e| format!("redis INFO memory: {e}"))?;
    let used = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .ok_or("INFO memory has no used_memory")?;
    let keys: u64 = redis::cmd("DBSIZE")
        .query_async(&mut conn)
        .await
        .map_err(|e| format!("redis DBSIZE: {e}"))?;
    out.insert("redis/used_memory_mib".into(), used / MIB);
    out.insert("redis/keys".into(), keys as f64);
    Ok(())
}

/// The queues of RabbitMQ node `node` (name, messages), by `rabbitmqctl` with the deployment's
/// `HOME` (its Erlang cookie).
pub(crate) async fn rabbit_queues(home: &Path, node: &str) -> Result<Vec<(String, u64)>, String> {
    let ctl = if Path::new("/usr/lib/rabbitmq/bin/rabbitmqctl").exists() {
        "/usr/lib/rabbitmq/bin/rabbitmqctl"
    } else {
        "rabbitmqctl"
    };
    let run = tokio::process::Command::new(ctl)
        .env("HOME", home)
        .args([
            "-n",
            node,
            "-q",
            "list_queues",
            "--no-table-headers",
            "name",
            "messages",
        ])
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(RABBITMQCTL_TIMEOUT, run)
        .await
        .map_err(|_| format!("rabbitmqctl -n {node}: no answer in {RABBITMQCTL_TIMEOUT:?}"))?
        .map_err(|e| format!("{ctl}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "rabbitmqctl -n {node} list_queues: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(parse_queues(&String::from_utf8_lossy(&out.stdout)))
}

/// `name<TAB>messages` lines.
pub(crate) fn parse_queues(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|l| {
            let (name, n) = l.trim().rsplit_once(char::is_whitespace)?;
            Some((name.trim().to_owned(), n.parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_numbers() {
        let s = "Name:\therald-gateway\nThreads:\t17\nVmRSS:\t  2048 kB\n";
        assert_eq!(status_number(s, "Threads"), Some(17));
        assert_eq!(status_number(s, "Missing"), None);
    }

    #[test]
    fn gauges_are_summed_over_labels_and_counters_left_out() {
        let text = "# HELP herald_sessions_open Open sessions.\n\
                    # TYPE herald_sessions_open gauge\n\
                    herald_sessions_open{transport=\"websocket\"} 3\n\
                    herald_sessions_open{transport=\"xhr_streaming\"} 2\n\
                    # TYPE herald_mailboxes gauge\n\
                    herald_mailboxes 7\n\
                    # TYPE herald_sessions_opened_total counter\n\
                    herald_sessions_opened_total 99\n\
                    # TYPE process_open_fds gauge\n\
                    process_open_fds 12\n";
        let g = gauges(text);
        assert_eq!(g.len(), 2);
        assert_eq!(g["herald_sessions_open"], 5.0);
        assert_eq!(g["herald_mailboxes"], 7.0);
    }

    #[test]
    fn queue_lines() {
        let q = parse_queues("herald.publications\t0\nherald.edge.edge1\t12\n\nbad line x\n");
        assert_eq!(
            q,
            vec![
                ("herald.publications".to_owned(), 0),
                ("herald.edge.edge1".to_owned(), 12)
            ]
        );
    }
}
