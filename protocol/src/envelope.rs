//! The notification envelope: what a backend hands Herald, validated once.
//!
//! A [`Notification`] is built by the router from an HTTP request or an AMQP
//! delivery, checked against [`Limits`] by [`Notification::validate`], and then
//! shared (`Arc<Notification>`) by every mailbox and session it reaches. The
//! payload is a [`Bytes`] so that a 400 KB message to 1,000 sessions is one
//! allocation, not 1,000.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use bytes::Bytes;

/// Header and field names shared by the AMQP contract, the HTTP API and the
/// STOMP MESSAGE frames Herald writes.
pub mod names {
    /// Publication scope: `user` (default), `client` or `global`.
    pub const SCOPE: &str = "scope";
    /// Target users (scope `user`).
    pub const USERS: &str = "users";
    /// Target client companies (scope `client`).
    pub const CLIENTS: &str = "clients";
    /// Optional site filter.
    pub const SITES: &str = "sites";
    /// Application event name, e.g. `chat.message`.
    pub const EVENT: &str = "event";
    /// Statistics / grouping topic.
    pub const TOPIC: &str = "topic";
    /// Time to live in milliseconds.
    pub const TTL_MS: &str = "ttl-ms";
    /// STOMP `message-id` header carrying the notification id.
    pub const MESSAGE_ID: &str = "message-id";
    /// Per-mailbox sequence number on MESSAGE frames.
    pub const SEQ: &str = "seq";
    /// Mailbox epoch: changes when a mailbox is created anew.
    pub const EPOCH: &str = "epoch";
    /// CONNECT/SUBSCRIBE header: the last sequence the client saw.
    pub const LAST_SEQ: &str = "last-seq";
    /// CONNECT or SUBSCRIBE header, with `last-seq` + `epoch`: how many
    /// milliseconds ago the client last heard from the session it resumes.
    /// When the mailbox it resumes is not on this edge any more (its edge
    /// died), routers re-send what went elsewhere for the user since then.
    pub const OFFLINE_MS: &str = "offline-ms";
    /// SUBSCRIBE header: comma-separated event patterns (`chat.*`).
    pub const EVENTS: &str = "events";
    /// Event name of the control message that says the replay has a gap.
    pub const GAP_EVENT: &str = "herald.gap";
}

/// Who a notification is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Scope {
    /// The users listed in [`Notification::users`].
    #[default]
    User,
    /// Every user of the client companies in [`Notification::clients`].
    Client,
    /// Everyone.
    Global,
}

impl Scope {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::User => "user",
            Scope::Client => "client",
            Scope::Global => "global",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unknown scope name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown scope {0:?}: expected user, client or global")]
pub struct UnknownScope(pub String);

impl FromStr for Scope {
    type Err = UnknownScope;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "user" => Ok(Scope::User),
            "client" => Ok(Scope::Client),
            "global" => Ok(Scope::Global),
            other => Err(UnknownScope(other.to_owned())),
        }
    }
}

/// A notification, ready to route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    /// Idempotency key; generated when the publisher gives none.
    pub id: String,
    /// Who it is for.
    pub scope: Scope,
    /// Scope `user`: the recipients.
    pub users: Vec<String>,
    /// Scope `client`: the client companies.
    pub clients: Vec<String>,
    /// Optional site filter; empty means every site.
    pub sites: Vec<String>,
    /// Application event name.
    pub event: String,
    /// Optional topic (statistics, delayed-delivery grouping).
    pub topic: Option<String>,
    /// MIME type of the payload.
    pub content_type: String,
    /// The payload, shared by every recipient.
    pub payload: Bytes,
    /// Whether the payload is valid UTF-8 (checked once, at validation).
    pub payload_is_utf8: bool,
    /// How long the notification stays worth delivering.
    pub ttl: Option<Duration>,
    /// Encodings of the payload made once per framing and shared by every
    /// recipient (see [`Encodings`]).
    pub encodings: Encodings,
    /// When Herald accepted it (see [`Accepted`]); takes no part in
    /// equality.
    pub accepted: Accepted,
}

/// When Herald accepted a notification: the moment a gateway or router took
/// it from a backend (HTTP or AMQP), or, for a delayed notification, the
/// moment it fired. Microseconds after the Unix epoch on the wall clock of
/// the process that accepted it (so a latency measured on another host
/// includes the clock offset between the two); [`Accepted::UNKNOWN`] when
/// nobody said (a notification read back from a store or from a router
/// that does not send it).
///
/// The delivery-latency histogram measures from here to the moment the
/// frame is handed to the socket. Like [`Encodings`], it takes no part in
/// equality: two notifications that say the same thing are equal whenever
/// they were accepted.
#[derive(Debug, Clone, Copy, Default)]
pub struct Accepted(u64);

impl Accepted {
    /// Not known: not measured.
    pub const UNKNOWN: Accepted = Accepted(0);

    /// At `micros` after the Unix epoch (0 is [`Accepted::UNKNOWN`]).
    pub const fn from_unix_micros(micros: u64) -> Self {
        Accepted(micros)
    }

    /// At `t` (before the epoch: unknown).
    pub fn at(t: std::time::SystemTime) -> Self {
        let micros = t
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        Accepted(micros)
    }

    /// Microseconds after the Unix epoch, when known.
    pub fn unix_micros(self) -> Option<u64> {
        (self.0 != 0).then_some(self.0)
    }

    /// How long before `now_micros` (microseconds after the Unix epoch) it
    /// was accepted, when known; zero when `now_micros` is earlier (a clock
    /// that stepped back, or another host's clock ahead of this one).
    pub fn micros_before(self, now_micros: u64) -> Option<u64> {
        self.unix_micros().map(|at| now_micros.saturating_sub(at))
    }
}

impl PartialEq for Accepted {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Accepted {}

/// Lazily computed encodings of a notification's payload, one per framing.
///
/// A framing that must transform the payload (SockJS escapes it into a JSON
/// string) does so once, the first time a session of that framing needs it,
/// and every other recipient shares the result. Caches take no part in
/// equality.
#[derive(Debug, Clone, Default)]
pub struct Encodings {
    /// The payload as SockJS writes it inside a JSON string: escaped UTF-8,
    /// or base64 for a payload that is not UTF-8.
    pub sockjs: std::sync::OnceLock<Bytes>,
    /// The MESSAGE header lines every recipient shares, as a raw STOMP
    /// session writes them, one per STOMP version (indexed by
    /// `Version as usize`): made by the first recipient of that version,
    /// copied into every other recipient's head.
    pub stomp_headers: [std::sync::OnceLock<Bytes>; 3],
    /// The same lines as a SockJS session writes them (its
    /// `content-length`, escaped into a JSON string), per version.
    pub sockjs_headers: [std::sync::OnceLock<Bytes>; 3],
}

impl PartialEq for Encodings {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Encodings {}

/// Bounds a publication must respect. Each has a configuration key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Largest payload in bytes.
    pub max_payload_bytes: usize,
    /// Most entries in `users`.
    pub max_users: usize,
    /// Most entries in `clients`.
    pub max_clients: usize,
    /// Most entries in `sites`.
    pub max_sites: usize,
    /// Longest identifier (`users`, `clients`, `sites` entries) in bytes.
    pub max_identifier_bytes: usize,
    /// Longest time to live.
    pub max_ttl: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_payload_bytes: 1024 * 1024,
            max_users: 50,
            max_clients: 50,
            max_sites: 50,
            max_identifier_bytes: 256,
            max_ttl: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

/// Longest `id`, `event` or `topic` in bytes.
pub const MAX_NAME_BYTES: usize = 200;

/// A field that failed validation, with a message for the publisher.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    /// The offending field, as the publisher named it.
    pub field: &'static str,
    /// What is wrong with it.
    pub message: String,
}

impl FieldError {
    /// A new error for `field`.
    pub fn new(field: &'static str, message: impl Into<String>) -> Self {
        FieldError {
            field,
            message: message.into(),
        }
    }
}

/// Whether `content_type` announces text, so its payload must be UTF-8.
pub fn is_text_content_type(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence.starts_with("text/")
        || essence == "application/json"
        || essence.ends_with("+json")
        || essence == "application/xml"
        || essence.ends_with("+xml")
        || essence == "application/javascript"
}

/// Whether `s` is a valid `id`, `event` or `topic`: 1 to 200 bytes of
/// `A-Z a-z 0-9 . _ ~ @ / + = -`. Colons, commas, stars and spaces are kept
/// out so names travel unescaped in STOMP and AMQP headers and never clash
/// with event filter syntax.
pub fn is_valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_NAME_BYTES
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._~@/+=-".contains(&b))
}

/// Whether `kept` is an id as Herald keeps it ([`crate::tenant`]): a valid
/// id, or a valid id scoped to a valid tenant (`id:tenant`).
pub fn is_valid_kept_id(kept: &str) -> bool {
    match crate::tenant::split(kept) {
        (id, None) => is_valid_name(id),
        (id, Some(t)) => is_valid_name(id) && crate::tenant::is_valid_tenant(t),
    }
}

fn check_identifiers(
    field: &'static str,
    values: &[String],
    max_len: usize,
    max_bytes: usize,
) -> Result<(), FieldError> {
    if values.len() > max_len {
        return Err(FieldError::new(
            field,
            format!("has {} entries; the limit is {max_len}", values.len()),
        ));
    }
    for v in values {
        if v.is_empty() || v.len() > max_bytes {
            return Err(FieldError::new(
                field,
                format!("entries must be 1 to {max_bytes} bytes long"),
            ));
        }
        if v.chars().any(char::is_control) {
            return Err(FieldError::new(
                field,
                "entries must not contain control characters",
            ));
        }
    }
    Ok(())
}

impl Notification {
    /// Checks every field against `limits`, and records whether the payload
    /// is UTF-8. Text content types must carry valid UTF-8.
    pub fn validate(&mut self, limits: &Limits) -> Result<(), FieldError> {
        self.validate_with(limits, is_valid_name)
    }

    /// [`Notification::validate`] for a notification Herald forwarded
    /// (a root's bundle to an edge): its id may be scoped to a tenant
    /// ([`crate::tenant`]).
    pub fn validate_forwarded(&mut self, limits: &Limits) -> Result<(), FieldError> {
        self.validate_with(limits, is_valid_kept_id)
    }

    fn validate_with(
        &mut self,
        limits: &Limits,
        valid_id: fn(&str) -> bool,
    ) -> Result<(), FieldError> {
        if !valid_id(&self.id) {
            return Err(FieldError::new(
                "id",
                "must be 1 to 200 characters of A-Z a-z 0-9 . _ ~ @ / + = -",
            ));
        }
        if !is_valid_name(&self.event) {
            return Err(FieldError::new(
                "event",
                "must be 1 to 200 characters of A-Z a-z 0-9 . _ ~ @ / + = -",
            ));
        }
        if let Some(topic) = &self.topic
            && !is_valid_name(topic)
        {
            return Err(FieldError::new(
                "topic",
                "must be 1 to 200 characters of A-Z a-z 0-9 . _ ~ @ / + = -",
            ));
        }
        let id_bytes = limits.max_identifier_bytes;
        check_identifiers("users", &self.users, limits.max_users, id_bytes)?;
        check_identifiers("clients", &self.clients, limits.max_clients, id_bytes)?;
        check_identifiers("sites", &self.sites, limits.max_sites, id_bytes)?;
        match self.scope {
            Scope::User if self.users.is_empty() => {
                return Err(FieldError::new(
                    "users",
                    "scope user needs at least one user",
                ));
            }
            Scope::Client if self.clients.is_empty() => {
                return Err(FieldError::new(
                    "clients",
                    "scope client needs at least one client",
                ));
            }
            _ => {}
        }
        if self.content_type.is_empty()
            || self.content_type.len() > 200
            || !self.content_type.bytes().all(|b| (0x20..0x7f).contains(&b))
        {
            return Err(FieldError::new(
                "content_type",
                "must be 1 to 200 printable ASCII characters",
            ));
        }
        if self.payload.len() > limits.max_payload_bytes {
            return Err(FieldError::new(
                "payload",
                format!(
                    "is {} bytes; the limit is {}",
                    self.payload.len(),
                    limits.max_payload_bytes
                ),
            ));
        }
        if let Some(ttl) = self.ttl
            && (ttl.is_zero() || ttl > limits.max_ttl)
        {
            return Err(FieldError::new(
                "ttl_ms",
                format!("must be between 1 and {} ms", limits.max_ttl.as_millis()),
            ));
        }
        self.payload_is_utf8 = simdutf8::basic::from_utf8(&self.payload).is_ok();
        if !self.payload_is_utf8 && is_text_content_type(&self.content_type) {
            return Err(FieldError::new(
                "payload",
                format!(
                    "is not valid UTF-8 but content type {} is text",
                    self.content_type
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_ids_are_ids_or_ids_of_a_tenant() {
        assert!(is_valid_kept_id("invoice-77"));
        assert!(is_valid_kept_id("invoice-77:eu,uk"));
        assert!(is_valid_kept_id("invoice-77:odd:tenant"));
        for bad in ["", ":a", "x:", "x y:a", "x:a\nb"] {
            assert!(!is_valid_kept_id(bad), "{bad:?}");
        }
        let long = format!("x:{}", "t".repeat(crate::tenant::MAX_TENANT_BYTES + 1));
        assert!(!is_valid_kept_id(&long));
    }

    fn sample() -> Notification {
        Notification {
            id: "n-1".into(),
            scope: Scope::User,
            users: vec!["alice".into()],
            clients: vec![],
            sites: vec![],
            event: "chat.message".into(),
            topic: None,
            content_type: "application/json".into(),
            payload: Bytes::from_static(b"{}"),
            payload_is_utf8: false,
            ttl: None,
            encodings: Default::default(),
            accepted: Default::default(),
        }
    }

    #[test]
    fn valid_sample_passes_and_records_utf8() {
        let mut n = sample();
        n.validate(&Limits::default()).unwrap();
        assert!(n.payload_is_utf8);
    }

    #[test]
    fn user_scope_needs_users() {
        let mut n = sample();
        n.users.clear();
        assert_eq!(n.validate(&Limits::default()).unwrap_err().field, "users");
    }

    #[test]
    fn client_scope_needs_clients() {
        let mut n = sample();
        n.scope = Scope::Client;
        assert_eq!(n.validate(&Limits::default()).unwrap_err().field, "clients");
    }

    #[test]
    fn too_many_users_names_the_limit() {
        let mut n = sample();
        n.users = (0..51).map(|i| format!("u{i}")).collect();
        let err = n.validate(&Limits::default()).unwrap_err();
        assert_eq!(err.field, "users");
        assert!(err.message.contains("50"), "{err}");
    }

    #[test]
    fn text_payload_must_be_utf8() {
        let mut n = sample();
        n.payload = Bytes::from_static(b"\xff\xfe");
        assert_eq!(n.validate(&Limits::default()).unwrap_err().field, "payload");
        n.content_type = "application/octet-stream".into();
        n.validate(&Limits::default()).unwrap();
        assert!(!n.payload_is_utf8);
    }

    #[test]
    fn names_reject_header_syntax() {
        assert!(is_valid_name("chat.message"));
        assert!(!is_valid_name("chat:message"));
        assert!(!is_valid_name("a,b"));
        assert!(!is_valid_name("a*"));
        assert!(!is_valid_name(""));
        assert!(!is_valid_name(&"x".repeat(201)));
    }

    #[test]
    fn scope_round_trips() {
        for s in [Scope::User, Scope::Client, Scope::Global] {
            assert_eq!(s.as_str().parse::<Scope>().unwrap(), s);
        }
        assert!("everyone".parse::<Scope>().is_err());
    }

    #[test]
    fn oversized_payload_and_bad_ttl_are_refused() {
        let limits = Limits {
            max_payload_bytes: 4,
            ..Limits::default()
        };
        let mut n = sample();
        n.payload = Bytes::from_static(b"12345");
        assert_eq!(n.validate(&limits).unwrap_err().field, "payload");
        let mut n = sample();
        n.ttl = Some(Duration::ZERO);
        assert_eq!(n.validate(&Limits::default()).unwrap_err().field, "ttl_ms");
    }

    #[test]
    fn acceptance_is_known_measured_and_not_compared() {
        let t = std::time::UNIX_EPOCH + Duration::from_micros(1_000_500);
        let at = Accepted::at(t);
        assert_eq!(at.unix_micros(), Some(1_000_500));
        assert_eq!(at.micros_before(1_250_500), Some(250_000));
        assert_eq!(at.micros_before(1_000_000), Some(0), "a clock behind");
        assert_eq!(Accepted::UNKNOWN.unix_micros(), None);
        assert_eq!(Accepted::UNKNOWN.micros_before(5), None);
        let mut later = sample();
        later.accepted = at;
        assert_eq!(later, sample());
    }
}
