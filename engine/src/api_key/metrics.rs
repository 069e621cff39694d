//! The API keys' own metrics: how many are in use, and their reloads.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Outcome of a reload, a label value.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum ReloadResult {
    /// The new keys are in use.
    Ok,
    /// The reload failed; the previous keys stay.
    Failed,
}

impl EncodeLabelValue for ReloadResult {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        std::fmt::Write::write_str(
            encoder,
            match self {
                ReloadResult::Ok => "ok",
                ReloadResult::Failed => "failed",
            },
        )
    }
}

/// Label set for [`KeyMetrics::reloads`].
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    /// `ok` or `failed`.
    pub result: ReloadResult,
}

/// The API keys' own metrics (held by [`super::ApiKeys`]).
#[derive(Debug, Clone, Default)]
pub struct KeyMetrics {
    /// API keys in use.
    pub keys: Gauge,
    /// Reloads (SIGHUP), by result.
    pub reloads: Family<ReloadLabels, Counter>,
}

impl KeyMetrics {
    /// Register `herald_api_keys` and `herald_api_key_reloads`.
    pub fn register(&self, registry: &mut Registry) {
        for result in [ReloadResult::Ok, ReloadResult::Failed] {
            let _ = self.reloads.get_or_create(&ReloadLabels { result });
        }
        registry.register("herald_api_keys", "API keys in use", self.keys.clone());
        registry.register(
            "herald_api_key_reloads",
            "API key reloads (SIGHUP), by result; a failed one keeps the previous keys",
            self.reloads.clone(),
        );
    }

    /// Count a reload.
    pub fn reloaded(&self, ok: bool) {
        let result = if ok {
            ReloadResult::Ok
        } else {
            ReloadResult::Failed
        };
        self.reloads.get_or_create(&ReloadLabels { result }).inc();
    }
}
