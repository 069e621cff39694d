//! Metrics of alerts (`herald_callback_alerts_*`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Labels of `herald_callback_alerts_total`: 3 kinds x 3 channels x 2
/// outcomes at most.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AlertLabels {
    /// `dead_letter`, `store_unavailable` or `store_recovered`.
    pub kind: &'static str,
    /// `log`, `webhook` or `mail`.
    pub channel: &'static str,
    /// `sent` or `failed`.
    pub outcome: &'static str,
}

/// Counters of alerts. Cheap to clone (clones share the counts).
#[derive(Debug, Clone, Default)]
pub struct AlertMetrics {
    /// Alerts by kind, channel and outcome. One alert is one dead letter,
    /// outage or recovery: `log` counts its log line; `webhook` and `mail`
    /// count it once the message that carries it (alone, or in a summary)
    /// was sent or failed.
    pub alerts: Family<AlertLabels, Counter>,
    /// Alerts not queued for the webhook and mail because the queue was
    /// full (policy: drop the newest; each still has its log line).
    pub dropped: Counter,
}

impl AlertMetrics {
    /// Register everything under `herald_callback_alerts*`.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("herald_callback");
        r.register(
            "alerts",
            "Alerts (dead letters, store outages and recoveries) by kind, channel (log, webhook, mail) and outcome (sent, failed)",
            self.alerts.clone(),
        );
        r.register(
            "alerts_dropped",
            "Alerts not queued for the webhook and mail because the queue was full (each still logged)",
            self.dropped.clone(),
        );
    }

    /// Count `n` alerts.
    pub(crate) fn count(
        &self,
        kind: &'static str,
        channel: &'static str,
        outcome: &'static str,
        n: u64,
    ) {
        self.alerts
            .get_or_create(&AlertLabels {
                kind,
                channel,
                outcome,
            })
            .inc_by(n);
    }
}
