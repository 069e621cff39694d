//! Identity from a signed JWT: HS256 with a shared secret, or RS256/ES256
//! with a public key. Claims: `sub` (user), `client` (company), `site`,
//! `exp`. The algorithm is fixed by configuration; a token signed with any
//! other (including `none`) is refused.

use std::sync::Arc;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

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
    /// Signed with another algorithm than the configured one.
    #[error("token algorithm not accepted: this gateway accepts {0:?}")]
    WrongAlgorithm(Algorithm),
    /// Not a JWT, or claims missing or malformed.
    #[error("token is malformed: {0}")]
    Malformed(String),
}

/// Verifies tokens.
#[derive(Clone)]
pub struct Verifier {
    key: Arc<DecodingKey>,
    validation: Arc<Validation>,
    algorithm: Algorithm,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Verifier({:?})", self.algorithm)
    }
}

impl Verifier {
    /// HS256 with `secret`.
    pub fn hs256(secret: &[u8], leeway_secs: u64) -> Self {
        Self::new(
            DecodingKey::from_secret(secret),
            Algorithm::HS256,
            leeway_secs,
        )
    }

    fn new(key: DecodingKey, algorithm: Algorithm, leeway_secs: u64) -> Self {
        let mut validation = Validation::new(algorithm);
        validation.leeway = leeway_secs;
        validation.validate_exp = true;
        validation.set_required_spec_claims(&["exp", "sub"]);
        Verifier {
            key: Arc::new(key),
            validation: Arc::new(validation),
            algorithm,
        }
    }

    /// From configuration (not dev mode): a secret, or a PEM public key.
    pub fn from_config(auth: &AuthConfig) -> Result<Self, String> {
        if let Some(secret) = &auth.jwt_secret {
            return Ok(Self::hs256(secret.as_bytes(), auth.leeway_secs));
        }
        let Some(path) = &auth.jwt_public_key_file else {
            return Err("no JWT key configured".into());
        };
        let pem = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let (key, algorithm) = match auth.jwt_algorithm.as_deref() {
            Some("RS256") => (DecodingKey::from_rsa_pem(&pem), Algorithm::RS256),
            Some("ES256") => (DecodingKey::from_ec_pem(&pem), Algorithm::ES256),
            other => return Err(format!("unsupported jwt_algorithm {other:?}")),
        };
        let key = key.map_err(|e| {
            format!(
                "auth.jwt_public_key_file {} is not a {algorithm:?} public key: {e}",
                path.display()
            )
        })?;
        Ok(Self::new(key, algorithm, auth.leeway_secs))
    }

    /// Check a token and return who it names.
    pub fn verify(&self, token: &str) -> Result<Identity, AuthError> {
        let token = token.trim();
        if token.is_empty() {
            return Err(AuthError::Missing);
        }
        let data = jsonwebtoken::decode::<Claims>(token, &self.key, &self.validation).map_err(
            |e| match e.kind() {
                ErrorKind::ExpiredSignature => AuthError::Expired,
                ErrorKind::InvalidSignature => AuthError::BadSignature,
                ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName => {
                    AuthError::WrongAlgorithm(self.algorithm)
                }
                _ => AuthError::Malformed(e.to_string()),
            },
        )?;
        let claims = data.claims;
        check_claim("sub", &claims.sub)?;
        for (name, value) in [("client", &claims.client), ("site", &claims.site)] {
            if let Some(v) = value {
                check_claim(name, v)?;
            }
        }
        Ok(Identity {
            user: claims.sub.into(),
            client: claims.client.map(Into::into),
            site: claims.site.unwrap_or_default().into(),
        })
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
mod tests {
    use super::*;
    use std::time::{SystemTime, UNIX_EPOCH};

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    fn now() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    }

    fn claims(exp: u64) -> Claims {
        Claims {
            sub: "alice".into(),
            client: Some("acme".into()),
            site: None,
            exp,
        }
    }

    #[test]
    fn accepts_a_valid_token() {
        let v = Verifier::hs256(SECRET, 0);
        let id = v.verify(&sign_hs256(SECRET, &claims(now() + 60))).unwrap();
        assert_eq!(&*id.user, "alice");
        assert_eq!(id.client.as_deref(), Some("acme"));
        assert_eq!(&*id.site, "");
    }

    #[test]
    fn refuses_expired_forged_and_garbage() {
        let v = Verifier::hs256(SECRET, 0);
        assert_eq!(
            v.verify(&sign_hs256(SECRET, &claims(now() - 120))),
            Err(AuthError::Expired)
        );
        let forged = sign_hs256(b"another-secret-another-secret-xx", &claims(now() + 60));
        assert_eq!(v.verify(&forged), Err(AuthError::BadSignature));
        assert!(matches!(v.verify("abc"), Err(AuthError::Malformed(_))));
        assert_eq!(v.verify(""), Err(AuthError::Missing));
    }

    #[test]
    fn refuses_other_algorithms_and_none() {
        let v = Verifier::hs256(SECRET, 0);
        let token = jsonwebtoken::encode(
            &Header::new(Algorithm::HS384),
            &claims(now() + 60),
            &EncodingKey::from_secret(SECRET),
        )
        .unwrap();
        assert_eq!(
            v.verify(&token),
            Err(AuthError::WrongAlgorithm(Algorithm::HS256))
        );
        // alg "none": header {"alg":"none"}, no signature.
        let none = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSIsImV4cCI6OTk5OTk5OTk5OX0.";
        assert!(v.verify(none).is_err());
    }

    #[test]
    fn claims_are_bounded() {
        let v = Verifier::hs256(SECRET, 0);
        let mut c = claims(now() + 60);
        c.sub = "x".repeat(300);
        assert!(matches!(
            v.verify(&sign_hs256(SECRET, &c)),
            Err(AuthError::Malformed(_))
        ));
    }
}
