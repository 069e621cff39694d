//! Which callback a due entry makes, if any: its own URLs (the
//! publication's `callback_url` and `recheck_url`) over its topic's, and
//! the settings (retry policy, condition, timeout, secrets) of its topic
//! when registered, else the defaults.
//!
//! Pure: an entry and a snapshot of the topics in, a [`Resolution`] out.

use std::sync::Arc;

use url::Url;

use crate::callback::topic::Topic;
use crate::schedule::entry::Entry;
use crate::schedule::topics::Snapshot;

/// What a due entry's callback is.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    /// The settings it follows.
    pub(crate) settings: Arc<Topic>,
    /// Where the call goes.
    pub(crate) callback_url: Url,
    /// What is asked first, if anything.
    pub(crate) recheck_url: Option<Url>,
}

/// What a due entry is to do.
#[derive(Debug, Clone)]
pub(crate) enum Resolution {
    /// No callback: browsers only.
    Browsers,
    /// A callback, and its browsers too when `browsers` is set.
    Call {
        /// The callback.
        resolved: Resolved,
        /// Whether it also goes to its browser recipients.
        browsers: bool,
    },
    /// Nothing it can do: it has neither browsers nor a callback any more
    /// (its topic lost its `callback_url`), or a stored URL does not parse.
    /// It becomes a dead letter with this reason.
    Broken(String),
}

/// What `entry` does, with `topics` in force; `defaults` are the settings
/// of a callback whose topic is not registered.
pub(crate) fn resolve(entry: &Entry, topics: &Snapshot, defaults: &Arc<Topic>) -> Resolution {
    let registered = entry
        .notification
        .topic
        .as_deref()
        .and_then(|t| topics.registered.get(t));
    let target = &entry.target;
    let callback_url = match (&target.callback_url, registered) {
        (Some(own), _) => match Url::parse(own) {
            Ok(url) => Some(url),
            Err(e) => {
                return Resolution::Broken(format!("its callback_url {own:?} is not a URL: {e}"));
            }
        },
        (None, Some(topic)) => topic.callback_url.clone(),
        (None, None) => None,
    };
    let Some(callback_url) = callback_url else {
        return if target.browsers {
            Resolution::Browsers
        } else {
            Resolution::Broken(match &entry.notification.topic {
                Some(t) => format!(
                    "it goes to no browser and neither it nor its topic {t} has a callback_url any more"
                ),
                None => "it goes to no browser and has no callback_url".to_owned(),
            })
        };
    };
    let recheck_url = match (&target.recheck_url, registered) {
        (Some(own), _) => match Url::parse(own) {
            Ok(url) => Some(url),
            Err(e) => {
                return Resolution::Broken(format!("its recheck_url {own:?} is not a URL: {e}"));
            }
        },
        (None, Some(topic)) => topic.recheck_url.clone(),
        (None, None) => None,
    };
    Resolution::Call {
        resolved: Resolved {
            settings: registered.cloned().unwrap_or_else(|| Arc::clone(defaults)),
            callback_url,
            recheck_url,
        },
        browsers: target.browsers,
    }
}

/// The settings of a callback whose topic is not registered: the
/// documented defaults (2n+1 minutes, 10 s timeout, unsigned).
pub(crate) fn defaults() -> Arc<Topic> {
    Arc::new(
        Topic::from_json(&serde_json::json!({}), &[])
            .expect("an empty topic is valid: every field has a default"),
    )
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::schedule::entry::Target;
    use crate::schedule::firer::sample;

    fn snapshot(topics: &[(&str, serde_json::Value)]) -> Snapshot {
        let mut registered = HashMap::new();
        for (name, body) in topics {
            let topic = Topic::from_json(body, &[crate::callback::destination::Class::Loopback])
                .expect("valid topic");
            registered.insert((*name).to_owned(), Arc::new(topic));
        }
        Snapshot::of_registered(registered)
    }

    fn entry(topic: Option<&str>, target: Target) -> Entry {
        let mut e = sample::entry("n1", "alice", 1);
        e.notification.topic = topic.map(str::to_owned);
        e.target = target;
        e
    }

    fn call(r: Resolution) -> (Resolved, bool) {
        match r {
            Resolution::Call { resolved, browsers } => (resolved, browsers),
            other => panic!("expected a call, got {other:?}"),
        }
    }

    #[test]
    fn no_callback_anywhere_goes_to_the_browsers() {
        let s = snapshot(&[("plain", serde_json::json!({"jitter_ms": 5}))]);
        let d = defaults();
        for topic in [None, Some("plain"), Some("unregistered")] {
            let r = resolve(&entry(topic, Target::default()), &s, &d);
            assert!(matches!(r, Resolution::Browsers), "{topic:?}: {r:?}");
        }
    }

    #[test]
    fn a_topic_supplies_both_urls_and_its_settings() {
        let s = snapshot(&[(
            "billing",
            serde_json::json!({
                "callback_url": "http://127.0.0.1:1/call",
                "recheck_url": "http://127.0.0.1:1/recheck",
                "timeout_ms": 1234
            }),
        )]);
        let (r, browsers) = call(resolve(
            &entry(Some("billing"), Target::default()),
            &s,
            &defaults(),
        ));
        assert!(browsers);
        assert_eq!(r.callback_url.as_str(), "http://127.0.0.1:1/call");
        assert_eq!(
            r.recheck_url.unwrap().as_str(),
            "http://127.0.0.1:1/recheck"
        );
        assert_eq!(r.settings.timeout_ms, 1234);
    }

    #[test]
    fn its_own_urls_win_one_by_one_and_unregistered_topics_get_the_defaults() {
        let s = snapshot(&[(
            "billing",
            serde_json::json!({
                "callback_url": "http://127.0.0.1:1/call",
                "recheck_url": "http://127.0.0.1:1/recheck"
            }),
        )]);
        let own = Target {
            callback_url: Some("http://127.0.0.1:2/mine".into()),
            recheck_url: None,
            browsers: false,
        };
        let (r, browsers) = call(resolve(
            &entry(Some("billing"), own.clone()),
            &s,
            &defaults(),
        ));
        assert!(!browsers);
        assert_eq!(r.callback_url.as_str(), "http://127.0.0.1:2/mine");
        assert_eq!(
            r.recheck_url.unwrap().as_str(),
            "http://127.0.0.1:1/recheck",
            "the topic's recheck stays"
        );
        let (r, _) = call(resolve(&entry(None, own), &s, &defaults()));
        assert_eq!(r.recheck_url, None);
        assert_eq!(
            r.settings.timeout_ms,
            crate::callback::topic::DEFAULT_TIMEOUT_MS
        );
    }

    #[test]
    fn callback_only_without_a_callback_is_broken() {
        let s = snapshot(&[]);
        let lost = Target {
            browsers: false,
            ..Target::default()
        };
        let r = resolve(&entry(Some("billing"), lost), &s, &defaults());
        match r {
            Resolution::Broken(why) => assert!(why.contains("billing"), "{why}"),
            other => panic!("{other:?}"),
        }
        let bad = Target {
            callback_url: Some("not a url".into()),
            ..Target::default()
        };
        assert!(matches!(
            resolve(&entry(None, bad), &s, &defaults()),
            Resolution::Broken(_)
        ));
    }
}
