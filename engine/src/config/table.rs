//! The table of a binary's configuration keys: the rows both binaries
//! share (here: the top-level keys they have in common and the sections of
//! the engine, `[publish]`, `[http]`, `[schedule]`, `[presence]`, `[callbacks]`), and
//! the binary's own rows, which its crate keeps
//! (`gateway/src/config/keys.rs`, `router/src/config/keys.rs`). A row says
//! the key's path in the TOML file, its type, whether it is a secret, older
//! variable names, and what it does; it is the one description of the key.
//! The variables (`HERALD_…`, `HERALD_ROUTER_…`), the environment overlay
//! ([`super::env`]), the redaction of `--print-config` ([`super::redact`])
//! and the page docs/configuration.md ([`super::page`]) are all made from a
//! binary's [`Table`]; each binary's tests check that every key of its
//! configuration structs has a row, and that the page is current
//! ([`super::coverage`]).
//!
//! Arrays of tables and tables of tables (`api_key`, `auth.keys`,
//! `schedule.topics`) are one row each: their variable holds a TOML inline
//! value.

use super::key::Kind::{Bool, Enum, Int, List, Str, Toml};
use super::key::Secret::{Fields, Yes};
use super::key::{Binary, Key, key};

/// A binary's keys: the common rows and its own.
#[derive(Debug, Clone, Copy)]
pub struct Table {
    /// The binary that reads them (the prefix of their variables).
    pub binary: Binary,
    parts: [&'static [Key]; 3],
}

impl Table {
    /// `binary`'s table: the common rows ([`TOP`], [`SECTIONS`]) and
    /// `own`, whose top-level keys come first, then its sections.
    pub const fn new(binary: Binary, own: &'static [Key]) -> Table {
        Table {
            binary,
            parts: [TOP, own, SECTIONS],
        }
    }

    /// A table of `keys` alone, without the common rows (for tests of the
    /// machinery).
    pub const fn only(binary: Binary, keys: &'static [Key]) -> Table {
        Table {
            binary,
            parts: [&[], keys, &[]],
        }
    }

    /// Every key, in the order of the documentation: the top-level keys
    /// (the common ones, then the binary's), the binary's sections, then
    /// the common sections.
    pub fn keys(&self) -> impl Iterator<Item = &'static Key> + use<> {
        self.parts.into_iter().flatten()
    }
}

/// The top-level keys of both binaries.
pub const TOP: &[Key] = &[
    key("listen", Str, "Address to listen on: browsers, the publish API, `/healthz`, `/readyz`, `/metrics` (the router: its HTTP API and probes)."),
    key("log_format", Enum(&["text", "json"]), "Log output format."),
    key("api_keys", List, "Plain API keys for the publish API and, with `metrics_require_key`, `/metrics` (every operation, every site), named `key-1`, `key-2`, … by position. The variable is comma-separated.").secret(Yes),
    key("api_key", Toml, "Named API keys, `[[api_key]]` tables: `name`, the key from `key`, `key_file` or `key_env`, `ops`, `sites`, `tenant`, `rate_per_sec`, `burst` (docs/api-keys.md). The variable (named so that it does not take `HERALD_API_KEY`, which a backend sets to the key it calls Herald with): `[{ name = \"billing\", key_env = \"BILLING_KEY\" }]`, or one table without the brackets.").secret(Fields(&["key"])).env_name("NAMED_API_KEYS"),
    key("metrics_require_key", Bool, "`GET /metrics` needs an API key allowed the `metrics` operation (`Authorization: Bearer KEY` or `X-Api-Key: KEY`; plain keys and named keys without `ops` have it): 401 or 403 otherwise, counted in `herald_api_key_refused_total{operation=\"metrics\"}`. Off: anyone who reaches `/metrics` reads it, API key names included. On, some key must allow `metrics` (an edge loads `api_keys` and `[[api_key]]` for it, and reloads them on SIGHUP). `/healthz` and `/readyz` stay open. docs/monitoring.md"),
    key("shutdown_grace_ms", Int, "How long shutdown waits for sessions (the router: HTTP requests and forwards) to drain."),
];

/// The sections of both binaries, the engine's: `[publish]`, `[http]`,
/// `[schedule]`, `[presence]`, `[callbacks]`.
pub const SECTIONS: &[Key] = &[
    key("publish.max_payload_bytes", Int, "Largest payload.").aliases(&["HERALD_ROUTER_MAX_PAYLOAD_BYTES"]),
    key("publish.max_body_bytes", Int, "Largest HTTP request body (batches included)."),
    key("publish.max_batch", Int, "Most notifications per HTTP batch."),
    key("publish.max_users", Int, "Most users per publication."),
    key("publish.max_clients", Int, "Most clients per publication."),
    key("publish.max_sites", Int, "Most sites per publication."),
    key("publish.max_ttl_ms", Int, "Longest `ttl-ms`."),
    key("publish.dedup_window_secs", Int, "How long a notification id stays taken once accepted (a delayed one: after its due time), over HTTP and AMQP alike: a later publication with it is a duplicate, answered under `duplicates` (AMQP: acked) and sent nowhere, counted in `herald_publish_duplicates_total`. Routers sharing a Redis store share the ledger there; otherwise it is in memory (docs/publishing.md#idempotency). 0 turns the ledger off (the delayed store still refuses an id it holds)."),
    key("publish.dedup_max", Int, "Most ids the idempotency ledger holds in memory (when full the oldest immediate id is forgotten first, then the delayed one whose hold ends soonest; counted in `herald_id_ledger_evicted_total`)."),
    key("http.write_timeout_ms", Int, "Longest an HTTP answer may wait for the client to take any of it (the client sends requests and does not read the answers, so the socket's buffers are full); then the connection is closed, counted as `write_timeout` in `herald_connections_refused_total`. Every HTTP path: the direct publish path, hyper, the router's API; not an upgraded WebSocket, whose `session.max_lag_ms` applies. A client that keeps taking bytes, however slowly, is not cut; an idle connection is not either. Like nginx's `send_timeout` (60 s)."),
    key("http.body_grace_ms", Int, "How long a request body may take before `body_min_bytes_per_sec` applies: a body of N bytes must be whole within `body_grace_ms` + N / `body_min_bytes_per_sec` of its head, and at every moment on the way have come at that rate since the grace (so one that stalls is cut before its end). A body behind is answered 408 Request Timeout with `Connection: close`, counted as `body_timeout` in `herald_connections_refused_total`."),
    key("http.body_min_bytes_per_sec", Int, "The least average rate of a request body once `body_grace_ms` has passed (above). The defaults, 240 B/s after 5 s, are Kestrel's `MinRequestBodyDataRate`: a browser on a poor mobile link keeps them; a publisher sending 1 byte every few seconds does not. The largest body (`publish.max_body_bytes`, 8 MiB) may take 9.7 hours at that rate: raise it where publishers are known to be fast."),
    key("schedule.max_delay_ms", Int, "Longest `delay_ms` (and furthest `deliver_at`) accepted."),
    key("schedule.max_past_ms", Int, "How far in the past a `deliver_at` may be and still be due at once; further back it is refused (HTTP 422, AMQP dead letter) naming `deliver_at`, as a time in the wrong unit or computed wrong. 0: any past time is refused. Also the room a publication waiting in the broker's queue has before its `deliver-at` is too old."),
    key("schedule.lease_ms", Int, "How long a claim holds an entry before another firer may take it (the redelivery delay after a crash)."),
    key("schedule.horizon_ms", Int, "How far ahead the in-memory window looks."),
    key("schedule.refill_every_ms", Int, "Longest time between two reads of the store's upcoming entries (each reads what came into the horizon since the one before)."),
    key("schedule.full_refill_every_ms", Int, "Longest time between two reads of the whole horizon, which also find entries other routers accepted due before the last read's end: their lateness bound if the router that accepted them dies first. At least `refill_every_ms`; equal, every read is whole."),
    key("schedule.max_window", Int, "Most entries in the in-memory window (keep-earliest when full)."),
    key("schedule.claim_batch", Int, "Most entries one claim takes."),
    key("schedule.claim_ahead_ms", Int, "Claim entries this long before they are due, and hold them in memory until then, so the claim's commit is not part of their lateness. A cancel that comes later than this before the due time finds the entry firing (too late). Must be less than `lease_ms`."),
    key("schedule.claim_ahead_max_ms", Int, "How far ahead a pile (many entries due close together, a herd) may be claimed: its claims start early enough to be done by its due time, at the pace claims were measured to take, but no earlier than this. Cancels of a pile's entries later than this before their due time may find them firing. At least `claim_ahead_ms`, at most `horizon_ms` (the window sees no further), less than `lease_ms`. Unset: 4 s, or less to fit a short lease or horizon."),
    key("schedule.max_claimed", Int, "Most claimed entries held in memory until they are due (when full, the firer stops claiming until some go: policy backpressure). About 0.5 KiB each plus the payload."),
    key("schedule.max_unsettled", Int, "Most fired entries waiting to be marked delivered (beyond, firing waits for the store: policy backpressure). A herd goes out at the link's pace and is marked delivered behind it; if the process dies, these fire again after their lease."),
    key("schedule.settle_delay_ms", Int, "How long fired entries wait before they are marked delivered (the first of a round waits this long, the rest less): a burst goes out before its bookkeeping competes with it, and a steady stream makes a few large writes instead of many small ones. Their status reads `firing` meanwhile; if the process dies, they fire again after their lease. Unset: 2 s, or less to fit a short lease."),
    key("schedule.hold_max_ms", Int, "How long a `when-online` notification is held for an offline user before it expires."),
    key("schedule.retention_ms", Int, "How long finished statuses stay readable."),
    key("schedule.maintenance_every_ms", Int, "How often held entries are expired, old statuses purged and the pending gauges refreshed."),
    key("schedule.retry_after_ms", Int, "When the link cannot take due entries, retry them after this long."),
    key("schedule.min_interval_ms", Int, "Default shortest time between two `when-online` sends to one user (0: none)."),
    key("schedule.merge", Bool, "Default for merging `when-online` notifications that fall due together for one user."),
    key("schedule.max_tracked_users", Int, "Most users whose last `when-online` send is remembered for `min_interval_ms` (when full, new users are not tracked; counted)."),
    key("schedule.online_queue", Int, "Bound of the queue of \"user came online\" events (when full, the newest is dropped and counted; the user's next connect retries)."),
    key("schedule.hint_queue", Int, "Bound of the queue of accepted entries handed to the in-memory window (when full, the newest is dropped and counted; the next refill reads it from the store)."),
    key("schedule.max_topics", Int, "Most topics registered through `PUT /v1/topics` (a new one beyond is refused with 409; configured topics do not count)."),
    key("schedule.topics", Toml, "Per-topic policies, `[schedule.topics.NAME]` tables: `jitter_ms`, `min_interval_ms`, `merge`. The variable: `{ coupon = { jitter_ms = 5000 } }`."),
    key("presence.events_topic", Str, "A topic to publish online and offline events to: a user's first session starting (cluster-wide in distributed mode) and last session ending each make a callback-only notification of this topic, `{\"user\",\"site\",\"client\",\"event\",\"at_ms\",\"edge\"}`, called back as the topic's `callback_url` says (docs/presence.md). Unset: no events. Standalone and routers with `[redis]`; an edge leaves it to its routers."),
    key("presence.events_queue", Int, "Presence events waiting to be stored, at most (drop-newest beyond, counted in `herald_presence_events_total{outcome=\"dropped\"}`)."),
    key("callbacks.allow_private_networks", Bool, "Let callbacks reach loopback, private (RFC 1918, ULA), link-local and shared (CGNAT) addresses and this host's own. Off by default: whoever can register a topic could otherwise make Herald call internal services. The cloud metadata addresses stay refused either way, and the answers of such destinations are recorded by status only."),
    key("callbacks.max_per_host", Int, "Requests to one destination host at once, at most, per process (the others wait for a slot: a receiver is never flooded)."),
    key("callbacks.max_in_flight", Int, "Callbacks made at once, at most, per process (as many more wait to start; beyond that, firing waits: backpressure)."),
    key("callbacks.alerts.webhook_url", Str, "A Slack-compatible incoming webhook: alerts are POSTed to it as JSON `{\"text\": \"...\"}`. Set by the operator, so any address is allowed.").secret(Yes),
    key("callbacks.alerts.smtp_host", Str, "The SMTP server mail goes through; unset, no mail."),
    key("callbacks.alerts.smtp_port", Int, "Its port (587, the submission port, by default)."),
    key("callbacks.alerts.smtp_tls", Enum(&["starttls", "tls", "none"]), "How the connection is protected: `starttls` (the default), `tls` (implicit TLS, usually port 465) or `none` (a local relay)."),
    key("callbacks.alerts.smtp_username", Str, "The user to log in as; with it, `smtp_password_env`."),
    key("callbacks.alerts.smtp_password_env", Str, "The name of the environment variable that holds the password (the password itself never goes in the file)."),
    key("callbacks.alerts.mail_from", Str, "The sender, `alerts@example.com` or `Herald <alerts@example.com>`."),
    key("callbacks.alerts.mail_to", List, "The recipients; at least one with `smtp_host`."),
    key("callbacks.alerts.min_interval_ms", Int, "At most one message per kind of alert per channel in this long; what comes in between goes out as one summary when it is over."),
    key("callbacks.alerts.store_unavailable_after_ms", Int, "The delayed store counts as unavailable once its maintenance rounds have been failing for this long (0: at the first failed round)."),
];
