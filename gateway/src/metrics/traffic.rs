//! What sessions write and read, by transport: bytes each way, and the
//! delivery latency of every MESSAGE frame (from when Herald accepted the
//! notification, or a delayed one fired, to when the frame was handed to
//! the socket).
//!
//! Hot path: a session resolves its transport's [`TransportMeter`] once
//! (an index into a fixed array, no lock, no lookup) and counts with
//! relaxed atomic adds, one per write for bytes and one per frame for
//! latency, reading the clock once per write. Nothing is allocated.

use std::sync::Arc;
use std::time::SystemTime;

use herald_protocol::envelope::Accepted;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::latency::LatencyHistogram;
use super::{Transport, TransportLabels};

/// One transport's counters, shared by all its sessions.
#[derive(Debug, Clone, Default)]
pub struct TransportMeter {
    /// Bytes written to clients.
    pub bytes_sent: Counter,
    /// Bytes read from clients.
    pub bytes_received: Counter,
    /// Acceptance to socket, per MESSAGE frame.
    pub latency: LatencyHistogram,
}

impl TransportMeter {
    /// Count one delivered frame of a notification accepted `accepted`,
    /// handed to the socket at `now_micros` (microseconds after the Unix
    /// epoch, [`now_micros`]); an unknown acceptance is not counted.
    pub fn delivered(&self, accepted: Accepted, now_micros: u64) {
        if let Some(micros) = accepted.micros_before(now_micros) {
            self.latency.observe_micros(micros);
        }
    }
}

/// The wall clock as microseconds after the Unix epoch, what
/// [`Accepted`] is compared with.
pub fn now_micros() -> u64 {
    Accepted::at(SystemTime::now()).unix_micros().unwrap_or(0)
}

/// Every transport's meter, and the families that export them.
#[derive(Debug, Clone)]
pub struct Traffic {
    sent: Family<TransportLabels, Counter>,
    received: Family<TransportLabels, Counter>,
    latency: Family<TransportLabels, LatencyHistogram>,
    /// By `Transport as usize`: the same counters as the families'.
    meters: Arc<[TransportMeter]>,
}

impl Default for Traffic {
    fn default() -> Self {
        let sent = Family::<TransportLabels, Counter>::default();
        let received = Family::<TransportLabels, Counter>::default();
        let latency = Family::<TransportLabels, LatencyHistogram>::default();
        let meters = Transport::ALL
            .iter()
            .enumerate()
            .map(|(i, &transport)| {
                debug_assert_eq!(transport as usize, i);
                let labels = TransportLabels { transport };
                TransportMeter {
                    bytes_sent: sent.get_or_create(&labels).clone(),
                    bytes_received: received.get_or_create(&labels).clone(),
                    latency: latency.get_or_create(&labels).clone(),
                }
            })
            .collect();
        Traffic {
            sent,
            received,
            latency,
            meters,
        }
    }
}

impl Traffic {
    /// The meter of `transport`.
    pub fn meter(&self, transport: Transport) -> &TransportMeter {
        &self.meters[transport as usize]
    }

    /// Register the three families.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "herald_bytes_sent",
            "Bytes written to browsers after the handshake, by transport (WebSocket: every frame; SockJS HTTP transports: the frames handed to the receiving request, response heads not counted)",
            self.sent.clone(),
        );
        registry.register(
            "herald_bytes_received",
            "Bytes read from browsers after the handshake, by transport (WebSocket transports: every frame; SockJS HTTP transports: xhr_send bodies, under the transport the session receives with)",
            self.received.clone(),
        );
        registry.register(
            "herald_delivery_latency_seconds",
            "From when Herald accepted a notification (HTTP or AMQP, at this gateway or at the router) to when its MESSAGE frame was handed to the socket, by transport; a delayed notification is measured from when it fired, not when it was accepted. Live deliveries only: frames read back from a mailbox's buffer (resume replays, a backlog behind a full window) are not observed. Across hosts it includes their clock offset",
            self.latency.clone(),
        );
    }
}
