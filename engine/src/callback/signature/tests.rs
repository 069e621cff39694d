use super::*;

/// The vector of the specification's reference JavaScript library
/// (standard-webhooks/standard-webhooks, libraries/javascript/src/
/// webhook.test.ts, "sign function works").
const SPEC_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const SPEC_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
const SPEC_TIMESTAMP: u64 = 1614265330;
const SPEC_BODY: &[u8] = br#"{"test": 2432232314}"#;
const SPEC_SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

fn spec_secret() -> Secret {
    Secret::parse(SPEC_SECRET).unwrap()
}

fn other_secret() -> Secret {
    Secret::from_key(vec![7; 32]).unwrap()
}

#[test]
fn signs_the_reference_vector() {
    let headers = sign(SPEC_ID, SPEC_TIMESTAMP, SPEC_BODY, &[spec_secret()]).unwrap();
    assert_eq!(
        headers,
        SignatureHeaders {
            id: SPEC_ID.into(),
            timestamp: "1614265330".into(),
            signature: SPEC_SIGNATURE.into(),
        }
    );
}

#[test]
fn signs_the_rust_reference_vector() {
    // libraries/rust/src/lib.rs, `test_sign`, of the same repository.
    let secret = Secret::parse("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD").unwrap();
    let body = br#"{"email":"test@example.com","username":"test_user"}"#;
    let headers = sign(
        "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
        1649367553,
        body,
        &[secret],
    )
    .unwrap();
    assert_eq!(
        headers.signature,
        "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw="
    );
}

#[test]
fn signs_once_per_secret_for_rotation() {
    let headers = sign(
        SPEC_ID,
        SPEC_TIMESTAMP,
        SPEC_BODY,
        &[other_secret(), spec_secret()],
    )
    .unwrap();
    let entries: Vec<&str> = headers.signature.split(' ').collect();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[1], SPEC_SIGNATURE);
    assert!(entries[0].starts_with("v1,") && entries[0] != SPEC_SIGNATURE);
    // A receiver that knows only one of the two accepts the request.
    for secret in [other_secret(), spec_secret()] {
        assert_eq!(
            verify(&headers, SPEC_BODY, &[secret], SPEC_TIMESTAMP, 300),
            Ok(())
        );
    }
}

#[test]
fn refuses_to_sign_without_a_secret_or_with_a_bad_id() {
    assert_eq!(sign(SPEC_ID, 1, b"", &[]), Err(SignError::NoSecret));
    for id in ["", "msg.1", "msg 1", "msg\n", "m\u{e9}"] {
        assert_eq!(
            sign(id, 1, b"", &[spec_secret()]),
            Err(SignError::BadId { id: id.into() }),
            "{id:?}"
        );
    }
}

#[test]
fn verifies_the_reference_vector_within_the_tolerance() {
    let headers = SignatureHeaders {
        id: SPEC_ID.into(),
        timestamp: SPEC_TIMESTAMP.to_string(),
        signature: SPEC_SIGNATURE.into(),
    };
    let secrets = [spec_secret()];
    let check = |now| verify(&headers, SPEC_BODY, &secrets, now, DEFAULT_TOLERANCE_SECS);
    assert_eq!(check(SPEC_TIMESTAMP), Ok(()));
    assert_eq!(check(SPEC_TIMESTAMP + 300), Ok(()));
    assert_eq!(check(SPEC_TIMESTAMP - 300), Ok(()));
    assert_eq!(
        check(SPEC_TIMESTAMP + 301),
        Err(VerifyError::TooOld {
            age_secs: 301,
            tolerance_secs: 300
        })
    );
    assert_eq!(
        check(SPEC_TIMESTAMP - 301),
        Err(VerifyError::InFuture {
            ahead_secs: 301,
            tolerance_secs: 300
        })
    );
}

#[test]
fn verify_refuses_tampering() {
    let good = sign(SPEC_ID, SPEC_TIMESTAMP, SPEC_BODY, &[spec_secret()]).unwrap();
    let secrets = [spec_secret()];
    let check = |h: &SignatureHeaders, body: &[u8]| verify(h, body, &secrets, SPEC_TIMESTAMP, 300);
    assert_eq!(
        check(&good, br#"{"test": 2432232315}"#),
        Err(VerifyError::Mismatch)
    );
    let other_id = SignatureHeaders {
        id: "msg_other".into(),
        ..good.clone()
    };
    assert_eq!(check(&other_id, SPEC_BODY), Err(VerifyError::Mismatch));
    let other_time = SignatureHeaders {
        timestamp: (SPEC_TIMESTAMP + 1).to_string(),
        ..good.clone()
    };
    assert_eq!(check(&other_time, SPEC_BODY), Err(VerifyError::Mismatch));
    assert_eq!(
        verify(&good, SPEC_BODY, &[other_secret()], SPEC_TIMESTAMP, 300),
        Err(VerifyError::Mismatch)
    );
}

#[test]
fn verify_reads_every_entry_and_skips_other_versions() {
    let fake = "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=";
    let v2 = "v2,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
    let secrets = [spec_secret()];
    let with = |signature: String| SignatureHeaders {
        id: SPEC_ID.into(),
        timestamp: SPEC_TIMESTAMP.to_string(),
        signature,
    };
    let check = |h: SignatureHeaders| verify(&h, SPEC_BODY, &secrets, SPEC_TIMESTAMP, 300);
    assert_eq!(
        check(with(format!("{fake} {v2} {SPEC_SIGNATURE} {fake}"))),
        Ok(())
    );
    // The right tag under another version does not count.
    assert_eq!(check(with(v2.into())), Err(VerifyError::NoSignature));
    assert_eq!(check(with(fake.into())), Err(VerifyError::Mismatch));
    // A truncated tag, an empty one, garbage.
    assert_eq!(
        check(with(SPEC_SIGNATURE[..8].into())),
        Err(VerifyError::NoSignature)
    );
    assert_eq!(check(with("v1,".into())), Err(VerifyError::Mismatch));
    // A valid base64 prefix of the tag is a shorter tag: no match.
    assert_eq!(
        check(with("v1,g0hM9SsE".into())),
        Err(VerifyError::Mismatch)
    );
    assert_eq!(check(with("v1,***".into())), Err(VerifyError::NoSignature));
    assert_eq!(check(with(String::new())), Err(VerifyError::NoSignature));
    let bad_time = SignatureHeaders {
        timestamp: "hello".into(),
        ..with(SPEC_SIGNATURE.into())
    };
    assert_eq!(check(bad_time), Err(VerifyError::BadTimestamp));
}

#[test]
fn secrets_are_validated() {
    assert_eq!(
        Secret::parse("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
        Err(SecretError::MissingPrefix)
    );
    assert!(matches!(
        Secret::parse("whsec_not base64!"),
        Err(SecretError::NotBase64 { .. })
    ));
    // 16 bytes.
    assert_eq!(
        Secret::parse("whsec_AAAAAAAAAAAAAAAAAAAAAA=="),
        Err(SecretError::TooShort { bytes: 16 })
    );
    assert_eq!(
        Secret::from_key(vec![0; 65]),
        Err(SecretError::TooLong { bytes: 65 })
    );
    assert!(Secret::from_key(vec![0; 24]).is_ok());
    assert!(Secret::from_key(vec![0; 64]).is_ok());
    assert_eq!(
        SecretError::TooShort { bytes: 16 }.to_string(),
        "a signing secret's key is 16 bytes; the minimum is 24"
    );
    let secret: Secret = SPEC_SECRET.parse().unwrap();
    assert_eq!(secret.to_whsec(), SPEC_SECRET);
    assert_eq!(format!("{secret:?}"), "Secret(24 bytes)");
}
