//! Decoding tests on raw bytes: every accepted shape and every refusal.

use super::*;

fn ok(body: &[u8], single: bool) -> Vec<String> {
    decode_messages(body, single).unwrap_or_else(|e| panic!("{body:?}: {e}"))
}

fn err(body: &[u8], single: bool) -> DecodeError {
    decode_messages(body, single).unwrap_err()
}

#[test]
fn arrays_of_strings() {
    for single in [false, true] {
        assert_eq!(ok(br#"["a"]"#, single), ["a"]);
        assert_eq!(ok(br#"["m1","m2",""]"#, single), ["m1", "m2", ""]);
        assert_eq!(ok(b"[]", single), Vec::<String>::new());
        assert_eq!(ok(b" \t\r\n[ \"a\" , \"b\" ]\n ", single), ["a", "b"]);
    }
}

#[test]
fn a_single_string_only_when_allowed() {
    assert_eq!(ok(br#""a""#, true), ["a"]);
    assert_eq!(ok(b" \"\" ", true), [""]);
    assert_eq!(err(br#""a""#, false), DecodeError::Broken);
}

#[test]
fn escapes_are_decoded() {
    let body = r#"["\"\\\/\b\f\n\r\t\u0000\u00e9\u2028\uD83D\uDE00", "é😀"]"#;
    assert_eq!(
        ok(body.as_bytes(), false),
        ["\"\\/\u{8}\u{c}\n\r\t\0é\u{2028}😀", "é😀"]
    );
    // The client's escapes (`escapable_by_client`), in lowercase hex too.
    assert_eq!(
        ok(br#"["\u00ad\u0600\ufeff\uffff"]"#, false),
        ["\u{ad}\u{600}\u{feff}\u{ffff}"]
    );
}

#[test]
fn lone_surrogates_are_broken() {
    for body in [
        &br#"["\ud800"]"#[..],
        br#"["\udc00"]"#,
        br#"["\ud83d\u0041"]"#,
        br#"["\ude00\ud83d"]"#,
        br#"["\ud83d"#,
        br#""\ud800""#,
    ] {
        assert_eq!(err(body, true), DecodeError::Broken, "{body:?}");
    }
}

#[test]
fn empty_is_empty_and_whitespace_is_broken() {
    // sockjs-node: an empty body is "Payload expected.", whitespace alone
    // fails JSON.parse and is "Broken JSON encoding.".
    assert_eq!(err(b"", false), DecodeError::Empty);
    assert_eq!(err(b"", true), DecodeError::Empty);
    assert_eq!(err(b" ", true), DecodeError::Broken);
    assert_eq!(err(b"\n\t", false), DecodeError::Broken);
}

#[test]
fn other_shapes_are_broken() {
    for body in [
        &b"[\"x"[..], // XhrPolling.test_invalid_json
        b"[\"a\"",
        b"[\"a\",]",
        b"[\"a\"] x",
        b"[\"a\"][]",
        b"\"a\" \"b\"",
        b"[[\"a\"]]",
        b"[1]",
        b"[null]",
        b"[\"a\",{}]",
        b"{}",
        b"null",
        b"1",
        b"true",
        b"'a'",
        b"[\"\x01\"]",     // raw control character in a string
        b"[\"\\x41\"]",    // not a JSON escape
        b"[\"\\u12\"]",    // short \u escape
        b"\xef\xbb\xbf[]", // a BOM is not JSON whitespace
    ] {
        assert_eq!(err(body, true), DecodeError::Broken, "{body:?}");
        assert_eq!(err(body, false), DecodeError::Broken, "{body:?}");
    }
}

#[test]
fn invalid_utf8_is_broken() {
    for body in [
        &b"[\"\xff\"]"[..],
        b"[\"\xc3\"]",
        b"[\"\xed\xa0\x80\"]",
        b"\"\xc3\xa9\xc3\"",
    ] {
        assert_eq!(err(body, true), DecodeError::Broken, "{body:?}");
    }
}

#[test]
fn error_texts_are_sockjs_protocols() {
    assert_eq!(DecodeError::Empty.to_string(), "Payload expected.");
    assert_eq!(DecodeError::Broken.to_string(), "Broken JSON encoding.");
}

#[test]
fn deep_nesting_is_broken_not_a_stack_overflow() {
    let body = "[".repeat(100_000);
    assert_eq!(err(body.as_bytes(), true), DecodeError::Broken);
}
