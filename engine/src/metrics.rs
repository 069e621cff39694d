//! Publication counters.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Why a publication was refused.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum RejectReason {
    /// No or wrong API key.
    Unauthorized,
    /// The body was not JSON.
    MalformedJson,
    /// A field failed validation.
    InvalidField,
    /// Body or payload over its limit.
    TooLarge,
    /// Content type missing or not supported.
    UnsupportedMediaType,
    /// The link refused the batch.
    Unavailable,
    /// A feature the publication asks for does not exist yet (AMQP
    /// delayed-delivery headers).
    Unsupported,
}

impl RejectReason {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::Unauthorized => "unauthorized",
            RejectReason::MalformedJson => "malformed_json",
            RejectReason::InvalidField => "invalid_field",
            RejectReason::TooLarge => "too_large",
            RejectReason::UnsupportedMediaType => "unsupported_media_type",
            RejectReason::Unavailable => "unavailable",
            RejectReason::Unsupported => "unsupported",
        }
    }
}

impl EncodeLabelValue for RejectReason {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        std::fmt::Write::write_str(encoder, self.as_str())
    }
}

/// Label set for [`PublishMetrics::rejected`].
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RejectLabels {
    /// Intake path: `http` or `amqp`.
    pub source: &'static str,
    /// Why.
    pub reason: RejectReason,
}

/// Label set for [`PublishMetrics::accepted`].
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    /// Intake path: `http` or `amqp`.
    pub source: &'static str,
}

/// Counters for the publication intake.
#[derive(Debug, Clone, Default)]
pub struct PublishMetrics {
    /// Notifications accepted.
    pub accepted: Family<SourceLabels, Counter>,
    /// Publications refused, by reason.
    pub rejected: Family<RejectLabels, Counter>,
}

impl PublishMetrics {
    /// Register the counters under `herald_notifications_*`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "herald_notifications_accepted",
            "Notifications accepted for routing",
            self.accepted.clone(),
        );
        registry.register(
            "herald_notifications_rejected",
            "Publications refused, by reason",
            self.rejected.clone(),
        );
    }

    /// Count one refusal.
    pub fn reject(&self, source: &'static str, reason: RejectReason) {
        self.rejected
            .get_or_create(&RejectLabels { source, reason })
            .inc();
    }
}
