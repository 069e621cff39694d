//! Prometheus metrics of the gateway (served at `GET /metrics`).
//!
//! - [`latency`]: a histogram that takes no lock, for the delivery path.
//! - [`traffic`]: bytes and delivery latency by transport, counted by the
//!   sessions as they write.
//!
//! The process metrics (`process_*`) and `herald_build_info` come from
//! `herald_engine`, as for the router.

pub mod latency;
pub mod traffic;

pub use traffic::{Traffic, TransportMeter};

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Browser transports.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum Transport {
    /// STOMP over a raw WebSocket (`/ws`, `/sockjs/websocket`).
    Websocket,
    /// SockJS over WebSocket.
    SockjsWebsocket,
    /// SockJS xhr-streaming.
    XhrStreaming,
    /// SockJS xhr-polling.
    XhrPolling,
    /// SockJS EventSource.
    Eventsource,
}

/// Label values are the snake_case names Prometheus users expect.
macro_rules! label_value {
    ($ty:ty { $($variant:ident => $name:literal),* $(,)? }) => {
        impl $ty {
            /// The label value.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(<$ty>::$variant => $name,)*
                }
            }

            /// Every value, to pre-create the series at zero.
            pub const ALL: &'static [$ty] = &[$(<$ty>::$variant),*];
        }

        impl EncodeLabelValue for $ty {
            fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
                std::fmt::Write::write_str(encoder, self.as_str())
            }
        }
    };
}

label_value!(Transport {
    Websocket => "websocket",
    SockjsWebsocket => "sockjs_websocket",
    XhrStreaming => "xhr_streaming",
    XhrPolling => "xhr_polling",
    Eventsource => "eventsource",
});
label_value!(RefuseReason {
    BadHandshake => "bad_handshake",
    SessionLimit => "session_limit",
    Auth => "auth",
    ConnectTimeout => "connect_timeout",
    Version => "version",
    InboundFull => "inbound_full",
    SniffShed => "sniff_shed",
    SniffAddressShed => "sniff_address_shed",
    HeaderTimeout => "header_timeout",
    BodyTooLarge => "body_too_large",
    RateLimited => "rate_limited",
    UserSessionLimit => "user_session_limit",
    ProxyUntrusted => "proxy_untrusted",
    ProxyMalformed => "proxy_malformed",
    ProxyTimeout => "proxy_timeout",
    WriteTimeout => "write_timeout",
    BodyTimeout => "body_timeout",
});
label_value!(DropReason {
    QueueFullDropOldest => "queue_full_drop_oldest",
    SlowConsumer => "slow_consumer",
    MailboxBufferEvicted => "mailbox_buffer_evicted",
    Expired => "expired",
});
label_value!(ProtocolError {
    MalformedFrame => "malformed_frame",
    Oversized => "oversized",
    InvalidUtf8 => "invalid_utf8",
    Websocket => "websocket",
    Refused => "refused",
});

/// Label: transport.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TransportLabels {
    /// Which transport.
    pub transport: Transport,
}

/// Why a connection or session was refused.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum RefuseReason {
    /// Not a valid WebSocket upgrade.
    BadHandshake,
    /// `session.max_sessions` reached.
    SessionLimit,
    /// Missing, forged, expired or wrong-algorithm token.
    Auth,
    /// No CONNECT within `session.connect_timeout_ms`.
    ConnectTimeout,
    /// No common STOMP version.
    Version,
    /// A SockJS `xhr_send` found the session's inbound queue full (503).
    InboundFull,
    /// A connection whose request head the front was still reading, shed
    /// because `session.max_sniffing` were and a new one came: the oldest
    /// of all makes room. Answered 503 and closed.
    SniffShed,
    /// A connection whose request head the front was still reading, shed
    /// because its client address had `session.max_sniffing_per_address`
    /// and a new one came from it: that address's oldest makes room.
    /// Answered 503 and closed.
    SniffAddressShed,
    /// The front did not see a whole request head (or a streaming
    /// receiver's body) within `session.header_timeout_ms` of accept:
    /// closed. (hyper's own timeouts, which also end idle keep-alive
    /// connections, are not counted.)
    HeaderTimeout,
    /// A native streaming receiver's body over 64 KiB: answered 413.
    BodyTooLarge,
    /// The source address opened connections faster than
    /// `[connection_rate]` allows: answered 429 with `Retry-After`.
    RateLimited,
    /// The user already had `session.max_per_user` sessions here: ERROR
    /// "too many sessions for this user", close 1008.
    UserSessionLimit,
    /// A PROXY protocol header from a peer not in `proxy.trusted`: closed.
    ProxyUntrusted,
    /// A malformed PROXY header, or one over 1 KiB: closed.
    ProxyMalformed,
    /// A PROXY header not whole within `session.header_timeout_ms` of
    /// accept: closed.
    ProxyTimeout,
    /// An HTTP answer the client took no byte of for
    /// `http.write_timeout_ms` (it sends and does not read): closed.
    WriteTimeout,
    /// A request body slower than `http.body_min_bytes_per_sec` after
    /// `http.body_grace_ms`: answered 408 and closed.
    BodyTimeout,
}

/// Label: reason for a refusal.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefuseLabels {
    /// Why.
    pub reason: RefuseReason,
}

/// Why a message was dropped or a session cut.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum DropReason {
    /// Policy `drop-oldest`: the mailbox evicted a message a lagging
    /// session had not been sent; a gap marker took its place.
    QueueFullDropOldest,
    /// A session cut as a slow consumer: with policy `disconnect`, its
    /// mailbox evicted a message it had not been sent; or it made no write
    /// progress for `session.max_lag_ms`; or it let the control frames the
    /// gateway answers with fill `session.queue_bytes`.
    SlowConsumer,
    /// Evicted from a mailbox replay buffer by its count or byte bound.
    MailboxBufferEvicted,
    /// The notification's TTL passed before delivery.
    Expired,
}

/// Label: drop reason.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DropLabels {
    /// Why.
    pub reason: DropReason,
}

/// Protocol errors answered with a STOMP ERROR frame or a WebSocket close.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum ProtocolError {
    /// Malformed STOMP frame.
    MalformedFrame,
    /// Frame or message over a size limit.
    Oversized,
    /// Invalid UTF-8 in a text message or header.
    InvalidUtf8,
    /// WebSocket framing violation.
    Websocket,
    /// A well-formed frame that is not allowed here.
    Refused,
}

/// Label: protocol error kind.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// Which kind.
    pub kind: ProtocolError,
}

/// Every gateway metric.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    /// Live sessions by transport.
    pub sessions: Family<TransportLabels, Gauge>,
    /// Sessions opened (CONNECTED sent) by transport.
    pub sessions_opened: Family<TransportLabels, Counter>,
    /// Live mailboxes.
    pub mailboxes: Gauge,
    /// Mailboxes removed after their TTL.
    pub mailboxes_expired: Counter,
    /// Refused connections and sessions.
    pub refused: Family<RefuseLabels, Counter>,
    /// Connections whose request head is being sniffed now (by the front,
    /// [`crate::front`]), bounded by `session.max_sniffing` (and
    /// `session.max_sniffing_per_address` per client address).
    pub sniffing: Gauge,
    /// Messages queued to sessions (one per session per notification).
    pub deliveries: Counter,
    /// Messages replayed from mailbox buffers on resume.
    pub replayed: Counter,
    /// Gap markers sent (a resume the buffer could not cover, or drops).
    pub gaps: Counter,
    /// Dropped messages and cut sessions.
    pub dropped: Family<DropLabels, Counter>,
    /// Protocol errors.
    pub errors: Family<ErrorLabels, Counter>,
    /// Bytes of control frames (pongs, receipts, ERROR, heart-beats, close,
    /// SockJS frames) waiting for clients, every session together; each
    /// session's share is bounded by `session.queue_bytes`.
    pub queued_control_bytes: Gauge,
    /// Sessions ended because their token's `exp` (plus the leeway) passed.
    pub sessions_token_expired: Counter,
    /// Times a session's window (`session.queue_messages`, `queue_bytes`)
    /// filled and the session went on reading from its mailbox's buffer.
    pub sessions_behind: Counter,
    /// Edge mode: root links currently connected.
    pub root_links: Gauge,
    /// Root brokers configured (`edge.roots`): 0 on a standalone gateway,
    /// what `root_links` should read on a healthy edge.
    pub root_links_configured: Gauge,
    /// Edge mode: root link failures (each followed by a reconnect).
    pub root_reconnects: Counter,
    /// Edge mode: notifications received from roots (a bundle counts each
    /// of its notifications).
    pub uplink_received: Counter,
    /// Edge mode: deliveries from roots that were bundles of several
    /// notifications (each one counted in `uplink_received` too).
    pub uplink_bundles: Counter,
    /// Edge mode: `basic.ack` frames sent to roots, each covering every
    /// delivery routed since the previous one.
    pub uplink_acks: Counter,
    /// Edge mode: notifications from roots that failed validation, and
    /// bundles that could not be read (dropped).
    pub uplink_rejected: Counter,
    /// Both modes: notifications dropped as duplicates of a recent id.
    pub duplicates: Counter,
    /// Both modes: ids forgotten before their dedup window ended because
    /// `edge.dedup_max` was reached (policy evict-oldest).
    pub dedup_evicted: Counter,
    /// Edge mode: presence changes dropped because their queue was full.
    pub presence_dropped: Counter,
    /// Edge mode: presence reports sent to roots.
    pub presence_reports: Counter,
    /// Edge mode: presence reports a slow root link skipped.
    pub presence_lagged: Counter,
    /// Source addresses the connection rate remembers now.
    pub connection_rate_addresses: Gauge,
    /// Addresses the connection rate forgot while they still owed tokens,
    /// to stay within `connection_rate.max_addresses` (evict-oldest).
    pub connection_rate_evicted: Counter,
    /// Bytes each way and delivery latency, by transport.
    pub traffic: Traffic,
    /// Per-topic statistics (`herald_topic_*`): deliveries are counted
    /// by the hub; standalone, the publish API and the delayed service
    /// share it.
    pub topics: herald_engine::stats::TopicStats,
    /// `GET /v1/stats` requests refused (bad paging).
    pub stats_refused: Counter,
    /// Edge mode: stats reports sent to roots.
    pub stats_reports: Counter,
    /// Edge mode: stats reports a slow root link skipped.
    pub stats_lagged: Counter,
}

impl Metrics {
    /// Register every metric.
    pub fn register(&self, registry: &mut Registry) {
        self.precreate();
        self.topics.register(registry);
        registry.register(
            "herald_stats_refused",
            "GET /v1/stats requests refused for a bad query (topics_limit, topics_after)",
            self.stats_refused.clone(),
        );
        registry.register(
            "herald_stats_reports",
            "Edge mode: stats reports sent to root links",
            self.stats_reports.clone(),
        );
        registry.register(
            "herald_stats_reports_lagged",
            "Edge mode: stats reports a slow root link skipped",
            self.stats_lagged.clone(),
        );
        registry.register(
            "herald_sessions",
            "Live browser sessions",
            self.sessions.clone(),
        );
        registry.register(
            "herald_sessions_opened",
            "Browser sessions opened",
            self.sessions_opened.clone(),
        );
        registry.register("herald_mailboxes", "Live mailboxes", self.mailboxes.clone());
        registry.register(
            "herald_mailboxes_expired",
            "Mailboxes removed after their TTL",
            self.mailboxes_expired.clone(),
        );
        registry.register(
            "herald_connections_refused",
            "Connections and sessions refused, by reason",
            self.refused.clone(),
        );
        registry.register(
            "herald_connections_sniffing",
            "Connections whose request head is awaited before routing",
            self.sniffing.clone(),
        );
        registry.register(
            "herald_deliveries",
            "Messages queued to sessions",
            self.deliveries.clone(),
        );
        registry.register(
            "herald_replayed",
            "Messages replayed on resume",
            self.replayed.clone(),
        );
        registry.register(
            "herald_gaps",
            "Gap markers sent to sessions",
            self.gaps.clone(),
        );
        registry.register(
            "herald_dropped",
            "Dropped messages and cut sessions, by reason",
            self.dropped.clone(),
        );
        registry.register(
            "herald_root_links",
            "Root broker links connected (edge mode)",
            self.root_links.clone(),
        );
        registry.register(
            "herald_root_links_configured",
            "Root brokers configured (edge.roots): 0 standalone; herald_root_links below it means a lost link",
            self.root_links_configured.clone(),
        );
        registry.register(
            "herald_root_reconnects",
            "Root broker link failures, each followed by a reconnect",
            self.root_reconnects.clone(),
        );
        registry.register(
            "herald_uplink_received",
            "Notifications received from root brokers (each one of a bundle counted)",
            self.uplink_received.clone(),
        );
        registry.register(
            "herald_uplink_bundles",
            "Deliveries from root brokers that were bundles of several notifications",
            self.uplink_bundles.clone(),
        );
        registry.register(
            "herald_uplink_acks",
            "Acks (multiple) sent to root brokers, each for every delivery routed since the last",
            self.uplink_acks.clone(),
        );
        registry.register(
            "herald_uplink_rejected",
            "Notifications from roots that failed validation, and bundles that could not be read, dropped",
            self.uplink_rejected.clone(),
        );
        registry.register(
            "herald_duplicates",
            "Notifications dropped as duplicates of a recent notification id (both modes)",
            self.duplicates.clone(),
        );
        registry.register(
            "herald_presence_dropped",
            "Presence changes dropped because their queue was full (drop-newest)",
            self.presence_dropped.clone(),
        );
        registry.register(
            "herald_presence_reports",
            "Presence reports sent to root brokers",
            self.presence_reports.clone(),
        );
        registry.register(
            "herald_presence_lagged",
            "Presence reports a slow root link skipped",
            self.presence_lagged.clone(),
        );
        registry.register(
            "herald_dedup_evicted",
            "Ids forgotten early because the dedup set was full (evict-oldest)",
            self.dedup_evicted.clone(),
        );
        registry.register(
            "herald_session_queued_control_bytes",
            "Bytes of control frames (pongs, receipts, ERROR, heart-beats, close) waiting for clients, all sessions",
            self.queued_control_bytes.clone(),
        );
        registry.register(
            "herald_sessions_behind",
            "Times a session's queue filled and it went on reading from its mailbox's buffer",
            self.sessions_behind.clone(),
        );
        registry.register(
            "herald_sessions_token_expired",
            "Sessions ended with ERROR \"token expired\" when their token's exp (plus the leeway) passed",
            self.sessions_token_expired.clone(),
        );
        registry.register(
            "herald_connection_rate_addresses",
            "Source addresses the per-address connection rate remembers",
            self.connection_rate_addresses.clone(),
        );
        registry.register(
            "herald_connection_rate_evicted",
            "Addresses forgotten by the connection rate while still limited, to stay within connection_rate.max_addresses (evict-oldest)",
            self.connection_rate_evicted.clone(),
        );
        registry.register(
            "herald_protocol_errors",
            "Protocol errors answered with ERROR or a close, by kind",
            self.errors.clone(),
        );
        self.traffic.register(registry);
    }

    /// Create every labelled series at zero so dashboards see them before
    /// the first event.
    pub fn precreate(&self) {
        for &transport in Transport::ALL {
            let _ = self.sessions.get_or_create(&TransportLabels { transport });
            let _ = self
                .sessions_opened
                .get_or_create(&TransportLabels { transport });
        }
        for &reason in RefuseReason::ALL {
            let _ = self.refused.get_or_create(&RefuseLabels { reason });
        }
        for &reason in DropReason::ALL {
            let _ = self.dropped.get_or_create(&DropLabels { reason });
        }
        for &kind in ProtocolError::ALL {
            let _ = self.errors.get_or_create(&ErrorLabels { kind });
        }
    }

    /// The counters of the HTTP deadlines (`[http]`): this family's
    /// `write_timeout` and `body_timeout` series.
    pub fn deadline_counters(&self) -> herald_engine::deadline::DeadlineCounters {
        let counter = |reason| self.refused.get_or_create(&RefuseLabels { reason }).clone();
        herald_engine::deadline::DeadlineCounters {
            write_timeout: counter(RefuseReason::WriteTimeout),
            body_timeout: counter(RefuseReason::BodyTimeout),
        }
    }

    /// Count a refusal.
    pub fn refuse(&self, reason: RefuseReason) {
        self.refused.get_or_create(&RefuseLabels { reason }).inc();
    }

    /// Count a drop.
    pub fn drop_one(&self, reason: DropReason) {
        self.dropped.get_or_create(&DropLabels { reason }).inc();
    }

    /// Count a protocol error.
    pub fn error(&self, kind: ProtocolError) {
        self.errors.get_or_create(&ErrorLabels { kind }).inc();
    }

    /// The live-session gauge for a transport.
    pub fn sessions_gauge(&self, transport: Transport) -> Gauge {
        self.sessions
            .get_or_create(&TransportLabels { transport })
            .clone()
    }
}
