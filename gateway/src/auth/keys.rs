//! The keys tokens are verified with, loaded from `[auth]`: the single-key
//! settings (the default key), `[[auth.keys]]` and a JWKS file, each key
//! with the [`Validation`] of its algorithm and the configured claims.
//!
//! Loading reads every file it needs; any problem fails the whole load
//! (a reload then keeps the keys it had). JWKS entries Herald cannot use
//! for signatures (`use: enc`, no `kid`, an algorithm it does not accept)
//! are skipped with a warning, since identity providers publish those
//! beside the signing keys.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};

use super::AuthError;
use crate::config::{ALGORITHMS, AuthConfig, KeyConfig, MIN_SECRET_BYTES};

/// One verification key.
pub(super) struct Key {
    pub(super) algorithm: Algorithm,
    pub(super) decoding: DecodingKey,
    pub(super) validation: Validation,
}

/// Every key, by `kid`, and the default for tokens without one.
pub(super) struct KeySet {
    by_kid: HashMap<String, Arc<Key>>,
    default: Option<Arc<Key>>,
    /// Only the single-key settings are configured: a token's `kid` is not
    /// looked at (as before keys had ids).
    kid_ignored: bool,
    pub(super) leeway_secs: u64,
}

impl std::fmt::Debug for KeySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut kids: Vec<_> = self.by_kid.keys().collect();
        kids.sort();
        f.debug_struct("KeySet")
            .field("kids", &kids)
            .field("default", &self.default.as_ref().map(|k| k.algorithm))
            .finish()
    }
}

/// The claims checks every key's validation makes.
struct Rules<'a> {
    leeway_secs: u64,
    issuers: &'a [String],
    audiences: &'a [String],
}

impl Rules<'_> {
    fn key(&self, algorithm: Algorithm, decoding: DecodingKey) -> Arc<Key> {
        let mut v = Validation::new(algorithm);
        v.leeway = self.leeway_secs;
        v.validate_exp = true;
        v.validate_nbf = true;
        let mut required = vec!["exp", "sub"];
        if !self.issuers.is_empty() {
            v.set_issuer(self.issuers);
            required.push("iss");
        }
        if self.audiences.is_empty() {
            // Off unless configured: a token's aud is then nobody's business.
            v.validate_aud = false;
        } else {
            v.set_audience(self.audiences);
            required.push("aud");
        }
        v.set_required_spec_claims(&required);
        Arc::new(Key {
            algorithm,
            decoding,
            validation: v,
        })
    }
}

impl KeySet {
    /// One HS256 secret as the default key (dev mode, tests).
    pub(super) fn hs256(secret: &[u8], leeway_secs: u64) -> KeySet {
        let rules = Rules {
            leeway_secs,
            issuers: &[],
            audiences: &[],
        };
        KeySet {
            by_kid: HashMap::new(),
            default: Some(rules.key(Algorithm::HS256, DecodingKey::from_secret(secret))),
            kid_ignored: true,
            leeway_secs,
        }
    }

    /// Every key `auth` names, its files read now.
    pub(super) fn load(auth: &AuthConfig) -> Result<KeySet, String> {
        let rules = Rules {
            leeway_secs: auth.leeway_secs,
            issuers: &auth.issuers,
            audiences: &auth.audiences,
        };
        let mut set = KeySet {
            by_kid: HashMap::new(),
            default: single_key(auth)?.map(|(alg, key)| rules.key(alg, key)),
            kid_ignored: false,
            leeway_secs: auth.leeway_secs,
        };
        for (i, k) in auth.keys.iter().enumerate() {
            let (alg, key) = configured_key(k).map_err(|e| format!("auth.keys[{i}]: {e}"))?;
            set.insert(k.kid.clone(), rules.key(alg, key), "auth.keys")?;
        }
        if let Some(path) = &auth.jwks_file {
            for (kid, alg, key) in read_jwks(path)? {
                set.insert(kid, rules.key(alg, key), "auth.jwks_file")?;
            }
        }
        if let Some(kid) = &auth.default_kid {
            let key = set
                .by_kid
                .get(kid)
                .ok_or_else(|| format!("auth.default_kid {kid:?} names no loaded key"))?;
            set.default = Some(Arc::clone(key));
        }
        set.kid_ignored = set.by_kid.is_empty();
        if set.default.is_none() && set.by_kid.is_empty() {
            return Err("no JWT key configured (or the JWKS file has no usable key)".into());
        }
        Ok(set)
    }

    fn insert(&mut self, kid: String, key: Arc<Key>, from: &str) -> Result<(), String> {
        if self.by_kid.contains_key(&kid) {
            return Err(format!("{from}: kid {kid:?} is defined twice"));
        }
        self.by_kid.insert(kid, key);
        Ok(())
    }

    /// The key a token's `kid` (or its absence) selects.
    pub(super) fn select(&self, kid: Option<&str>) -> Result<&Key, AuthError> {
        let found = match kid {
            Some(kid) if !self.kid_ignored => self
                .by_kid
                .get(kid)
                .ok_or_else(|| AuthError::UnknownKey(kid.to_owned()))?,
            _ => self.default.as_ref().ok_or(AuthError::NoDefaultKey)?,
        };
        Ok(found)
    }

    /// How many keys there are (the default counted once).
    pub(super) fn len(&self) -> usize {
        let default_apart = self
            .default
            .as_ref()
            .is_some_and(|d| !self.by_kid.values().any(|k| Arc::ptr_eq(k, d)));
        self.by_kid.len() + usize::from(default_apart)
    }
}

/// The single-key settings: `jwt_secret`, or `jwt_public_key_file` with
/// `jwt_algorithm`.
fn single_key(auth: &AuthConfig) -> Result<Option<(Algorithm, DecodingKey)>, String> {
    if let Some(secret) = &auth.jwt_secret {
        return Ok(Some((
            Algorithm::HS256,
            DecodingKey::from_secret(secret.as_bytes()),
        )));
    }
    let Some(path) = &auth.jwt_public_key_file else {
        return Ok(None);
    };
    let algorithm = match auth.jwt_algorithm.as_deref() {
        Some("RS256") => Algorithm::RS256,
        Some("ES256") => Algorithm::ES256,
        other => return Err(format!("unsupported jwt_algorithm {other:?}")),
    };
    let key = pem_key(path, algorithm).map_err(|e| format!("auth.jwt_public_key_file {e}"))?;
    Ok(Some((algorithm, key)))
}

fn configured_key(k: &KeyConfig) -> Result<(Algorithm, DecodingKey), String> {
    let algorithm = accepted(&k.algorithm)?;
    let key = match (&k.secret, &k.public_key_file) {
        (Some(secret), None) if is_hmac(algorithm) => {
            if secret.len() < MIN_SECRET_BYTES {
                return Err(format!(
                    "the secret needs at least {MIN_SECRET_BYTES} bytes"
                ));
            }
            DecodingKey::from_secret(secret.as_bytes())
        }
        (None, Some(path)) if !is_hmac(algorithm) => pem_key(path, algorithm)?,
        _ => {
            return Err(format!(
                "{algorithm:?} needs exactly one of secret (HS*) or public_key_file"
            ));
        }
    };
    Ok((algorithm, key))
}

fn accepted(name: &str) -> Result<Algorithm, String> {
    match name.parse::<Algorithm>() {
        Ok(alg) if ALGORITHMS.contains(&name) => Ok(alg),
        _ => Err(format!(
            "algorithm {name:?} is not one of {}",
            ALGORITHMS.join(", ")
        )),
    }
}

fn is_hmac(alg: Algorithm) -> bool {
    matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512)
}

fn pem_key(path: &Path, algorithm: Algorithm) -> Result<DecodingKey, String> {
    let pem = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let key = match algorithm {
        Algorithm::ES256 | Algorithm::ES384 => DecodingKey::from_ec_pem(&pem),
        _ => DecodingKey::from_rsa_pem(&pem),
    };
    key.map_err(|e| format!("{} is not a {algorithm:?} public key: {e}", path.display()))
}

/// The usable signature keys of a JWKS file.
fn read_jwks(path: &Path) -> Result<Vec<(String, Algorithm, DecodingKey)>, String> {
    #[derive(serde::Deserialize)]
    struct RawSet {
        keys: Vec<serde_json::Value>,
    }
    let where_ = || format!("auth.jwks_file {}", path.display());
    let text = std::fs::read(path).map_err(|e| format!("{}: {e}", where_()))?;
    let raw: RawSet =
        serde_json::from_slice(&text).map_err(|e| format!("{}: not a JWK set: {e}", where_()))?;
    let mut keys = Vec::new();
    for (i, value) in raw.keys.into_iter().enumerate() {
        let jwk: Jwk = match serde_json::from_value(value) {
            Ok(jwk) => jwk,
            Err(e) => return Err(format!("{}: keys[{i}]: {e}", where_())),
        };
        let Some(kid) = jwk.common.key_id.clone() else {
            tracing::warn!(file = %path.display(), index = i, "JWKS key skipped: no kid, so no token can name it");
            continue;
        };
        match jwk_key(&jwk) {
            Ok(Some((alg, key))) => keys.push((kid, alg, key)),
            Ok(None) => {
                tracing::warn!(file = %path.display(), kid, "JWKS key skipped: not a signature key Herald accepts");
            }
            Err(e) => return Err(format!("{}: key {kid:?}: {e}", where_())),
        }
    }
    Ok(keys)
}

/// A JWK's algorithm (its `alg`, or what its type and curve imply) and
/// key; `None` for keys that are not for signatures Herald accepts.
fn jwk_key(jwk: &Jwk) -> Result<Option<(Algorithm, DecodingKey)>, String> {
    if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
        return Ok(None);
    }
    let implied = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Algorithm::RS256,
        AlgorithmParameters::EllipticCurve(ec) => match ec.curve {
            EllipticCurve::P256 => Algorithm::ES256,
            EllipticCurve::P384 => Algorithm::ES384,
            _ => return Ok(None),
        },
        AlgorithmParameters::OctetKey(_) => Algorithm::HS256,
        _ => return Ok(None),
    };
    let algorithm = match jwk.common.key_algorithm {
        None => implied,
        Some(named) => match Algorithm::try_from(named) {
            Ok(alg) if ALGORITHMS.contains(&format!("{alg:?}").as_str()) => alg,
            _ => return Ok(None),
        },
    };
    let fits = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => matches!(
            algorithm,
            Algorithm::RS256
                | Algorithm::RS384
                | Algorithm::RS512
                | Algorithm::PS256
                | Algorithm::PS384
                | Algorithm::PS512
        ),
        AlgorithmParameters::OctetKey(_) => is_hmac(algorithm),
        _ => algorithm == implied,
    };
    if !fits {
        return Err(format!("alg {algorithm:?} does not fit the key's type"));
    }
    if let AlgorithmParameters::OctetKey(oct) = &jwk.algorithm {
        use base64::Engine;
        let secret = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(oct.value.trim_end_matches('='))
            .map_err(|e| format!("k is not base64url: {e}"))?;
        if secret.len() < MIN_SECRET_BYTES {
            return Err(format!(
                "the secret needs at least {MIN_SECRET_BYTES} bytes"
            ));
        }
    }
    let key = DecodingKey::from_jwk(jwk).map_err(|e| e.to_string())?;
    Ok(Some((algorithm, key)))
}
