//! The result of `herald-bench retained`: memory per retained notification against the goal
//! (at most payload + [`GOAL_OVERHEAD`] bytes), as text or JSON.

use serde::Serialize;

use super::args::PublishPath;
use crate::harness::report::grouped;
use crate::harness::rss::human_bytes;

/// What a retained notification may cost beyond its payload (issue 19).
pub(crate) const GOAL_OVERHEAD: u64 = 256;

/// The gateway's memory at one point (bytes).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(crate) struct Memory {
    /// `VmRSS`.
    pub(crate) rss: u64,
    /// `RssAnon`: the resident anonymous memory (heap, stacks), without the binary's pages.
    pub(crate) anon: u64,
    /// Whether two reads of `VmRSS` half a second apart agreed within 1%.
    pub(crate) settled: bool,
}

/// The report.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Report {
    pub(crate) run_id: String,
    pub(crate) gateway_bin: String,
    pub(crate) gateway_pid: u32,
    pub(crate) path: PublishPath,
    pub(crate) users: usize,
    pub(crate) per_user: usize,
    pub(crate) warmup: usize,
    pub(crate) payload: usize,
    pub(crate) connections: usize,
    /// Notifications measured (`users × per_user`).
    pub(crate) notifications: u64,
    pub(crate) accepted: u64,
    pub(crate) refused: u64,
    /// The first refusal or error, if any.
    pub(crate) problem: Option<String>,
    /// Bench messages the sessions received, the warm-up included.
    pub(crate) received: u64,
    pub(crate) publish_secs: f64,
    /// With the sessions open and subscribed (and the warm-up retained).
    pub(crate) before: Memory,
    /// Once every notification arrived.
    pub(crate) after: Memory,
    /// `VmRSS` growth per measured notification.
    pub(crate) rss_per_notification: f64,
    /// `RssAnon` growth per measured notification.
    pub(crate) anon_per_notification: f64,
    pub(crate) goal_bytes: u64,
    pub(crate) goal_met: bool,
    /// Every notification was accepted and arrived, and both readings settled.
    pub(crate) complete: bool,
    /// How the gateway ended.
    pub(crate) gateway_stopped: String,
}

impl Report {
    /// Fills in the figures derived from the readings.
    pub(crate) fn derive(&mut self) {
        let n = self.notifications.max(1) as f64;
        self.rss_per_notification = (self.after.rss as f64 - self.before.rss as f64) / n;
        self.anon_per_notification = (self.after.anon as f64 - self.before.anon as f64) / n;
        self.goal_bytes = self.payload as u64 + GOAL_OVERHEAD;
        self.goal_met = self.rss_per_notification <= self.goal_bytes as f64;
        let expected = self.notifications + (self.users * self.warmup) as u64;
        self.complete = self.refused == 0
            && self.received >= expected
            && self.before.settled
            && self.after.settled;
    }

    pub(crate) fn human(&self) -> String {
        let over = |per: f64| per - self.payload as f64;
        let mut out = format!(
            "retained: {} path, {} users x {} notifications of {} B (warm-up {} each, not counted)\n\
             gateway: {} (pid {}), run {}\n",
            self.path.name(),
            grouped(self.users as f64),
            self.per_user,
            self.payload,
            self.warmup,
            self.gateway_bin,
            self.gateway_pid,
            self.run_id,
        );
        let rate = self.accepted as f64 / self.publish_secs.max(1e-9);
        out += &format!(
            "published {} in {:.1} s ({}/s, one per request over {} connections); {} refused; \
             received {}\n",
            grouped(self.accepted as f64),
            self.publish_secs,
            grouped(rate),
            self.connections,
            self.refused,
            grouped(self.received as f64),
        );
        if let Some(p) = &self.problem {
            out += &format!("first problem: {p}\n");
        }
        out += &format!(
            "gateway RSS: {} with the idle sessions, {} after: +{}{}\n",
            human_bytes(self.before.rss as f64),
            human_bytes(self.after.rss as f64),
            human_bytes(self.after.rss as f64 - self.before.rss as f64),
            if self.before.settled && self.after.settled {
                ""
            } else {
                " (a reading did not settle)"
            },
        );
        out += &format!(
            "per retained notification: RSS {:.0} B (payload + {:.0} B), anonymous {:.0} B \
             (payload + {:.0} B)\n",
            self.rss_per_notification,
            over(self.rss_per_notification),
            self.anon_per_notification,
            over(self.anon_per_notification),
        );
        out += &format!(
            "goal: at most payload + {GOAL_OVERHEAD} B = {} B of RSS: {}\n",
            self.goal_bytes,
            if self.goal_met { "met" } else { "NOT met" },
        );
        if !self.complete {
            out += "INCOMPLETE: a notification was refused or did not arrive, or a reading did not settle\n";
        }
        out += &format!("gateway {}\n", self.gateway_stopped);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(before: u64, after: u64) -> Report {
        let mut r = Report {
            run_id: "bench-x".into(),
            gateway_bin: "herald-gateway".into(),
            gateway_pid: 1,
            path: PublishPath::Raw,
            users: 1000,
            per_user: 50,
            warmup: 1,
            payload: 100,
            connections: 4,
            notifications: 50_000,
            accepted: 51_000,
            refused: 0,
            problem: None,
            received: 51_000,
            publish_secs: 10.0,
            before: Memory {
                rss: before,
                anon: before / 2,
                settled: true,
            },
            after: Memory {
                rss: after,
                anon: after / 2,
                settled: true,
            },
            rss_per_notification: 0.0,
            anon_per_notification: 0.0,
            goal_bytes: 0,
            goal_met: false,
            complete: false,
            gateway_stopped: "stopped".into(),
        };
        r.derive();
        r
    }

    #[test]
    fn growth_per_notification_against_the_goal() {
        let r = report(40_000_000, 40_000_000 + 50_000 * 300);
        assert_eq!(r.rss_per_notification, 300.0);
        assert_eq!(r.goal_bytes, 356);
        assert!(r.goal_met && r.complete);
        let r = report(40_000_000, 40_000_000 + 50_000 * 5_858);
        assert!(!r.goal_met);
        assert!(r.human().contains("NOT met"), "{}", r.human());
    }

    #[test]
    fn a_missing_arrival_makes_the_run_incomplete() {
        let mut r = report(1, 2);
        r.received -= 1;
        r.derive();
        assert!(!r.complete);
    }
}
