//! The record of one request a callback made (a recheck or a call), kept
//! with its notification for `GET /v1/notifications/{id}` and the dead
//! letters, and its stored form: a small versioned binary record shared by
//! every store backend.
//!
//! Layout (integers little-endian; `str` = u16 length, then UTF-8):
//! ```text
//! u8  version (1)
//! u64 at_ms | u32 duration_ms | u32 attempt
//! u8  kind: 0 recheck, 1 call
//! u16 status (0: no response)
//! u8  outcome: 0 proceed, 1 delivered, 2 declined, 3 failed
//! str error (empty: none) | str excerpt (the answer's first bytes)
//! ```

use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::Serialize;

use super::answer::{REASON_BYTES, RECORD_BYTES};

/// The record version this code writes.
pub const VERSION: u8 = 1;

/// The longest error kept, in bytes (cut at a character boundary).
pub const MAX_ERROR_BYTES: usize = REASON_BYTES * 2;

/// The longest excerpt kept, in bytes: [`RECORD_BYTES`] of body, which
/// may be up to three times longer as text when the body was not UTF-8.
pub const MAX_EXCERPT_BYTES: usize = RECORD_BYTES * 3;

/// Which request an attempt made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// `GET recheck_url`.
    Recheck,
    /// `POST callback_url`.
    Call,
}

/// What the attempt's answer meant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The recheck said go ahead.
    Proceed,
    /// The call succeeded.
    Delivered,
    /// The recheck said no.
    Declined,
    /// No answer, or an answer that counts as a failure: retried.
    Failed,
}

/// One request and its answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Attempt {
    /// When the request started, epoch ms.
    pub at_ms: u64,
    /// How long until the answer (or the timeout).
    pub duration_ms: u32,
    /// Which attempt of the policy (1 for the first).
    pub attempt: u32,
    /// Recheck or call.
    pub kind: Kind,
    /// The HTTP status, if a response came.
    pub status: Option<u16>,
    /// What it meant.
    pub verdict: Verdict,
    /// What went wrong, if anything (timeout, network error, `retry_if` held).
    pub error: Option<String>,
    /// The start of the answer's body.
    pub excerpt: String,
}

/// A record that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttemptError {
    /// The record ends early.
    #[error("attempt record ends early: {0} missing")]
    Truncated(&'static str),
    /// A version this code does not read.
    #[error("attempt record version {0}; this build reads {VERSION}")]
    Version(u8),
    /// A code with no meaning.
    #[error("attempt record: unknown {field} code {code}")]
    Code {
        /// Which field.
        field: &'static str,
        /// The code found.
        code: u8,
    },
    /// Text that is not UTF-8.
    #[error("attempt record: {0} is not UTF-8")]
    Utf8(&'static str),
    /// Bytes after the record.
    #[error("attempt record: {0} bytes after its end")]
    Trailing(usize),
}

impl Attempt {
    /// The stored form. Error and excerpt are cut to their bounds.
    pub fn encode(&self) -> Bytes {
        let error = cut(self.error.as_deref().unwrap_or(""), MAX_ERROR_BYTES);
        let excerpt = cut(&self.excerpt, MAX_EXCERPT_BYTES);
        let mut out =
            BytesMut::with_capacity(1 + 8 + 4 + 4 + 1 + 2 + 1 + 4 + error.len() + excerpt.len());
        out.put_u8(VERSION);
        out.put_u64_le(self.at_ms);
        out.put_u32_le(self.duration_ms);
        out.put_u32_le(self.attempt);
        out.put_u8(match self.kind {
            Kind::Recheck => 0,
            Kind::Call => 1,
        });
        out.put_u16_le(self.status.unwrap_or(0));
        out.put_u8(match self.verdict {
            Verdict::Proceed => 0,
            Verdict::Delivered => 1,
            Verdict::Declined => 2,
            Verdict::Failed => 3,
        });
        put_str(&mut out, error);
        put_str(&mut out, excerpt);
        out.freeze()
    }

    /// The stored form of one policy attempt's requests (a recheck that
    /// said go, then its call): their records one after the other, as
    /// one value of an attempt log. `None` when there are none.
    pub fn encode_all<'a>(requests: impl IntoIterator<Item = &'a Attempt>) -> Option<Bytes> {
        let mut out = BytesMut::new();
        for a in requests {
            out.extend_from_slice(&a.encode());
        }
        (!out.is_empty()).then(|| out.freeze())
    }

    /// Read a value made by [`Attempt::encode_all`] (or one
    /// [`Attempt::encode`]): every record in it, in order.
    pub fn decode_all(mut value: &[u8]) -> Result<Vec<Attempt>, AttemptError> {
        let mut out = Vec::with_capacity(2);
        loop {
            out.push(Attempt::read(&mut value)?);
            if value.is_empty() {
                return Ok(out);
            }
        }
    }

    /// Read a record made by [`Attempt::encode`].
    pub fn decode(mut record: &[u8]) -> Result<Attempt, AttemptError> {
        let a = Attempt::read(&mut record)?;
        if !record.is_empty() {
            return Err(AttemptError::Trailing(record.len()));
        }
        Ok(a)
    }

    /// Read one record off the front of `r`.
    fn read(r: &mut &[u8]) -> Result<Attempt, AttemptError> {
        let version = take(r, 1, "version")?.get_u8();
        if version != VERSION {
            return Err(AttemptError::Version(version));
        }
        let at_ms = take(r, 8, "at_ms")?.get_u64_le();
        let duration_ms = take(r, 4, "duration_ms")?.get_u32_le();
        let attempt = take(r, 4, "attempt")?.get_u32_le();
        let kind = match take(r, 1, "kind")?.get_u8() {
            0 => Kind::Recheck,
            1 => Kind::Call,
            code => {
                return Err(AttemptError::Code {
                    field: "kind",
                    code,
                });
            }
        };
        let status = match take(r, 2, "status")?.get_u16_le() {
            0 => None,
            s => Some(s),
        };
        let verdict = match take(r, 1, "verdict")?.get_u8() {
            0 => Verdict::Proceed,
            1 => Verdict::Delivered,
            2 => Verdict::Declined,
            3 => Verdict::Failed,
            code => {
                return Err(AttemptError::Code {
                    field: "verdict",
                    code,
                });
            }
        };
        let error = get_str(r, "error")?;
        let excerpt = get_str(r, "excerpt")?;
        Ok(Attempt {
            at_ms,
            duration_ms,
            attempt,
            kind,
            status,
            verdict,
            error: (!error.is_empty()).then_some(error),
            excerpt,
        })
    }
}

fn take<'a>(r: &mut &'a [u8], n: usize, what: &'static str) -> Result<&'a [u8], AttemptError> {
    if r.len() < n {
        return Err(AttemptError::Truncated(what));
    }
    let (head, rest) = r.split_at(n);
    *r = rest;
    Ok(head)
}

fn put_str(out: &mut BytesMut, s: &str) {
    // Both strings are cut below u16::MAX by the caller.
    out.put_u16_le(s.len() as u16);
    out.put_slice(s.as_bytes());
}

fn get_str(r: &mut &[u8], what: &'static str) -> Result<String, AttemptError> {
    let len = usize::from(take(r, 2, what)?.get_u16_le());
    let bytes = take(r, len, what)?;
    String::from_utf8(bytes.to_vec()).map_err(|_| AttemptError::Utf8(what))
}

/// `s` cut to at most `max` bytes at a character boundary.
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn attempt() -> Attempt {
        Attempt {
            at_ms: 1_700_000_000_123,
            duration_ms: 42,
            attempt: 3,
            kind: Kind::Call,
            status: Some(503),
            verdict: Verdict::Failed,
            error: Some("HTTP 503".into()),
            excerpt: "busy".into(),
        }
    }

    #[test]
    fn round_trips() {
        let a = attempt();
        assert_eq!(Attempt::decode(&a.encode()).unwrap(), a);
        let none = Attempt {
            status: None,
            error: None,
            excerpt: String::new(),
            kind: Kind::Recheck,
            verdict: Verdict::Proceed,
            ..attempt()
        };
        assert_eq!(Attempt::decode(&none.encode()).unwrap(), none);
    }

    #[test]
    fn long_text_is_cut_at_a_character_boundary() {
        let a = Attempt {
            error: Some("é".repeat(MAX_ERROR_BYTES)),
            excerpt: "€".repeat(MAX_EXCERPT_BYTES),
            ..attempt()
        };
        let back = Attempt::decode(&a.encode()).unwrap();
        let error = back.error.unwrap();
        assert!(error.len() <= MAX_ERROR_BYTES && error.chars().all(|c| c == 'é'));
        assert_eq!(error.len(), MAX_ERROR_BYTES);
        assert!(back.excerpt.len() <= MAX_EXCERPT_BYTES && back.excerpt.len().is_multiple_of(3));
    }

    #[test]
    fn every_truncation_and_bad_code_is_an_error() {
        let full = attempt().encode();
        for cut in 0..full.len() {
            assert!(Attempt::decode(&full[..cut]).is_err(), "cut at {cut}");
        }
        let mut long = full.to_vec();
        long.push(0);
        assert_eq!(Attempt::decode(&long), Err(AttemptError::Trailing(1)));
        // One policy attempt's requests, stored as one value.
        let a = attempt();
        let both = Attempt::encode_all([&a, &a]).unwrap();
        assert_eq!(Attempt::decode_all(&both).unwrap(), [a.clone(), a.clone()]);
        assert!(Attempt::decode_all(&both[..both.len() - 1]).is_err());
        assert_eq!(Attempt::encode_all([]), None);
        let mut bad = full.to_vec();
        bad[0] = 2;
        assert_eq!(Attempt::decode(&bad), Err(AttemptError::Version(2)));
        let mut bad = full.to_vec();
        bad[17] = 9; // kind
        assert_eq!(
            Attempt::decode(&bad),
            Err(AttemptError::Code {
                field: "kind",
                code: 9
            })
        );
    }

    #[test]
    fn the_json_view_names_kinds_and_verdicts() {
        let v = serde_json::to_value(attempt()).unwrap();
        assert_eq!(v["kind"], "call");
        assert_eq!(v["verdict"], "failed");
        assert_eq!(v["status"], 503);
    }

    proptest! {
        #[test]
        fn any_bytes_decode_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
            let _ = Attempt::decode(&bytes);
        }
    }
}
