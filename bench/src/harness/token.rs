//! Minting the HS256 JWTs the bench sessions present in STOMP `CONNECT` (`passcode`).
//!
//! Claims follow the gateway contract: `sub` (user id), `client` (company id), optional `site`,
//! `exp` (epoch seconds). Every session gets its own user so that each one costs the gateway a
//! mailbox, as real traffic would.

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use rand::Rng as _;
use rand::distr::Alphanumeric;
use serde::{Deserialize, Serialize};

/// Environment variable through which the parent hands the JWT secret to its workers (not argv,
/// which every user on the machine can read in `ps`).
pub(crate) const JWT_SECRET_ENV: &str = "HERALD_BENCH_JWT_SECRET";

/// How many distinct companies the bench spreads its users over.
pub(crate) const BENCH_CLIENTS: usize = 100;

/// The claims of a bench token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Claims {
    pub(crate) sub: String,
    pub(crate) client: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) site: Option<String>,
    pub(crate) exp: u64,
}

impl Claims {
    /// The claims of session `session` of worker `worker`: user `bench-{worker}-{session}`,
    /// company `bench-co-{session % 100}`.
    pub(crate) fn for_session(worker: usize, session: usize, exp: u64) -> Self {
        Self {
            sub: user_id(worker, session),
            client: format!("bench-co-{}", session % BENCH_CLIENTS),
            site: None,
            exp,
        }
    }
}

/// The user id of session `session` of worker `worker`.
pub(crate) fn user_id(worker: usize, session: usize) -> String {
    format!("bench-{worker}-{session}")
}

/// Signs claims with one shared HS256 secret.
pub(crate) struct Minter {
    key: EncodingKey,
    header: Header,
}

impl Minter {
    pub(crate) fn new(secret: &str) -> Self {
        Self {
            key: EncodingKey::from_secret(secret.as_bytes()),
            header: Header::new(Algorithm::HS256),
        }
    }

    pub(crate) fn mint(&self, claims: &Claims) -> Result<String, jsonwebtoken::errors::Error> {
        jsonwebtoken::encode(&self.header, claims, &self.key)
    }
}

/// Seconds since the Unix epoch, now.
pub(crate) fn now_epoch_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A random token of `len` alphanumeric characters (JWT secrets, API keys).
pub(crate) fn random_token(len: usize) -> String {
    rand::rng()
        .sample_iter(&Alphanumeric)
        .take(len)
        .map(char::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{DecodingKey, Validation};

    #[test]
    fn claims_for_session() {
        let c = Claims::for_session(3, 1234, 99);
        assert_eq!(c.sub, "bench-3-1234");
        assert_eq!(c.client, "bench-co-34");
        assert_eq!(c.site, None);
        assert_eq!(c.exp, 99);
    }

    #[test]
    fn minted_token_decodes_with_the_secret() {
        let exp = now_epoch_secs() + 3600;
        let claims = Claims::for_session(0, 7, exp);
        let token = Minter::new("s3cret").mint(&claims).expect("mint");

        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_required_spec_claims(&["exp", "sub"]);
        let data = jsonwebtoken::decode::<Claims>(
            &token,
            &DecodingKey::from_secret(b"s3cret"),
            &validation,
        )
        .expect("decode");
        assert_eq!(data.header.alg, Algorithm::HS256);
        assert_eq!(data.claims, claims);

        let raw = jsonwebtoken::decode::<serde_json::Value>(
            &token,
            &DecodingKey::from_secret(b"s3cret"),
            &validation,
        )
        .expect("decode raw");
        assert_eq!(raw.claims["sub"], "bench-0-7");
        assert_eq!(raw.claims["client"], "bench-co-7");
        assert_eq!(raw.claims["exp"], exp);
        assert!(raw.claims.get("site").is_none(), "no site claim when unset");
    }

    #[test]
    fn wrong_secret_is_rejected() {
        let token = Minter::new("right")
            .mint(&Claims::for_session(0, 0, now_epoch_secs() + 60))
            .expect("mint");
        let err = jsonwebtoken::decode::<Claims>(
            &token,
            &DecodingKey::from_secret(b"wrong"),
            &Validation::new(Algorithm::HS256),
        );
        assert!(err.is_err());
    }

    #[test]
    fn random_tokens() {
        let a = random_token(32);
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(a, random_token(32));
    }
}
