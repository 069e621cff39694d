//! Identity from a signed JWT, checked against one of the configured keys
//! (`keys`: the single-key settings, `[[auth.keys]]` by `kid`, a JWKS
//! file; reloaded on SIGHUP without a restart). A token's header `kid`
//! picks its key; without `kid` it is checked against the default key.
//! Claims: `sub` (user), `client` (company), `site`, optionally `iss` and
//! `aud` (checked when configured),
//! `exp`, `nbf` (when present; both with `auth.leeway_secs` of skew). The
//! algorithm is fixed by configuration; a token signed with any other is
//! refused, and `none` (or a name no library knows) is refused by name as
//! "algorithm not allowed" before the token reaches the library.

mod keys;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};

use keys::KeySet;

use crate::config::AuthConfig;
use crate::hub::Identity;

/// Longest `sub`, `client` or `site` claim, in bytes.
pub const MAX_CLAIM_BYTES: usize = 256;

/// The claims Herald reads.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claims {
    /// User id.
    pub sub: String,
    /// Client company id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// Site (tenant / domain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<String>,
    /// Expiry, seconds since the epoch.
    pub exp: u64,
}

/// Why a token was refused; the text goes into the STOMP ERROR frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No token anywhere.
    #[error(
        "no token: send a JWT as the CONNECT passcode, an Authorization: Bearer header, or ?token="
    )]
    Missing,
    /// Past `exp`.
    #[error("token expired")]
    Expired,
    /// Signature does not verify.
    #[error("token signature is invalid")]
    BadSignature,
    /// Before `nbf` (beyond the leeway).
    #[error("token not valid yet: its nbf is in the future")]
    NotYetValid,
    /// Signed with another algorithm than the key's.
    #[error("token algorithm not accepted: this gateway accepts {0:?}")]
    WrongAlgorithm(Algorithm),
    /// Not signed (`alg: none`), or with an algorithm no JWT library knows:
    /// refused by name, never handed to the library's parser.
    #[error("token algorithm not allowed: {0:?}")]
    AlgorithmNotAllowed(String),
    /// The header's `kid` names no configured key.
    #[error("token key id (kid) {0:?} is not known to this gateway")]
    UnknownKey(String),
    /// No `kid`, and no default key is configured.
    #[error("token has no key id (kid) and this gateway has no default key")]
    NoDefaultKey,
    /// `iss` missing or not one of `auth.issuers`.
    #[error("token issuer (iss) not accepted")]
    WrongIssuer,
    /// `aud` missing or not one of `auth.audiences`.
    #[error("token audience (aud) not accepted")]
    WrongAudience,
    /// Not a JWT, or claims missing or malformed.
    #[error("token is malformed: {0}")]
    Malformed(String),
}

/// A token that verified: who it names and how long it stays valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// Who the token names.
    pub who: Identity,
    /// Until `exp` plus the leeway, from the moment it was verified.
    pub valid_for: Duration,
}

/// Verifies tokens. Clones share the keys, so a [`Verifier::reload`]
/// reaches every holder.
#[derive(Clone)]
pub struct Verifier {
    keys: Arc<RwLock<Arc<KeySet>>>,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Verifier({:?})", self.keys.read())
    }
}

impl Verifier {
    /// HS256 with `secret`, the default key.
    pub fn hs256(secret: &[u8], leeway_secs: u64) -> Self {
        Self::with(KeySet::hs256(secret, leeway_secs))
    }

    fn with(keys: KeySet) -> Self {
        Verifier {
            keys: Arc::new(RwLock::new(Arc::new(keys))),
        }
    }

    /// From configuration (not dev mode): every key it names, read now.
    pub fn from_config(auth: &AuthConfig) -> Result<Self, String> {
        KeySet::load(auth).map(Self::with)
    }

    /// Load the keys `auth` names again and use them from now on; on any
    /// problem keep the current ones and say why. Returns how many keys
    /// are in use.
    pub fn reload(&self, auth: &AuthConfig) -> Result<usize, String> {
        let fresh = KeySet::load(auth)?;
        let count = fresh.len();
        *self.keys.write() = Arc::new(fresh);
        Ok(count)
    }

    /// Check a token and return who it names.
    pub fn verify(&self, token: &str) -> Result<Verified, AuthError> {
        let token = token.trim();
        if token.is_empty() {
            return Err(AuthError::Missing);
        }
        let header = TokenHeader::parse(token)?;
        // Refused here, by name, before the library: it knows no `none`
        // and would answer with a parse error.
        let Ok(alg) = header.alg.parse::<Algorithm>() else {
            return Err(AuthError::AlgorithmNotAllowed(header.alg));
        };
        let keys = Arc::clone(&self.keys.read());
        let key = keys.select(header.kid.as_deref())?;
        if alg != key.algorithm {
            return Err(AuthError::WrongAlgorithm(key.algorithm));
        }
        let data =
            jsonwebtoken::decode::<Claims>(token, &key.decoding, &key.validation).map_err(|e| {
                match e.kind() {
                    ErrorKind::ExpiredSignature => AuthError::Expired,
                    ErrorKind::ImmatureSignature => AuthError::NotYetValid,
                    ErrorKind::InvalidSignature => AuthError::BadSignature,
                    ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName => {
                        AuthError::WrongAlgorithm(key.algorithm)
                    }
                    ErrorKind::InvalidIssuer => AuthError::WrongIssuer,
                    ErrorKind::InvalidAudience => AuthError::WrongAudience,
                    ErrorKind::MissingRequiredClaim(c) if c == "iss" => AuthError::WrongIssuer,
                    ErrorKind::MissingRequiredClaim(c) if c == "aud" => AuthError::WrongAudience,
                    _ => AuthError::Malformed(e.to_string()),
                }
            })?;
        let claims = data.claims;
        check_claim("sub", &claims.sub)?;
        for (name, value) in [("client", &claims.client), ("site", &claims.site)] {
            if let Some(v) = value {
                check_claim(name, v)?;
            }
        }
        Ok(Verified {
            valid_for: valid_for(claims.exp, keys.leeway_secs),
            who: Identity {
                user: claims.sub.into(),
                client: claims.client.map(Into::into),
                site: claims.site.unwrap_or_default().into(),
            },
        })
    }
}

/// From now until `exp + leeway`; zero when that is past, [`Duration::MAX`]
/// when it is beyond what the clock can name.
fn valid_for(exp: u64, leeway_secs: u64) -> Duration {
    let Some(end) = UNIX_EPOCH.checked_add(Duration::from_secs(exp.saturating_add(leeway_secs)))
    else {
        return Duration::MAX;
    };
    end.duration_since(SystemTime::now())
        .unwrap_or(Duration::ZERO)
}

/// The header fields Herald reads before choosing a key, parsed leniently
/// (as strings) so that an algorithm the library has no name for is still
/// refused by name.
#[derive(Debug, Deserialize)]
struct TokenHeader {
    alg: String,
    #[serde(default)]
    kid: Option<String>,
}

impl TokenHeader {
    fn parse(token: &str) -> Result<Self, AuthError> {
        use base64::Engine;
        let mut parts = token.split('.');
        let (Some(head), Some(_), Some(_), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(AuthError::Malformed(
                "not a JWT: expected three dot-separated parts".into(),
            ));
        };
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(head.trim_end_matches('='))
            .map_err(|e| AuthError::Malformed(format!("header is not base64url: {e}")))?;
        serde_json::from_slice(&bytes)
            .map_err(|e| AuthError::Malformed(format!("header is not a JWT header: {e}")))
    }
}

fn check_claim(name: &str, value: &str) -> Result<(), AuthError> {
    if value.is_empty() || value.len() > MAX_CLAIM_BYTES || value.chars().any(char::is_control) {
        return Err(AuthError::Malformed(format!(
            "claim {name} must be 1 to {MAX_CLAIM_BYTES} bytes without control characters"
        )));
    }
    Ok(())
}

/// Sign an HS256 token (dev mode's demo token, tests, tools).
pub fn sign_hs256(secret: &[u8], claims: &Claims) -> String {
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        claims,
        &EncodingKey::from_secret(secret),
    )
    .unwrap_or_default()
}

#[cfg(test)]
pub(crate) mod tests;
