//! A topic's callback settings: what `PUT /v1/topics/{name}` takes, checked
//! once at registration so that nothing is parsed when a notification
//! falls due.
//!
//! # The wire form
//! ```json
//! {
//!   "callback_url": "https://push.example.com/send",
//!   "recheck_url": "https://billing.example.com/still-due",
//!   "retry": "2n+1",
//!   "retry_if": "{res.code}!=200 && {res.data.status}!=2",
//!   "timeout_ms": 10000,
//!   "signing_secrets": ["whsec_..."],
//!   "jitter_ms": 0, "min_interval_ms": 60000, "merge": false
//! }
//! ```
//! Every field is optional. `retry` is one of:
//! - `"2n+1"` (the default): 1, 3, 5, 7, ... minutes, 10 attempts;
//! - `{"delays_ms": [60000, 180000]}`: explicit waits, one more attempt
//!   than delays;
//! - `{"initial_ms": 1000, "max_ms": 60000, "attempts": 8}`: exponential
//!   with full jitter.
//!
//! A topic with a `recheck_url` and no `callback_url` is refused (a
//! recheck guards a call); signing secrets without a URL to sign for are
//! refused too, so a typo in a field name is not silently a topic that
//! never calls anyone. Unknown fields are refused.
//!
//! Every error names its field (dotted, with indexes:
//! `retry.delays_ms[2]`, `signing_secrets[0]`), and a `retry_if` error
//! carries the byte position in the condition.

use serde::Serialize;
use serde_json::{Map, Value};
use url::Url;

use super::condition::Condition;
use super::destination::{self, Class};
use super::retry::{MAX_ATTEMPTS, Policy};
use super::signature::Secret;

/// The default per-attempt timeout.
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;

/// The longest per-attempt timeout: 5 minutes.
pub const MAX_TIMEOUT_MS: u64 = 5 * 60 * 1000;

/// The most signing secrets a topic holds at once (rotation needs two;
/// a few more leave room for a slow roll-out).
pub const MAX_SECRETS: usize = 8;

/// The longest `jitter_ms` and `min_interval_ms`: one day.
pub const MAX_SPREAD_MS: u64 = 24 * 60 * 60 * 1000;

/// A topic's settings, validated.
#[derive(Debug, Clone)]
pub struct Topic {
    /// The callback's destination, if the topic calls out.
    pub callback_url: Option<Url>,
    /// Asked before each call, if set.
    pub recheck_url: Option<Url>,
    /// When to try again.
    pub retry: Policy,
    /// When a 2xx answer still counts as a failure.
    pub retry_if: Option<RetryIf>,
    /// Per-attempt timeout.
    pub timeout_ms: u64,
    /// Secrets every call is signed with (several during a rotation).
    pub signing_secrets: Vec<Secret>,
    /// Spread due times over `[due, due + jitter_ms]`.
    pub jitter_ms: u64,
    /// `when-online` sends to one user at least this far apart.
    pub min_interval_ms: Option<u64>,
    /// Merge `when-online` notifications that fall due together.
    pub merge: Option<bool>,
}

/// A `retry_if` condition with the text it was parsed from (for `GET`).
#[derive(Debug, Clone)]
pub struct RetryIf {
    /// As registered.
    pub text: String,
    /// Parsed.
    pub condition: Condition,
}

/// A setting that cannot be registered: HTTP 422 naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct TopicError {
    /// The field to blame, dotted (`retry.delays_ms[2]`).
    pub field: String,
    /// What is wrong with it.
    pub message: String,
    /// For `retry_if`: the byte offset in the condition the error points at.
    pub position: Option<usize>,
}

impl TopicError {
    /// An error of `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        TopicError {
            field: field.into(),
            message: message.into(),
            position: None,
        }
    }
}

/// Check a topic name: what a notification's `topic` accepts (1 to 200
/// characters of `A-Z a-z 0-9 . _ ~ @ / + = -`), so every topic a backend
/// publishes under can be registered.
pub fn check_name(name: &str) -> Result<(), TopicError> {
    if herald_protocol::envelope::is_valid_name(name) {
        Ok(())
    } else {
        Err(TopicError::new(
            "name",
            "must be 1 to 200 characters of A-Z a-z 0-9 . _ ~ @ / + = -",
        ))
    }
}

const FIELDS: [&str; 9] = [
    "callback_url",
    "recheck_url",
    "retry",
    "retry_if",
    "timeout_ms",
    "signing_secrets",
    "jitter_ms",
    "min_interval_ms",
    "merge",
];

impl Topic {
    /// Parse and check the JSON form (see the module docs). `allowed`
    /// lists the address classes a deployment lets callbacks reach
    /// (`callbacks.allow_private_networks`).
    pub fn from_json(body: &Value, allowed: &[Class]) -> Result<Topic, TopicError> {
        let Value::Object(map) = body else {
            return Err(TopicError::new("", "a topic is a JSON object"));
        };
        if let Some(unknown) = map.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            return Err(TopicError::new(
                unknown.clone(),
                format!("unknown field; expected one of {}", FIELDS.join(", ")),
            ));
        }
        let callback_url = url_field(map, "callback_url", allowed)?;
        let recheck_url = url_field(map, "recheck_url", allowed)?;
        let retry = match map.get("retry") {
            None | Some(Value::Null) => Policy::default(),
            Some(v) => retry_field(v)?,
        };
        let retry_if = match map.get("retry_if") {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) => Some(RetryIf {
                condition: Condition::parse(text).map_err(|e| TopicError {
                    field: "retry_if".into(),
                    message: e.to_string(),
                    position: e.position(),
                })?,
                text: text.clone(),
            }),
            Some(_) => return Err(TopicError::new("retry_if", "must be a string")),
        };
        let timeout_ms = match uint_field(map, "timeout_ms", 1, MAX_TIMEOUT_MS)? {
            Some(ms) => ms,
            None => DEFAULT_TIMEOUT_MS,
        };
        let signing_secrets = secrets_field(map)?;
        let jitter_ms = uint_field(map, "jitter_ms", 0, MAX_SPREAD_MS)?.unwrap_or(0);
        let min_interval_ms = uint_field(map, "min_interval_ms", 0, MAX_SPREAD_MS)?;
        let merge = match map.get("merge") {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => return Err(TopicError::new("merge", "must be true or false")),
        };
        if callback_url.is_none() {
            if recheck_url.is_some() {
                return Err(TopicError::new(
                    "recheck_url",
                    "a recheck guards a callback: set callback_url as well",
                ));
            }
            if !signing_secrets.is_empty() {
                return Err(TopicError::new(
                    "signing_secrets",
                    "nothing to sign without a callback_url",
                ));
            }
        }
        Ok(Topic {
            callback_url,
            recheck_url,
            retry,
            retry_if,
            timeout_ms,
            signing_secrets,
            jitter_ms,
            min_interval_ms,
            merge,
        })
    }

    /// The JSON form, as `GET /v1/topics/{name}` answers it: secrets are
    /// never shown, only how many there are.
    pub fn to_json(&self) -> Value {
        #[derive(Serialize)]
        struct View<'a> {
            callback_url: Option<&'a str>,
            recheck_url: Option<&'a str>,
            retry: Value,
            retry_if: Option<&'a str>,
            timeout_ms: u64,
            signing_secrets: usize,
            jitter_ms: u64,
            min_interval_ms: Option<u64>,
            merge: Option<bool>,
        }
        let view = View {
            callback_url: self.callback_url.as_ref().map(Url::as_str),
            recheck_url: self.recheck_url.as_ref().map(Url::as_str),
            retry: retry_json(&self.retry),
            retry_if: self.retry_if.as_ref().map(|r| r.text.as_str()),
            timeout_ms: self.timeout_ms,
            signing_secrets: self.signing_secrets.len(),
            jitter_ms: self.jitter_ms,
            min_interval_ms: self.min_interval_ms,
            merge: self.merge,
        };
        serde_json::to_value(view).expect("a topic view serializes")
    }

    /// The stored form: [`Topic::to_json`] with the secrets themselves,
    /// for the store only (never answered to a client). Read back with
    /// [`Topic::from_json`].
    pub fn to_stored_json(&self) -> Value {
        let mut value = self.to_json();
        let secrets = self
            .signing_secrets
            .iter()
            .map(|s| Value::String(s.to_whsec()))
            .collect();
        value["signing_secrets"] = Value::Array(secrets);
        value
    }
}

fn url_field(
    map: &Map<String, Value>,
    field: &'static str,
    allowed: &[Class],
) -> Result<Option<Url>, TopicError> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => destination::parse_url(field, text, allowed)
            .map(Some)
            .map_err(|e| TopicError::new(e.field(), message_of(&e.to_string(), e.field()))),
        Some(_) => Err(TopicError::new(field, "must be a string")),
    }
}

/// An error's text without its leading `field: `, which the field of the
/// JSON error already says.
pub(crate) fn message_of(text: &str, field: &str) -> String {
    text.strip_prefix(field)
        .and_then(|rest| rest.strip_prefix(": "))
        .unwrap_or(text)
        .to_owned()
}

fn uint_field(
    map: &Map<String, Value>,
    field: &str,
    min: u64,
    max: u64,
) -> Result<Option<u64>, TopicError> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
            _ => Err(TopicError::new(
                field,
                format!("must be a whole number from {min} to {max}, got {v}"),
            )),
        },
    }
}

fn secrets_field(map: &Map<String, Value>) -> Result<Vec<Secret>, TopicError> {
    let list = match map.get("signing_secrets") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(_) => {
            return Err(TopicError::new(
                "signing_secrets",
                "must be a list of whsec_ secrets",
            ));
        }
    };
    if list.len() > MAX_SECRETS {
        return Err(TopicError::new(
            "signing_secrets",
            format!("{} secrets; the limit is {MAX_SECRETS}", list.len()),
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, v)| {
            let field = format!("signing_secrets[{i}]");
            match v {
                Value::String(text) => {
                    Secret::parse(text).map_err(|e| TopicError::new(field, e.to_string()))
                }
                _ => Err(TopicError::new(field, "must be a string")),
            }
        })
        .collect()
}

/// The name of the field report's schedule, the default.
const TWO_N_PLUS_ONE: &str = "2n+1";

fn retry_field(value: &Value) -> Result<Policy, TopicError> {
    let map = match value {
        Value::String(name) if name == TWO_N_PLUS_ONE => return Ok(Policy::TwoNPlusOne),
        Value::String(name) => {
            return Err(TopicError::new(
                "retry",
                format!("unknown schedule {name:?}; the named one is \"2n+1\""),
            ));
        }
        Value::Object(map) => map,
        _ => {
            return Err(TopicError::new(
                "retry",
                "must be \"2n+1\", {\"delays_ms\": [...]} or {\"initial_ms\", \"max_ms\", \"attempts\"}",
            ));
        }
    };
    let invalid = |e: super::retry::RetryError| {
        let field = e.field().to_owned();
        TopicError::new(field.clone(), message_of(&e.to_string(), &field))
    };
    if let Some(unknown) = map.keys().find(|k| {
        !matches!(
            k.as_str(),
            "delays_ms" | "initial_ms" | "max_ms" | "attempts"
        )
    }) {
        return Err(TopicError::new(
            format!("retry.{unknown}"),
            "unknown field; expected delays_ms, or initial_ms, max_ms and attempts",
        ));
    }
    if let Some(delays) = map.get("delays_ms") {
        if map.len() > 1 {
            return Err(TopicError::new(
                "retry",
                "delays_ms is a schedule of its own: leave out initial_ms, max_ms and attempts",
            ));
        }
        let Value::Array(list) = delays else {
            return Err(TopicError::new(
                "retry.delays_ms",
                "must be a list of milliseconds",
            ));
        };
        if list.len() >= MAX_ATTEMPTS as usize {
            return Err(TopicError::new(
                "retry.delays_ms",
                format!(
                    "{} delays make {} attempts; the limit is {MAX_ATTEMPTS}",
                    list.len(),
                    list.len() + 1
                ),
            ));
        }
        let delays = list
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_i64().ok_or_else(|| {
                    TopicError::new(
                        format!("retry.delays_ms[{i}]"),
                        format!("must be a whole number of milliseconds, got {v}"),
                    )
                })
            })
            .collect::<Result<Vec<i64>, _>>()?;
        return Policy::delays(&delays).map_err(invalid);
    }
    let get = |field: &str| -> Result<i64, TopicError> {
        let path = format!("retry.{field}");
        match map.get(field) {
            None => Err(TopicError::new(
                path,
                "missing: an exponential schedule needs initial_ms, max_ms and attempts",
            )),
            Some(v) => v
                .as_i64()
                .ok_or_else(|| TopicError::new(path, format!("must be a whole number, got {v}"))),
        }
    };
    Policy::exponential(get("initial_ms")?, get("max_ms")?, get("attempts")?).map_err(invalid)
}

fn retry_json(policy: &Policy) -> Value {
    match policy {
        Policy::TwoNPlusOne => Value::String(TWO_N_PLUS_ONE.into()),
        Policy::Delays(delays) => serde_json::json!({ "delays_ms": delays }),
        Policy::Exponential {
            initial_ms,
            max_ms,
            attempts,
        } => serde_json::json!({
            "initial_ms": initial_ms,
            "max_ms": max_ms,
            "attempts": attempts,
        }),
    }
}

#[cfg(test)]
mod tests;
