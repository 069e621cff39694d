use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

fn holds(condition: &str, status: u16, body: Value) -> bool {
    Condition::parse(condition)
        .unwrap_or_else(|e| panic!("{condition}: {e}"))
        .eval(status, Some(&body))
}

fn error(condition: &str) -> String {
    Condition::parse(condition)
        .expect_err(condition)
        .to_string()
}

#[test]
fn field_report_example() {
    let c = "{res.code}!=200 && {res.data.status}!=2 || {res.data.msg}=='failed'";
    assert!(holds(c, 500, json!({"data": {"status": 1}})));
    assert!(!holds(c, 200, json!({"data": {"status": 1}})));
    assert!(!holds(c, 500, json!({"data": {"status": 2}})));
    assert!(holds(c, 200, json!({"data": {"msg": "failed"}})));
    assert!(!holds(c, 200, json!({"data": {"msg": "done"}})));
}

#[test]
fn status_and_res_code_are_the_http_status() {
    assert!(holds("{status} == 503", 503, Value::Null));
    assert!(holds("{res.code} == 503", 503, json!({"code": 7})));
    assert!(holds("{status} == {res.code}", 418, Value::Null));
}

#[test]
fn paths_reach_into_objects_and_arrays() {
    let body = json!({"items": [{"id": "a"}, {"id": "b"}], "map": {"0": "zero"}});
    assert!(holds("{res.items.1.id} == 'b'", 200, body.clone()));
    assert!(holds("{res.map.0} == \"zero\"", 200, body.clone()));
    assert!(holds("{res.items.2.id} == null", 200, body.clone()));
    assert!(holds("{res.items.x} == null", 200, body.clone()));
    assert!(holds("{res.items.1.id.deeper} == null", 200, body.clone()));
    assert!(holds("{res.missing} == null", 200, body.clone()));
    assert!(holds("{res.items.0} == {res.items.0}", 200, body.clone()));
    assert!(holds("{res} != null", 200, body));
    assert!(holds("{res} == 5", 200, json!(5)));
}

#[test]
fn no_body_reads_as_null() {
    let c = Condition::parse("{res.a} == null && {res} == null").unwrap();
    assert!(c.eval(200, None));
    assert!(c.reads_body());
    let c = Condition::parse("{res.code} >= 500 || {status} == 429").unwrap();
    assert!(!c.reads_body());
    assert!(c.eval(429, None));
}

#[test]
fn literals() {
    assert!(holds("true", 200, Value::Null));
    assert!(!holds("false", 200, Value::Null));
    assert!(!holds("null", 200, Value::Null));
    assert!(!holds("1", 200, Value::Null));
    assert!(holds("null == null", 200, Value::Null));
    assert!(holds("-1.5 < 0", 200, Value::Null));
    assert!(holds("1e3 == 1000", 200, Value::Null));
    assert!(holds("'it\\'s' == \"it's\"", 200, Value::Null));
    assert!(holds(
        "'a\\\\b\\n\\r\\t\\\"' == \"a\\\\b\\n\\r\\t\\\"\"",
        200,
        Value::Null
    ));
    assert!(holds(
        "'\u{e9}t\u{e9}' == {res.s}",
        200,
        json!({"s": "\u{e9}t\u{e9}"})
    ));
}

#[test]
fn every_comparison_on_numbers() {
    let cases = [
        ("==", [false, true, false]),
        ("!=", [true, false, true]),
        ("<", [true, false, false]),
        (">", [false, false, true]),
        ("<=", [true, true, false]),
        (">=", [false, true, true]),
    ];
    for (op, expected) in cases {
        for (left, want) in [1, 2, 3].into_iter().zip(expected) {
            let c = format!("{left} {op} 2");
            assert_eq!(holds(&c, 200, Value::Null), want, "{c}");
        }
    }
}

#[test]
fn numbers_compare_by_value() {
    assert!(holds("{res.n} == 200", 200, json!({"n": 200.0})));
    assert!(holds(
        "{res.n} > 9223372036854775807",
        200,
        json!({"n": u64::MAX})
    ));
    assert!(holds("-1 < {res.n}", 200, json!({"n": u64::MAX})));
    assert!(holds("{res.n} < 0.5", 200, json!({"n": -3})));
}

#[test]
fn strings_order_by_bytes() {
    assert!(holds("'abc' < 'abd'", 200, Value::Null));
    assert!(holds("'b' > 'abc'", 200, Value::Null));
    assert!(holds("'a' <= 'a' && 'a' >= 'a'", 200, Value::Null));
    assert!(holds("'Z' < 'a'", 200, Value::Null));
}

#[test]
fn different_types_are_unequal_and_unordered() {
    for op in ["==", "<", ">", "<=", ">="] {
        for (a, b) in [
            ("'200'", "200"),
            ("null", "0"),
            ("true", "1"),
            ("{res}", "'x'"),
        ] {
            let c = format!("{a} {op} {b}");
            assert!(!holds(&c, 200, json!([1])), "{c}");
        }
    }
    for (a, b) in [
        ("'200'", "200"),
        ("null", "0"),
        ("true", "1"),
        ("{res}", "'x'"),
    ] {
        let c = format!("{a} != {b}");
        assert!(holds(&c, 200, json!([1])), "{c}");
    }
    // Ordering is for numbers and strings only.
    assert!(!holds("true > false", 200, Value::Null));
    assert!(!holds("null <= null", 200, Value::Null));
    assert!(!holds(
        "{res.a} < {res.b}",
        200,
        json!({"a": [1], "b": [2]})
    ));
    assert!(holds(
        "{res.a} != {res.b}",
        200,
        json!({"a": [1], "b": [2]})
    ));
    assert!(holds(
        "{res.a} == {res.b}",
        200,
        json!({"a": {"x": 1}, "b": {"x": 1}})
    ));
}

#[test]
fn only_true_is_true() {
    assert!(holds("{res.retry}", 200, json!({"retry": true})));
    assert!(!holds("{res.retry}", 200, json!({"retry": "yes"})));
    assert!(!holds("{res.retry}", 200, json!({"retry": 1})));
    assert!(holds("!{res.ok}", 200, json!({})));
    assert!(holds("!{res.ok}", 200, json!({"ok": 1})));
    assert!(!holds("!{res.ok}", 200, json!({"ok": true})));
    assert!(holds("!!{res.ok}", 200, json!({"ok": true})));
    assert!(!holds("1 && true", 200, Value::Null));
    assert!(holds("1 || true", 200, Value::Null));
}

#[test]
fn precedence_not_then_comparison_then_and_then_or() {
    // `!` binds to its operand: (!{res.ok}) == true.
    assert!(holds("!{res.ok} == true", 200, json!({"ok": false})));
    assert!(!holds("!({res.ok} == false)", 200, json!({"ok": false})));
    // && before ||, on either side.
    assert!(holds("true || false && false", 200, Value::Null));
    assert!(holds("false && false || true", 200, Value::Null));
    assert!(!holds("(true || false) && false", 200, Value::Null));
    // Comparison before &&.
    assert!(holds("1 == 1 && 2 == 2", 200, Value::Null));
    assert_eq!(
        Condition::parse("a").map(|_| ()),
        Err(ParseError::UnknownWord { at: 0 })
    );
    let c = Condition::parse("!1 == 2 && 3 < 4 || 5 >= 6").unwrap();
    assert_eq!(c.to_string(), "!1 == 2 && 3 < 4 || 5 >= 6");
    let c = Condition::parse("(!(1 == 2)) && ((3 < 4 || 5 >= 6))").unwrap();
    assert_eq!(c.to_string(), "!(1 == 2) && (3 < 4 || 5 >= 6)");
}

#[test]
fn comparisons_do_not_chain() {
    assert_eq!(
        Condition::parse("1 == 1 == true"),
        Err(ParseError::ChainedComparison { at: 7 })
    );
    assert!(holds("(1 == 1) == true", 200, Value::Null));
}

#[test]
fn errors_name_the_position() {
    assert_eq!(error("{res.code}!=200 && "), "expected a value at 19");
    assert_eq!(error("{status} == 1 &&&& 2"), "expected a value at 16");
    assert_eq!(error("{status} == "), "expected a value at 12");
    assert_eq!(error(""), "expected a value at 0");
    assert_eq!(error("   "), "expected a value at 3");
    assert_eq!(error("1 == (2 == 3"), "unclosed parenthesis opened at 5");
    assert_eq!(error("(1 == 2))"), "unmatched ')' at 8");
    assert_eq!(error("(1 2)"), "expected ')' at 3");
    assert_eq!(error("1 2"), "expected '&&', '||' or the end at 2");
    assert_eq!(error("1 = 2"), "expected '==' at 2");
    assert_eq!(error("1 & 2"), "expected '&&' at 2");
    assert_eq!(error("1 | 2"), "expected '||' at 2");
    assert_eq!(error("'abc"), "unclosed string opened at 0");
    assert_eq!(
        error("1 == 'a\\x'"),
        "unknown escape in string at 7; use \\\\ \\' \\\" \\n \\r \\t"
    );
    assert_eq!(error("{status"), "unclosed field opened at 0");
    assert_eq!(error("1 == 01"), "invalid number at 5");
    assert_eq!(error("1 == 1."), "invalid number at 5");
    assert_eq!(error("1 == 1e999"), "invalid number at 5");
    assert_eq!(error("1 == -"), "invalid number at 5");
    assert_eq!(error("1 == # "), "unexpected character '#' at 5");
    assert_eq!(error("1 == \u{e9}"), "unexpected character '\u{e9}' at 5");
    assert!(error("1 == yes").starts_with("unknown word at 5; values are {status}"));
    assert_eq!(
        error("{foo} == 1"),
        "bad field at 0: fields are {status}, {res.code}, {res} and {res.<path>}"
    );
    assert_eq!(error("1 == {res..a}"), "bad field at 5: empty path segment");
    assert_eq!(error("{res.a.} == 1"), "bad field at 0: empty path segment");
    assert_eq!(
        error("{res.a b} == 1"),
        "bad field at 0: path segments cannot hold spaces or control characters"
    );
    assert_eq!(
        error("{res.code.x} == 1"),
        "bad field at 0: {res.code} is the HTTP status and has no fields"
    );
    assert_eq!(
        Condition::parse("{res.a{}"),
        Err(ParseError::UnclosedField { opened_at: 0 })
    );
}

#[test]
fn length_and_depth_are_bounded() {
    let long = format!("{}1", "1 || ".repeat(300));
    assert!(long.len() > MAX_BYTES);
    assert_eq!(
        error(&long),
        format!("condition is {} bytes; the limit is 1024", long.len())
    );

    let deep = |n: usize| format!("{}1{}", "(".repeat(n), ")".repeat(n));
    assert!(Condition::parse(&deep(MAX_DEPTH)).is_ok());
    assert_eq!(error(&deep(MAX_DEPTH + 1)), "nesting deeper than 32 at 32");
    let nots = |n: usize| format!("{}true", "!".repeat(n));
    assert!(Condition::parse(&nots(MAX_DEPTH)).is_ok());
    assert_eq!(
        Condition::parse(&nots(MAX_DEPTH + 1)),
        Err(ParseError::TooDeep { at: 32 })
    );
    // A long flat chain is not nesting.
    let flat = format!("{}1", "1 || ".repeat(200));
    assert!(Condition::parse(&flat).is_ok());
}

#[test]
fn error_positions() {
    assert_eq!(ParseError::TooLong { len: 2000 }.position(), None);
    assert_eq!(
        ParseError::UnclosedParen { opened_at: 3 }.position(),
        Some(3)
    );
    assert_eq!(
        ParseError::Expected {
            what: "a value",
            at: 14
        }
        .position(),
        Some(14)
    );
}

#[test]
fn display_is_canonical() {
    let c: Condition = "{res.code}!=200&&{res.data.status}!=2||{res.data.msg}=='failed'"
        .parse()
        .unwrap();
    assert_eq!(
        c.to_string(),
        "{res.code} != 200 && {res.data.status} != 2 || {res.data.msg} == \"failed\""
    );
    let c = Condition::parse("a' == 1").map(|_| ());
    assert_eq!(c, Err(ParseError::UnknownWord { at: 0 }));
    let c = Condition::parse("1 || (2 || 3) && (4 && 5)").unwrap();
    assert_eq!(c.to_string(), "1 || (2 || 3) && (4 && 5)");
    assert_eq!(Condition::parse(&c.to_string()).unwrap(), c);
}

fn literal() -> impl Strategy<Value = Expr> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e300f64..1e300).prop_map(Value::from),
        any::<String>().prop_map(Value::String),
    ]
    .prop_map(Expr::Literal)
}

fn field() -> impl Strategy<Value = Expr> {
    let segment = "[A-Za-z0-9_$@-]{1,8}".prop_filter("code is the status", |s| s != "code");
    prop_oneof![
        Just(Field::Status),
        Just(Field::ResCode),
        (segment, prop::collection::vec(any_segment(), 0..3))
            .prop_map(|(first, rest)| Field::Body(std::iter::once(first).chain(rest).collect())),
        Just(Field::Body(Vec::new())),
    ]
    .prop_map(Expr::Field)
}

/// Any segment the parser accepts: no `.`, `{`, `}`, spaces or controls.
fn any_segment() -> impl Strategy<Value = String> {
    "[^.{}]{1,6}".prop_filter("no spaces or controls", |s| {
        !s.chars().any(|c| c.is_whitespace() || c.is_control())
    })
}

fn op() -> impl Strategy<Value = CmpOp> {
    prop_oneof![
        Just(CmpOp::Eq),
        Just(CmpOp::Ne),
        Just(CmpOp::Lt),
        Just(CmpOp::Gt),
        Just(CmpOp::Le),
        Just(CmpOp::Ge),
    ]
}

fn expr() -> impl Strategy<Value = Expr> {
    prop_oneof![literal(), field()].prop_recursive(5, 48, 4, |inner| {
        prop_oneof![
            inner.clone().prop_map(|e| Expr::Not(Box::new(e))),
            (inner.clone(), op(), inner.clone()).prop_map(|(a, op, b)| Expr::Cmp(
                Box::new(a),
                op,
                Box::new(b)
            )),
            prop::collection::vec(inner.clone(), 2..4).prop_map(Expr::And),
            prop::collection::vec(inner, 2..4).prop_map(Expr::Or),
        ]
    })
}

proptest! {
    #[test]
    fn display_parses_back_to_the_same_condition(expr in expr()) {
        let c = Condition { expr };
        let text = c.to_string();
        prop_assume!(text.len() <= MAX_BYTES);
        let parsed = Condition::parse(&text);
        prop_assert_eq!(parsed.as_ref(), Ok(&c), "{}", text);
    }

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,200}", status in any::<u16>()) {
        if let Ok(c) = Condition::parse(&text) {
            let again = Condition::parse(&c.to_string());
            prop_assert_eq!(again.as_ref(), Ok(&c));
            c.eval(status, Some(&json!({"a": [1, "x", null], "b": {"c": true}})));
            c.eval(status, None);
        }
    }

    #[test]
    fn language_shaped_text_never_panics(
        parts in prop::collection::vec(
            prop_oneof![
                Just("{status}"), Just("{res.code}"), Just("{res.a.0}"), Just("{res"),
                Just("("), Just(")"), Just("!"), Just("&&"), Just("||"), Just("&"),
                Just("=="), Just("!="), Just("<"), Just("<="), Just(">"), Just(">="),
                Just("'s'"), Just("\"s"), Just("1"), Just("-2.5e3"), Just("true"),
                Just("null"), Just(" "), Just("\\"), Just("é"),
            ],
            0..60,
        ),
    ) {
        let text: String = parts.concat();
        match Condition::parse(&text) {
            Ok(c) => {
                prop_assert_eq!(Condition::parse(&c.to_string()), Ok(c.clone()));
                c.eval(200, Some(&json!({"a": [true]})));
            }
            Err(e) => {
                if let Some(at) = e.position() {
                    prop_assert!(at <= text.len());
                }
            }
        }
    }
}
