//! Standard Webhooks signatures (<https://www.standardwebhooks.com/>,
//! symmetric scheme `v1`).
//!
//! A callback carries three headers: `webhook-id` (the same on every attempt
//! of one notification, the receiver's idempotency key), `webhook-timestamp`
//! (seconds since the epoch, of this attempt) and `webhook-signature`:
//! `v1,<base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}"))>`, one entry per
//! secret, space-separated, so a topic can rotate its secret without a
//! moment in which receivers reject what it sends.
//!
//! Secrets are written `whsec_<base64 of 24 to 64 random bytes>`, the form
//! the specification prescribes; the key is the decoded bytes. Nothing here
//! reads the clock: [`sign`] and [`verify`] take the time as an argument.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// The header that carries the message id.
pub const ID_HEADER: &str = "webhook-id";
/// The header that carries the attempt's timestamp (epoch seconds).
pub const TIMESTAMP_HEADER: &str = "webhook-timestamp";
/// The header that carries the signatures.
pub const SIGNATURE_HEADER: &str = "webhook-signature";

/// The prefix of a secret's written form.
pub const SECRET_PREFIX: &str = "whsec_";
/// The shortest key the specification allows, in bytes (192 bits).
pub const MIN_SECRET_BYTES: usize = 24;
/// The longest key the specification allows, in bytes (512 bits).
pub const MAX_SECRET_BYTES: usize = 64;
/// How far a received timestamp may be from the receiver's clock, in
/// seconds, as the reference libraries use: a replay older than this fails.
pub const DEFAULT_TOLERANCE_SECS: u64 = 5 * 60;

/// The signature version of the symmetric scheme.
const VERSION: &str = "v1";

/// A signing secret. Its `Debug` form hides the key.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    key: Vec<u8>,
}

/// Why a secret was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// The text does not start with `whsec_`.
    #[error("a signing secret starts with whsec_")]
    MissingPrefix,
    /// What follows the prefix is not standard base64 (with padding).
    #[error("a signing secret is whsec_ followed by base64: {reason}")]
    NotBase64 {
        /// The decoder's complaint.
        reason: String,
    },
    /// The key is shorter than [`MIN_SECRET_BYTES`].
    #[error("a signing secret's key is {bytes} bytes; the minimum is {MIN_SECRET_BYTES}")]
    TooShort {
        /// The key's length.
        bytes: usize,
    },
    /// The key is longer than [`MAX_SECRET_BYTES`].
    #[error("a signing secret's key is {bytes} bytes; the maximum is {MAX_SECRET_BYTES}")]
    TooLong {
        /// The key's length.
        bytes: usize,
    },
}

impl Secret {
    /// Parses the written form `whsec_<base64>`.
    pub fn parse(text: &str) -> Result<Secret, SecretError> {
        let encoded = text
            .strip_prefix(SECRET_PREFIX)
            .ok_or(SecretError::MissingPrefix)?;
        let key = BASE64.decode(encoded).map_err(|e| SecretError::NotBase64 {
            reason: e.to_string(),
        })?;
        Secret::from_key(key)
    }

    /// A secret from raw key bytes (e.g. freshly generated random bytes).
    pub fn from_key(key: Vec<u8>) -> Result<Secret, SecretError> {
        match key.len() {
            n if n < MIN_SECRET_BYTES => Err(SecretError::TooShort { bytes: n }),
            n if n > MAX_SECRET_BYTES => Err(SecretError::TooLong { bytes: n }),
            _ => Ok(Secret { key }),
        }
    }

    /// The written form, `whsec_<base64>`, to show the topic's owner once.
    pub fn to_whsec(&self) -> String {
        format!("{SECRET_PREFIX}{}", BASE64.encode(&self.key))
    }

    fn mac(&self, id: &str, timestamp: &str, body: &[u8]) -> HmacSha256 {
        // HMAC takes keys of any length; ours are 24 to 64 bytes.
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC accepts any key length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.as_bytes());
        mac.update(b".");
        mac.update(body);
        mac
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({} bytes)", self.key.len())
    }
}

impl std::str::FromStr for Secret {
    type Err = SecretError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Secret::parse(s)
    }
}

/// The three header values of a signed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureHeaders {
    /// `webhook-id`.
    pub id: String,
    /// `webhook-timestamp`: epoch seconds, in decimal.
    pub timestamp: String,
    /// `webhook-signature`: `v1,<base64>` per secret, space-separated.
    pub signature: String,
}

/// Why a request could not be signed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignError {
    /// No secret to sign with.
    #[error("no signing secret")]
    NoSecret,
    /// The id is empty, or holds a `.` (which would make `{id}.{ts}.{body}`
    /// ambiguous, as the specification warns) or a byte a header cannot
    /// carry.
    #[error("webhook id {id:?} is not usable: it must be non-empty printable ASCII without '.'")]
    BadId {
        /// The refused id.
        id: String,
    },
}

/// Signs `body` as message `id` sent at `timestamp_secs`, once with each of
/// `secrets` (the current one first during a rotation).
pub fn sign(
    id: &str,
    timestamp_secs: u64,
    body: &[u8],
    secrets: &[Secret],
) -> Result<SignatureHeaders, SignError> {
    if secrets.is_empty() {
        return Err(SignError::NoSecret);
    }
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_graphic() && b != b'.') {
        return Err(SignError::BadId { id: id.to_owned() });
    }
    let timestamp = timestamp_secs.to_string();
    let signature = secrets
        .iter()
        .map(|secret| {
            let tag = secret.mac(id, &timestamp, body).finalize().into_bytes();
            format!("{VERSION},{}", BASE64.encode(tag))
        })
        .collect::<Vec<_>>()
        .join(" ");
    Ok(SignatureHeaders {
        id: id.to_owned(),
        timestamp,
        signature,
    })
}

/// Why a received request did not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// `webhook-timestamp` is not a decimal number of seconds.
    #[error("webhook-timestamp is not a number of seconds")]
    BadTimestamp,
    /// The timestamp is older than the tolerance: perhaps a replay.
    #[error("webhook-timestamp is {age_secs} s old; the tolerance is {tolerance_secs} s")]
    TooOld {
        /// How old it is.
        age_secs: u64,
        /// The tolerance used.
        tolerance_secs: u64,
    },
    /// The timestamp is further ahead than the tolerance.
    #[error(
        "webhook-timestamp is {ahead_secs} s in the future; the tolerance is {tolerance_secs} s"
    )]
    InFuture {
        /// How far ahead it is.
        ahead_secs: u64,
        /// The tolerance used.
        tolerance_secs: u64,
    },
    /// `webhook-signature` holds no `v1` entry.
    #[error("webhook-signature holds no v1 signature")]
    NoSignature,
    /// No `v1` entry matches any of the secrets.
    #[error("no signature matches")]
    Mismatch,
}

/// Verifies a received request: the timestamp within `tolerance_secs` of
/// `now_secs`, and one of the `v1` entries of `signature` made by one of
/// `secrets` over `id`, `timestamp` and `body`. Entries of other versions
/// are skipped. Tags are compared in constant time.
pub fn verify(
    headers: &SignatureHeaders,
    body: &[u8],
    secrets: &[Secret],
    now_secs: u64,
    tolerance_secs: u64,
) -> Result<(), VerifyError> {
    let sent: u64 = headers
        .timestamp
        .parse()
        .map_err(|_| VerifyError::BadTimestamp)?;
    if now_secs.saturating_sub(sent) > tolerance_secs {
        return Err(VerifyError::TooOld {
            age_secs: now_secs - sent,
            tolerance_secs,
        });
    }
    if sent.saturating_sub(now_secs) > tolerance_secs {
        return Err(VerifyError::InFuture {
            ahead_secs: sent - now_secs,
            tolerance_secs,
        });
    }
    let tags: Vec<Vec<u8>> = headers
        .signature
        .split(' ')
        .filter_map(|entry| entry.split_once(','))
        .filter(|(version, _)| *version == VERSION)
        .filter_map(|(_, tag)| BASE64.decode(tag).ok())
        .collect();
    if tags.is_empty() {
        return Err(VerifyError::NoSignature);
    }
    let matched = secrets.iter().any(|secret| {
        let mac = secret.mac(&headers.id, &headers.timestamp, body);
        // `verify_slice` compares in constant time (the `subtle` crate).
        tags.iter().any(|tag| mac.clone().verify_slice(tag).is_ok())
    });
    if matched {
        Ok(())
    } else {
        Err(VerifyError::Mismatch)
    }
}

#[cfg(test)]
mod tests;
