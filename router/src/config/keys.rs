//! The keys only `herald-router` reads, one row each: its path in the TOML
//! file, its type, whether it is a secret, older variable names, and what
//! it does, the one description of the key (the fields of
//! [`super::Config`] name their key and point here). With the rows both
//! binaries share (`herald_engine::config::table`) they make the router's
//! [`TABLE`]: its `HERALD_ROUTER_…` variables, the redaction of
//! `--print-config`, and its part of docs/configuration.md.

use herald_engine::config::Kind::{Enum, Int, List, Str};
use herald_engine::config::Secret::UrlPassword;
use herald_engine::config::{Binary, Key, Table, key};

/// Every key of the router: the common rows and [`OWN`].
pub const TABLE: Table = Table::new(Binary::Router, OWN);

/// The keys only this binary reads, in the order of the documentation:
/// top-level keys, then each section.
pub const OWN: &[Key] = &[
    key(
        "amqp.url",
        Str,
        "Broker URL, `amqp://user:pass@host:port/vhost` or `amqps://…`.",
    )
    .secret(UrlPassword)
    .aliases(&["HERALD_ROUTER_AMQP_URL"]),
    key(
        "amqp.connection_name",
        Str,
        "Connection name the broker shows.",
    ),
    key(
        "amqp.prefetch",
        Int,
        "Most unacknowledged publications in flight (`basic.qos`).",
    )
    .aliases(&["HERALD_ROUTER_PREFETCH"]),
    key(
        "amqp.reconnect_initial_ms",
        Int,
        "First reconnect delay (grows exponentially, with jitter).",
    )
    .aliases(&["HERALD_ROUTER_RECONNECT_INITIAL_MS"]),
    key("amqp.reconnect_max_ms", Int, "Longest reconnect delay.")
        .aliases(&["HERALD_ROUTER_RECONNECT_MAX_MS"]),
    key(
        "amqp.connect_timeout_ms",
        Int,
        "Longest a connection attempt may take.",
    ),
    key(
        "amqp.publish_timeout_ms",
        Int,
        "Longest the HTTP API waits for the broker's confirms (then 503).",
    ),
    key(
        "amqp.bundle_max",
        Int,
        "Most notifications in one message to the edges: a batch (an HTTP batch, delayed notifications falling due) goes as bundles of up to this many. 1 sends one message per notification, for edges older than bundles.",
    ),
    key(
        "amqp.bundle_max_bytes",
        Int,
        "Most bytes in one bundle; a notification larger than this goes alone. At most 16 MiB (16777216): edges drop larger deliveries.",
    ),
    key(
        "amqp.topology.exchange",
        Str,
        "Topic exchange backends publish to.",
    ),
    key(
        "amqp.topology.queue",
        Str,
        "Durable queue bound to `exchange` with `#`: the router consumes it.",
    ),
    key(
        "amqp.topology.dead_exchange",
        Str,
        "Fanout exchange for publications that fail validation.",
    ),
    key(
        "amqp.topology.dead_queue",
        Str,
        "Durable queue bound to `dead_exchange`, where dead letters wait for a human.",
    ),
    key(
        "amqp.topology.edges_exchange",
        Str,
        "Fanout exchange every edge binds its own queue to.",
    ),
    key(
        "amqp.topology.presence_exchange",
        Str,
        "Fanout exchange edges publish presence reports to.",
    ),
    key(
        "amqp.topology.presence_queue",
        Str,
        "Durable queue bound to `presence_exchange`, shared by the routers of this root.",
    ),
    key(
        "redis.url",
        Str,
        "One Redis server: `redis://host:port/db` (`rediss://` for TLS).",
    )
    .secret(UrlPassword)
    .aliases(&["HERALD_ROUTER_REDIS_URL"]),
    key("redis.cluster", List, "Or a Redis Cluster: its seed nodes.").secret(UrlPassword),
    key(
        "redis.prefix",
        Str,
        "Key prefix (several deployments can share a Redis).",
    ),
    key(
        "redis.shards",
        Int,
        "Shards the entries are spread over; fixed for the life of the data.",
    ),
    key(
        "redis.connect_timeout_ms",
        Int,
        "Longest a connect may take.",
    ),
    key(
        "redis.response_timeout_ms",
        Int,
        "Longest one Redis request may wait for its answer.",
    ),
    key(
        "redis.operation_timeout_ms",
        Int,
        "Longest one store operation may take in all.",
    ),
    key(
        "redis.presence_edge_ttl_ms",
        Int,
        "An edge's users count as online this long after its last presence report (keep it a few times `edge.presence_heartbeat_ms`).",
    ),
    key(
        "routing.mode",
        Enum(&["fanout", "targeted"]),
        "`fanout`: every notification to every edge (`herald.edges`). `targeted`: user- and client-scoped ones only to the edges holding a recipient (`herald.edges.targeted`), from the edges' presence reports; global ones, and any while the view is in doubt, to every edge. Edges of this version bind both, so routers switch one at a time (docs/architecture.md, targeted routing).",
    ),
    key(
        "routing.stale_ms",
        Int,
        "Targeted: an edge's view is trusted this long after its last report (keep it a few times `edge.presence_heartbeat_ms`), and a router routes to every edge this long after its view starts.",
    ),
    key(
        "routing.forget_ms",
        Int,
        "Targeted: an edge not heard from this long is forgotten (it then gets nothing by its own key). Keep it at least the edges' `edge.queue_expires_secs`, after which its queue is gone anyway.",
    ),
    key(
        "routing.catch_up_ms",
        Int,
        "Targeted: how long a notification sent to chosen edges is kept to be re-sent to an edge a recipient arrives on; longer than a presence report takes to reach the router (`edge.presence_batch_ms` and the queue's lag). Also the longest absence from a dead edge after which a returning user (STOMP `offline-ms`) still gets everything published meanwhile.",
    ),
    key(
        "routing.catch_up_max",
        Int,
        "Targeted: most notifications kept for the catch-up (the oldest forgotten first, counted in `herald_routing_catch_up_evicted_total`).",
    ),
    key(
        "routing.catch_up_max_bytes",
        Int,
        "Targeted: most payload bytes kept for the catch-up.",
    ),
    key(
        "routing.queue_max_length",
        Int,
        "Targeted: most reports waiting in this router's own presence queue (drop-head beyond: the edge whose report went is distrusted until its next snapshot).",
    ),
];
