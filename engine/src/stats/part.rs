//! [`Part`]: what one process measured (an edge, a router, or a standalone
//! gateway), the unit the cluster's figures are merged from. Its JSON form
//! is the body of an edge's stats report (over AMQP) and of a router's
//! summary (in Redis).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::window::Windows;

/// Most topic rows one part may carry (its own table is smaller:
/// `max_topics` + `other`); a part with more is refused.
pub const MAX_PART_TOPICS: usize = 1_000;
/// Most transports in `sessions`.
pub const MAX_PART_TRANSPORTS: usize = 16;

/// Delayed notifications by due time, as the store counted them last.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Due {
    /// Due within the next minute (overdue included).
    pub next_minute: u64,
    /// Due after that, within the hour.
    pub next_hour: u64,
    /// Due after that, within the day.
    pub next_day: u64,
    /// Due later.
    pub later: u64,
}

/// Callbacks since the process started, by outcome.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Callbacks {
    /// Succeeded.
    pub succeeded: u64,
    /// Attempts that failed (each retried or dead).
    pub failed: u64,
    /// Put back to be tried again.
    pub retried: u64,
    /// Given up on (dead letters).
    pub dead: u64,
    /// Declined by their recheck.
    pub declined: u64,
}

impl Callbacks {
    /// The callback outcomes among `totals` (every topic's events since
    /// the process started).
    pub fn of_totals(totals: &super::window::Counts) -> Callbacks {
        use super::window::Event;
        Callbacks {
            succeeded: totals.get(Event::CallbacksSucceeded),
            failed: totals.get(Event::CallbacksFailed),
            retried: totals.get(Event::CallbacksRetried),
            dead: totals.get(Event::CallbacksDead),
            declined: totals.get(Event::CallbacksDeclined),
        }
    }

    fn add(&mut self, o: &Callbacks) {
        self.succeeded += o.succeeded;
        self.failed += o.failed;
        self.retried += o.retried;
        self.dead += o.dead;
        self.declined += o.declined;
    }
}

/// One process's figures at `at_ms`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Part {
    /// `edge`, `router` or `standalone`.
    pub kind: String,
    /// The edge or router id.
    pub id: String,
    /// When measured, ms since the epoch.
    pub at_ms: u64,
    /// Live browser sessions by transport (edges, standalone).
    #[serde(default)]
    pub sessions: BTreeMap<String, u64>,
    /// Live mailboxes (edges, standalone).
    #[serde(default)]
    pub mailboxes: u64,
    /// Messages queued to sessions since the process started.
    #[serde(default)]
    pub deliveries: u64,
    /// Scheduled delayed notifications (routers, standalone): the store's
    /// count, the same for every router sharing it.
    #[serde(default)]
    pub delayed: Option<Due>,
    /// Callbacks since the process started.
    #[serde(default)]
    pub callbacks: Callbacks,
    /// Rolling windows per topic (`other` included).
    #[serde(default)]
    pub topics: BTreeMap<String, Windows>,
}

impl Part {
    /// Whether the part is within its bounds; `Err` names the field.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if !matches!(self.kind.as_str(), "edge" | "router" | "standalone") {
            return Err(("kind", "edge, router or standalone".into()));
        }
        if self.id.is_empty() || self.id.len() > 200 {
            return Err(("id", "1 to 200 bytes".into()));
        }
        if self.topics.len() > MAX_PART_TOPICS {
            return Err(("topics", format!("at most {MAX_PART_TOPICS} topics")));
        }
        if self.topics.keys().any(|t| t.is_empty() || t.len() > 200) {
            return Err(("topics", "topic names are 1 to 200 bytes".into()));
        }
        if self.sessions.len() > MAX_PART_TRANSPORTS {
            return Err((
                "sessions",
                format!("at most {MAX_PART_TRANSPORTS} transports"),
            ));
        }
        Ok(())
    }
}

/// Parts added together.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    /// Sessions by transport.
    pub sessions: BTreeMap<String, u64>,
    /// Mailboxes.
    pub mailboxes: u64,
    /// Deliveries since each process started.
    pub deliveries: u64,
    /// The freshest store count among the parts that have one.
    pub delayed: Option<Due>,
    /// Callbacks since each process started.
    pub callbacks: Callbacks,
    /// Windows per topic.
    pub topics: BTreeMap<String, Windows>,
}

impl Totals {
    /// Add `parts` up. Topic rows whose name `keep` refuses are added to
    /// `other` (an edge's rows of topics that are not registered).
    pub fn of<'a>(
        parts: impl IntoIterator<Item = &'a Part>,
        keep: &dyn Fn(&str) -> bool,
    ) -> Totals {
        let mut t = Totals::default();
        let mut delayed_at = 0;
        for p in parts {
            for (k, v) in &p.sessions {
                *t.sessions.entry(k.clone()).or_default() += v;
            }
            t.mailboxes += p.mailboxes;
            t.deliveries += p.deliveries;
            t.callbacks.add(&p.callbacks);
            if let Some(d) = &p.delayed
                && (t.delayed.is_none() || p.at_ms > delayed_at)
            {
                t.delayed = Some(d.clone());
                delayed_at = p.at_ms;
            }
            for (name, w) in &p.topics {
                let name = if name == super::topics::OTHER || keep(name) {
                    name.as_str()
                } else {
                    super::topics::OTHER
                };
                t.topics.entry(name.to_owned()).or_default().add(w);
            }
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::window::{Counts, Event};

    fn windows(accepted: u64) -> Windows {
        let mut c = Counts::default();
        c.events[0] = accepted;
        Windows {
            last_minute: c.clone(),
            last_hour: c.clone(),
            last_day: c,
        }
    }

    #[test]
    fn parts_add_up_and_unkept_names_fold_into_other() {
        let a = Part {
            kind: "edge".into(),
            id: "e1".into(),
            at_ms: 10,
            sessions: [("websocket".to_owned(), 2)].into(),
            deliveries: 5,
            topics: [
                ("billing".to_owned(), windows(1)),
                ("x".to_owned(), windows(2)),
            ]
            .into(),
            ..Part::default()
        };
        let b = Part {
            kind: "router".into(),
            id: "r1".into(),
            at_ms: 20,
            sessions: [("websocket".to_owned(), 3)].into(),
            delayed: Some(Due {
                later: 4,
                ..Due::default()
            }),
            topics: [
                ("other".to_owned(), windows(3)),
                ("billing".to_owned(), windows(4)),
            ]
            .into(),
            ..Part::default()
        };
        let t = Totals::of([&a, &b], &|n| n == "billing");
        assert_eq!(t.sessions["websocket"], 5);
        assert_eq!(t.deliveries, 5);
        assert_eq!(t.delayed.as_ref().map(|d| d.later), Some(4));
        assert_eq!(t.topics["billing"].last_hour.get(Event::Accepted), 5);
        assert_eq!(t.topics["other"].last_hour.get(Event::Accepted), 5);
        assert!(!t.topics.contains_key("x"));
    }

    #[test]
    fn a_part_out_of_bounds_is_refused_by_field() {
        let p = Part {
            kind: "edge".into(),
            id: "e1".into(),
            ..Part::default()
        };
        assert_eq!(p.check(), Ok(()));
        let bad = Part {
            kind: "x".into(),
            ..p.clone()
        };
        assert_eq!(bad.check().unwrap_err().0, "kind");
        let mut many = p;
        for i in 0..=MAX_PART_TOPICS {
            many.topics.insert(format!("t{i}"), Windows::default());
        }
        assert_eq!(many.check().unwrap_err().0, "topics");
    }
}
