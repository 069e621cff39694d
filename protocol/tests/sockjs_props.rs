//! Property tests: SockJS escaping is JSON that parses back to the text,
//! `escaped_len` and `encoded_array_len` are exact, frames round-trip
//! through `decode_messages` and serde_json, and `decode_messages` accepts
//! whatever a JSON encoder or a SockJS client writes.

use bytes::BytesMut;
use herald_protocol::sockjs::{
    decode_messages, encode_array, encode_close, encoded_array_len, escape_into, escaped_len,
};
use proptest::prelude::*;

/// Characters weighted towards the escape set's boundaries, multi-byte
/// UTF-8 and characters outside the BMP.
fn text() -> impl Strategy<Value = String> {
    let c = prop_oneof![
        4 => any::<char>(),
        2 => prop::char::range('\u{0}', '\u{7f}'),
        1 => prop::sample::select(&['"', '\\', '/', '\u{7f}', '\u{80}', 'é', '€', '😀'][..]),
        1 => prop::char::range('\u{2000}', '\u{2070}'),
        1 => prop::char::range('\u{ffe0}', '\u{ffff}'),
        1 => prop::char::range('\u{10000}', '\u{10ffff}'),
    ];
    prop::collection::vec(c, 0..48).prop_map(String::from_iter)
}

fn messages() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(text(), 0..6)
}

/// What a SockJS client sends: every UTF-16 code unit as `\uXXXX`, in
/// either case.
fn client_escaped(text: &str, upper: bool) -> String {
    let units = text.encode_utf16();
    if upper {
        units.map(|u| format!("\\u{u:04X}")).collect()
    } else {
        units.map(|u| format!("\\u{u:04x}")).collect()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn escaping_parses_back(s in text()) {
        let mut out = BytesMut::from(&b"\""[..]);
        escape_into(&s, &mut out);
        prop_assert_eq!(escaped_len(&s), out.len() - 1);
        out.extend_from_slice(b"\"");
        prop_assert_eq!(serde_json::from_slice::<String>(&out).unwrap(), s);
    }

    #[test]
    fn escaping_arbitrary_strings_parses_back(s in any::<String>()) {
        let mut out = BytesMut::from(&b"\""[..]);
        escape_into(&s, &mut out);
        prop_assert_eq!(escaped_len(&s), out.len() - 1);
        out.extend_from_slice(b"\"");
        prop_assert_eq!(serde_json::from_slice::<String>(&out).unwrap(), s);
    }

    #[test]
    fn arrays_round_trip(messages in messages()) {
        let refs: Vec<&str> = messages.iter().map(String::as_str).collect();
        let mut out = BytesMut::new();
        encode_array(&refs, &mut out);
        prop_assert_eq!(encoded_array_len(&refs), out.len());
        prop_assert_eq!(out[0], b'a');
        prop_assert_eq!(serde_json::from_slice::<Vec<String>>(&out[1..]).unwrap(), messages.clone());
        prop_assert_eq!(decode_messages(&out[1..], false), Ok(messages));
    }

    #[test]
    fn close_frames_round_trip(code in any::<u16>(), reason in text()) {
        let mut out = BytesMut::new();
        encode_close(code, &reason, &mut out);
        prop_assert_eq!(out[0], b'c');
        let (c, r) = serde_json::from_slice::<(u16, String)>(&out[1..]).unwrap();
        prop_assert_eq!(c, code);
        prop_assert_eq!(r, reason);
    }

    #[test]
    fn decodes_what_serde_json_writes(messages in messages(), pretty in any::<bool>()) {
        let json = if pretty {
            serde_json::to_string_pretty(&messages).unwrap()
        } else {
            serde_json::to_string(&messages).unwrap()
        };
        prop_assert_eq!(decode_messages(json.as_bytes(), false), Ok(messages.clone()));
        prop_assert_eq!(decode_messages(json.as_bytes(), true), Ok(messages.clone()));
        if let Some(first) = messages.first() {
            let single = serde_json::to_string(first).unwrap();
            prop_assert_eq!(decode_messages(single.as_bytes(), true), Ok(vec![first.clone()]));
        }
    }

    #[test]
    fn decodes_what_a_client_writes(messages in messages(), upper in any::<bool>()) {
        let quoted: Vec<String> = messages
            .iter()
            .map(|m| format!("\"{}\"", client_escaped(m, upper)))
            .collect();
        let body = format!("[{}]", quoted.join(","));
        prop_assert_eq!(decode_messages(body.as_bytes(), false), Ok(messages));
    }
}
