//! Counters of the AMQP link: connection state, reconnects, and what the
//! broker said about forwards.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Metrics of one supervised AMQP connection. Cheap to clone (shared
/// counters). An edge linked to several roots registers one per root in a
/// sub-registry labelled with the root.
#[derive(Debug, Clone, Default)]
pub struct AmqpMetrics {
    /// 1 while a connection is up (its session running), else 0.
    pub connected: Gauge,
    /// Successful connections after the first one.
    pub reconnects: Counter,
    /// Connection attempts that failed (refused, timed out, TLS or AMQP
    /// handshake, authentication).
    pub connect_failures: Counter,
    /// Sessions that ended with an error: the connection or a channel was
    /// lost, the topology could not be declared, a forward failed.
    pub disconnects: Counter,
    /// Forwards the broker confirmed but could not route: no edge queue was
    /// bound to the edges exchange.
    pub unroutable: Counter,
    /// Forwards the broker refused (`basic.nack`); the delivery is retried.
    pub nacked: Counter,
    /// Messages to the edges that each carried several notifications.
    pub bundles: Counter,
    /// Notifications that went to the edges inside a bundle.
    pub bundled: Counter,
}

impl AmqpMetrics {
    /// Register under `herald_amqp_*`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "herald_amqp_connected",
            "1 while connected to the broker",
            self.connected.clone(),
        );
        registry.register(
            "herald_amqp_reconnects",
            "Connections to the broker made after the first",
            self.reconnects.clone(),
        );
        registry.register(
            "herald_amqp_connect_failures",
            "Failed attempts to connect to the broker",
            self.connect_failures.clone(),
        );
        registry.register(
            "herald_amqp_disconnects",
            "Broker sessions ended by an error (connection or channel lost, declaration or forward failed)",
            self.disconnects.clone(),
        );
        registry.register(
            "herald_amqp_unroutable",
            "Forwards confirmed but routed to no edge queue",
            self.unroutable.clone(),
        );
        registry.register(
            "herald_amqp_nacked",
            "Forwards the broker refused (basic.nack)",
            self.nacked.clone(),
        );
        registry.register(
            "herald_amqp_bundles",
            "Messages to the edges that each carried several notifications",
            self.bundles.clone(),
        );
        registry.register(
            "herald_amqp_bundled",
            "Notifications that went to the edges inside a bundle",
            self.bundled.clone(),
        );
    }
}
