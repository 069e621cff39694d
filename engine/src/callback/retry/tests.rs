use super::*;

fn ms(n: u64) -> Option<Duration> {
    Some(Duration::from_millis(n))
}

fn minutes(n: u64) -> Option<Duration> {
    Some(Duration::from_secs(60 * n))
}

#[test]
fn explicit_delays_make_one_more_attempt_than_delays() {
    let p = Policy::Delays(vec![100, 2_000, 30_000]);
    assert_eq!(p.attempts(), 4);
    assert_eq!(p.next_delay(0, 0.5), ms(0));
    assert_eq!(p.next_delay(1, 0.5), ms(100));
    assert_eq!(p.next_delay(2, 0.5), ms(2_000));
    assert_eq!(p.next_delay(3, 0.5), ms(30_000));
    assert_eq!(p.next_delay(4, 0.5), None);
    assert_eq!(p.next_delay(u32::MAX, 0.5), None);
    let once = Policy::Delays(Vec::new());
    assert_eq!(once.attempts(), 1);
    assert_eq!(once.next_delay(1, 0.0), None);
}

#[test]
fn two_n_plus_one_is_the_default_and_field_report_3s_schedule() {
    let p = Policy::default();
    assert_eq!(p, Policy::TwoNPlusOne);
    assert_eq!(p.attempts(), 10);
    let waits: Vec<_> = (1..=10).map(|n| p.next_delay(n, 0.9)).collect();
    let expected: Vec<_> = [1, 3, 5, 7, 9, 11, 13, 15, 17]
        .into_iter()
        .map(minutes)
        .chain([None])
        .collect();
    assert_eq!(waits, expected);
}

#[test]
fn exponential_doubles_up_to_the_maximum_with_full_jitter() {
    let p = Policy::Exponential {
        initial_ms: 1_000,
        max_ms: 10_000,
        attempts: 7,
    };
    // jitter just under 1 gives (almost) the ceiling: 1, 2, 4, 8, 10, 10 s.
    let top: Vec<_> = (1..=7).map(|n| p.next_delay(n, 1.0 - 1e-12)).collect();
    assert_eq!(
        top,
        vec![
            ms(999),
            ms(1_999),
            ms(3_999),
            ms(7_999),
            ms(9_999),
            ms(9_999),
            None
        ]
    );
    // Full jitter: anywhere in [0, ceiling).
    assert_eq!(p.next_delay(4, 0.0), ms(0));
    assert_eq!(p.next_delay(4, 0.5), ms(4_000));
    assert_eq!(p.next_delay(4, 0.25), ms(2_000));
    // Out-of-range jitter is clamped, NaN is 0.
    assert_eq!(p.next_delay(4, 7.0), ms(8_000));
    assert_eq!(p.next_delay(4, -1.0), ms(0));
    assert_eq!(p.next_delay(4, f64::NAN), ms(0));
}

#[test]
fn exponential_does_not_overflow_on_late_attempts() {
    let p = Policy::Exponential {
        initial_ms: MAX_DELAY_MS,
        max_ms: MAX_DELAY_MS,
        attempts: MAX_ATTEMPTS,
    };
    assert_eq!(p.next_delay(99, 0.5), ms(MAX_DELAY_MS / 2));
    let p = Policy::Exponential {
        initial_ms: 3,
        max_ms: u64::MAX,
        attempts: u32::MAX,
    };
    assert_eq!(p.next_delay(80, 0.0), ms(0));
    assert!(p.next_delay(80, 0.5).is_some());
}

#[test]
fn registration_names_the_field_of_a_bad_delay() {
    let err = Policy::delays(&[1_000, 5_000, -3]).unwrap_err();
    assert_eq!(err.field(), "retry.delays_ms[2]");
    assert_eq!(
        err.to_string(),
        "retry.delays_ms[2]: must be at least 1 ms, got -3"
    );
    let err = Policy::delays(&[0]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "retry.delays_ms[0]: must be at least 1 ms, got 0"
    );
    let too_long = MAX_DELAY_MS as i64 + 1;
    let err = Policy::delays(&[1, too_long]).unwrap_err();
    assert_eq!(err.field(), "retry.delays_ms[1]");
    assert_eq!(
        err.to_string(),
        "retry.delays_ms[1]: 2592000001 ms is longer than 30 days (2592000000 ms)"
    );
    assert_eq!(
        Policy::delays(&[1; 100]).unwrap_err(),
        RetryError::TooManyAttempts {
            field: "retry.delays_ms".into(),
            attempts: 101
        }
    );
    assert_eq!(
        Policy::delays(&[1; 99]).unwrap(),
        Policy::Delays(vec![1; 99])
    );
    assert_eq!(
        Policy::delays(&[MAX_DELAY_MS as i64]).unwrap(),
        Policy::Delays(vec![MAX_DELAY_MS])
    );
}

#[test]
fn registration_checks_exponential_fields() {
    assert_eq!(
        Policy::exponential(500, 60_000, 8),
        Ok(Policy::Exponential {
            initial_ms: 500,
            max_ms: 60_000,
            attempts: 8
        })
    );
    let field = |r: Result<Policy, RetryError>| r.unwrap_err().field().to_owned();
    assert_eq!(field(Policy::exponential(0, 1, 1)), "retry.initial_ms");
    assert_eq!(field(Policy::exponential(1, -1, 1)), "retry.max_ms");
    assert_eq!(field(Policy::exponential(1, i64::MAX, 1)), "retry.max_ms");
    assert_eq!(field(Policy::exponential(10, 5, 1)), "retry.max_ms");
    assert_eq!(field(Policy::exponential(1, 1, 0)), "retry.attempts");
    assert_eq!(field(Policy::exponential(1, 1, 101)), "retry.attempts");
    assert_eq!(field(Policy::exponential(1, 1, i64::MAX)), "retry.attempts");
    assert_eq!(
        Policy::exponential(1, 1, -2).unwrap_err().to_string(),
        "retry.attempts: must be at least 1, got -2"
    );
    assert_eq!(
        Policy::exponential(10, 5, 1).unwrap_err().to_string(),
        "retry.max_ms: 5 is below retry.initial_ms (10)"
    );
    assert_eq!(
        Policy::exponential(1, 1, 101).unwrap_err().to_string(),
        "retry.attempts: makes 101 attempts; the limit is 100"
    );
}

#[test]
fn validate_applies_the_registration_rules_to_built_policies() {
    assert_eq!(Policy::TwoNPlusOne.validate(), Ok(()));
    assert_eq!(Policy::Delays(vec![1, 2]).validate(), Ok(()));
    assert_eq!(
        Policy::Delays(vec![1, u64::MAX])
            .validate()
            .unwrap_err()
            .field(),
        "retry.delays_ms[1]"
    );
    let p = Policy::Exponential {
        initial_ms: 1,
        max_ms: 2,
        attempts: 0,
    };
    assert_eq!(p.validate().unwrap_err().field(), "retry.attempts");
}

/// 2015-10-21T07:28:00Z in epoch milliseconds.
const OCT_21_2015_MS: u64 = 1_445_412_480_000;

#[test]
fn retry_after_reads_delta_seconds() {
    assert_eq!(retry_after("120", 0), Some(Duration::from_secs(120)));
    assert_eq!(retry_after(" 0 ", 0), Some(Duration::ZERO));
    assert_eq!(
        retry_after("99999999999999999999999", 0),
        Some(Duration::from_secs(u64::MAX))
    );
    for bad in ["", " ", "-5", "1.5", "+3", "soon", "12 s"] {
        assert_eq!(retry_after(bad, 0), None, "{bad:?}");
    }
}

#[test]
fn retry_after_reads_http_dates() {
    let date = "Wed, 21 Oct 2015 07:28:00 GMT";
    assert_eq!(retry_after(date, OCT_21_2015_MS - 90_500), ms(90_500));
    assert_eq!(retry_after(date, OCT_21_2015_MS), ms(0));
    // A date in the past means now.
    assert_eq!(retry_after(date, OCT_21_2015_MS + 5_000), ms(0));
    // The obsolete RFC 850 and asctime forms.
    assert_eq!(
        retry_after("Wednesday, 21-Oct-15 07:28:00 GMT", OCT_21_2015_MS - 1_000),
        ms(1_000)
    );
    assert_eq!(
        retry_after("Wed Oct 21 07:28:00 2015", OCT_21_2015_MS - 1_000),
        ms(1_000)
    );
    assert_eq!(retry_after("Wed, 21 Oct 2015 07:28:00 PST", 0), None);
}

#[test]
fn retry_after_is_clamped_between_the_policy_and_a_maximum() {
    let s = Duration::from_secs;
    let max = s(3_600);
    assert_eq!(clamp_retry_after(s(60), None, max), s(60));
    assert_eq!(clamp_retry_after(s(60), Some(s(10)), max), s(60));
    assert_eq!(clamp_retry_after(s(60), Some(s(600)), max), s(600));
    assert_eq!(clamp_retry_after(s(60), Some(s(86_400)), max), max);
    assert_eq!(clamp_retry_after(s(7_200), Some(s(86_400)), max), s(7_200));
}
