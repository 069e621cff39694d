//! Publication counters, and the HTTP API's counters by API key.

use std::sync::Arc;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::api_key::Operation;

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
    /// The API key may not publish, or not to these sites (HTTP 403).
    Forbidden,
    /// The API key is over its publish rate (HTTP 429).
    RateLimited,
    /// The body came slower than `http.body_min_bytes_per_sec` (HTTP 408).
    BodyTimeout,
}

impl RejectReason {
    /// Every reason, to create the series at zero.
    pub const ALL: [RejectReason; 10] = [
        RejectReason::Unauthorized,
        RejectReason::MalformedJson,
        RejectReason::InvalidField,
        RejectReason::TooLarge,
        RejectReason::UnsupportedMediaType,
        RejectReason::Unavailable,
        RejectReason::Unsupported,
        RejectReason::Forbidden,
        RejectReason::RateLimited,
        RejectReason::BodyTimeout,
    ];

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
            RejectReason::Forbidden => "forbidden",
            RejectReason::RateLimited => "rate_limited",
            RejectReason::BodyTimeout => "body_timeout",
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

/// Why the HTTP API refused a request on account of its API key.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum KeyRefusal {
    /// No key, or not a configured one (401).
    Unauthorized,
    /// The key may not perform the operation, or not on these sites (403).
    Forbidden,
    /// The key is over its publish rate (429).
    RateLimited,
}

impl KeyRefusal {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyRefusal::Unauthorized => "unauthorized",
            KeyRefusal::Forbidden => "forbidden",
            KeyRefusal::RateLimited => "rate_limited",
        }
    }
}

impl EncodeLabelValue for KeyRefusal {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        std::fmt::Write::write_str(encoder, self.as_str())
    }
}

/// Label set for [`PublishMetrics::key_refused`].
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KeyRefusedLabels {
    /// The key's name; empty when no key matched.
    pub api_key: Arc<str>,
    /// What the request asked to do.
    pub operation: Operation,
    /// Why it was refused.
    pub reason: KeyRefusal,
}

/// Label set for [`PublishMetrics::key_notifications`].
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KeyLabels {
    /// The key's name.
    pub api_key: Arc<str>,
}

/// Counters for the publication intake.
#[derive(Debug, Clone, Default)]
pub struct PublishMetrics {
    /// Notifications accepted.
    pub accepted: Family<SourceLabels, Counter>,
    /// Publications refused, by reason.
    pub rejected: Family<RejectLabels, Counter>,
    /// HTTP requests refused for their API key (every endpoint), by key
    /// name, operation and reason.
    pub key_refused: Family<KeyRefusedLabels, Counter>,
    /// Notifications accepted over HTTP, by the name of the key that
    /// published them.
    pub key_notifications: Family<KeyLabels, Counter>,
    /// Per-topic statistics (`accepted` is counted here); registered by
    /// its owner, shared with the delayed service and the hub.
    pub topics: crate::stats::TopicStats,
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
        self.register_key_refusals(registry);
        registry.register(
            "herald_api_key_notifications",
            "Notifications accepted over HTTP, by the name of the API key that published them",
            self.key_notifications.clone(),
        );
    }

    /// Register `herald_api_key_refused` alone: what a process that serves
    /// no publish API counts (an edge whose `/metrics` takes a key).
    pub fn register_key_refusals(&self, registry: &mut Registry) {
        registry.register(
            "herald_api_key_refused",
            "HTTP requests refused for their API key (401 unauthorized, 403 forbidden, 429 rate_limited), by key name and operation",
            self.key_refused.clone(),
        );
    }

    /// Create the accepted and rejected series of each intake path in
    /// `sources` (`http`, `amqp`) at zero, so a rate or an alert's
    /// `increase` sees the first one.
    pub fn precreate(&self, sources: &[&'static str]) {
        for &source in sources {
            let _ = self.accepted.get_or_create(&SourceLabels { source });
            for reason in RejectReason::ALL {
                let _ = self
                    .rejected
                    .get_or_create(&RejectLabels { source, reason });
            }
        }
    }

    /// Count a request refused for its key.
    pub fn refuse_key(&self, api_key: Option<Arc<str>>, operation: Operation, reason: KeyRefusal) {
        self.key_refused
            .get_or_create(&KeyRefusedLabels {
                api_key: api_key.unwrap_or_else(|| Arc::from("")),
                operation,
                reason,
            })
            .inc();
    }

    /// Count one refusal.
    pub fn reject(&self, source: &'static str, reason: RejectReason) {
        self.rejected
            .get_or_create(&RejectLabels { source, reason })
            .inc();
    }
}

/// The labels of `herald_build_info`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
    commit: String,
}

/// Register what every Herald process exposes about itself: the build
/// ([`register_build_info`]) and the process (`process_*`,
/// [`crate::process::metrics`]).
pub fn register_process(registry: &mut Registry, version: &str, commit: &str) {
    register_build_info(registry, version, commit);
    crate::process::metrics::register(registry);
}

/// Register `herald_build_info{version, commit} 1`, the Prometheus idiom
/// for which build runs (join it to other series on the instance).
pub fn register_build_info(registry: &mut Registry, version: &str, commit: &str) {
    let info = Family::<BuildLabels, prometheus_client::metrics::gauge::Gauge>::default();
    info.get_or_create(&BuildLabels {
        version: version.to_owned(),
        commit: commit.to_owned(),
    })
    .set(1);
    registry.register(
        "herald_build_info",
        "The build that runs: 1, with its version and commit",
        info,
    );
}

#[cfg(test)]
mod build_info_tests {
    use super::*;

    #[test]
    fn build_info_names_version_and_commit() {
        let mut r = Registry::default();
        register_build_info(&mut r, "0.1.0", "abc123");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        assert!(
            text.contains(r#"herald_build_info{version="0.1.0",commit="abc123"} 1"#),
            "{text}"
        );
    }
}
