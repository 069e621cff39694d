//! Spacing: a `when-online` send to a user who had one less than the
//! topic's `min_interval_ms` ago waits for the end of the interval.
//!
//! Pure: takes `now` and the firer's record of the last send per user, no
//! I/O. Bounded by `max_tracked_users` users: when full, sends older than
//! every interval in force are forgotten, and if that frees nothing, the
//! user is not tracked (policy: send unspaced, counted by the caller).

use std::collections::HashMap;

use crate::schedule::config::ScheduleConfig;
use crate::schedule::entry::{Entry, Millis};
use crate::schedule::topics::Topics;

/// What spacing says about one send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Spacing {
    /// It may go now (no interval applies, or it is recorded as the user's
    /// last send).
    Go,
    /// It may go now, but the table of last sends is full: not recorded.
    Untracked,
    /// Too soon after the user's last send: it may go at this time.
    Wait(Millis),
}

/// Whether `e` may go at `now`; records it in `last_send` when it goes and
/// an interval applies.
pub(super) fn spacing(
    last_send: &mut HashMap<String, Millis>,
    config: &ScheduleConfig,
    topics: &Topics,
    e: &Entry,
    now: Millis,
) -> Spacing {
    let Some(user) = e.online_user() else {
        return Spacing::Go;
    };
    let interval = topics.min_interval_ms(e.notification.topic.as_deref());
    if interval == 0 {
        return Spacing::Go;
    }
    if let Some(last) = last_send.get(user)
        && now < last.saturating_add(interval)
    {
        return Spacing::Wait(last + interval);
    }
    if last_send.len() >= config.max_tracked_users && !last_send.contains_key(user) {
        forget_old_sends(last_send, topics, now);
        if last_send.len() >= config.max_tracked_users {
            return Spacing::Untracked;
        }
    }
    last_send.insert(user.to_owned(), now);
    Spacing::Go
}

/// Drop sends older than every interval in force: they no longer postpone
/// anything.
fn forget_old_sends(last_send: &mut HashMap<String, Millis>, topics: &Topics, now: Millis) {
    let longest = topics.longest_min_interval_ms();
    last_send.retain(|_, last| last.saturating_add(longest) > now);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::config::TopicPolicy;
    use crate::schedule::firer::sample::entry;

    fn online(id: &str, user: &str, topic: Option<&str>) -> Entry {
        let mut e = entry(id, user, 1);
        e.when_online = true;
        e.notification.topic = topic.map(str::to_owned);
        e
    }

    fn config(min_interval_ms: u64, max_tracked_users: usize) -> ScheduleConfig {
        let mut c = ScheduleConfig {
            min_interval_ms,
            max_tracked_users,
            ..ScheduleConfig::default()
        };
        c.topics.insert(
            "slow".into(),
            TopicPolicy {
                min_interval_ms: Some(5_000),
                ..TopicPolicy::default()
            },
        );
        c
    }

    #[test]
    fn a_send_too_soon_after_the_last_waits_for_the_interval() {
        let c = config(1_000, 10);
        let mut last = HashMap::new();
        assert_eq!(
            spacing(
                &mut last,
                &c,
                &Topics::new(&c, vec![]),
                &online("a", "u", None),
                100
            ),
            Spacing::Go
        );
        assert_eq!(
            spacing(
                &mut last,
                &c,
                &Topics::new(&c, vec![]),
                &online("b", "u", None),
                600
            ),
            Spacing::Wait(1_100)
        );
        assert_eq!(
            spacing(
                &mut last,
                &c,
                &Topics::new(&c, vec![]),
                &online("c", "u", Some("slow")),
                600
            ),
            Spacing::Wait(5_100),
            "the topic's own interval"
        );
        assert_eq!(
            spacing(
                &mut last,
                &c,
                &Topics::new(&c, vec![]),
                &online("d", "u", None),
                1_100
            ),
            Spacing::Go
        );
        assert_eq!(last["u"], 1_100, "the send that went is the last");
    }

    #[test]
    fn scheduled_entries_and_topics_without_interval_are_not_spaced() {
        let c = config(0, 10);
        let mut last = HashMap::new();
        let mut scheduled = online("s", "u", Some("slow"));
        scheduled.when_online = false;
        assert_eq!(
            spacing(&mut last, &c, &Topics::new(&c, vec![]), &scheduled, 0),
            Spacing::Go
        );
        assert_eq!(
            spacing(
                &mut last,
                &c,
                &Topics::new(&c, vec![]),
                &online("a", "u", None),
                0
            ),
            Spacing::Go
        );
        assert!(last.is_empty(), "nothing to remember");
    }

    #[test]
    fn a_full_table_forgets_old_sends_then_stops_tracking() {
        let c = config(1_000, 2);
        let mut last = HashMap::new();
        assert_eq!(
            spacing(
                &mut last,
                &c,
                &Topics::new(&c, vec![]),
                &online("a", "u1", None),
                0
            ),
            Spacing::Go
        );
        assert_eq!(
            spacing(
                &mut last,
                &c,
                &Topics::new(&c, vec![]),
                &online("b", "u2", None),
                0
            ),
            Spacing::Go
        );
        assert_eq!(
            spacing(
                &mut last,
                &c,
                &Topics::new(&c, vec![]),
                &online("c", "u3", None),
                4_000
            ),
            Spacing::Untracked,
            "the slow topic's 5 s keep both"
        );
        assert_eq!(
            spacing(
                &mut last,
                &c,
                &Topics::new(&c, vec![]),
                &online("d", "u3", None),
                5_000
            ),
            Spacing::Go
        );
        assert_eq!(last.keys().map(String::as_str).collect::<Vec<_>>(), ["u3"]);
    }
}
