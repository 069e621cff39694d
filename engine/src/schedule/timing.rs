//! When a delayed notification is due: the publisher's `delay_ms` or
//! `deliver_at`, fixed against the server clock at acceptance. Pure.

use herald_protocol::envelope::{FieldError, Notification, Scope};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::config::ScheduleConfig;
use super::entry::Millis;

/// `deliver_at` as given: RFC 3339 text or a number of the Unix epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliverAt {
    /// `2027-01-15T08:00:00Z`, `2027-01-15T09:00:00.250+01:00`.
    Rfc3339(String),
    /// Seconds since the Unix epoch when below [`SECONDS_BELOW`] (the Go
    /// delay service's `timing_moment`, `date +%s`), else milliseconds
    /// (JavaScript's `Date.now()`): the two cannot be confused for any
    /// time from March 1973 to the year 5138.
    Epoch(i64),
}

/// A `deliver_at` number below this is epoch seconds, from here on epoch
/// milliseconds: 10^11 seconds is the year 5138, 10^11 milliseconds is
/// 3 March 1973.
pub const SECONDS_BELOW: i64 = 100_000_000_000;

/// What a publication asks about timing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DelayRequest {
    /// Deliver this many ms after acceptance.
    pub delay_ms: Option<i64>,
    /// Deliver at this time.
    pub deliver_at: Option<DeliverAt>,
    /// Hold until the user is online.
    pub when_online: bool,
}

impl DelayRequest {
    /// Whether the publication goes through the delayed store (any of the
    /// three is set) rather than straight to the link.
    pub fn is_delayed(&self) -> bool {
        self.delay_ms.is_some() || self.deliver_at.is_some() || self.when_online
    }
}

/// The due time of `n` accepted at `now`, or the field that is wrong.
///
/// A `deliver_at` in the past is due at once (`now`), up to
/// `max_past_ms` back; further back it is refused (a time in the wrong
/// unit, or computed wrong, rather than one a little late). A delay or a
/// `deliver_at` beyond `max_delay_ms` is refused, as is a negative delay.
/// The topic's `jitter_ms`, if any, is added from `jitter` (a draw in
/// `0..=jitter_ms`), so a due time never moves earlier.
pub fn due_time(
    req: &DelayRequest,
    n: &Notification,
    now: Millis,
    config: &ScheduleConfig,
    jitter_ms: u64,
    jitter: impl FnOnce(u64) -> u64,
) -> Result<Millis, FieldError> {
    let max = config.max_delay_ms;
    let due = match (&req.delay_ms, &req.deliver_at) {
        (Some(_), Some(_)) => {
            return Err(FieldError::new(
                "deliver_at",
                "give a delay or a delivery time, not both",
            ));
        }
        (Some(d), None) => {
            if *d < 0 {
                return Err(FieldError::new(
                    "delay_ms",
                    format!("must not be negative (got {d})"),
                ));
            }
            let d = *d as u64;
            if d > max {
                return Err(FieldError::new(
                    "delay_ms",
                    format!("is {d} ms; the limit is {max} ms (schedule.max_delay_ms)"),
                ));
            }
            now.saturating_add(d)
        }
        (None, Some(at)) => {
            let at = parse_deliver_at(at)?;
            if at > now.saturating_add(max) {
                return Err(FieldError::new(
                    "deliver_at",
                    format!(
                        "is {} ms from now; the limit is {max} ms (schedule.max_delay_ms)",
                        at - now
                    ),
                ));
            }
            let past = config.max_past_ms;
            if at.saturating_add(past) < now {
                return Err(FieldError::new(
                    "deliver_at",
                    format!(
                        "is {} ({} ms ago); the limit is {past} ms in the past \
                         (schedule.max_past_ms): give RFC 3339, epoch seconds or epoch milliseconds",
                        rfc3339(at),
                        now - at
                    ),
                ));
            }
            at.max(now)
        }
        (None, None) => now,
    };
    if req.when_online && (n.scope != Scope::User || n.users.len() != 1) {
        return Err(FieldError::new(
            "when_online",
            "needs scope user with exactly one user (it waits for that user's session)",
        ));
    }
    let extra = if jitter_ms > 0 {
        jitter(jitter_ms).min(jitter_ms)
    } else {
        0
    };
    Ok(due.saturating_add(extra))
}

/// Epoch ms of a `deliver_at`.
pub fn parse_deliver_at(at: &DeliverAt) -> Result<Millis, FieldError> {
    match at {
        DeliverAt::Epoch(ms) if *ms < 0 => Err(FieldError::new(
            "deliver_at",
            format!("must not be before 1970 (got {ms})"),
        )),
        DeliverAt::Epoch(s) if *s < SECONDS_BELOW => Ok(*s as u64 * 1000),
        DeliverAt::Epoch(ms) => Ok(*ms as u64),
        DeliverAt::Rfc3339(text) => {
            let t = OffsetDateTime::parse(text, &Rfc3339).map_err(|e| {
                FieldError::new(
                    "deliver_at",
                    format!(
                        "{text:?} is not an RFC 3339 time like 2027-01-15T08:00:00Z, nor epoch seconds or ms: {e}"
                    ),
                )
            })?;
            let ms = t.unix_timestamp_nanos() / 1_000_000;
            u64::try_from(ms)
                .map_err(|_| FieldError::new("deliver_at", format!("{text:?} is before 1970")))
        }
    }
}

/// RFC 3339 text of epoch ms (UTC, millisecond precision).
pub fn rfc3339(ms: Millis) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_default()
}

/// The wall clock in epoch ms.
pub fn now_ms() -> Millis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as Millis)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    const NOW: Millis = 1_800_000_000_000;

    fn n(scope: Scope, users: &[&str], topic: Option<&str>) -> Notification {
        Notification {
            id: "x".into(),
            scope,
            users: users.iter().map(|u| u.to_string()).collect(),
            clients: vec!["c".into()],
            sites: vec![],
            event: "e".into(),
            topic: topic.map(str::to_owned),
            content_type: "application/json".into(),
            payload: Bytes::from_static(b"1"),
            payload_is_utf8: true,
            ttl: None,
            encodings: Default::default(),
            accepted: Default::default(),
        }
    }

    fn due(req: DelayRequest) -> Result<Millis, FieldError> {
        due_time(
            &req,
            &n(Scope::User, &["u"], None),
            NOW,
            &ScheduleConfig::default(),
            0,
            |_| 0,
        )
    }

    #[test]
    fn delay_and_deliver_at() {
        let d = |ms| DelayRequest {
            delay_ms: Some(ms),
            ..Default::default()
        };
        assert_eq!(due(d(0)), Ok(NOW));
        assert_eq!(due(d(1500)), Ok(NOW + 1500));
        let at = |a| DelayRequest {
            deliver_at: Some(a),
            ..Default::default()
        };
        assert_eq!(due(at(DeliverAt::Epoch((NOW + 7) as i64))), Ok(NOW + 7));
        assert_eq!(
            due(at(DeliverAt::Rfc3339("2027-01-15T08:00:00.250Z".into()))),
            Ok(NOW + 250)
        );
        assert_eq!(
            parse_deliver_at(&DeliverAt::Rfc3339("2027-01-15T09:00:00+01:00".into())),
            parse_deliver_at(&DeliverAt::Rfc3339("2027-01-15T08:00:00Z".into()))
        );
        assert_eq!(
            due(at(DeliverAt::Epoch((NOW - 60_000) as i64))),
            Ok(NOW),
            "the recent past is due now"
        );
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
    }

    /// Issue 39, item 2: the Go delay service's `timing_moment` is epoch
    /// seconds. Read as milliseconds it was January 1970, due at once.
    #[test]
    fn epoch_seconds_and_milliseconds_are_told_apart() {
        let at = |a| DelayRequest {
            deliver_at: Some(DeliverAt::Epoch(a)),
            ..Default::default()
        };
        let secs = (NOW / 1000 + 3600) as i64;
        assert_eq!(due(at(secs)), Ok(NOW + 3_600_000), "seconds");
        assert_eq!(due(at(secs * 1000)), Ok(NOW + 3_600_000), "milliseconds");
        assert_eq!(due(at(secs * 1000 + 250)), Ok(NOW + 3_600_250));
        // Every second of this century, and every millisecond since 1973.
        for t in [946_684_800_i64, 4_102_444_799] {
            assert_eq!(parse_deliver_at(&DeliverAt::Epoch(t)), Ok(t as u64 * 1000));
            assert_eq!(
                parse_deliver_at(&DeliverAt::Epoch(t * 1000)),
                Ok(t as u64 * 1000)
            );
        }
        assert_eq!(
            parse_deliver_at(&DeliverAt::Epoch(SECONDS_BELOW)),
            Ok(SECONDS_BELOW as u64)
        );
    }

    #[test]
    fn a_time_far_in_the_past_is_refused_naming_the_field() {
        let at = |a| DelayRequest {
            deliver_at: Some(a),
            ..Default::default()
        };
        let limit = ScheduleConfig::default().max_past_ms;
        assert_eq!(
            due(at(DeliverAt::Epoch((NOW - limit) as i64))),
            Ok(NOW),
            "at the limit: due now"
        );
        for far in [
            DeliverAt::Epoch((NOW - limit - 1) as i64),
            DeliverAt::Epoch(5),
            DeliverAt::Rfc3339("2001-01-01T00:00:00Z".into()),
        ] {
            let e = due(at(far.clone())).unwrap_err();
            assert_eq!(e.field, "deliver_at", "{far:?}");
            assert!(e.message.contains("schedule.max_past_ms"), "{}", e.message);
        }
        let e = due(at(DeliverAt::Rfc3339("2001-01-01T00:00:00Z".into()))).unwrap_err();
        assert!(
            e.message.starts_with("is 2001-01-01T00:00:00Z ("),
            "{}",
            e.message
        );
    }

    #[test]
    fn bad_timing_names_its_field() {
        let cases = [
            (
                DelayRequest {
                    delay_ms: Some(-1),
                    ..Default::default()
                },
                "delay_ms",
                "negative",
            ),
            (
                DelayRequest {
                    delay_ms: Some(i64::MAX),
                    ..Default::default()
                },
                "delay_ms",
                "limit",
            ),
            (
                DelayRequest {
                    deliver_at: Some(DeliverAt::Rfc3339("tomorrow".into())),
                    ..Default::default()
                },
                "deliver_at",
                "RFC 3339",
            ),
            (
                DelayRequest {
                    deliver_at: Some(DeliverAt::Epoch(-5)),
                    ..Default::default()
                },
                "deliver_at",
                "1970",
            ),
            (
                DelayRequest {
                    deliver_at: Some(DeliverAt::Epoch(i64::MAX)),
                    ..Default::default()
                },
                "deliver_at",
                "limit",
            ),
            (
                DelayRequest {
                    delay_ms: Some(1),
                    deliver_at: Some(DeliverAt::Epoch(1)),
                    ..Default::default()
                },
                "deliver_at",
                "not both",
            ),
        ];
        for (req, field, words) in cases {
            let e = due(req.clone()).unwrap_err();
            assert_eq!(e.field, field, "{req:?}");
            assert!(e.message.contains(words), "{req:?}: {}", e.message);
        }
    }

    #[test]
    fn when_online_needs_one_user() {
        let req = DelayRequest {
            when_online: true,
            ..Default::default()
        };
        let cfg = ScheduleConfig::default();
        assert_eq!(
            due_time(&req, &n(Scope::User, &["u"], None), NOW, &cfg, 0, |_| 0),
            Ok(NOW)
        );
        for bad in [
            n(Scope::User, &["a", "b"], None),
            n(Scope::Client, &[], None),
        ] {
            let e = due_time(&req, &bad, NOW, &cfg, 0, |_| 0).unwrap_err();
            assert_eq!(e.field, "when_online");
        }
    }

    #[test]
    fn jitter_only_delays() {
        let cfg: ScheduleConfig = toml::from_str("[topics.herd]\njitter_ms = 1000\n").unwrap();
        let req = DelayRequest {
            delay_ms: Some(10),
            ..Default::default()
        };
        let herd = n(Scope::User, &["u"], Some("herd"));
        assert_eq!(
            due_time(
                &req,
                &herd,
                NOW,
                &cfg,
                cfg.policy(Some("herd")).jitter_ms,
                |max| max
            ),
            Ok(NOW + 1010)
        );
        assert_eq!(
            due_time(
                &req,
                &herd,
                NOW,
                &cfg,
                cfg.policy(Some("herd")).jitter_ms,
                |_| u64::MAX
            ),
            Ok(NOW + 1010),
            "clamped"
        );
        let calm = n(Scope::User, &["u"], Some("calm"));
        assert_eq!(
            due_time(
                &req,
                &calm,
                NOW,
                &cfg,
                cfg.policy(Some("calm")).jitter_ms,
                |_| panic!("no draw")
            ),
            Ok(NOW + 10)
        );
    }
}
