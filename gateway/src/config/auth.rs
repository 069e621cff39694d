//! `[auth]`: the keys browser tokens are verified with, and the claims
//! checked beyond the signature.
//!
//! Keys come from three places, all optional, all reloaded on SIGHUP: the
//! single-key settings (`jwt_secret`, or `jwt_public_key_file` with
//! `jwt_algorithm`), a list `[[auth.keys]]` each named by its `kid`, and a
//! JWKS file (`jwks_file`, RFC 7517). None of them set means dev mode.

use std::collections::HashSet;
use std::path::PathBuf;

use serde::Deserialize;

/// The algorithms a configured key may name.
pub const ALGORITHMS: &[&str] = &[
    "HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256",
    "ES384",
];

/// Shortest HMAC secret accepted, in bytes (RFC 7518 §3.2 for HS256).
pub const MIN_SECRET_BYTES: usize = 32;

/// JWT verification settings, `[auth]`. No key set anywhere means dev mode.
/// Each field is the key of its name, described once in its row of
/// [`super::keys::OWN`].
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Key `auth.jwt_secret`.
    pub jwt_secret: Option<String>,
    /// Key `auth.jwt_public_key_file`.
    pub jwt_public_key_file: Option<PathBuf>,
    /// Key `auth.jwt_algorithm`.
    pub jwt_algorithm: Option<String>,
    /// Key `auth.leeway_secs`.
    pub leeway_secs: u64,
    /// Key `auth.keys`.
    pub keys: Vec<KeyConfig>,
    /// Key `auth.jwks_file`.
    pub jwks_file: Option<PathBuf>,
    /// Key `auth.default_kid`.
    pub default_kid: Option<String>,
    /// Key `auth.issuers`.
    pub issuers: Vec<String>,
    /// Key `auth.audiences`.
    pub audiences: Vec<String>,
}

/// One key of `[[auth.keys]]`.
#[derive(Clone, Default, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct KeyConfig {
    /// The `kid` tokens name it by.
    pub kid: String,
    /// One of [`ALGORITHMS`].
    pub algorithm: String,
    /// The HMAC secret (HS*), at least 32 bytes.
    pub secret: Option<String>,
    /// PEM public key file (RS*, PS*, ES*).
    pub public_key_file: Option<PathBuf>,
}

impl std::fmt::Debug for KeyConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyConfig")
            .field("kid", &self.kid)
            .field("algorithm", &self.algorithm)
            .field("secret", &self.secret.as_ref().map(|_| "***"))
            .field("public_key_file", &self.public_key_file)
            .finish()
    }
}

impl AuthConfig {
    /// Whether no key is configured anywhere (dev mode).
    pub fn no_keys(&self) -> bool {
        self.jwt_secret.is_none()
            && self.jwt_public_key_file.is_none()
            && self.keys.is_empty()
            && self.jwks_file.is_none()
    }

    /// Every problem of `[auth]` that can be seen without reading the key
    /// files (those are read, and their problems reported, when the keys
    /// are loaded).
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        match (&self.jwt_secret, &self.jwt_public_key_file) {
            (Some(_), Some(_)) => p.push(
                "auth: set either jwt_secret (HS256) or jwt_public_key_file (RS256/ES256), not both"
                    .to_owned(),
            ),
            (Some(secret), None) => {
                if secret.len() < MIN_SECRET_BYTES {
                    p.push(format!(
                        "auth.jwt_secret is {} bytes; HS256 needs at least {MIN_SECRET_BYTES}",
                        secret.len()
                    ));
                }
                if let Some(alg) = self.jwt_algorithm.as_ref().filter(|a| *a != "HS256") {
                    p.push(format!(
                        "auth.jwt_algorithm is {alg} but a secret is HS256; use jwt_public_key_file for {alg}"
                    ));
                }
            }
            (None, Some(path)) => {
                match self.jwt_algorithm.as_deref() {
                    Some("RS256" | "ES256") => {}
                    Some(other) => p.push(format!(
                        "auth.jwt_algorithm {other} is not usable with a public key: use RS256 or ES256"
                    )),
                    None => p.push(
                        "auth.jwt_algorithm is required with jwt_public_key_file: RS256 or ES256"
                            .to_owned(),
                    ),
                }
                if !path.is_file() {
                    p.push(format!(
                        "auth.jwt_public_key_file {} does not exist",
                        path.display()
                    ));
                }
            }
            (None, None) => {}
        }
        let mut kids = HashSet::new();
        for (i, key) in self.keys.iter().enumerate() {
            let name = format!("auth.keys[{i}]");
            if key.kid.is_empty() {
                p.push(format!("{name}.kid must not be empty"));
            } else if !kids.insert(key.kid.as_str()) {
                p.push(format!("{name}.kid {:?} is used twice", key.kid));
            }
            p.extend(key_problems(&name, key));
        }
        if let Some(kid) = &self.default_kid {
            if self.jwt_secret.is_some() || self.jwt_public_key_file.is_some() {
                p.push(
                    "auth.default_kid and a single-key setting (jwt_secret, jwt_public_key_file) both name the default key: keep one"
                        .to_owned(),
                );
            }
            if self.jwks_file.is_none() && !kids.contains(kid.as_str()) {
                p.push(format!(
                    "auth.default_kid {kid:?} names no key of auth.keys"
                ));
            }
        }
        if let Some(path) = &self.jwks_file
            && !path.is_file()
        {
            p.push(format!("auth.jwks_file {} does not exist", path.display()));
        }
        for (name, values) in [
            ("auth.issuers", &self.issuers),
            ("auth.audiences", &self.audiences),
        ] {
            if values.iter().any(String::is_empty) {
                p.push(format!("{name} must not contain an empty string"));
            }
        }
        p
    }
}

fn key_problems(name: &str, key: &KeyConfig) -> Vec<String> {
    let mut p = Vec::new();
    let alg = key.algorithm.as_str();
    if !ALGORITHMS.contains(&alg) {
        p.push(format!(
            "{name}.algorithm {alg:?} is not one of {}",
            ALGORITHMS.join(", ")
        ));
        return p;
    }
    let hmac = alg.starts_with("HS");
    match (&key.secret, &key.public_key_file, hmac) {
        (Some(secret), None, true) => {
            if secret.len() < MIN_SECRET_BYTES {
                p.push(format!(
                    "{name}.secret is {} bytes; {alg} needs at least {MIN_SECRET_BYTES}",
                    secret.len()
                ));
            }
        }
        (None, Some(path), false) => {
            if !path.is_file() {
                p.push(format!(
                    "{name}.public_key_file {} does not exist",
                    path.display()
                ));
            }
        }
        (_, _, true) => p.push(format!(
            "{name}: {alg} needs a secret (and no public_key_file)"
        )),
        (_, _, false) => p.push(format!(
            "{name}: {alg} needs a public_key_file (and no secret)"
        )),
    }
    p
}
