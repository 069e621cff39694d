//! The arguments of `herald-bench delayed` with every default resolved and checked, and what
//! follows from them alone (pure): the worker split, the main plan, the plan in words, the goal.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use serde::Serialize;

use super::args::{DelayedArgs, Scenario};
use crate::harness::outcome::BenchError;
use crate::harness::plan::WorkerPlan;
use crate::harness::report::grouped;
use crate::scheduled::delivery::Delivery;
use crate::scheduled::ingest::Ingested;
use crate::scheduled::plan::{self, DAY_MS, DueOrder, Dues, Plan};
use crate::scheduled::system::{SystemSettings, Target};

/// The issue's goals.
const INGEST_GOAL_ROUTER: f64 = 100_000.0;
const INGEST_GOAL_STANDALONE: f64 = 50_000.0;
const LATENESS_GOAL_P99_MS: u64 = 10;
pub(super) const HERD_GOAL_MS: u64 = 2_000;
/// The gateway holds one socket per session and may hold at most 20,000 file descriptors.
const MAX_SESSIONS: usize = 19_000;
/// Herald's default `publish.max_batch`.
const MAX_BATCH: u64 = 1_000;
/// The footprint's probe falls due this long after it is published.
pub(super) const PROBE_LEAD_MS: u64 = 5_000;
/// A goal of the issue, and whether the run met it (the report carries it).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Goal {
    pub(crate) goal: String,
    pub(crate) met: bool,
}

/// The arguments with every default resolved and checked.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) scenario: Scenario,
    /// The Herald under test and how to start it.
    pub(crate) system: SystemSettings,
    pub(crate) count: u64,
    pub(crate) batch: u64,
    pub(crate) connections: usize,
    pub(crate) payload_bytes: usize,
    pub(crate) rate: u64,
    pub(crate) lead_ms: u64,
    pub(crate) sessions: usize,
    pub(crate) processes: Option<usize>,
    pub(crate) probe: u64,
    pub(crate) probe_rate: u64,
    pub(crate) far_days: u64,
    pub(crate) due_order: DueOrder,
    pub(crate) drain_timeout: Duration,
    pub(crate) handshake_timeout: Duration,
    pub(crate) broker_pid: Option<u32>,
    pub(crate) json: bool,
}

impl Settings {
    /// Resolves the defaults of `a` and checks everything before anything starts.
    pub(crate) fn from_args(a: &DelayedArgs) -> Result<Self, String> {
        let scenario = a.scenario;
        let count = count(a)?;
        let probe = if scenario == Scenario::Footprint {
            a.probe
        } else {
            0
        };
        let sessions = sessions(a, probe)?;
        check_publishing(a, probe)?;
        let lead_ms = a.lead_ms.unwrap_or_else(|| plan::default_lead_ms(count));
        if matches!(scenario, Scenario::Lateness | Scenario::Herd) && lead_ms < 1_000 {
            return Err("--lead-ms must be at least 1000".into());
        }
        check_binaries(a, sessions)?;
        if sessions > 0 {
            crate::harness::plan::plan(sessions, a.processes, &[], IpAddr::V4(Ipv4Addr::LOCALHOST))
                .map_err(|e| e.to_string())?;
        }
        Ok(Self {
            scenario,
            system: SystemSettings {
                target: a.target,
                router_bin: a.router_bin.clone(),
                gateway_bin: a.gateway_bin.clone(),
                amqp_url: a.amqp_url.clone(),
                redis_url: a.redis_url.clone(),
                schedule: crate::harness::configs::parse_settings(&a.schedule)
                    .map_err(|e| format!("--schedule {e}"))?,
                callbacks: toml::Table::new(),
                startup_timeout: a.startup_timeout,
                router_log: a.router_log.clone(),
                gateway_log: a.gateway_log.clone(),
            },
            count,
            batch: a.batch,
            connections: a.connections,
            payload_bytes: a.payload_bytes,
            rate: a.rate,
            lead_ms,
            sessions,
            processes: a.processes,
            probe,
            probe_rate: a.probe_rate,
            far_days: a.far_days,
            due_order: a.due_order,
            drain_timeout: Duration::from_secs(a.drain_timeout),
            handshake_timeout: Duration::from_secs(a.handshake_timeout),
            broker_pid: a.broker_pid,
            json: a.json,
        })
    }

    /// The worker split of the sessions.
    pub(super) fn worker_plans(&self) -> Result<Vec<WorkerPlan>, BenchError> {
        crate::harness::plan::plan(
            self.sessions,
            self.processes,
            &[],
            IpAddr::V4(Ipv4Addr::LOCALHOST),
        )
        .map_err(|e| BenchError::Usage(e.to_string()))
    }

    /// The scenario's main plan, its due times counted from `now_ms`.
    pub(super) fn main_plan(&self, now_ms: u64) -> Plan {
        let dues = match self.scenario {
            Scenario::Ingest | Scenario::Footprint => {
                let start_ms = now_ms + self.far_days * DAY_MS;
                match self.due_order {
                    DueOrder::Sequential => Dues::Spread { start_ms },
                    DueOrder::Random => Dues::scattered(start_ms, self.count),
                }
            }
            Scenario::Lateness => Dues::Steady {
                start_ms: now_ms + self.lead_ms,
                rate: self.rate,
            },
            Scenario::Herd => Dues::Herd {
                at_ms: now_ms + self.lead_ms,
            },
        };
        Plan {
            first: 0,
            count: self.count,
            dues,
        }
    }

    /// The plan in words.
    pub(super) fn describe_plan(&self) -> String {
        match self.scenario {
            Scenario::Ingest => format!(
                "due in {} days (none fires), {}",
                self.far_days,
                self.due_order.describe()
            ),
            Scenario::Footprint => format!(
                "due in {} days (none fires), {}, then {} probe notifications due at {}/s from {} s after",
                self.far_days,
                self.due_order.describe(),
                self.probe,
                grouped(self.probe_rate as f64),
                PROBE_LEAD_MS / 1000
            ),
            Scenario::Lateness => format!(
                "due at {}/s for {} s, from {:.1} s after publishing starts",
                grouped(self.rate as f64),
                self.count / self.rate.max(1),
                self.lead_ms as f64 / 1000.0
            ),
            Scenario::Herd => format!(
                "all due at one instant, {:.1} s after publishing starts",
                self.lead_ms as f64 / 1000.0
            ),
        }
    }

    /// The issue's goal for this scenario and target, met or not.
    pub(super) fn goal(
        &self,
        ingest: Option<&Ingested>,
        delivery: Option<&Delivery>,
    ) -> Option<Goal> {
        match self.scenario {
            Scenario::Ingest => {
                let target = match self.system.target {
                    Target::Router => INGEST_GOAL_ROUTER,
                    Target::Standalone => INGEST_GOAL_STANDALONE,
                };
                let i = ingest?;
                Some(Goal {
                    goal: format!("durable ingest >= {}/s", grouped(target)),
                    met: i.rate >= target && i.refused.is_empty(),
                })
            }
            Scenario::Lateness => {
                let d = delivery?;
                Some(Goal {
                    goal: format!(
                        "lateness p99 <= {LATENESS_GOAL_P99_MS} ms at {}/s, nothing lost",
                        grouped(self.rate as f64)
                    ),
                    met: d.missing == 0
                        && d.lateness
                            .as_ref()
                            .is_some_and(|l| l.p99_ns <= LATENESS_GOAL_P99_MS * 1_000_000),
                })
            }
            Scenario::Herd => {
                let d = delivery?;
                Some(Goal {
                    goal: format!(
                        "all {} delivered within {} s of their due time",
                        grouped(self.count as f64),
                        HERD_GOAL_MS / 1000
                    ),
                    met: d.missing == 0 && d.within_goal == Some(d.expected),
                })
            }
            Scenario::Footprint => None,
        }
    }
}

/// How many notifications the scenario publishes: `--count`, or `--rate x --seconds` for
/// `lateness`, or the scenario's default.
fn count(a: &DelayedArgs) -> Result<u64, String> {
    let count = match (a.scenario, a.count) {
        (Scenario::Lateness, Some(_)) => {
            return Err(
                "lateness publishes --rate x --seconds; --count is for the other scenarios".into(),
            );
        }
        (Scenario::Lateness, None) => {
            if a.rate == 0 || a.seconds == 0 {
                return Err("--rate and --seconds must be at least 1".into());
            }
            a.rate.saturating_mul(a.seconds)
        }
        (_, Some(n)) => n,
        (Scenario::Ingest, None) => 500_000,
        (Scenario::Herd, None) => 200_000,
        (Scenario::Footprint, None) => 1_000_000,
    };
    if count == 0 {
        return Err("--count must be at least 1".into());
    }
    Ok(count)
}

/// How many sessions receive the notifications (none for `ingest`, nor for a footprint
/// without a probe), checked against what the scenario needs and the gateway can hold.
fn sessions(a: &DelayedArgs, probe: u64) -> Result<usize, String> {
    let scenario = a.scenario;
    let sessions = match (scenario, a.sessions) {
        (Scenario::Ingest, Some(n)) if n > 0 => {
            return Err("ingest publishes to users nobody is connected as; --sessions is for the other scenarios".into());
        }
        (Scenario::Ingest, _) => 0,
        (Scenario::Footprint, _) if probe == 0 => 0,
        (_, Some(n)) => n,
        (Scenario::Lateness, None) => 1_000,
        (Scenario::Herd, None) => 10_000,
        (Scenario::Footprint, None) => 100,
    };
    if scenario != Scenario::Ingest && probe_or_delivery(scenario, probe) && sessions == 0 {
        return Err("--sessions must be at least 1 to receive the notifications".into());
    }
    if sessions > MAX_SESSIONS {
        return Err(format!(
            "--sessions must be at most {MAX_SESSIONS}: the gateway holds one socket per session and may hold at most 20,000 file descriptors"
        ));
    }
    Ok(sessions)
}

/// The publishing options within what Herald accepts.
fn check_publishing(a: &DelayedArgs, probe: u64) -> Result<(), String> {
    if a.batch == 0 || a.batch > MAX_BATCH {
        return Err(format!(
            "--batch must be between 1 and {MAX_BATCH} (Herald's publish.max_batch)"
        ));
    }
    if a.connections == 0 || a.connections > 256 {
        return Err("--connections must be between 1 and 256".into());
    }
    if a.payload_bytes > 64 * 1024 {
        return Err("--payload-bytes must be at most 64 KiB".into());
    }
    if a.far_days == 0 || a.far_days > 300 {
        return Err(
            "--far-days must be between 1 and 300 (Herald refuses more than 365 days ahead)".into(),
        );
    }
    if a.scenario == Scenario::Footprint && probe > 0 && a.probe_rate == 0 {
        return Err("--probe-rate must be at least 1".into());
    }
    Ok(())
}

/// The binaries the target needs (and the sessions' edge gateway) are given.
fn check_binaries(a: &DelayedArgs, sessions: usize) -> Result<(), String> {
    match a.target {
        Target::Router if a.router_bin.is_none() => {
            Err("--target router needs --router-bin".into())
        }
        Target::Router if sessions > 0 && a.gateway_bin.is_none() => {
            Err("--target router needs --gateway-bin for the sessions' edge gateway".into())
        }
        Target::Standalone if a.gateway_bin.is_none() => {
            Err("--target standalone needs --gateway-bin".into())
        }
        _ => Ok(()),
    }
}

fn probe_or_delivery(scenario: Scenario, probe: u64) -> bool {
    match scenario {
        Scenario::Ingest => false,
        Scenario::Lateness | Scenario::Herd => true,
        Scenario::Footprint => probe > 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Result<Settings, String> {
        use clap::Parser as _;
        let mut argv = vec![
            "herald-bench",
            "delayed",
            "--router-bin",
            "r",
            "--gateway-bin",
            "g",
        ];
        argv.extend_from_slice(extra);
        match crate::cli::Cli::try_parse_from(argv).unwrap().command {
            crate::cli::Command::Delayed(a) => Settings::from_args(&a),
            _ => unreachable!(),
        }
    }

    #[test]
    fn defaults_follow_the_scenario() {
        let s = args(&["--scenario", "ingest"]).unwrap();
        assert_eq!((s.count, s.sessions), (500_000, 0));
        let s = args(&["--scenario", "lateness"]).unwrap();
        assert_eq!((s.count, s.sessions, s.rate), (100_000, 1_000, 10_000));
        assert_eq!(s.lead_ms, 15_000);
        let s = args(&["--scenario", "herd"]).unwrap();
        assert_eq!((s.count, s.sessions, s.lead_ms), (200_000, 10_000, 25_000));
        let s = args(&["--scenario", "footprint"]).unwrap();
        assert_eq!((s.count, s.sessions, s.probe), (1_000_000, 100, 1_000));
        let s = args(&["--scenario", "footprint", "--probe", "0"]).unwrap();
        assert_eq!(s.sessions, 0, "no probe, no sessions");
        let s = args(&["--scenario", "herd", "--count", "1000", "--lead-ms", "3000"]).unwrap();
        assert_eq!((s.count, s.lead_ms), (1000, 3000));
    }

    #[test]
    fn due_order_picks_the_ingest_plan() {
        let start = 1_000 + 30 * DAY_MS;
        let s = args(&["--scenario", "ingest", "--count", "1000"]).unwrap();
        assert_eq!(s.main_plan(1_000).dues, Dues::Spread { start_ms: start });
        let s = args(&[
            "--scenario",
            "ingest",
            "--count",
            "1000",
            "--due-order",
            "random",
        ])
        .unwrap();
        assert_eq!(s.main_plan(1_000).dues, Dues::scattered(start, 1000));
        assert!(s.describe_plan().contains("scrambled"));
        use clap::Parser as _;
        let bad = [
            "herald-bench",
            "delayed",
            "--scenario",
            "ingest",
            "--due-order",
            "sideways",
        ];
        assert!(crate::cli::Cli::try_parse_from(bad).is_err());
    }

    #[test]
    fn bad_arguments_are_refused_before_anything_starts() {
        for bad in [
            &["--scenario", "lateness", "--count", "5"][..],
            &["--scenario", "lateness", "--rate", "0"],
            &["--scenario", "ingest", "--sessions", "10"],
            &["--scenario", "herd", "--count", "0"],
            &["--scenario", "herd", "--sessions", "0"],
            &["--scenario", "herd", "--sessions", "20000"],
            &[
                "--scenario",
                "herd",
                "--sessions",
                "100",
                "--processes",
                "200",
            ],
            &["--scenario", "ingest", "--batch", "1001"],
            &["--scenario", "ingest", "--batch", "0"],
            &["--scenario", "ingest", "--connections", "0"],
            &["--scenario", "ingest", "--payload-bytes", "100000"],
            &["--scenario", "ingest", "--far-days", "400"],
            &["--scenario", "herd", "--lead-ms", "10"],
            &["--scenario", "footprint", "--probe-rate", "0"],
            &["--scenario", "ingest", "--schedule", "claim_batch"],
        ] {
            assert!(args(bad).is_err(), "{bad:?}");
        }
        use clap::Parser as _;
        let parse = |argv: &[&str]| match crate::cli::Cli::try_parse_from(argv).unwrap().command {
            crate::cli::Command::Delayed(a) => Settings::from_args(&a),
            _ => unreachable!(),
        };
        assert!(
            parse(&["herald-bench", "delayed", "--scenario", "ingest"]).is_err(),
            "router needs --router-bin"
        );
        assert!(
            parse(&[
                "herald-bench",
                "delayed",
                "--scenario",
                "ingest",
                "--router-bin",
                "r"
            ])
            .is_ok(),
            "ingest on a router needs no gateway"
        );
        assert!(
            parse(&[
                "herald-bench",
                "delayed",
                "--scenario",
                "herd",
                "--router-bin",
                "r"
            ])
            .is_err(),
            "sessions need the edge gateway"
        );
        assert!(
            parse(&[
                "herald-bench",
                "delayed",
                "--scenario",
                "ingest",
                "--target",
                "standalone"
            ])
            .is_err(),
            "standalone needs --gateway-bin"
        );
    }

    #[test]
    fn plans_per_scenario() {
        let now = 1_800_000_000_000;
        let s = args(&["--scenario", "lateness", "--lead-ms", "5000"]).unwrap();
        let p = s.main_plan(now);
        assert_eq!(p.first_due_ms(), now + 5_000);
        assert_eq!(p.last_due_ms(), now + 5_000 + 9_999);
        let s = args(&["--scenario", "herd", "--count", "10", "--lead-ms", "2000"]).unwrap();
        let p = s.main_plan(now);
        assert_eq!(
            (p.first_due_ms(), p.last_due_ms()),
            (now + 2_000, now + 2_000)
        );
        let s = args(&["--scenario", "ingest", "--count", "10"]).unwrap();
        assert_eq!(s.main_plan(now).first_due_ms(), now + 30 * DAY_MS);
    }

    #[test]
    fn goals() {
        let s = args(&["--scenario", "ingest", "--count", "10"]).unwrap();
        let mut i = Ingested {
            rate: 120_000.0,
            ..Ingested::default()
        };
        assert!(s.goal(Some(&i), None).unwrap().met);
        i.rate = 60_000.0;
        assert!(
            !s.goal(Some(&i), None).unwrap().met,
            "100,000/s on a router"
        );
        let s = args(&[
            "--scenario",
            "ingest",
            "--count",
            "10",
            "--target",
            "standalone",
        ])
        .unwrap();
        assert!(s.goal(Some(&i), None).unwrap().met, "50,000/s standalone");
        let s = args(&["--scenario", "footprint"]).unwrap();
        assert_eq!(s.goal(Some(&i), None), None);
    }
}
