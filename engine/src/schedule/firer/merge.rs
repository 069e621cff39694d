//! Merging: the `when-online` entries of a merging topic for one user in a
//! claimed batch become one notification, whose payload is a JSON array of
//! their payloads (only JSON payloads merge).
//!
//! Pure: entries in, [`ToSend`]s out, no I/O.

use std::collections::HashMap;

use bytes::{BufMut, BytesMut};
use herald_protocol::envelope::Notification;

use crate::schedule::entry::Entry;
use crate::schedule::sender::Resolved;

/// One send: an entry, and the ids of the entries it stands for (several
/// when merged; the entry's own otherwise).
#[derive(Debug)]
pub(super) struct ToSend {
    pub(super) entry: Entry,
    pub(super) ids: Vec<String>,
    /// Its callback, made once the link took it (never merged).
    pub(super) call: Option<Resolved>,
}

impl ToSend {
    /// An entry that stands for itself.
    pub(super) fn one(entry: Entry) -> ToSend {
        let ids = vec![entry.id().to_owned()];
        ToSend {
            entry,
            ids,
            call: None,
        }
    }

    /// An entry that stands for itself and calls out once the link took
    /// it.
    pub(super) fn with_call(entry: Entry, call: Resolved) -> ToSend {
        ToSend {
            call: Some(call),
            ..ToSend::one(entry)
        }
    }
}

/// What [`merge`] made of a batch.
#[derive(Debug)]
pub(super) struct Merged {
    /// The unmerged entries in their order, then one send per group in the
    /// order of each group's first entry.
    pub(super) sends: Vec<ToSend>,
    /// Entries folded into another one (a group of `n` counts `n - 1`).
    pub(super) folded: u64,
}

/// Group the merging `when-online` entries per (user, topic): each group
/// becomes its first entry carrying a JSON array of the payloads.
/// `merges` says whether a topic merges.
pub(super) fn merge(entries: Vec<Entry>, merges: impl Fn(Option<&str>) -> bool) -> Merged {
    let mut sends: Vec<ToSend> = Vec::with_capacity(entries.len());
    let mut groups: HashMap<(String, Option<String>), usize> = HashMap::new();
    let mut members: Vec<Vec<Entry>> = Vec::new();
    for e in entries {
        let topic = e.notification.topic.clone();
        let mergeable = e.when_online
            && e.notification.content_type == "application/json"
            && merges(topic.as_deref());
        match (mergeable, e.online_user()) {
            (true, Some(user)) => {
                let key = (user.to_owned(), topic);
                match groups.get(&key) {
                    Some(&slot) => members[slot].push(e),
                    None => {
                        groups.insert(key, members.len());
                        members.push(vec![e]);
                    }
                }
            }
            _ => sends.push(ToSend::one(e)),
        }
    }
    let mut folded = 0;
    for group in members {
        let ids: Vec<String> = group.iter().map(|e| e.id().to_owned()).collect();
        if group.len() == 1 {
            let entry = group.into_iter().next().expect("one");
            sends.push(ToSend {
                entry,
                ids,
                call: None,
            });
            continue;
        }
        folded += group.len() as u64 - 1;
        sends.push(ToSend {
            entry: merged(group),
            ids,
            call: None,
        });
    }
    Merged { sends, folded }
}

/// One notification standing for `group` (same user and topic, JSON
/// payloads, due order): the first entry's envelope with the payloads as a
/// JSON array.
fn merged(group: Vec<Entry>) -> Entry {
    let size: usize = group.iter().map(|e| e.notification.payload.len() + 1).sum();
    let mut payload = BytesMut::with_capacity(size + 2);
    payload.put_u8(b'[');
    for (i, e) in group.iter().enumerate() {
        if i > 0 {
            payload.put_u8(b',');
        }
        payload.put_slice(&e.notification.payload);
    }
    payload.put_u8(b']');
    let mut first = group.into_iter().next().expect("a group has a first entry");
    first.notification = Notification {
        payload: payload.freeze(),
        encodings: Default::default(),
        accepted: Default::default(),
        ..first.notification
    };
    first
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::schedule::firer::sample::entry;

    /// A `when-online` JSON entry for `user` on `topic`.
    fn online(id: &str, user: &str, topic: Option<&str>, payload: &'static str) -> Entry {
        let mut e = entry(id, user, 1);
        e.when_online = true;
        e.notification.topic = topic.map(str::to_owned);
        e.notification.content_type = "application/json".into();
        e.notification.payload = Bytes::from_static(payload.as_bytes());
        e
    }

    fn all(_: Option<&str>) -> bool {
        true
    }

    fn shape(m: &Merged) -> Vec<(&str, Vec<&str>, &[u8])> {
        m.sends
            .iter()
            .map(|s| {
                (
                    s.entry.id(),
                    s.ids.iter().map(String::as_str).collect(),
                    &s.entry.notification.payload[..],
                )
            })
            .collect()
    }

    #[test]
    fn one_user_and_topic_become_one_send_with_a_json_array() {
        let m = merge(
            vec![
                online("a1", "alice", Some("t"), "1"),
                online("b1", "bob", Some("t"), "{}"),
                online("a2", "alice", Some("t"), "[2]"),
                online("a3", "alice", Some("other"), "3"),
            ],
            all,
        );
        assert_eq!(
            shape(&m),
            [
                ("a1", vec!["a1", "a2"], &b"[1,[2]]"[..]),
                ("b1", vec!["b1"], b"{}"),
                ("a3", vec!["a3"], b"3"),
            ]
        );
        assert_eq!(m.folded, 1);
    }

    #[test]
    fn what_does_not_merge_goes_first_in_its_order() {
        let mut text = online("t1", "alice", None, "x");
        text.notification.content_type = "text/plain".into();
        let mut scheduled = online("s1", "alice", None, "{}");
        scheduled.when_online = false;
        let m = merge(
            vec![
                online("a1", "alice", None, "1"),
                text,
                online("a2", "alice", None, "2"),
                scheduled,
                online("n1", "alice", Some("never"), "3"),
            ],
            |topic| topic != Some("never"),
        );
        assert_eq!(
            shape(&m),
            [
                ("t1", vec!["t1"], &b"x"[..]),
                ("s1", vec!["s1"], b"{}"),
                ("n1", vec!["n1"], b"3"),
                ("a1", vec!["a1", "a2"], b"[1,2]"),
            ]
        );
        assert_eq!(m.folded, 1);
    }
}
