//! The arguments of `herald-bench callbacks` with every default resolved and checked, and what
//! follows from them alone (pure): the plan of a run, the order of the runs, the goals.

use std::time::Duration;

use super::args::{CallbacksArgs, Peer, Scenario};
use crate::harness::report::grouped;
use crate::scheduled::plan::{Dues, Plan};
use crate::scheduled::system::{SystemSettings, Target};

/// Issue 17's goals.
pub(crate) const THROUGHPUT_GOAL: f64 = 20_000.0;
pub(crate) const LATENESS_GOAL_P99_MS: f64 = 20.0;
pub(crate) const HERD_GOAL_MS: u64 = 5_000;
/// Herald against BullMQ: throughput at least twice, p99 lateness at most a tenth.
pub(crate) const THROUGHPUT_RATIO_GOAL: f64 = 2.0;
pub(crate) const LATENESS_RATIO_GOAL: f64 = 10.0;
/// The topic every Herald run registers and publishes to (BullMQ's calls name it too).
pub(crate) const TOPIC: &str = "bench.callbacks";
/// The topic's signing secret (Standard Webhooks `whsec_` form); the BullMQ worker signs with
/// the same.
pub(crate) const SIGNING_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// Herald's default `publish.max_batch`.
const MAX_BATCH: u64 = 1_000;
/// Rounds at most (each is a few runs of a few seconds to a minute).
const MAX_RUNS: usize = 20;

/// One of the two things measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Side {
    Herald,
    Bullmq,
}

impl Side {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Side::Herald => "herald",
            Side::Bullmq => "bullmq",
        }
    }
}

/// Herald's `[callbacks]`: the receiver is on loopback, and `per_host` calls at once to it.
fn callbacks_section(per_host: usize) -> toml::Table {
    let mut t = toml::Table::new();
    t.insert("allow_private_networks".into(), true.into());
    t.insert(
        "max_per_host".into(),
        i64::try_from(per_host).unwrap_or(i64::MAX).into(),
    );
    t
}

/// The arguments with every default resolved and checked.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) scenario: Scenario,
    pub(crate) peer: Peer,
    pub(crate) runs: usize,
    pub(crate) system: SystemSettings,
    pub(crate) count: u64,
    pub(crate) rate: u64,
    pub(crate) lead_ms: u64,
    pub(crate) receiver_delay: Duration,
    pub(crate) concurrency: usize,
    /// Herald's `[callbacks] max_per_host`.
    pub(crate) per_host: usize,
    /// Whether Herald also delivers each to the browsers (`--with-browsers`).
    pub(crate) browsers: bool,
    pub(crate) payload_bytes: usize,
    pub(crate) batch: u64,
    pub(crate) connections: usize,
    pub(crate) drain_timeout: Duration,
    pub(crate) peer_dir: std::path::PathBuf,
    pub(crate) node: std::path::PathBuf,
    pub(crate) npm: std::path::PathBuf,
    pub(crate) peer_log: Option<std::path::PathBuf>,
    pub(crate) json: bool,
}

impl Settings {
    /// Resolves the defaults of `a` and checks everything before anything starts.
    pub(crate) fn from_args(a: &CallbacksArgs) -> Result<Self, String> {
        let count = match (a.scenario, a.count) {
            (Scenario::Lateness, Some(_)) => {
                return Err("lateness makes --rate x --seconds callbacks; --count is for the other scenarios".into());
            }
            (Scenario::Lateness, None) => {
                if a.rate == 0 || a.seconds == 0 {
                    return Err("--rate and --seconds must be at least 1".into());
                }
                a.rate.saturating_mul(a.seconds)
            }
            (_, Some(n)) => n,
            (Scenario::Throughput, None) => 50_000,
            (Scenario::Herd, None) => 100_000,
        };
        if count == 0 {
            return Err("--count must be at least 1".into());
        }
        if a.runs == 0 || a.runs > MAX_RUNS {
            return Err(format!("--runs must be between 1 and {MAX_RUNS}"));
        }
        if a.batch == 0 || a.batch > MAX_BATCH {
            return Err(format!(
                "--batch must be between 1 and {MAX_BATCH} (Herald's publish.max_batch)"
            ));
        }
        if a.connections == 0 || a.connections > 64 {
            return Err("--connections must be between 1 and 64".into());
        }
        if a.per_host == 0 || a.per_host > 4_096 {
            return Err("--per-host must be between 1 and 4096 (Herald's max_per_host)".into());
        }
        let concurrency = a.concurrency.unwrap_or(a.per_host);
        if concurrency == 0 || concurrency > 10_000 {
            return Err("--concurrency must be between 1 and 10000".into());
        }
        if a.payload_bytes < 32 || a.payload_bytes > 64 * 1024 {
            return Err("--payload-bytes must be between 32 and 65536".into());
        }
        let lead_ms = a.lead_ms.unwrap_or(5_000 + count / 5);
        if lead_ms < 1_000 {
            return Err("--lead-ms must be at least 1000".into());
        }
        let herald = a.peer != Peer::Bullmq;
        match a.target {
            Target::Standalone if herald && a.gateway_bin.is_none() => {
                return Err("--target standalone needs --gateway-bin".into());
            }
            Target::Router if herald && a.router_bin.is_none() => {
                return Err("--target router needs --router-bin".into());
            }
            _ => {}
        }
        Ok(Self {
            scenario: a.scenario,
            peer: a.peer,
            runs: a.runs,
            system: SystemSettings {
                target: a.target,
                router_bin: a.router_bin.clone(),
                gateway_bin: a.gateway_bin.clone(),
                amqp_url: a.amqp_url.clone(),
                redis_url: a.redis_url.clone(),
                schedule: crate::harness::configs::parse_settings(&a.schedule)
                    .map_err(|e| format!("--schedule {e}"))?,
                callbacks: callbacks_section(a.per_host),
                startup_timeout: a.startup_timeout,
                router_log: a.router_log.clone(),
                gateway_log: a.gateway_log.clone(),
            },
            count,
            rate: a.rate,
            lead_ms,
            receiver_delay: Duration::from_millis(a.receiver_delay_ms),
            concurrency,
            per_host: a.per_host,
            browsers: a.with_browsers,
            payload_bytes: a.payload_bytes,
            batch: a.batch,
            connections: a.connections,
            drain_timeout: Duration::from_secs(a.drain_timeout),
            peer_dir: a.peer_dir.clone(),
            node: a.node.clone(),
            npm: a.npm.clone(),
            peer_log: a.peer_log.clone(),
            json: a.json,
        })
    }

    /// The runs in order: round by round, Herald then BullMQ (A B A B ...), as `--peer` asks.
    pub(crate) fn order(&self) -> Vec<(usize, Side)> {
        let sides: &[Side] = match self.peer {
            Peer::Herald => &[Side::Herald],
            Peer::Bullmq => &[Side::Bullmq],
            Peer::Both => &[Side::Herald, Side::Bullmq],
        };
        (0..self.runs)
            .flat_map(|round| sides.iter().map(move |&side| (round, side)))
            .collect()
    }

    /// A run's plan, its due times counted from `now_ms` (when publishing starts).
    pub(crate) fn plan(&self, now_ms: u64) -> Plan {
        let start_ms = now_ms + self.lead_ms;
        let dues = match self.scenario {
            Scenario::Throughput | Scenario::Herd => Dues::Herd { at_ms: start_ms },
            Scenario::Lateness => Dues::Steady {
                start_ms,
                rate: self.rate,
            },
        };
        Plan {
            first: 0,
            count: self.count,
            dues,
        }
    }

    /// The plan in words.
    pub(crate) fn describe_plan(&self) -> String {
        let lead = self.lead_ms as f64 / 1000.0;
        match self.scenario {
            Scenario::Throughput | Scenario::Herd => format!(
                "{} callbacks all due at one instant, {lead:.1} s after publishing starts",
                grouped(self.count as f64)
            ),
            Scenario::Lateness => format!(
                "{} callbacks due at {}/s for {} s, from {lead:.1} s after publishing starts",
                grouped(self.count as f64),
                grouped(self.rate as f64),
                self.count / self.rate.max(1)
            ),
        }
    }

    /// The herd goal applies to `herd` only.
    pub(crate) fn herd_goal_ms(&self) -> Option<u64> {
        (self.scenario == Scenario::Herd).then_some(HERD_GOAL_MS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Result<Settings, String> {
        use clap::Parser as _;
        let mut argv = vec!["herald-bench", "callbacks", "--gateway-bin", "g"];
        argv.extend_from_slice(extra);
        match crate::cli::Cli::try_parse_from(argv).unwrap().command {
            crate::cli::Command::Callbacks(a) => Settings::from_args(&a),
            _ => unreachable!(),
        }
    }

    #[test]
    fn defaults_follow_the_scenario() {
        let s = args(&["--scenario", "throughput"]).unwrap();
        assert_eq!((s.count, s.lead_ms, s.runs), (50_000, 15_000, 3));
        assert_eq!(s.system.target, Target::Standalone);
        assert_eq!(
            s.system.callbacks.get("allow_private_networks"),
            Some(&toml::Value::Boolean(true)),
            "the receiver is on loopback"
        );
        assert_eq!(
            s.concurrency, s.per_host,
            "BullMQ runs as many at once as Herald"
        );
        let s = args(&["--scenario", "herd"]).unwrap();
        assert_eq!((s.count, s.lead_ms), (100_000, 25_000));
        assert_eq!(s.herd_goal_ms(), Some(5_000));
        let s = args(&["--scenario", "lateness"]).unwrap();
        assert_eq!((s.count, s.rate, s.concurrency), (50_000, 5_000, 64));
        assert_eq!(s.herd_goal_ms(), None);
    }

    #[test]
    fn runs_alternate_herald_and_bullmq() {
        let s = args(&["--scenario", "herd", "--runs", "2"]).unwrap();
        assert_eq!(
            s.order(),
            [
                (0, Side::Herald),
                (0, Side::Bullmq),
                (1, Side::Herald),
                (1, Side::Bullmq)
            ]
        );
        let s = args(&["--scenario", "herd", "--runs", "2", "--peer", "bullmq"]).unwrap();
        assert_eq!(s.order(), [(0, Side::Bullmq), (1, Side::Bullmq)]);
    }

    #[test]
    fn plans_per_scenario() {
        let now = 1_800_000_000_000;
        let s = args(&["--scenario", "lateness", "--lead-ms", "2000"]).unwrap();
        let p = s.plan(now);
        assert_eq!(p.first_due_ms(), now + 2_000);
        assert_eq!(p.last_due_ms(), now + 2_000 + 9_999);
        let s = args(&["--scenario", "throughput", "--count", "10"]).unwrap();
        let p = s.plan(now);
        assert_eq!(p.first_due_ms(), p.last_due_ms());
    }

    #[test]
    fn bad_arguments_are_refused() {
        for bad in [
            &["--scenario", "lateness", "--count", "5"][..],
            &["--scenario", "lateness", "--rate", "0"],
            &["--scenario", "herd", "--count", "0"],
            &["--scenario", "herd", "--runs", "0"],
            &["--scenario", "herd", "--batch", "1001"],
            &["--scenario", "herd", "--concurrency", "0"],
            &["--scenario", "herd", "--payload-bytes", "10"],
            &["--scenario", "herd", "--lead-ms", "10"],
            &["--scenario", "herd", "--target", "router"],
        ] {
            assert!(args(bad).is_err(), "{bad:?}");
        }
        use clap::Parser as _;
        let cli = crate::cli::Cli::try_parse_from([
            "herald-bench",
            "callbacks",
            "--scenario",
            "herd",
            "--peer",
            "bullmq",
        ])
        .unwrap();
        let crate::cli::Command::Callbacks(a) = cli.command else {
            unreachable!()
        };
        assert!(
            Settings::from_args(&a).is_ok(),
            "BullMQ alone needs no Herald binary"
        );
    }
}
