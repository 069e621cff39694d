//! The words of an alert (pure): a subject for mail and a text for mail
//! and the webhook, from one [`Digest`] of alerts of one kind. Free text
//! (a dead letter's reason, a store error) is cut to [`MAX_DETAIL_CHARS`].

use std::fmt::Write;

use super::coalesce::Digest;
use super::{Alert, DeadLetter, Kind};

/// Longest reason or error quoted in a message, in characters.
pub(crate) const MAX_DETAIL_CHARS: usize = 300;

/// One message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Message {
    /// The mail subject.
    pub(crate) subject: String,
    /// The body (mail) or `text` (webhook).
    pub(crate) text: String,
}

/// The message of `digest`, alerts of `kind`.
pub(crate) fn render(kind: Kind, digest: &Digest<Alert>) -> Message {
    let n = digest.alerts();
    if let ([only], 0) = (digest.shown.as_slice(), digest.more) {
        return Message {
            subject: single_subject(only),
            text: format!("Herald: {}", line(only)),
        };
    }
    let since = rfc3339(digest.since_ms);
    let subject = match kind {
        Kind::DeadLetter => format!("Herald: {n} dead letters"),
        Kind::StoreUnavailable => format!("Herald: delayed store unavailable ({n} times)"),
        Kind::StoreRecovered => format!("Herald: delayed store available again ({n} times)"),
    };
    let mut text = format!("Herald: {n} {} since {since}:\n", noun(kind));
    for alert in &digest.shown {
        let _ = writeln!(text, "- {}", line(alert));
    }
    if digest.more > 0 {
        let _ = writeln!(
            text,
            "and {} more {} since {since}.",
            digest.more,
            noun(kind)
        );
    }
    Message {
        subject,
        text: text.trim_end().to_owned(),
    }
}

fn noun(kind: Kind) -> &'static str {
    match kind {
        Kind::DeadLetter => "dead letters",
        Kind::StoreUnavailable => "store outages",
        Kind::StoreRecovered => "store recoveries",
    }
}

fn single_subject(alert: &Alert) -> String {
    match alert {
        Alert::DeadLetter(d) => format!("Herald: dead letter {}", d.id),
        Alert::StoreUnavailable { .. } => "Herald: delayed store unavailable".to_owned(),
        Alert::StoreRecovered { .. } => "Herald: delayed store available again".to_owned(),
    }
}

/// One alert in one line.
fn line(alert: &Alert) -> String {
    match alert {
        Alert::DeadLetter(DeadLetter {
            id,
            topic,
            reason,
            attempts,
        }) => {
            let topic = topic
                .as_deref()
                .map(|t| format!(" (topic {t})"))
                .unwrap_or_default();
            let s = if *attempts == 1 { "" } else { "s" };
            format!(
                "notification {id}{topic} is dead after {attempts} attempt{s}: {}",
                cut(reason)
            )
        }
        Alert::StoreUnavailable { error, since_ms } => format!(
            "the delayed-notification store has been failing since {}: {}",
            rfc3339(*since_ms),
            cut(error)
        ),
        Alert::StoreRecovered { since_ms, at_ms } => format!(
            "the delayed-notification store is available again at {}, after failing for {}",
            rfc3339(*at_ms),
            duration(at_ms.saturating_sub(*since_ms))
        ),
    }
}

/// `text`, cut to [`MAX_DETAIL_CHARS`] characters (with `...`).
fn cut(text: &str) -> String {
    let one_line = text.replace(['\r', '\n'], " ");
    match one_line.char_indices().nth(MAX_DETAIL_CHARS) {
        Some((at, _)) => format!("{}...", &one_line[..at]),
        None => one_line,
    }
}

/// Epoch milliseconds as RFC 3339 UTC, to the second.
pub(crate) fn rfc3339(ms: u64) -> String {
    let secs = i64::try_from(ms / 1000).unwrap_or(i64::MAX);
    time::OffsetDateTime::from_unix_timestamp(secs)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| format!("{ms} ms after the epoch"))
}

/// A duration for people: `42 s`, `5 min 3 s`, `2 h 5 min`.
fn duration(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..120 => format!("{s} s"),
        120..7_200 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, s % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // 2025-01-01T00:00:00Z
    const T0: u64 = 1_735_689_600_000;

    fn dead(id: &str, topic: Option<&str>) -> Alert {
        Alert::DeadLetter(DeadLetter {
            id: id.into(),
            topic: topic.map(Into::into),
            reason: "HTTP 500 after 10003 ms".into(),
            attempts: 10,
        })
    }

    fn one(alert: Alert) -> Digest<Alert> {
        Digest {
            shown: vec![alert],
            more: 0,
            since_ms: T0,
        }
    }

    #[test]
    fn one_dead_letter_is_one_line() {
        let m = render(Kind::DeadLetter, &one(dead("n-1", Some("billing"))));
        assert_eq!(m.subject, "Herald: dead letter n-1");
        assert_eq!(
            m.text,
            "Herald: notification n-1 (topic billing) is dead after 10 attempts: HTTP 500 after 10003 ms"
        );
        let m = render(Kind::DeadLetter, &one(dead("n-2", None)));
        assert!(
            m.text.starts_with("Herald: notification n-2 is dead"),
            "{}",
            m.text
        );
    }

    #[test]
    fn a_summary_itemises_the_first_and_counts_the_rest() {
        let d = Digest {
            shown: vec![dead("a", Some("t")), dead("b", None)],
            more: 41,
            since_ms: T0,
        };
        let m = render(Kind::DeadLetter, &d);
        assert_eq!(m.subject, "Herald: 43 dead letters");
        assert_eq!(
            m.text,
            "Herald: 43 dead letters since 2025-01-01T00:00:00Z:\n\
             - notification a (topic t) is dead after 10 attempts: HTTP 500 after 10003 ms\n\
             - notification b is dead after 10 attempts: HTTP 500 after 10003 ms\n\
             and 41 more dead letters since 2025-01-01T00:00:00Z."
        );
    }

    #[test]
    fn store_alerts_say_since_when_and_for_how_long() {
        let down = Alert::StoreUnavailable {
            error: "counts: connection refused".into(),
            since_ms: T0,
        };
        let m = render(Kind::StoreUnavailable, &one(down));
        assert_eq!(m.subject, "Herald: delayed store unavailable");
        assert_eq!(
            m.text,
            "Herald: the delayed-notification store has been failing since 2025-01-01T00:00:00Z: counts: connection refused"
        );
        let up = Alert::StoreRecovered {
            since_ms: T0,
            at_ms: T0 + 303_000,
        };
        let m = render(Kind::StoreRecovered, &one(up));
        assert_eq!(m.subject, "Herald: delayed store available again");
        assert!(
            m.text
                .ends_with("available again at 2025-01-01T00:05:03Z, after failing for 5 min 3 s"),
            "{}",
            m.text
        );
    }

    #[test]
    fn long_details_are_cut_to_one_bounded_line() {
        let long = Alert::StoreUnavailable {
            error: format!("line one\nline two {}", "é".repeat(1_000)),
            since_ms: T0,
        };
        let m = render(Kind::StoreUnavailable, &one(long));
        assert!(!m.text.contains('\n'));
        assert!(m.text.ends_with("..."));
        assert!(
            m.text.chars().count() < MAX_DETAIL_CHARS + 120,
            "{}",
            m.text
        );
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(duration(42_500), "42 s");
        assert_eq!(duration(303_000), "5 min 3 s");
        assert_eq!(duration(7_500_000), "2 h 5 min");
    }
}
