//! Escaping tests: every boundary of the escape set, the exact output the
//! sockjs-protocol suite expects, and parsing back as JSON.

use bytes::BytesMut;

use super::*;

fn escape(text: &str) -> String {
    let mut out = BytesMut::new();
    escape_into(text, &mut out);
    assert_eq!(escaped_len(text), out.len(), "escaped_len of {text:?}");
    String::from_utf8(out.to_vec()).unwrap()
}

/// The escape set as the protocol states it, one range per line.
fn must_escape(c: char) -> bool {
    matches!(
        c,
        '\u{0}'..='\u{1f}'
            | '"'
            | '\\'
            | '\u{200c}'..='\u{200f}'
            | '\u{2028}'..='\u{202f}'
            | '\u{2060}'..='\u{206f}'
            | '\u{fff0}'..='\u{ffff}'
    )
}

#[test]
fn range_boundaries() {
    let escaped = [
        ('\u{0}', "\\u0000"),
        ('\u{1}', "\\u0001"),
        ('\u{b}', "\\u000b"),
        ('\u{1f}', "\\u001f"),
        ('\u{200c}', "\\u200c"),
        ('\u{200f}', "\\u200f"),
        ('\u{2028}', "\\u2028"),
        ('\u{2029}', "\\u2029"),
        ('\u{202f}', "\\u202f"),
        ('\u{2060}', "\\u2060"),
        ('\u{206f}', "\\u206f"),
        ('\u{fff0}', "\\ufff0"),
        ('\u{fffe}', "\\ufffe"),
        ('\u{ffff}', "\\uffff"),
    ];
    for (c, want) in escaped {
        assert_eq!(escape(&c.to_string()), want, "U+{:04X}", u32::from(c));
    }
    let raw = [
        '\u{20}',
        '\u{7f}',
        '\u{80}',
        '\u{9f}',
        '\u{ad}',
        '\u{2000}',
        '\u{200b}',
        '\u{2010}',
        '\u{2027}',
        '\u{2030}',
        '\u{205f}',
        '\u{2070}',
        '\u{20ac}',
        '\u{2fff}',
        '\u{e000}',
        '\u{f000}',
        '\u{feff}',
        '\u{ffef}',
        '\u{10000}',
        '\u{1f600}',
        '\u{10ffff}',
    ];
    for c in raw {
        let text = c.to_string();
        assert_eq!(escape(&text), text, "U+{:04X}", u32::from(c));
    }
}

#[test]
fn json_short_forms_like_json_stringify() {
    assert_eq!(escape("\u{8}\t\n\u{c}\r"), "\\b\\t\\n\\f\\r");
    assert_eq!(escape("say \"hi\" \\o/"), "say \\\"hi\\\" \\\\o/");
    assert_eq!(
        escape("MESSAGE\nid:1\n\nbody\0"),
        "MESSAGE\\nid:1\\n\\nbody\\u0000"
    );
}

#[test]
fn unescaped_runs_are_copied_raw() {
    assert_eq!(escape(""), "");
    assert_eq!(escape("héllo € 😀 日本"), "héllo € 😀 日本");
    assert_eq!(escape("é\n€\u{2028}😀"), "é\\n€\\u2028😀");
    // A lead byte 0xE2 or 0xEF right at the end, and back to back escapes.
    assert_eq!(escape("a€"), "a€");
    assert_eq!(escape("\u{ffff}\u{ffff}\""), "\\uffff\\uffff\\\"");
}

/// `JSONEncoding.test_xhr_server_encodes`: every character from U+00FF up
/// that the server must escape, sent in one message, comes back as exactly
/// `\u%04x` each.
#[test]
fn sockjs_protocol_server_killer_string() {
    let chars: String = (0xFFu32..=0xFFFF)
        .filter_map(char::from_u32)
        .filter(|&c| must_escape(c))
        .collect();
    let want: String = chars
        .chars()
        .map(|c| format!("\\u{:04x}", u32::from(c)))
        .collect();
    assert_eq!(escape(&chars), want);
}

/// Every BMP character (and a few beyond): escaped exactly when it is in
/// the set, and the output parses back as JSON.
#[test]
fn every_bmp_character() {
    let extra = ['\u{10000}', '\u{1f600}', '\u{10ffff}'];
    for c in (0..=0xFFFFu32).filter_map(char::from_u32).chain(extra) {
        let text = c.to_string();
        let escaped = escape(&text);
        assert_eq!(
            escaped != text,
            must_escape(c),
            "U+{:04X} -> {escaped:?}",
            u32::from(c)
        );
        let json = format!("\"{escaped}\"");
        assert_eq!(serde_json::from_str::<String>(&json).unwrap(), text);
    }
}
