//! The AMQP form of a notification: headers and properties to and from a
//! [`Notification`]. Pure: no I/O, tested without a broker.
//!
//! | AMQP | type | notification |
//! |---|---|---|
//! | body | bytes | `payload` |
//! | property `message_id` | short string | `id` (generated when absent) |
//! | property `content_type` | short string | `content_type` (default `application/octet-stream`) |
//! | header `scope` | string | `scope`: `user` (default), `client`, `global` |
//! | header `users`, `clients`, `sites` | array of strings | recipients and site filter |
//! | header `event` | string, required | `event` |
//! | header `topic` | string | `topic` |
//! | header `ttl-ms` | integer | `ttl` |
//! | header `delay-ms` | integer | deliver this many ms after acceptance |
//! | header `deliver-at` | integer (epoch seconds or ms) or RFC 3339 string | deliver at this time |
//! | header `when-online` | boolean | hold until the user is online |
//! | header `callback-url` | string | `POST` it here when due (over its topic's) |
//! | header `recheck-url` | string | ask here first (over its topic's) |
//! | header `browsers` | boolean, or string `true`/`false` | `false`: callback only, no browser |
//! | property `type` = `herald.cancel` | | cancel the delayed notification `message_id` |
//!
//! A string is a long string (`S`), or a byte array (`x`, what some clients
//! make of a byte string) holding UTF-8. An integer is any of the signed or
//! unsigned integer types. Any other type is refused, naming the header.
//! Headers Herald does not know are ignored. The timing headers are read by
//! [`delay_from_amqp`]; a router without a delayed store refuses them
//! ([`DELAYED_DISABLED`]) rather than deliver at once. The callback headers
//! are read by [`target_from_amqp`] and checked by
//! [`herald_engine::callback::target::check`].

use std::time::Duration;

use bytes::Bytes;
use herald_protocol::envelope::{Accepted, Limits, Notification, Scope, names};
use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldArray, FieldTable, LongString, ShortString};

use herald_engine::callback::target::{self, TargetRequest};
use herald_engine::metrics::RejectReason;
use herald_engine::schedule::timing::{DelayRequest, DeliverAt};

/// Content type assumed when a publication has none.
pub const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";

/// Delivery mode 2: the broker writes the message to disk in durable queues.
pub const PERSISTENT: u8 = 2;

/// Header names of the AMQP contract beyond the envelope's own
/// ([`names`]).
pub mod headers {
    /// Delayed delivery: milliseconds from acceptance.
    pub const DELAY_MS: &str = "delay-ms";
    /// Delayed delivery: epoch seconds or milliseconds, or RFC 3339 text.
    pub const DELIVER_AT: &str = "deliver-at";
    /// Hold until the user is online.
    pub const WHEN_ONLINE: &str = "when-online";
    /// The notification's own callback URL.
    pub const CALLBACK_URL: &str = "callback-url";
    /// The notification's own recheck URL.
    pub const RECHECK_URL: &str = "recheck-url";
    /// Whether its browser recipients get it (`false`: callback only).
    pub const BROWSERS: &str = "browsers";
    /// Field name for the `type` property.
    pub const TYPE_PROPERTY: &str = "type";
    /// Dead letters: why the publication was refused.
    pub const ERROR: &str = "x-herald-error";
    /// Dead letters: the header or property at fault.
    pub const FIELD: &str = "x-herald-field";
    /// Dead letters: the routing key the publication was sent with.
    pub const ROUTING_KEY: &str = "x-herald-routing-key";
    /// Field name for the `message_id` property.
    pub const MESSAGE_ID_PROPERTY: &str = "message_id";
    /// Field name for the `content_type` property.
    pub const CONTENT_TYPE_PROPERTY: &str = "content_type";
    /// Field name for the message body.
    pub const BODY: &str = "body";
    /// Field name for the `headers` property as a whole.
    pub const HEADERS: &str = "headers";
    /// Router to edges: when the router accepted the notification (or the
    /// delayed one fired), microseconds after the Unix epoch: an integer
    /// on a single notification, the table of
    /// [`herald_protocol::bundle::encode_accepted`] (a byte array) on a
    /// bundle. Edges measure delivery latency from it; one without it
    /// (an older router) delivers the same, unmeasured, and an older edge
    /// ignores it.
    pub const ACCEPTED: &str = "x-herald-accepted-us";
}

/// Reason given for the timing headers by a router without a delayed store.
pub const DELAYED_DISABLED: &str =
    "delayed delivery is not enabled on this router (configure [redis] url, or --redis-url)";

/// The `type` property of a cancel message: cancel the delayed notification
/// named by its `message_id`.
pub const CANCEL_TYPE: &str = "herald.cancel";

/// Why a publication was refused. It goes to the dead-letter exchange with
/// `reason` in `x-herald-error` and `field` in `x-herald-field`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct Rejection {
    /// What is wrong, starting with the header's name
    /// (`users: must be an array of strings`).
    pub reason: String,
    /// The header or property at fault (`users`, `message_id`, `body`).
    pub field: &'static str,
    /// The metric label.
    pub kind: RejectReason,
}

/// Longest `reason`: it may quote the publisher's input (an unknown scope),
/// and it travels in a header of the dead letter, which must still fit the
/// broker's frame size.
pub const MAX_REASON_BYTES: usize = 512;

impl Rejection {
    /// A rejection of `field` for `message` (cut to [`MAX_REASON_BYTES`]).
    pub fn invalid(field: &'static str, message: impl std::fmt::Display) -> Self {
        let mut reason = format!("{field}: {message}");
        if reason.len() > MAX_REASON_BYTES {
            let mut end = MAX_REASON_BYTES - 3;
            while !reason.is_char_boundary(end) {
                end -= 1;
            }
            reason.truncate(end);
            reason.push_str("...");
        }
        Rejection {
            reason,
            field,
            kind: RejectReason::InvalidField,
        }
    }
}

/// Parse and validate a publication: `properties` and `body` as delivered;
/// `new_id` makes the id when the publisher set no `message_id`. The body is
/// copied once; [`from_amqp_bytes`] takes it without a copy.
pub fn from_amqp(
    properties: &BasicProperties,
    body: &[u8],
    limits: &Limits,
    new_id: impl FnOnce() -> String,
) -> Result<Notification, Rejection> {
    from_amqp_bytes(properties, Bytes::copy_from_slice(body), limits, new_id)
}

/// A delivery's body as [`Bytes`] that own exactly its bytes, without a
/// copy. lapin assembles a body in a `Vec` that may have grown past its
/// length (a body of several frames); `Bytes::from` keeps a `Vec`'s whole
/// capacity alive, so the slack is given back first (a shrinking
/// `realloc`, done in place). A notification made from it, kept in a
/// mailbox or an outbox, then costs its payload and no more.
pub fn body_bytes(mut data: Vec<u8>) -> Bytes {
    if data.capacity() != data.len() {
        data.shrink_to_fit();
    }
    Bytes::from(data)
}

/// [`from_amqp`] for a body already in [`Bytes`] (a delivery's `Vec<u8>`
/// converts without a copy: [`body_bytes`]). The notification shares it.
pub fn from_amqp_bytes(
    properties: &BasicProperties,
    body: Bytes,
    limits: &Limits,
    new_id: impl FnOnce() -> String,
) -> Result<Notification, Rejection> {
    read(
        properties,
        body,
        limits,
        new_id,
        Notification::validate,
        |_| false,
    )
}

/// [`from_amqp_bytes`] for a notification a router forwarded to an edge:
/// its id may be scoped to a tenant ([`herald_protocol::tenant`]), which
/// no publisher may write.
pub fn forwarded_from_amqp_bytes(
    properties: &BasicProperties,
    body: Bytes,
    limits: &Limits,
    new_id: impl FnOnce() -> String,
) -> Result<Notification, Rejection> {
    read(
        properties,
        body,
        limits,
        new_id,
        Notification::validate_forwarded,
        |_| false,
    )
}

type Validate = fn(&mut Notification, &Limits) -> Result<(), herald_protocol::envelope::FieldError>;

/// Read a notification; `job` is asked, with its topic, whether one that
/// names no recipients is a delay-queue job (scope `global`).
fn read(
    properties: &BasicProperties,
    body: Bytes,
    limits: &Limits,
    new_id: impl FnOnce() -> String,
    validate: Validate,
    job: impl FnOnce(Option<&str>) -> bool,
) -> Result<Notification, Rejection> {
    let empty = FieldTable::default();
    let table = properties.headers().as_ref().unwrap_or(&empty);
    let get = |name: &str| table.inner().get(name);
    if let Some(rejection) = unread_headers(properties) {
        return Err(rejection);
    }
    let scoped = get(names::SCOPE).is_some();
    let scope = match get(names::SCOPE) {
        None => Scope::User,
        Some(v) => string(names::SCOPE, v)?
            .parse::<Scope>()
            .map_err(|e| Rejection::invalid(names::SCOPE, e))?,
    };
    let users = list(names::USERS, get(names::USERS), limits.max_users)?;
    let clients = list(names::CLIENTS, get(names::CLIENTS), limits.max_clients)?;
    let sites = list(names::SITES, get(names::SITES), limits.max_sites)?;
    let topic = get(names::TOPIC)
        .map(|v| string(names::TOPIC, v))
        .transpose()?;
    let event = match (get(names::EVENT), &topic) {
        (Some(v), _) => string(names::EVENT, v)?,
        (None, Some(topic)) => topic.clone(),
        (None, None) => {
            return Err(Rejection::invalid(
                names::EVENT,
                "the header is required (or a topic header: the event defaults to it)",
            ));
        }
    };
    let unaddressed = !scoped && users.is_empty() && clients.is_empty();
    let scope = match unaddressed && job(topic.as_deref()) {
        true => Scope::Global,
        false => scope,
    };
    let ttl = get(names::TTL_MS).map(|v| ttl_ms(v, limits)).transpose()?;
    let id = match properties.message_id() {
        Some(id) => id.as_str().to_owned(),
        None => new_id(),
    };
    let content_type = properties
        .content_type()
        .as_ref()
        .map_or(DEFAULT_CONTENT_TYPE, ShortString::as_str)
        .to_owned();
    let mut n = Notification {
        id,
        scope,
        users,
        clients,
        sites,
        event,
        topic,
        content_type,
        payload: body,
        payload_is_utf8: false,
        ttl,
        encodings: Default::default(),
        accepted: Default::default(),
    };
    validate(&mut n, limits).map_err(|e| {
        let field = match e.field {
            "id" => headers::MESSAGE_ID_PROPERTY,
            "content_type" => headers::CONTENT_TYPE_PROPERTY,
            "payload" => headers::BODY,
            "ttl_ms" => names::TTL_MS,
            other => other,
        };
        let mut rejection = Rejection::invalid(field, e.message);
        if field == headers::BODY && n.payload.len() > limits.max_payload_bytes {
            rejection.kind = RejectReason::TooLarge;
        }
        rejection
    })?;
    Ok(n)
}

/// The refusal of a message whose headers its client did not read
/// ([`crate::wire::nesting`]: over the bounds, replaced by
/// `x-herald-rejected` and the reason); None for any other.
pub fn unread_headers(properties: &BasicProperties) -> Option<Rejection> {
    let why = properties
        .headers()
        .as_ref()?
        .inner()
        .get(crate::wire::nesting::REJECTED_HEADER)?;
    let why = match why {
        AMQPValue::LongString(s) => s.to_string(),
        _ => "over the bounds".to_owned(),
    };
    Some(Rejection::invalid(
        headers::HEADERS,
        format!("not read: {why}"),
    ))
}

/// The timing headers of a publication (none set: not delayed). Their
/// values are checked here for type; [`herald_engine::schedule::timing::due_time`]
/// checks their range.
pub fn delay_from_amqp(properties: &BasicProperties) -> Result<DelayRequest, Rejection> {
    let empty = FieldTable::default();
    let table = properties.headers().as_ref().unwrap_or(&empty);
    let get = |name: &str| table.inner().get(name);
    let delay_ms = get(headers::DELAY_MS)
        .map(|v| {
            integer(v).ok_or_else(|| {
                Rejection::invalid(
                    headers::DELAY_MS,
                    format!("must be an integer (milliseconds), not {}", type_name(v)),
                )
            })
        })
        .transpose()?
        .map(clamp_i64);
    let deliver_at = match get(headers::DELIVER_AT) {
        None => None,
        Some(v) => match (integer(v), as_text(v)) {
            (Some(ms), _) => Some(DeliverAt::Epoch(clamp_i64(ms))),
            (None, Some(Ok(text))) => Some(DeliverAt::Rfc3339(text.to_owned())),
            (None, Some(Err(_))) => {
                return Err(Rejection::invalid(
                    headers::DELIVER_AT,
                    "must be UTF-8 text",
                ));
            }
            (None, None) => {
                return Err(Rejection::invalid(
                    headers::DELIVER_AT,
                    format!(
                        "must be an integer (epoch seconds or ms) or an RFC 3339 string, not {}",
                        type_name(v)
                    ),
                ));
            }
        },
    };
    let when_online = match get(headers::WHEN_ONLINE) {
        None => false,
        Some(AMQPValue::Boolean(b)) => *b,
        Some(v) => {
            return Err(Rejection::invalid(
                headers::WHEN_ONLINE,
                format!("must be a boolean, not {}", type_name(v)),
            ));
        }
    };
    Ok(DelayRequest {
        delay_ms,
        deliver_at,
        when_online,
    })
}

/// The header of a field [`target::check`] names (`callback_url` is the
/// header `callback-url`).
pub fn target_header(field: &str) -> &'static str {
    match field {
        target::RECHECK_URL => headers::RECHECK_URL,
        target::BROWSERS => headers::BROWSERS,
        _ => headers::CALLBACK_URL,
    }
}

/// The message is a cancel (`type` = [`CANCEL_TYPE`]): the id to cancel, or
/// why it names none. `None` for any other message.
pub fn cancel_from_amqp(properties: &BasicProperties) -> Option<Result<String, Rejection>> {
    let kind = properties.kind().as_ref()?;
    if kind.as_str() != CANCEL_TYPE {
        return None;
    }
    Some(match properties.message_id() {
        Some(id) if herald_protocol::envelope::is_valid_name(id.as_str()) => {
            Ok(id.as_str().to_owned())
        }
        Some(_) => Err(Rejection::invalid(
            headers::MESSAGE_ID_PROPERTY,
            "must be 1 to 200 characters of A-Z a-z 0-9 . _ ~ @ / + = -",
        )),
        None => Err(Rejection::invalid(
            headers::MESSAGE_ID_PROPERTY,
            "a cancel names the notification to cancel in message_id",
        )),
    })
}

fn integer(v: &AMQPValue) -> Option<i128> {
    Some(match v {
        AMQPValue::ShortShortInt(n) => (*n).into(),
        AMQPValue::ShortShortUInt(n) => (*n).into(),
        AMQPValue::ShortInt(n) => (*n).into(),
        AMQPValue::ShortUInt(n) => (*n).into(),
        AMQPValue::LongInt(n) => (*n).into(),
        AMQPValue::LongUInt(n) => (*n).into(),
        AMQPValue::LongLongInt(n) => (*n).into(),
        _ => return None,
    })
}

fn clamp_i64(n: i128) -> i64 {
    n.clamp(i64::MIN.into(), i64::MAX.into()) as i64
}

/// The properties and body that carry `n` to the edges: the same headers a
/// backend would send, so an edge reads it back with [`from_amqp`].
pub fn to_amqp(n: &Notification) -> (BasicProperties, Bytes) {
    let mut table = FieldTable::default();
    let text = |s: &str| AMQPValue::LongString(LongString::from(s));
    let array = |values: &[String]| {
        AMQPValue::FieldArray(FieldArray::from(
            values.iter().map(|v| text(v)).collect::<Vec<_>>(),
        ))
    };
    table.insert(names::SCOPE.into(), text(n.scope.as_str()));
    for (name, values) in [
        (names::USERS, &n.users),
        (names::CLIENTS, &n.clients),
        (names::SITES, &n.sites),
    ] {
        if !values.is_empty() {
            table.insert(name.into(), array(values));
        }
    }
    table.insert(names::EVENT.into(), text(&n.event));
    if let Some(topic) = &n.topic {
        table.insert(names::TOPIC.into(), text(topic));
    }
    if let Some(ttl) = n.ttl {
        let ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        table.insert(names::TTL_MS.into(), AMQPValue::LongLongInt(ms));
    }
    if let Some(at) = n.accepted.unix_micros() {
        let at = i64::try_from(at).unwrap_or(i64::MAX);
        table.insert(headers::ACCEPTED.into(), AMQPValue::LongLongInt(at));
    }
    // Validated: the id and the content type are at most 200 ASCII bytes,
    // within a short string's 255.
    let properties = BasicProperties::default()
        .with_message_id(short(&n.id))
        .with_content_type(short(&n.content_type))
        .with_delivery_mode(PERSISTENT)
        .with_headers(table);
    (properties, n.payload.clone())
}

/// The `type` property of a bundle: several notifications in one message
/// to the edges ([`herald_protocol::bundle`]). Routers never forward a
/// publication with a `type`, so an edge tells bundles apart by it (not
/// by the content type, which a publisher chooses).
pub const BUNDLE_TYPE: &str = "herald.bundle";

/// The AMQP form of several notifications in one message: a bundle body,
/// content type [`herald_protocol::bundle::CONTENT_TYPE`], type
/// [`BUNDLE_TYPE`].
pub fn bundle_to_amqp(batch: &[std::sync::Arc<Notification>]) -> (BasicProperties, Bytes) {
    let body = herald_protocol::bundle::encode(batch.iter().map(|n| &**n));
    let mut properties = BasicProperties::default()
        .with_content_type(short(herald_protocol::bundle::CONTENT_TYPE))
        .with_type(short(BUNDLE_TYPE))
        .with_delivery_mode(PERSISTENT);
    if let Some(table) = herald_protocol::bundle::encode_accepted(batch.iter().map(|n| &**n)) {
        let mut fields = FieldTable::default();
        fields.insert(
            headers::ACCEPTED.into(),
            AMQPValue::ByteArray(table.as_ref().into()),
        );
        properties = properties.with_headers(fields);
    }
    (properties, body)
}

/// When a router accepted the notification a message to the edges carries
/// ([`headers::ACCEPTED`], an integer); unknown when absent or not one.
pub fn accepted_from_amqp(properties: &BasicProperties) -> Accepted {
    properties
        .headers()
        .as_ref()
        .and_then(|t| t.inner().get(headers::ACCEPTED))
        .and_then(integer)
        .and_then(|us| u64::try_from(us).ok())
        .map_or(Accepted::UNKNOWN, Accepted::from_unix_micros)
}

/// The acceptance table of a bundle message ([`headers::ACCEPTED`], a byte
/// array), for [`herald_protocol::bundle::apply_accepted`].
pub fn bundle_accepted(properties: &BasicProperties) -> Option<&[u8]> {
    match properties
        .headers()
        .as_ref()
        .and_then(|t| t.inner().get(headers::ACCEPTED))
    {
        Some(AMQPValue::ByteArray(b)) => Some(b.as_slice()),
        _ => None,
    }
}

/// The properties of a dead letter: the publication's own, plus
/// `x-herald-error`, `x-herald-field` and `x-herald-routing-key`.
pub fn dead_letter_properties(
    original: &BasicProperties,
    rejection: &Rejection,
    routing_key: &str,
) -> BasicProperties {
    let mut table = original.headers().clone().unwrap_or_default();
    table.insert(
        headers::ERROR.into(),
        AMQPValue::LongString(rejection.reason.as_str().into()),
    );
    table.insert(
        headers::FIELD.into(),
        AMQPValue::LongString(rejection.field.into()),
    );
    table.insert(
        headers::ROUTING_KEY.into(),
        AMQPValue::LongString(routing_key.into()),
    );
    original.clone().with_headers(table)
}

/// A short string from text known to fit; longer text is cut at a character
/// boundary rather than panicking.
pub fn short(s: &str) -> ShortString {
    let mut end = s.len().min(lapin::types::MAX_SHORT_STRING_LENGTH);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    ShortString::from(&s[..end])
}

/// The AMQP type name of a value, for error messages.
fn type_name(v: &AMQPValue) -> &'static str {
    match v {
        AMQPValue::Boolean(_) => "a boolean",
        AMQPValue::ShortShortInt(_)
        | AMQPValue::ShortShortUInt(_)
        | AMQPValue::ShortInt(_)
        | AMQPValue::ShortUInt(_)
        | AMQPValue::LongInt(_)
        | AMQPValue::LongUInt(_)
        | AMQPValue::LongLongInt(_) => "an integer",
        AMQPValue::Float(_) | AMQPValue::Double(_) => "a floating-point number",
        AMQPValue::DecimalValue(_) => "a decimal",
        AMQPValue::ShortString(_) | AMQPValue::LongString(_) => "a string",
        AMQPValue::ByteArray(_) => "a byte array",
        AMQPValue::FieldArray(_) => "an array",
        AMQPValue::Timestamp(_) => "a timestamp",
        AMQPValue::FieldTable(_) => "a table",
        AMQPValue::Void => "void",
    }
}

/// The UTF-8 text of a string value, `None` for other types.
fn as_text(v: &AMQPValue) -> Option<Result<&str, std::str::Utf8Error>> {
    match v {
        AMQPValue::LongString(s) => Some(std::str::from_utf8(s.as_bytes())),
        AMQPValue::ShortString(s) => Some(Ok(s.as_str())),
        AMQPValue::ByteArray(b) => Some(std::str::from_utf8(b.as_slice())),
        _ => None,
    }
}

pub(crate) fn string(field: &'static str, v: &AMQPValue) -> Result<String, Rejection> {
    match as_text(v) {
        Some(Ok(s)) => Ok(s.to_owned()),
        Some(Err(_)) => Err(Rejection::invalid(field, "must be UTF-8 text")),
        None => Err(Rejection::invalid(
            field,
            format!("must be a string, not {}", type_name(v)),
        )),
    }
}

pub(crate) fn list(
    field: &'static str,
    v: Option<&AMQPValue>,
    max: usize,
) -> Result<Vec<String>, Rejection> {
    let items = match v {
        None => return Ok(Vec::new()),
        Some(AMQPValue::FieldArray(a)) => a.as_slice(),
        Some(other) => {
            return Err(Rejection::invalid(
                field,
                format!("must be an array of strings, not {}", type_name(other)),
            ));
        }
    };
    // Count first: a huge array is refused before anything is copied.
    if items.len() > max {
        return Err(Rejection::invalid(
            field,
            format!("has {} entries; the limit is {max}", items.len()),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| match as_text(item) {
            Some(Ok(s)) => Ok(s.to_owned()),
            Some(Err(_)) => Err(Rejection::invalid(
                field,
                format!("entry {i} is not UTF-8 text"),
            )),
            None => Err(Rejection::invalid(
                field,
                format!(
                    "must be an array of strings; entry {i} is {}",
                    type_name(item)
                ),
            )),
        })
        .collect()
}

fn ttl_ms(v: &AMQPValue, limits: &Limits) -> Result<Duration, Rejection> {
    let ms: i128 = match v {
        AMQPValue::ShortShortInt(n) => (*n).into(),
        AMQPValue::ShortShortUInt(n) => (*n).into(),
        AMQPValue::ShortInt(n) => (*n).into(),
        AMQPValue::ShortUInt(n) => (*n).into(),
        AMQPValue::LongInt(n) => (*n).into(),
        AMQPValue::LongUInt(n) => (*n).into(),
        AMQPValue::LongLongInt(n) => (*n).into(),
        other => {
            return Err(Rejection::invalid(
                names::TTL_MS,
                format!(
                    "must be an integer (milliseconds), not {}",
                    type_name(other)
                ),
            ));
        }
    };
    let max = limits.max_ttl.as_millis();
    match u64::try_from(ms) {
        Ok(ms) if ms >= 1 && u128::from(ms) <= max => Ok(Duration::from_millis(ms)),
        _ => Err(Rejection::invalid(
            names::TTL_MS,
            format!("must be between 1 and {max} ms"),
        )),
    }
}

mod publication;
#[cfg(test)]
mod tests;

pub use publication::{publication_from_amqp_bytes, target_from_amqp};
