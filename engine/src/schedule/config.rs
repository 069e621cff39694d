//! `[schedule]`: settings of delayed notifications, shared by
//! `herald-router` and standalone `herald-gateway`.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::scheduler::SchedulerConfig;

/// Per-topic policies (`[schedule.topics.NAME]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TopicPolicy {
    /// Spread due times over `[due, due + jitter_ms]` (a same-second herd
    /// becomes a ramp). Never earlier than asked.
    pub jitter_ms: u64,
    /// `when-online` sends to one user at least this far apart (overrides
    /// `schedule.min_interval_ms`).
    pub min_interval_ms: Option<u64>,
    /// Merge `when-online` notifications of this topic that fall due
    /// together for one user into one (overrides `schedule.merge`).
    pub merge: Option<bool>,
}

/// Settings of delayed notifications, `[schedule]`. Each field is the key of its name,
/// described once in its row of [`crate::config::table::SECTIONS`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ScheduleConfig {
    /// Key `schedule.max_delay_ms`.
    pub max_delay_ms: u64,
    /// Key `schedule.max_past_ms`.
    pub max_past_ms: u64,
    /// Key `schedule.lease_ms`.
    pub lease_ms: u64,
    /// Key `schedule.horizon_ms`.
    pub horizon_ms: u64,
    /// Key `schedule.refill_every_ms`.
    pub refill_every_ms: u64,
    /// Key `schedule.full_refill_every_ms`.
    pub full_refill_every_ms: u64,
    /// Key `schedule.max_window`.
    pub max_window: usize,
    /// Key `schedule.claim_batch`.
    pub claim_batch: usize,
    /// Key `schedule.claim_ahead_ms`.
    pub claim_ahead_ms: u64,
    /// Key `schedule.claim_ahead_max_ms`.
    /// Unset, [`ScheduleConfig::claim_ahead_max_ms`] derives it.
    pub claim_ahead_max_ms: Option<u64>,
    /// Key `schedule.max_claimed`.
    pub max_claimed: usize,
    /// Key `schedule.max_unsettled`.
    pub max_unsettled: usize,
    /// Key `schedule.settle_delay_ms`.
    /// Unset, [`ScheduleConfig::settle_delay_ms`] derives it.
    pub settle_delay_ms: Option<u64>,
    /// Key `schedule.hold_max_ms`.
    pub hold_max_ms: u64,
    /// Key `schedule.retention_ms`.
    pub retention_ms: u64,
    /// Key `schedule.maintenance_every_ms`.
    pub maintenance_every_ms: u64,
    /// Key `schedule.retry_after_ms`.
    pub retry_after_ms: u64,
    /// Key `schedule.min_interval_ms`.
    pub min_interval_ms: u64,
    /// Key `schedule.merge`.
    pub merge: bool,
    /// Key `schedule.max_tracked_users`.
    pub max_tracked_users: usize,
    /// Key `schedule.online_queue`.
    pub online_queue: usize,
    /// Key `schedule.hint_queue`.
    pub hint_queue: usize,
    /// Key `schedule.max_topics`.
    pub max_topics: usize,
    /// Key `schedule.topics`.
    pub topics: BTreeMap<String, TopicPolicy>,
}

impl Default for ScheduleConfig {
    fn default() -> Self {
        let s = SchedulerConfig::default();
        ScheduleConfig {
            max_delay_ms: 365 * 24 * 3600 * 1000,
            max_past_ms: 24 * 3600 * 1000,
            lease_ms: 30_000,
            horizon_ms: s.horizon_ms,
            refill_every_ms: s.refill_every_ms,
            full_refill_every_ms: s.full_refill_every_ms,
            max_window: s.max_window,
            claim_batch: s.claim_batch,
            claim_ahead_ms: 500,
            claim_ahead_max_ms: None,
            max_claimed: 250_000,
            max_unsettled: 250_000,
            settle_delay_ms: None,
            hold_max_ms: 7 * 24 * 3600 * 1000,
            retention_ms: 3 * 24 * 3600 * 1000,
            maintenance_every_ms: 5_000,
            retry_after_ms: 1_000,
            min_interval_ms: 0,
            merge: false,
            max_tracked_users: 1_000_000,
            online_queue: 65_536,
            hint_queue: 65_536,
            max_topics: 10_000,
            topics: BTreeMap::new(),
        }
    }
}

/// `claim_ahead_max_ms` when unset, if lease and horizon allow.
const CLAIM_AHEAD_MAX_MS: u64 = 4_000;
/// `settle_delay_ms` when unset, if the lease allows.
const SETTLE_DELAY_MS: u64 = 2_000;

impl ScheduleConfig {
    /// How far ahead a pile may be claimed: as set, or 4 s, at most a
    /// quarter of the lease and the horizon, at least `claim_ahead_ms`.
    pub fn claim_ahead_max_ms(&self) -> u64 {
        self.claim_ahead_max_ms.unwrap_or_else(|| {
            CLAIM_AHEAD_MAX_MS
                .min(self.horizon_ms)
                .min(self.lease_ms / 4)
                .max(self.claim_ahead_ms)
        })
    }

    /// How long fired entries wait to be marked delivered: as set, or
    /// 2 s, at most half of what the lease leaves after a pile's claim.
    pub fn settle_delay_ms(&self) -> u64 {
        self.settle_delay_ms.unwrap_or_else(|| {
            SETTLE_DELAY_MS.min(self.lease_ms.saturating_sub(self.claim_ahead_max_ms()) / 2)
        })
    }

    /// Every rule, as problems named `schedule.*`.
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        let positive: [(&str, u64); 10] = [
            ("max_delay_ms", self.max_delay_ms),
            ("lease_ms", self.lease_ms),
            ("horizon_ms", self.horizon_ms),
            ("refill_every_ms", self.refill_every_ms),
            ("full_refill_every_ms", self.full_refill_every_ms),
            ("hold_max_ms", self.hold_max_ms),
            ("retention_ms", self.retention_ms),
            ("maintenance_every_ms", self.maintenance_every_ms),
            ("retry_after_ms", self.retry_after_ms),
            ("max_window", self.max_window as u64),
        ];
        for (key, value) in positive {
            if value == 0 {
                p.push(format!("schedule.{key} must be at least 1"));
            }
        }
        for (key, value) in [
            ("claim_batch", self.claim_batch),
            ("max_claimed", self.max_claimed),
            ("max_unsettled", self.max_unsettled),
            ("online_queue", self.online_queue),
            ("hint_queue", self.hint_queue),
        ] {
            if value == 0 {
                p.push(format!("schedule.{key} must be at least 1"));
            }
        }
        if self.claim_batch > 100_000 {
            p.push("schedule.claim_batch must be at most 100000".into());
        }
        if self.claim_ahead_ms >= self.lease_ms {
            p.push(format!(
                "schedule.claim_ahead_ms ({}) must be less than schedule.lease_ms ({}), or entries claimed ahead would be claimed again before they are due",
                self.claim_ahead_ms, self.lease_ms
            ));
        }
        self.pile_problems(&mut p);
        if self.refill_every_ms > self.horizon_ms {
            p.push(format!(
                "schedule.refill_every_ms ({}) must not exceed schedule.horizon_ms ({}), or entries due between refills would be missed until the next one",
                self.refill_every_ms, self.horizon_ms
            ));
        }
        if self.full_refill_every_ms < self.refill_every_ms {
            p.push(format!(
                "schedule.full_refill_every_ms ({}) must be at least schedule.refill_every_ms ({})",
                self.full_refill_every_ms, self.refill_every_ms
            ));
        }
        for (name, t) in &self.topics {
            if !herald_protocol::envelope::is_valid_name(name) {
                p.push(format!(
                    "schedule.topics.{name:?} is not a valid topic name (1 to 200 of A-Z a-z 0-9 . _ ~ @ / + = -)"
                ));
            }
            if t.jitter_ms > self.max_delay_ms {
                p.push(format!(
                    "schedule.topics.{name}.jitter_ms must not exceed schedule.max_delay_ms"
                ));
            }
        }
        p
    }

    /// Rules of the values set for `claim_ahead_max_ms` and
    /// `settle_delay_ms` (unset, they are derived to fit).
    fn pile_problems(&self, p: &mut Vec<String>) {
        let ahead_max = self.claim_ahead_max_ms();
        let settle = self.settle_delay_ms();
        if let Some(max) = self.claim_ahead_max_ms {
            if max < self.claim_ahead_ms {
                p.push(format!(
                    "schedule.claim_ahead_max_ms ({max}) must be at least schedule.claim_ahead_ms ({})",
                    self.claim_ahead_ms
                ));
            }
            if max >= self.lease_ms {
                p.push(format!(
                    "schedule.claim_ahead_max_ms ({max}) must be less than schedule.lease_ms ({}), or a pile claimed ahead would be claimed again before it is due",
                    self.lease_ms
                ));
            }
            if max > self.horizon_ms {
                p.push(format!(
                    "schedule.claim_ahead_max_ms ({max}) must not exceed schedule.horizon_ms ({}): the window does not see further ahead",
                    self.horizon_ms
                ));
            }
        }
        let set = self.claim_ahead_max_ms.is_some() || self.settle_delay_ms.is_some();
        if set && ahead_max.saturating_add(settle) >= self.lease_ms {
            p.push(format!(
                "schedule.claim_ahead_max_ms ({ahead_max}) plus schedule.settle_delay_ms ({settle}) must be less than schedule.lease_ms ({}), or entries would be claimed again before they are marked delivered",
                self.lease_ms
            ));
        }
    }

    /// The scheduler's settings.
    pub fn scheduler(&self) -> SchedulerConfig {
        SchedulerConfig {
            horizon_ms: self.horizon_ms,
            refill_every_ms: self.refill_every_ms,
            full_refill_every_ms: self.full_refill_every_ms,
            max_window: self.max_window,
            claim_batch: self.claim_batch,
        }
    }

    /// The policy of `topic` (the defaults when it has none).
    pub fn policy(&self, topic: Option<&str>) -> TopicPolicy {
        topic
            .and_then(|t| self.topics.get(t))
            .cloned()
            .unwrap_or_default()
    }

    /// The shortest time between two `when-online` sends for `topic`.
    pub fn min_interval_ms(&self, topic: Option<&str>) -> u64 {
        self.policy(topic)
            .min_interval_ms
            .unwrap_or(self.min_interval_ms)
    }

    /// Whether `when-online` notifications of `topic` merge.
    pub fn merges(&self, topic: Option<&str>) -> bool {
        self.policy(topic).merge.unwrap_or(self.merge)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        assert_eq!(ScheduleConfig::default().problems(), Vec::<String>::new());
    }

    #[test]
    fn every_problem_is_named() {
        let c = ScheduleConfig {
            lease_ms: 0,
            claim_batch: 0,
            refill_every_ms: 10_000,
            full_refill_every_ms: 2_000,
            topics: [("bad name".to_owned(), TopicPolicy::default())].into(),
            ..ScheduleConfig::default()
        };
        let p = c.problems();
        assert_eq!(p.len(), 6, "{p:?}");
        assert!(
            p.iter()
                .any(|m| m.starts_with("schedule.full_refill_every_ms"))
        );
        assert!(p.iter().any(|m| m.contains("schedule.lease_ms")));
        assert!(p.iter().any(|m| m.starts_with("schedule.claim_ahead_ms")));
        assert!(p.iter().any(|m| m.contains("schedule.claim_batch")));
        assert!(p.iter().any(|m| m.contains("refill_every_ms")));
        assert!(p.iter().any(|m| m.contains("bad name")));
    }

    #[test]
    fn a_pile_is_claimed_within_the_window_and_the_lease() {
        let problems = |max| {
            ScheduleConfig {
                claim_ahead_max_ms: Some(max),
                ..ScheduleConfig::default()
            }
            .problems()
        };
        assert!(problems(500).is_empty(), "as far as claim_ahead_ms");
        assert!(problems(5_000).is_empty(), "as far as the horizon");
        assert!(problems(499)[0].contains("at least schedule.claim_ahead_ms (500)"));
        assert!(problems(5_001)[0].contains("must not exceed schedule.horizon_ms (5000)"));
        let long = ScheduleConfig {
            horizon_ms: 60_000,
            claim_ahead_max_ms: Some(30_000),
            ..ScheduleConfig::default()
        };
        assert!(long.problems()[0].contains("less than schedule.lease_ms (30000)"));
        let slow = ScheduleConfig {
            settle_delay_ms: Some(26_000),
            ..ScheduleConfig::default()
        };
        assert_eq!(
            slow.problems(),
            [
                "schedule.claim_ahead_max_ms (4000) plus schedule.settle_delay_ms (26000) must be less than schedule.lease_ms (30000), or entries would be claimed again before they are marked delivered"
            ]
        );
    }

    #[test]
    fn unset_pile_settings_fit_the_lease_and_the_horizon() {
        let d = ScheduleConfig::default();
        assert_eq!(
            (d.claim_ahead_max_ms(), d.settle_delay_ms()),
            (4_000, 2_000)
        );
        let short = ScheduleConfig {
            lease_ms: 1_000,
            ..ScheduleConfig::default()
        };
        assert_eq!(short.problems(), Vec::<String>::new());
        assert_eq!(
            (short.claim_ahead_max_ms(), short.settle_delay_ms()),
            (500, 250),
            "claim_ahead_ms, and half of what the lease leaves"
        );
        let near = ScheduleConfig {
            horizon_ms: 2_000,
            refill_every_ms: 500,
            ..ScheduleConfig::default()
        };
        assert_eq!(near.problems(), Vec::<String>::new());
        assert_eq!(
            near.claim_ahead_max_ms(),
            2_000,
            "as far as the window sees"
        );
    }

    #[test]
    fn topic_policies_override_the_defaults() {
        let c: ScheduleConfig = toml::from_str(
            "min_interval_ms = 100\n[topics.coupon]\njitter_ms = 5\nmerge = true\n[topics.quiet]\nmin_interval_ms = 0\n",
        )
        .unwrap();
        assert_eq!(c.min_interval_ms(Some("coupon")), 100);
        assert_eq!(c.min_interval_ms(Some("quiet")), 0);
        assert_eq!(c.min_interval_ms(None), 100);
        assert!(c.merges(Some("coupon")));
        assert!(!c.merges(None));
        assert_eq!(c.policy(Some("coupon")).jitter_ms, 5);
    }
}
