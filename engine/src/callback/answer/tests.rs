use super::*;

fn response(status: u16, body: &[u8]) -> Answer<'_> {
    Answer::Response {
        status,
        body,
        quote: true,
    }
}

fn is_proceed(r: Recheck) -> bool {
    r == Recheck::Proceed
}

#[test]
fn recheck_proceeds_on_ok_or_json_ok_true() {
    for body in [
        &b"OK"[..],
        b"ok",
        b"  Ok\r\n",
        br#"{"ok": true}"#,
        br#" {"ok":true,"note":"still wanted"} "#,
    ] {
        assert!(is_proceed(recheck(&response(200, body))), "{body:?}");
    }
    assert!(is_proceed(recheck(&response(204, b"OK"))));
}

#[test]
fn recheck_declines_another_2xx_quoting_the_body() {
    for body in [
        &b""[..],
        b"NO",
        b"okay",
        b"\"ok\"",
        br#"{"ok": false}"#,
        br#"{"ok": "true"}"#,
        br#"[{"ok": true}]"#,
    ] {
        assert!(
            matches!(recheck(&response(200, body)), Recheck::Decline { .. }),
            "{body:?}"
        );
    }
    assert_eq!(
        recheck(&response(200, b"cancelled by user")),
        Recheck::Decline {
            reason: "HTTP 200: cancelled by user".into()
        }
    );
    assert_eq!(
        recheck(&response(200, b"")),
        Recheck::Decline {
            reason: "HTTP 200".into()
        }
    );
    let long = vec![b'x'; 1000];
    let Recheck::Decline { reason } = recheck(&response(200, &long)) else {
        panic!("not declined");
    };
    assert_eq!(reason, format!("HTTP 200: {}", "x".repeat(256)));
}

#[test]
fn recheck_retries_server_errors_rate_limits_and_transport_failures() {
    for status in [500, 502, 503, 504, 599, 429, 408] {
        assert!(
            matches!(recheck(&response(status, b"OK")), Recheck::Retry { .. }),
            "{status}"
        );
    }
    assert_eq!(
        recheck(&Answer::Timeout),
        Recheck::Retry {
            reason: "timed out".into()
        }
    );
    assert_eq!(
        recheck(&Answer::Network {
            error: "connection refused"
        }),
        Recheck::Retry {
            reason: "network error: connection refused".into()
        }
    );
}

#[test]
fn recheck_declines_other_4xx_and_retries_the_unexpected() {
    for status in [400, 401, 403, 404, 410, 422, 499] {
        assert!(
            matches!(recheck(&response(status, b"OK")), Recheck::Decline { .. }),
            "{status}"
        );
    }
    for status in [100, 301, 302, 304, 600] {
        assert!(
            matches!(recheck(&response(status, b"OK")), Recheck::Retry { .. }),
            "{status}"
        );
    }
}

#[test]
fn callback_without_condition_is_delivered_on_any_2xx() {
    for status in [200, 201, 202, 204, 299] {
        assert_eq!(callback(&response(status, b""), None), Outcome::Delivered);
    }
    for answer in [
        response(199, b""),
        response(301, b""),
        response(404, b"gone"),
        response(500, b""),
        Answer::Timeout,
        Answer::Network { error: "reset" },
    ] {
        assert!(
            matches!(callback(&answer, None), Outcome::Failed { .. }),
            "{answer:?}"
        );
    }
    assert_eq!(
        callback(&response(503, b"busy"), None),
        Outcome::Failed {
            reason: "HTTP 503: busy".into()
        }
    );
}

#[test]
fn callback_fails_when_the_condition_holds() {
    let c = Condition::parse("{res.data.status} != 2 || {res.data.msg} == 'failed'").unwrap();
    let ok = br#"{"data": {"status": 2, "msg": "done"}}"#;
    assert_eq!(callback(&response(200, ok), Some(&c)), Outcome::Delivered);
    let failed = br#"{"data": {"status": 2, "msg": "failed"}}"#;
    assert_eq!(
        callback(&response(200, failed), Some(&c)),
        Outcome::Failed {
            reason: format!(
                "HTTP 200: {}; retry_if held",
                String::from_utf8_lossy(failed)
            )
        }
    );
    // The condition is asked only of a 2xx.
    let c = Condition::parse("{res.code} == 500").unwrap();
    assert!(matches!(
        callback(&response(500, b""), Some(&c)),
        Outcome::Failed { .. }
    ));
}

#[test]
fn empty_or_non_json_body_fails_a_condition_that_reads_the_body() {
    let c = Condition::parse("{res.data.status} == 'error'").unwrap();
    for body in [&b""[..], b"OK", b"<html>", b"{\"data\":"] {
        let Outcome::Failed { reason } = callback(&response(200, body), Some(&c)) else {
            panic!("{body:?} delivered");
        };
        assert!(
            reason.ends_with("retry_if reads the body, which is empty or not JSON"),
            "{reason}"
        );
    }
    assert_eq!(
        callback(&response(200, br#"{"data": {"status": "ok"}}"#), Some(&c)),
        Outcome::Delivered
    );
    // A condition on the status alone does not need a body.
    let c = Condition::parse("{res.code} == 202").unwrap();
    assert_eq!(callback(&response(200, b""), Some(&c)), Outcome::Delivered);
    assert!(matches!(
        callback(&response(202, b""), Some(&c)),
        Outcome::Failed { .. }
    ));
}

#[test]
fn excerpt_cuts_at_a_character_boundary() {
    assert_eq!(excerpt(b"short", RECORD_BYTES), "short");
    assert_eq!(excerpt(b"", RECORD_BYTES), "");
    let body = vec![b'a'; 2000];
    assert_eq!(excerpt(&body, RECORD_BYTES).len(), 1024);
    // "é" is 2 bytes, "€" 3, "😀" 4: a cut inside any of them backs off.
    for (c, len) in [("\u{e9}", 2), ("\u{20ac}", 3), ("\u{1f600}", 4)] {
        for cut in 1..len {
            let body = format!("{}{c}tail", "a".repeat(10 - cut));
            let text = excerpt(body.as_bytes(), 10);
            assert_eq!(text, "a".repeat(10 - cut), "{c} cut after {cut}");
        }
        let body = format!("{}{c}tail", "a".repeat(10 - len));
        assert_eq!(
            excerpt(body.as_bytes(), 10),
            format!("{}{c}", "a".repeat(10 - len))
        );
    }
}

#[test]
fn excerpt_keeps_invalid_bytes_as_replacement_characters() {
    assert_eq!(
        excerpt(b"ok\xff\xfeok", RECORD_BYTES),
        "ok\u{fffd}\u{fffd}ok"
    );
    // A run of continuation bytes backs off at most three.
    let body = vec![0x80; 20];
    assert_eq!(excerpt(&body, 10), "\u{fffd}".repeat(7));
}
