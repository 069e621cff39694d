//! Tokens against keys: algorithms, claims, kids, JWKS, reloads.

use super::*;
use crate::config::KeyConfig;
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
    let id = v
        .verify(&sign_hs256(SECRET, &claims(now() + 60)))
        .unwrap()
        .who;
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

/// A token signed with `claims` as raw JSON (for claims [`Claims`] lacks).
fn sign_json(claims: &serde_json::Value) -> String {
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        claims,
        &EncodingKey::from_secret(SECRET),
    )
    .unwrap()
}

#[test]
fn alg_none_is_refused_as_an_algorithm_not_allowed() {
    let v = Verifier::hs256(SECRET, 0);
    for header in [
        r#"{"alg":"none"}"#,
        r#"{"alg":"None","typ":"JWT"}"#,
        r#"{"alg":"XS999"}"#,
    ] {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let body = format!(r#"{{"sub":"alice","exp":{}}}"#, now() + 60);
        let token = format!("{}.{}.", b64.encode(header), b64.encode(body));
        let err = v.verify(&token).unwrap_err().to_string();
        assert!(err.contains("algorithm not allowed"), "{header}: {err}");
    }
}

#[test]
fn nbf_in_the_future_is_refused_within_the_leeway_accepted() {
    let v = Verifier::hs256(SECRET, 30);
    let early =
        sign_json(&serde_json::json!({"sub": "alice", "exp": now() + 600, "nbf": now() + 120}));
    let err = v
        .verify(&early)
        .expect_err("nbf two minutes ahead")
        .to_string();
    assert!(err.contains("not valid yet"), "{err}");
    let skewed =
        sign_json(&serde_json::json!({"sub": "alice", "exp": now() + 600, "nbf": now() + 10}));
    assert!(v.verify(&skewed).is_ok(), "within the leeway");
    let past =
        sign_json(&serde_json::json!({"sub": "alice", "exp": now() + 600, "nbf": now() - 10}));
    assert!(v.verify(&past).is_ok());
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

// ---- several keys, JWKS, claims, reloads ----

const OLD: &str = "old-secret-old-secret-old-secret-0123";
const NEW: &str = "new-secret-new-secret-new-secret-4567";

/// Key material for the tests, generated once per test process so that no
/// private key or secret is ever in the repository (secret scanners flag
/// committed PEM keys, fixtures or not).
pub(crate) struct TestKeys {
    /// RSA 2048: PKCS#8 private PEM (to sign) and SPKI public PEM (to verify).
    pub rsa_pem: String,
    pub rsa_pub_pem: String,
    /// P-256, the same two forms.
    pub ec_pem: String,
    pub ec_pub_pem: String,
    /// The secret of the JWKS's `oct` key.
    pub oct: Vec<u8>,
    /// A JWK set of the public keys above: `rsa-1` (RS256), `ec-1` (P-256),
    /// `oct-1` (HS256), and `enc-1`, the RSA key again marked for encryption.
    pub jwks: String,
}

pub(crate) fn test_keys() -> &'static TestKeys {
    static KEYS: std::sync::OnceLock<TestKeys> = std::sync::OnceLock::new();
    KEYS.get_or_init(|| {
        use base64::Engine;
        use p256::elliptic_curve::sec1::ToEncodedPoint;
        use rsa::pkcs8::{EncodePrivateKey, EncodePublicKey, LineEnding};
        use rsa::rand_core::{OsRng, RngCore};
        use rsa::traits::PublicKeyParts;
        let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);

        let rsa = rsa::RsaPrivateKey::new(&mut OsRng, 2048).unwrap();
        let rsa_pub = rsa.to_public_key();
        let ec = p256::SecretKey::random(&mut OsRng);
        let ec_pub = ec.public_key();
        let point = ec_pub.to_encoded_point(false);
        let mut oct = vec![0u8; 48];
        OsRng.fill_bytes(&mut oct);

        let (n, e) = (
            b64(&rsa_pub.n().to_bytes_be()),
            b64(&rsa_pub.e().to_bytes_be()),
        );
        let jwks = serde_json::json!({"keys": [
            {"kty": "RSA", "kid": "rsa-1", "use": "sig", "alg": "RS256", "n": n, "e": e},
            {"kty": "EC", "kid": "ec-1", "use": "sig", "crv": "P-256",
             "x": b64(point.x().unwrap()), "y": b64(point.y().unwrap())},
            {"kty": "oct", "kid": "oct-1", "alg": "HS256", "k": b64(&oct)},
            {"kty": "RSA", "kid": "enc-1", "use": "enc", "alg": "RSA-OAEP", "n": n, "e": e},
        ]});
        TestKeys {
            rsa_pem: rsa.to_pkcs8_pem(LineEnding::LF).unwrap().to_string(),
            rsa_pub_pem: rsa_pub.to_public_key_pem(LineEnding::LF).unwrap(),
            ec_pem: ec.to_pkcs8_pem(LineEnding::LF).unwrap().to_string(),
            ec_pub_pem: ec_pub.to_public_key_pem(LineEnding::LF).unwrap(),
            oct,
            jwks: jwks.to_string(),
        }
    })
}

/// The public keys and the JWK set as files (`rsa.pub.pem`, `ec.pub.pem`,
/// `jwks.json`) in a fresh directory, removed when the result is dropped.
pub(crate) fn key_files() -> tempfile::TempDir {
    let keys = test_keys();
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [
        ("rsa.pub.pem", &keys.rsa_pub_pem),
        ("ec.pub.pem", &keys.ec_pub_pem),
        ("jwks.json", &keys.jwks),
    ] {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    dir
}

fn body(sub: &str) -> serde_json::Value {
    serde_json::json!({"sub": sub, "exp": now() + 600})
}

/// Sign `claims` with `alg`, the header naming `kid`.
fn signed(
    alg: Algorithm,
    kid: Option<&str>,
    key: &EncodingKey,
    claims: &serde_json::Value,
) -> String {
    let mut header = Header::new(alg);
    header.kid = kid.map(Into::into);
    jsonwebtoken::encode(&header, claims, key).unwrap()
}

fn hs(kid: Option<&str>, secret: &[u8], claims: &serde_json::Value) -> String {
    signed(
        Algorithm::HS256,
        kid,
        &EncodingKey::from_secret(secret),
        claims,
    )
}

fn hmac_key(kid: &str, secret: &str) -> KeyConfig {
    KeyConfig {
        kid: kid.into(),
        algorithm: "HS256".into(),
        secret: Some(secret.into()),
        public_key_file: None,
    }
}

#[test]
fn the_kid_picks_the_key_and_no_kid_means_the_default() {
    let (keys, files) = (test_keys(), key_files());
    let auth = AuthConfig {
        keys: vec![
            hmac_key("2024", OLD),
            hmac_key("2025", NEW),
            KeyConfig {
                kid: "rsa".into(),
                algorithm: "RS256".into(),
                secret: None,
                public_key_file: Some(files.path().join("rsa.pub.pem")),
            },
        ],
        default_kid: Some("2025".into()),
        ..AuthConfig::default()
    };
    let v = Verifier::from_config(&auth).unwrap();
    let ok = |t: &str| v.verify(t).map(|v| v.who.user.to_string());
    assert_eq!(
        ok(&hs(Some("2024"), OLD.as_bytes(), &body("a"))),
        Ok("a".into())
    );
    assert_eq!(
        ok(&hs(Some("2025"), NEW.as_bytes(), &body("b"))),
        Ok("b".into())
    );
    assert_eq!(
        ok(&hs(None, NEW.as_bytes(), &body("c"))),
        Ok("c".into()),
        "the default"
    );
    let rsa = EncodingKey::from_rsa_pem(keys.rsa_pem.as_bytes()).unwrap();
    assert_eq!(
        ok(&signed(Algorithm::RS256, Some("rsa"), &rsa, &body("d"))),
        Ok("d".into())
    );
    // The wrong key for the kid, an unknown kid, an HMAC token against an
    // RSA key's kid (the classic key-confusion attack).
    assert_eq!(
        v.verify(&hs(Some("2025"), OLD.as_bytes(), &body("x"))),
        Err(AuthError::BadSignature)
    );
    assert_eq!(
        v.verify(&hs(Some("nope"), NEW.as_bytes(), &body("x"))),
        Err(AuthError::UnknownKey("nope".into()))
    );
    assert_eq!(
        v.verify(&hs(Some("rsa"), keys.rsa_pub_pem.as_bytes(), &body("x"))),
        Err(AuthError::WrongAlgorithm(Algorithm::RS256))
    );
    // Without a default, a token without kid has nowhere to go.
    let v = Verifier::from_config(&AuthConfig {
        default_kid: None,
        ..auth
    })
    .unwrap();
    assert_eq!(
        v.verify(&hs(None, NEW.as_bytes(), &body("x"))),
        Err(AuthError::NoDefaultKey)
    );
}

#[test]
fn the_single_key_settings_still_work_and_ignore_a_kid() {
    let auth = AuthConfig {
        jwt_secret: Some(OLD.into()),
        ..AuthConfig::default()
    };
    let v = Verifier::from_config(&auth).unwrap();
    assert!(v.verify(&hs(None, OLD.as_bytes(), &body("a"))).is_ok());
    assert!(
        v.verify(&hs(Some("any"), OLD.as_bytes(), &body("a")))
            .is_ok()
    );
    let (keys, files) = (test_keys(), key_files());
    let ec = AuthConfig {
        jwt_public_key_file: Some(files.path().join("ec.pub.pem")),
        jwt_algorithm: Some("ES256".into()),
        ..AuthConfig::default()
    };
    let v = Verifier::from_config(&ec).unwrap();
    let key = EncodingKey::from_ec_pem(keys.ec_pem.as_bytes()).unwrap();
    assert!(
        v.verify(&signed(Algorithm::ES256, None, &key, &body("a")))
            .is_ok()
    );
}

#[test]
fn a_jwks_file_gives_rsa_ec_and_oct_keys_by_kid() {
    let (keys, files) = (test_keys(), key_files());
    let auth = AuthConfig {
        jwks_file: Some(files.path().join("jwks.json")),
        default_kid: Some("ec-1".into()),
        ..AuthConfig::default()
    };
    let v = Verifier::from_config(&auth).unwrap();
    let rsa = EncodingKey::from_rsa_pem(keys.rsa_pem.as_bytes()).unwrap();
    let ec = EncodingKey::from_ec_pem(keys.ec_pem.as_bytes()).unwrap();
    let user = |t: String| v.verify(&t).map(|v| v.who.user.to_string());
    assert_eq!(
        user(signed(Algorithm::RS256, Some("rsa-1"), &rsa, &body("r"))),
        Ok("r".into())
    );
    assert_eq!(
        user(signed(Algorithm::ES256, Some("ec-1"), &ec, &body("e"))),
        Ok("e".into())
    );
    assert_eq!(
        user(signed(Algorithm::ES256, None, &ec, &body("d"))),
        Ok("d".into())
    );
    assert_eq!(
        user(hs(Some("oct-1"), &keys.oct, &body("o"))),
        Ok("o".into())
    );
    // The encryption key beside them is no signing key.
    assert_eq!(
        user(signed(Algorithm::RS256, Some("enc-1"), &rsa, &body("x"))),
        Err(AuthError::UnknownKey("enc-1".into()))
    );
}

#[test]
fn a_broken_jwks_file_is_a_load_error_that_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jwks.json");
    let auth = AuthConfig {
        jwks_file: Some(path.clone()),
        ..AuthConfig::default()
    };
    for (text, says) in [
        ("{", "not a JWK set"),
        (
            r#"{"keys":[{"kty":"oct","kid":"k","k":"c2hvcnQ"}]}"#,
            "at least 32",
        ),
        (
            r#"{"keys":[{"kty":"EC","kid":"k","alg":"RS256","crv":"P-256","x":"AA","y":"AA"}]}"#,
            "does not fit",
        ),
        (r#"{"keys":[]}"#, "no usable key"),
    ] {
        std::fs::write(&path, text).unwrap();
        let err = Verifier::from_config(&auth).unwrap_err();
        assert!(err.contains(says), "{text}: {err}");
    }
}

#[test]
fn issuer_and_audience_are_checked_only_when_configured() {
    let open = Verifier::from_config(&AuthConfig {
        jwt_secret: Some(OLD.into()),
        ..AuthConfig::default()
    })
    .unwrap();
    let with = |extra: serde_json::Value| {
        let mut c = body("a");
        c.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        hs(None, OLD.as_bytes(), &c)
    };
    let any_aud = with(serde_json::json!({"iss": "someone", "aud": "something"}));
    assert!(open.verify(&any_aud).is_ok(), "off by default");
    let strict = Verifier::from_config(&AuthConfig {
        jwt_secret: Some(OLD.into()),
        issuers: vec!["https://id.example".into()],
        audiences: vec!["herald".into(), "herald-eu".into()],
        ..AuthConfig::default()
    })
    .unwrap();
    let good = with(serde_json::json!({"iss": "https://id.example", "aud": ["herald", "other"]}));
    assert!(strict.verify(&good).is_ok());
    for (claims, err) in [
        (
            serde_json::json!({"iss": "https://evil.example", "aud": "herald"}),
            AuthError::WrongIssuer,
        ),
        (serde_json::json!({"aud": "herald"}), AuthError::WrongIssuer),
        (
            serde_json::json!({"iss": "https://id.example", "aud": "other"}),
            AuthError::WrongAudience,
        ),
        (
            serde_json::json!({"iss": "https://id.example"}),
            AuthError::WrongAudience,
        ),
    ] {
        assert_eq!(strict.verify(&with(claims.clone())), Err(err), "{claims}");
    }
}

#[test]
fn a_reload_swaps_the_keys_for_every_clone_and_a_failed_one_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jwks.json");
    let oct = |kid: &str, secret: &str| {
        use base64::Engine;
        let k = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret);
        format!(r#"{{"keys":[{{"kty":"oct","kid":"{kid}","k":"{k}"}}]}}"#)
    };
    std::fs::write(&path, oct("old", OLD)).unwrap();
    let auth = AuthConfig {
        jwks_file: Some(path.clone()),
        ..AuthConfig::default()
    };
    let v = Verifier::from_config(&auth).unwrap();
    let held = v.clone();
    let old = hs(Some("old"), OLD.as_bytes(), &body("a"));
    let new = hs(Some("new"), NEW.as_bytes(), &body("a"));
    assert!(held.verify(&old).is_ok());
    assert!(held.verify(&new).is_err());
    std::fs::write(&path, oct("new", NEW)).unwrap();
    assert_eq!(v.reload(&auth), Ok(1));
    assert!(held.verify(&new).is_ok(), "the clone sees the new keys");
    assert_eq!(held.verify(&old), Err(AuthError::UnknownKey("old".into())));
    std::fs::write(&path, "not json").unwrap();
    assert!(v.reload(&auth).unwrap_err().contains("not a JWK set"));
    assert!(held.verify(&new).is_ok(), "a failed reload keeps the keys");
}

#[test]
fn valid_for_runs_to_exp_plus_the_leeway() {
    let v = Verifier::hs256(SECRET, 30);
    let left = v
        .verify(&sign_hs256(SECRET, &claims(now() + 60)))
        .unwrap()
        .valid_for;
    assert!(
        left > Duration::from_secs(88) && left <= Duration::from_secs(90),
        "{left:?}"
    );
    let within_leeway = v.verify(&sign_hs256(SECRET, &claims(now() - 10))).unwrap();
    assert!(within_leeway.valid_for <= Duration::from_secs(20));
    let far = v
        .verify(&sign_hs256(SECRET, &claims(u64::MAX / 2)))
        .unwrap();
    assert_eq!(far.valid_for, Duration::MAX);
}
