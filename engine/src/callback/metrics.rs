//! Metrics of callbacks (`herald_callback_*`): requests by kind and
//! status class, outcomes, the sender's queue and requests in flight, call
//! durations, and each host's breaker.
//!
//! Every label set is bounded: kinds, classes and outcomes are fixed
//! lists, and hosts get a label of their own only for the first
//! [`MAX_HOST_LABELS`] seen (the rest share `other`), so a deployment
//! calling many hosts does not grow the scrape without bound.

use std::collections::HashSet;
use std::sync::Arc;

use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::attempt::{Attempt, Kind};
use super::breaker::Transition;
use super::client::ClientEvents;

/// Hosts with a breaker label of their own, at most.
pub const MAX_HOST_LABELS: usize = 64;

/// Label of `herald_callback_requests_total` and
/// `herald_callback_request_duration_seconds`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `recheck` or `call`.
    pub kind: &'static str,
    /// `2xx`, `3xx`, `4xx`, `5xx`, `1xx`, or `none` (timeout, network
    /// error, refused destination: no response).
    pub class: &'static str,
}

/// Every value of [`OutcomeLabels::outcome`].
pub const OUTCOMES: [&str; 6] = ["delivered", "declined", "retry", "dead", "paused", "late"];

/// Label of `herald_callback_outcomes_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `delivered`, `declined`, `retry`, `dead`, `paused` (the host's
    /// breaker was open: nothing tried) or `late` (the claim's lease was
    /// too short to start it: put back without an attempt).
    pub outcome: &'static str,
}

/// Label of `herald_callback_breaker_open` and
/// `herald_callback_breaker_transitions_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HostLabels {
    /// The host (`host:port`), or `other` past [`MAX_HOST_LABELS`].
    pub host: String,
}

/// Label of `herald_callback_breaker_transitions_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TransitionLabels {
    /// The host (`host:port`), or `other` past [`MAX_HOST_LABELS`].
    pub host: String,
    /// `opened` or `closed`.
    pub to: &'static str,
}

/// The callback metrics. Cheap to clone.
#[derive(Debug, Clone)]
pub struct CallbackMetrics {
    /// Requests made, by kind and status class.
    pub requests: Family<RequestLabels, Counter>,
    /// How long each request took, by kind and status class.
    pub duration: Family<RequestLabels, Histogram>,
    /// What each attempt came to.
    pub outcomes: Family<OutcomeLabels, Counter>,
    /// Callbacks handed to the sender and not yet recorded.
    pub in_flight: Gauge,
    /// Store calls that recorded outcomes and failed (the entries stay
    /// firing and are called again after their lease).
    pub record_failures: Counter,
    /// 1 while a host's breaker is open.
    pub breaker_open: Family<HostLabels, Gauge>,
    /// Breaker changes by host.
    pub breaker_transitions: Family<TransitionLabels, Counter>,
    /// Hosts the breaker could not track (its table was full).
    pub untracked_hosts: Counter,
    hosts: Arc<Mutex<HashSet<String>>>,
}

fn duration_histogram() -> Histogram {
    Histogram::new([
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    ])
}

impl Default for CallbackMetrics {
    fn default() -> Self {
        CallbackMetrics {
            requests: Family::default(),
            duration: Family::new_with_constructor(duration_histogram),
            outcomes: Family::default(),
            in_flight: Gauge::default(),
            record_failures: Counter::default(),
            breaker_open: Family::default(),
            breaker_transitions: Family::default(),
            untracked_hosts: Counter::default(),
            hosts: Arc::default(),
        }
    }
}

impl CallbackMetrics {
    /// Register everything under `herald_callback_*`, with every outcome
    /// at zero (an alert's `increase` then sees the first dead letter).
    pub fn register(&self, registry: &mut Registry) {
        for outcome in OUTCOMES {
            let _ = self.outcomes.get_or_create(&OutcomeLabels { outcome });
        }
        let r = registry.sub_registry_with_prefix("herald_callback");
        r.register(
            "requests",
            "Callback requests made (kind: recheck or call; class: status class, none without a response)",
            self.requests.clone(),
        );
        r.register(
            "request_duration_seconds",
            "Time from a callback request to its answer (or timeout)",
            self.duration.clone(),
        );
        r.register(
            "outcomes",
            "Callback attempts by what they came to (delivered, declined, retry, dead, paused, late)",
            self.outcomes.clone(),
        );
        r.register(
            "in_flight",
            "Callbacks handed to the sender and not yet recorded",
            self.in_flight.clone(),
        );
        r.register(
            "record_failures",
            "Store calls recording callback outcomes that failed (called again after the lease)",
            self.record_failures.clone(),
        );
        r.register(
            "breaker_open",
            "1 while a destination host's circuit breaker is open",
            self.breaker_open.clone(),
        );
        r.register(
            "breaker_transitions",
            "Circuit breaker changes by destination host",
            self.breaker_transitions.clone(),
        );
        r.register(
            "untracked_hosts",
            "Destination hosts the breaker could not track (its table was full)",
            self.untracked_hosts.clone(),
        );
    }

    /// Count the requests of one attempt.
    pub fn requests(&self, attempts: &[Attempt]) {
        for a in attempts {
            let labels = RequestLabels {
                kind: match a.kind {
                    Kind::Recheck => "recheck",
                    Kind::Call => "call",
                },
                class: class(a.status),
            };
            self.requests.get_or_create(&labels).inc();
            self.duration
                .get_or_create(&labels)
                .observe(f64::from(a.duration_ms) / 1000.0);
        }
    }

    /// Count one attempt's outcome.
    pub fn outcome(&self, outcome: &'static str) {
        self.outcomes
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// The label of `host`: itself while fewer than [`MAX_HOST_LABELS`]
    /// hosts have one, else `other`.
    fn host_label(&self, host: &str) -> String {
        let mut hosts = self.hosts.lock();
        if hosts.contains(host) {
            return host.to_owned();
        }
        if hosts.len() < MAX_HOST_LABELS {
            hosts.insert(host.to_owned());
            return host.to_owned();
        }
        "other".to_owned()
    }
}

/// The status class of a response (`none` without one).
fn class(status: Option<u16>) -> &'static str {
    match status {
        None => "none",
        Some(100..=199) => "1xx",
        Some(200..=299) => "2xx",
        Some(300..=399) => "3xx",
        Some(400..=499) => "4xx",
        Some(_) => "5xx",
    }
}

impl ClientEvents for CallbackMetrics {
    fn breaker(&self, host: &str, transition: Transition) {
        let host = self.host_label(host);
        let (to, open) = match transition {
            Transition::Opened { .. } => ("opened", 1),
            Transition::Closed => ("closed", 0),
        };
        self.breaker_transitions
            .get_or_create(&TransitionLabels {
                host: host.clone(),
                to,
            })
            .inc();
        self.breaker_open
            .get_or_create(&HostLabels { host })
            .set(open);
    }

    fn untracked(&self) {
        self.untracked_hosts.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_labels_are_bounded() {
        let m = CallbackMetrics::default();
        for i in 0..MAX_HOST_LABELS {
            assert_eq!(m.host_label(&format!("h{i}:80")), format!("h{i}:80"));
        }
        assert_eq!(m.host_label("late:80"), "other");
        assert_eq!(
            m.host_label("h3:80"),
            "h3:80",
            "a known host keeps its label"
        );
    }

    #[test]
    fn status_classes() {
        assert_eq!(class(None), "none");
        assert_eq!(class(Some(204)), "2xx");
        assert_eq!(class(Some(302)), "3xx");
        assert_eq!(class(Some(429)), "4xx");
        assert_eq!(class(Some(503)), "5xx");
    }
}
