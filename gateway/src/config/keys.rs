//! The keys only `herald-gateway` reads, one row each: its path in the
//! TOML file, its type, whether it is a secret, older variable names, and
//! what it does, the one description of the key (the fields of
//! [`super::Config`] name their key and point here). With the rows both
//! binaries share (`herald_engine::config::table`) they make the gateway's
//! [`TABLE`]: its `HERALD_…` variables, the redaction of `--print-config`,
//! and its part of docs/configuration.md.

use herald_engine::config::Kind::{Bool, Enum, Float, Int, List, Str, Toml};
use herald_engine::config::Secret::{Fields, UrlPassword, Yes};
use herald_engine::config::{Binary, Key, Table, key};

/// Every key of the gateway: the common rows and [`OWN`].
pub const TABLE: Table = Table::new(Binary::Gateway, OWN);

/// The keys only this binary reads, in the order of the documentation:
/// top-level keys, then each section.
pub const OWN: &[Key] = &[
    key("data_dir", Str, "Where Herald keeps its files: dev credentials and, standalone, the delayed-notification store (`DATA_DIR/delayed`)."),
    key("auth.jwt_secret", Str, "HS256 shared secret (at least 32 bytes): the default key.").secret(Yes).aliases(&["HERALD_JWT_SECRET"]),
    key("auth.jwt_public_key_file", Str, "PEM file with the RS256 or ES256 public key: the default key.").aliases(&["HERALD_JWT_PUBLIC_KEY_FILE"]),
    key("auth.jwt_algorithm", Str, "`HS256`, `RS256` or `ES256`; defaults to HS256 with a secret.").aliases(&["HERALD_JWT_ALGORITHM"]),
    key("auth.leeway_secs", Int, "Clock skew tolerated on `exp` and `nbf`, in seconds; a session ends this long after its token's `exp`."),
    key("auth.keys", Toml, "Keys chosen by the token header's `kid`, `[[auth.keys]]` tables: `kid`, `algorithm`, and `secret` or `public_key_file`. The variable: `[{ kid = \"2026-01\", algorithm = \"HS256\", secret = \"…\" }]`, or one table without the brackets.").secret(Fields(&["secret"])),
    key("auth.jwks_file", Str, "A JWKS file (RFC 7517): RSA, EC (P-256, P-384) and `oct` keys, each chosen by its `kid`."),
    key("auth.default_kid", Str, "The key (of `keys` or the JWKS file) for tokens without `kid`, when no single-key setting is made."),
    key("auth.issuers", List, "Accepted `iss` values; empty: `iss` is not checked. When set, a token must carry one of them."),
    key("auth.audiences", List, "Accepted `aud` values; empty: `aud` is not checked. When set, a token's `aud` must name one of them."),
    key("session.max_sessions", Int, "Most concurrent sessions; the next upgrade gets 503.").aliases(&["HERALD_MAX_SESSIONS"]),
    key("session.max_per_user", Int, "Most sessions of one user (a token's `sub` on its `site`) on this gateway at once; the next CONNECT gets ERROR \"too many sessions for this user\" and is closed. Users are hashed to edges, so this is about a user's limit across the deployment too."),
    key("session.connect_timeout_ms", Int, "Time allowed between the upgrade and a valid CONNECT."),
    key("session.header_timeout_ms", Int, "Time a new connection has, from accept, to send its whole request head (a native streaming receiver: its body too), for `/ws`, SockJS and every other route alike; then it is closed without an answer. Also hyper's header read timeout on a keep-alive connection."),
    key("session.max_sniffing", Int, "Most new connections whose request head the front is still reading (before it sorts them to the publish path, a WebSocket, a SockJS stream or hyper; a native SockJS streaming receiver: its body too). A new connection is always taken in: when this many are being read, the oldest of them is answered 503 and closed (`sniff_shed`)."),
    key("session.max_sniffing_per_address", Int, "Most of those from one client address (an IPv6 client: its /64; the client a PROXY header names, behind a trusted proxy). A new connection from an address that has this many sheds that address's oldest (503, `sniff_address_shed`), so one address never takes more and others never wait for it. Trusted proxies' own connections count against `max_sniffing` only. At least `max_sniffing` turns the share off."),
    key("session.heartbeat_send_ms", Int, "Shortest interval at which the server sends heart-beats (`sx`)."),
    key("session.heartbeat_receive_ms", Int, "Shortest interval at which the server wants heart-beats (`sy`)."),
    key("session.max_frame_bytes", Int, "Largest inbound STOMP frame (and WebSocket message)."),
    key("session.max_headers", Int, "Most headers in an inbound frame."),
    key("session.max_header_bytes", Int, "Longest inbound header line."),
    key("session.max_subscriptions", Int, "Most subscriptions per session."),
    key("session.queue_messages", Int, "Most messages queued for one session (its window onto the mailbox: beyond it, the session reads on from the mailbox's buffer)."),
    key("session.queue_bytes", Int, "Most payload bytes queued for one session (as `queue_messages`), and the bound on the control frames waiting for its socket."),
    key("session.when_full", Enum(&["disconnect", "drop-oldest"]), "What happens when the mailbox evicts a message a lagging session has not been sent (only past `mailbox.unsent_bytes`): `disconnect` cuts the session (ERROR, close 1008; it resumes and replays what is still buffered), `drop-oldest` puts a `herald.gap` in its place.").aliases(&["HERALD_WHEN_FULL"]),
    key("session.max_lag_ms", Int, "Longest a session may go without write progress (its client taking bytes) while something waits for it; then it is cut as a slow consumer, whatever `when_full` says."),
    key("connection_rate.per_sec", Float, "New connections a second per source address, on average; 0 turns the limit off. A connection over it is answered 429 with `Retry-After` and closed. Off by default: users behind one NAT share an address, and behind a proxy not in `proxy.trusted` every browser is the proxy's; how many half-read heads one address may hold is bounded by `session.max_sniffing_per_address` instead."),
    key("connection_rate.burst", Int, "Connections one address may open at once before the rate applies."),
    key("connection_rate.max_addresses", Int, "Addresses remembered; beyond it refilled ones are forgotten first, then the oldest (evict-oldest, counted)."),
    key("mailbox.ttl_secs", Int, "How long a mailbox outlives its user's last session.").aliases(&["HERALD_MAILBOX_TTL_SECS"]),
    key("mailbox.buffer_messages", Int, "Most messages kept for replay, and for sessions that fell behind to read on from."),
    key("mailbox.buffer_bytes", Int, "Most payload bytes kept (as `buffer_messages`)."),
    key("mailbox.unsent_bytes", Int, "Most bytes a mailbox holds while a live session of its user has not been sent its oldest message: beyond `buffer_messages` and `buffer_bytes`, what a session was not sent yet is not evicted under it, so a burst for a user who reads waits here and arrives whole, however many messages. Counted as the messages packed (names and payload) and 50 bytes each of bookkeeping. Past it the oldest is evicted all the same and `session.when_full` applies to the sessions that lose it: a client that stops reading is cut by this (bytes) or by `session.max_lag_ms` (time), never by a message count."),
    key("mailbox.expiry_tick_ms", Int, "How often expired mailboxes are removed."),
    key("mailbox.max_expirations_per_tick", Int, "Most mailboxes removed per tick, so mass expiry makes no spike."),
    key("sockjs.heartbeat_ms", Int, "Interval of SockJS `h` frames when nothing else is sent."),
    key("sockjs.session_timeout_ms", Int, "How long a session survives without a receiving request."),
    key("sockjs.streaming_limit_bytes", Int, "Bytes after which an xhr-streaming or EventSource response ends (the client opens a new one), so browsers can free what they buffered."),
    key("sockjs.max_send_bytes", Int, "Largest `xhr_send` body; 413 beyond."),
    key("sockjs.jsessionid", Bool, "Set a `JSESSIONID` cookie (for load balancers that stick by it) and answer `cookie_needed: true` in `/info`."),
    key("sockjs.websocket", Bool, "Offer the websocket transport in `/info`."),
    key("sockjs.test_endpoints", Bool, "Mount the SockJS protocol test suite's services (`/echo`, `/close`, `/disabled_websocket_echo`, `/cookie_needed_echo`). Tests only.").aliases(&["HERALD_SOCKJS_TEST_ENDPOINTS"]),
    key("edge.id", Str, "This edge's stable id: its queue on every root is `herald.edge.<id>`, so it must survive restarts.").aliases(&["HERALD_EDGE_ID"]),
    key("edge.roots", List, "AMQP URLs of every root broker; empty means standalone. The variable is comma-separated.").secret(UrlPassword).aliases(&["HERALD_ROOTS"]),
    key("edge.exchange", Str, "The fanout exchange routers publish to on each root."),
    key("edge.prefetch", Int, "Unacknowledged deliveries per root link."),
    key("edge.queue_expires_secs", Int, "How long a root keeps this edge's queue once the edge is gone."),
    key("edge.dedup_window_secs", Int, "Window in which a repeated notification id reaches no mailbox. Both modes: standalone deduplicates what the publish API and the delayed firer hand the hub, an edge what its roots deliver. (The key keeps its `edge.` name from when only edges deduplicated, so existing configurations keep working.) 0 turns deduplication off."),
    key("edge.dedup_max", Int, "Most ids remembered for deduplication, both modes (the oldest forgotten first, counted in `herald_dedup_evicted_total`)."),
    key("edge.reconnect_initial_ms", Int, "First reconnect delay after a broker connection fails (grows exponentially, with jitter). Read under its old name `reconnect_min_ms` too, with a deprecation warning."),
    key("edge.reconnect_max_ms", Int, "Longest reconnect delay."),
    key("edge.connect_timeout_ms", Int, "Longest a connection attempt to a root may take."),
    key("edge.presence_exchange", Str, "The fanout exchange presence reports go to on each root."),
    key("edge.presence_batch_ms", Int, "Longest a presence change waits before it is reported."),
    key("edge.presence_heartbeat_ms", Int, "Longest time between two presence reports (an empty one is a heartbeat: routers count this edge's users online while they come)."),
    key("edge.presence_queue", Int, "Bound of the queue of presence changes (drop-newest when full)."),
    key("edge.presence_sync_ms", Int, "Time between two snapshots of every mailbox this edge holds, which routers routing by edge (`routing.mode = \"targeted\"`) need to trust their view of it after they start or miss a report; one is also sent whenever a root link comes up."),
    key("edge.uplink_client", Enum(&["herald", "lapin"]), "The AMQP client of the root links: `herald`, Herald's own consumer, whose task reads the socket itself (no thread hand-off per delivery), or `lapin`, which runs each connection on a thread of its own. `amqps://` roots always use lapin."),
    key("proxy.protocol", Bool, "Read a PROXY protocol header (v1 or v2, HAProxy's `send-proxy` / `send-proxy-v2`) at the start of connections from `trusted` peers and take the client's address from it. A connection from a trusted peer without a header is served as a direct one (the proxy's own health checks); a header from an untrusted peer, or a malformed, oversized or slow one, gets the connection closed, logged and counted. Off: `X-Forwarded-For` from trusted peers names the client."),
    key("proxy.trusted", List, "The proxies, as CIDRs (`127.0.0.1/32`, `10.0.0.0/8`, `::1/128`; a bare address is a single host). Empty: no peer is a proxy and every connection's own address is the client's.").example("10.0.0.0/8, ::1/128"),
];
