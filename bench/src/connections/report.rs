//! The result of `herald-bench connections`, as one JSON object (`--json`) or as text.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::harness::rss::human_bytes;

/// Gateway memory figures, present when the gateway pid is known.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Memory {
    pub(crate) gateway_pid: u32,
    /// VmRSS before any worker started.
    pub(crate) rss_before_bytes: u64,
    /// VmRSS once every session was up and the RSS settled.
    pub(crate) rss_after_bytes: u64,
    /// False if the RSS was still moving by 1% or more when the settle deadline passed.
    pub(crate) rss_settled: bool,
    /// `(after - before) / opened`; absent when no session opened.
    pub(crate) bytes_per_session: Option<f64>,
}

impl Memory {
    pub(crate) fn new(
        gateway_pid: u32,
        before: u64,
        after: u64,
        settled: bool,
        opened: u64,
    ) -> Self {
        let bytes_per_session =
            (opened > 0).then(|| (after as f64 - before as f64) / opened as f64);
        Self {
            gateway_pid,
            rss_before_bytes: before,
            rss_after_bytes: after,
            rss_settled: settled,
            bytes_per_session,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ConnectionsReport {
    pub(crate) command: &'static str,
    /// `websocket`, `sockjs-websocket` or `xhr-streaming`.
    pub(crate) transport: &'static str,
    pub(crate) url: String,
    pub(crate) processes: usize,
    pub(crate) sessions_requested: u64,
    pub(crate) sessions_opened: u64,
    pub(crate) sessions_failed: u64,
    /// Failure counts by reason (empty when all opened).
    pub(crate) failures: BTreeMap<String, u64>,
    /// From the first handshake started to the last one finished, across workers.
    pub(crate) connect_seconds: f64,
    /// `sessions_opened / connect_seconds`.
    pub(crate) connect_rate: f64,
    /// Flattened into the top-level object; absent without a gateway pid.
    #[serde(flatten)]
    pub(crate) memory: Option<Memory>,
}

impl ConnectionsReport {
    pub(crate) fn connect_rate(opened: u64, seconds: f64) -> f64 {
        if seconds > 0.0 {
            opened as f64 / seconds
        } else {
            0.0
        }
    }

    pub(crate) fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    pub(crate) fn to_text(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = writeln!(out, "transport    {} ({})", self.transport, self.url);
        let _ = writeln!(
            out,
            "sessions     {} opened, {} failed (of {}, over {} process{})",
            self.sessions_opened,
            self.sessions_failed,
            self.sessions_requested,
            self.processes,
            if self.processes == 1 { "" } else { "es" }
        );
        let _ = writeln!(
            out,
            "connect      {:.2} s, {:.0} sessions/s",
            self.connect_seconds, self.connect_rate
        );
        match &self.memory {
            Some(m) => {
                let _ = writeln!(
                    out,
                    "gateway RSS  {} before, {} after{} (pid {})",
                    human_bytes(m.rss_before_bytes as f64),
                    human_bytes(m.rss_after_bytes as f64),
                    if m.rss_settled { "" } else { " (still moving)" },
                    m.gateway_pid
                );
                match m.bytes_per_session {
                    Some(b) => {
                        let _ = writeln!(out, "per session  {b:.0} bytes ({})", human_bytes(b));
                    }
                    None => {
                        let _ = writeln!(out, "per session  - (no session opened)");
                    }
                }
            }
            None => {
                let _ = writeln!(
                    out,
                    "gateway RSS  not measured (give --gateway-pid or --spawn-gateway)"
                );
            }
        }
        if !self.failures.is_empty() {
            let _ = writeln!(out, "failures");
            for (reason, count) in &self.failures {
                let _ = writeln!(out, "  {count:>8}  {reason}");
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(memory: Option<Memory>) -> ConnectionsReport {
        ConnectionsReport {
            command: "connections",
            transport: "websocket",
            url: "ws://127.0.0.1:8080/ws".into(),
            processes: 1,
            sessions_requested: 2000,
            sessions_opened: 1998,
            sessions_failed: 2,
            failures: BTreeMap::from([("timeout during receipt".to_owned(), 2)]),
            connect_seconds: 1.25,
            connect_rate: ConnectionsReport::connect_rate(1998, 1.25),
            memory,
        }
    }

    #[test]
    fn bytes_per_session() {
        let m = Memory::new(7, 10_000_000, 30_000_000, true, 2000);
        assert_eq!(m.bytes_per_session, Some(10_000.0));
        // RSS can shrink (allocator returning memory); report it as it is.
        let m = Memory::new(7, 30_000_000, 29_000_000, true, 1000);
        assert_eq!(m.bytes_per_session, Some(-1000.0));
        assert_eq!(Memory::new(7, 1, 2, true, 0).bytes_per_session, None);
    }

    #[test]
    fn json_is_one_flat_object() {
        let r = report(Some(Memory::new(42, 1024, 2048 + 1024, false, 1998)));
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(v["command"], "connections");
        assert_eq!(v["transport"], "websocket");
        assert_eq!(v["sessions_opened"], 1998);
        assert_eq!(v["sessions_failed"], 2);
        assert_eq!(v["failures"]["timeout during receipt"], 2);
        assert_eq!(v["connect_rate"], 1598.4);
        assert_eq!(v["gateway_pid"], 42);
        assert_eq!(v["rss_before_bytes"], 1024);
        assert_eq!(v["rss_after_bytes"], 3072);
        assert_eq!(v["rss_settled"], false);
        assert!(!r.to_json().contains('\n'));

        let v: serde_json::Value = serde_json::from_str(&report(None).to_json()).unwrap();
        assert!(v.get("rss_before_bytes").is_none());
    }

    #[test]
    fn text_report() {
        let text = report(Some(Memory::new(42, 10 << 20, 30 << 20, true, 1998))).to_text();
        assert!(text.starts_with("transport    websocket (ws://127.0.0.1:8080/ws)\n"));
        assert!(text.contains("1998 opened, 2 failed (of 2000, over 1 process)"));
        assert!(text.contains("1.25 s, 1598 sessions/s"));
        assert!(text.contains("10.0 MiB before, 30.0 MiB after (pid 42)"));
        assert!(text.contains("per session  10496 bytes (10.3 KiB)"));
        assert!(text.contains("       2  timeout during receipt"));
        assert!(report(None).to_text().contains("not measured"));
    }
}
