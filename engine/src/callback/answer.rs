//! What an answer means: the recheck's (send, don't send, ask again later)
//! and the callback's (delivered or failed), and the excerpt of a body an
//! attempt record keeps.
//!
//! # Recheck
//! | answer | meaning |
//! |---|---|
//! | 2xx with body `OK` (any case, surrounding whitespace ignored) or a JSON object with `"ok": true` | [`Recheck::Proceed`] |
//! | any other 2xx | [`Recheck::Decline`]: the backend said no (e.g. the task was cancelled) |
//! | 5xx, 429, 408, timeout, network error | [`Recheck::Retry`] |
//! | any other 4xx | [`Recheck::Decline`] |
//! | anything else (1xx, 3xx: redirects are not followed) | [`Recheck::Retry`]: a misconfigured endpoint ends `dead`, alerted and replayable, rather than silently declined |
//!
//! # Callback
//! Delivered when the status is 2xx and the topic's `retry_if` condition,
//! if any, does not hold. When the condition reads the body (`{res...}`)
//! and the body is empty or not JSON, the attempt fails (field report 3):
//! an endpoint that answers nothing has not answered the question the
//! condition asks. Every failure is retried per the policy.
//!
//! # Excerpts
//! An attempt record keeps the first [`RECORD_BYTES`] of a body, a decline
//! or failure reason the first [`REASON_BYTES`]. The cut backs off to a
//! UTF-8 character boundary, and the bytes are stored as lossy text: invalid
//! sequences become U+FFFD, so a binary body still leaves a readable trace.
//! An answer from a destination that is not plainly public (reached only
//! because `allow_private_networks` allowed it) is neither kept nor quoted:
//! its status and length are.

use serde_json::Value;

use super::condition::Condition;

/// How much of a body an attempt record keeps, in bytes of the body.
pub const RECORD_BYTES: usize = 1024;

/// How much of a body a decline or failure reason quotes, in bytes.
pub const REASON_BYTES: usize = 256;

/// What came back from one HTTP request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer<'a> {
    /// An HTTP response.
    Response {
        /// The status code.
        status: u16,
        /// The body as read (the sender bounds how much it reads).
        body: &'a [u8],
        /// Whether a reason may quote the body: not when it came from a
        /// destination that is not plainly public ([`super::client::Answer::public`]).
        quote: bool,
    },
    /// No response within the timeout.
    Timeout,
    /// No response: connection refused or reset, DNS, TLS, a refused
    /// destination, ...
    Network {
        /// What went wrong, for the record.
        error: &'a str,
    },
}

/// What a recheck answer means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recheck {
    /// Send the callback.
    Proceed,
    /// Do not send it; the notification ends `declined`.
    Decline {
        /// Why, quoting the start of the body.
        reason: String,
    },
    /// Ask again later, per the retry policy.
    Retry {
        /// Why.
        reason: String,
    },
}

/// What a callback answer means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Delivered: done.
    Delivered,
    /// Failed: retry per the policy, or dead when none is left.
    Failed {
        /// Why, quoting the start of the body.
        reason: String,
    },
}

/// Classifies the answer of a recheck request (see the module docs).
pub fn recheck(answer: &Answer<'_>) -> Recheck {
    let (status, body) = match *answer {
        Answer::Response { status, body, .. } => (status, body),
        Answer::Timeout | Answer::Network { .. } => {
            return Recheck::Retry {
                reason: describe(answer),
            };
        }
    };
    match status {
        200..=299 if says_ok(body) => Recheck::Proceed,
        200..=299 | 400..=499 if !matches!(status, 408 | 429) => Recheck::Decline {
            reason: describe(answer),
        },
        _ => Recheck::Retry {
            reason: describe(answer),
        },
    }
}

/// Whether a recheck body says go: `OK` in any case, or `{"ok": true}`.
fn says_ok(body: &[u8]) -> bool {
    if body.trim_ascii().eq_ignore_ascii_case(b"ok") {
        return true;
    }
    matches!(
        serde_json::from_slice::<Value>(body),
        Ok(Value::Object(map)) if map.get("ok") == Some(&Value::Bool(true))
    )
}

/// Classifies the answer of a callback request against the topic's
/// `retry_if` condition, if any (see the module docs).
pub fn callback(answer: &Answer<'_>, condition: Option<&Condition>) -> Outcome {
    let failed = || Outcome::Failed {
        reason: describe(answer),
    };
    let Answer::Response { status, body, .. } = *answer else {
        return failed();
    };
    if !(200..=299).contains(&status) {
        return failed();
    }
    let Some(condition) = condition else {
        return Outcome::Delivered;
    };
    let json = if condition.reads_body() {
        match serde_json::from_slice::<Value>(body) {
            Ok(json) => Some(json),
            Err(_) => {
                return Outcome::Failed {
                    reason: format!(
                        "{}; retry_if reads the body, which is empty or not JSON",
                        describe(answer)
                    ),
                };
            }
        }
    } else {
        None
    };
    if condition.eval(status, json.as_ref()) {
        Outcome::Failed {
            reason: format!("{}; retry_if held", describe(answer)),
        }
    } else {
        Outcome::Delivered
    }
}

/// A one-line account of an answer for reasons and logs.
fn describe(answer: &Answer<'_>) -> String {
    match *answer {
        Answer::Response {
            status, body: [], ..
        } => format!("HTTP {status}"),
        Answer::Response {
            status,
            quote: false,
            body,
        } => format!(
            "HTTP {status} ({} bytes, not quoted: the destination is not public)",
            body.len()
        ),
        Answer::Response { status, body, .. } => {
            format!("HTTP {status}: {}", excerpt(body, REASON_BYTES))
        }
        Answer::Timeout => "timed out".to_owned(),
        Answer::Network { error } => format!("network error: {error}"),
    }
}

/// The first `max_bytes` of `body` as text: cut back to a character
/// boundary, invalid UTF-8 replaced by U+FFFD (so the text may be up to
/// three times longer than the bytes it stands for, when they were not
/// UTF-8).
pub fn excerpt(body: &[u8], max_bytes: usize) -> String {
    let mut end = body.len().min(max_bytes);
    if end < body.len() {
        // Do not split a character: back off over continuation bytes of the
        // one the cut falls in (at most 3 in UTF-8).
        let floor = end.saturating_sub(3);
        while end > floor && is_continuation(body[end]) {
            end -= 1;
        }
    }
    String::from_utf8_lossy(&body[..end]).into_owned()
}

fn is_continuation(byte: u8) -> bool {
    byte & 0b1100_0000 == 0b1000_0000
}

#[cfg(test)]
mod tests;
