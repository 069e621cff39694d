//! Online and offline events (the pure part; the queue and the task that
//! stores them are [`crate::presence::events`]) to a topic
//! (`[presence] events_topic`): when a
//! user's first session starts (cluster-wide in distributed mode: no live
//! edge before, one now) or their last one ends, a notification of that
//! topic carries
//!
//! ```json
//! {"user":"alice","site":"","client":"acme","event":"online","at_ms":1795698000123,"edge":"edge1"}
//! ```
//!
//! to the topic's callback, made from the delayed store like any callback
//! of the topic (signed, retried, dead-lettered). The events are
//! callback-only (`browsers: false`): who among the browsers may learn
//! another user's presence is the application's decision.
//!
//! Who decides a transition: standalone, the hub (its mailboxes know a
//! user's first and last session); distributed, the routers' Redis, in the
//! script that records a report (`presence/redis.rs`), so the second
//! copy of a report (one per root) sees no transition. The notification id
//! is derived from the transition ([`event_id`]: edge, boot, the report's
//! sequence or the session's `since_ms`, user, event), so a repeat is a
//! duplicate in the store, not a second call.
//!
//! Bounds, the queue and the metrics: [`crate::presence::events`].

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Online or offline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Move {
    /// The user's first session started (no live session before).
    Online,
    /// The user's last session ended (none left).
    Offline,
}

impl Move {
    /// The event's name (`event` of the payload and of the notification).
    pub fn as_str(self) -> &'static str {
        match self {
            Move::Online => "online",
            Move::Offline => "offline",
        }
    }
}

/// A user came or went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// The user id.
    pub user: String,
    /// The site of the session that came or went (`""`: none).
    pub site: String,
    /// Its client company, when the token named one.
    pub client: Option<String>,
    /// Online or offline.
    pub event: Move,
    /// When (ms since the Unix epoch): a first session's start; the report
    /// or sweep that saw the last one end.
    pub at_ms: u64,
    /// The edge where it happened (`edge.id`, or `standalone`).
    pub edge: String,
    /// The notification id ([`event_id`]).
    pub id: String,
}

/// The id of a transition's notification: `pe-` and 32 hex digits of the
/// SHA-256 of its parts, so every router derives the same id from the same
/// report.
pub fn event_id(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p.as_bytes());
    }
    let digest = h.finalize();
    let mut out = String::with_capacity(35);
    out.push_str("pe-");
    for b in &digest[..16] {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

#[derive(Serialize)]
struct Payload<'a> {
    user: &'a str,
    site: &'a str,
    client: Option<&'a str>,
    event: Move,
    at_ms: u64,
    edge: &'a str,
}

impl Transition {
    /// The JSON the callback receives.
    pub fn payload(&self) -> Vec<u8> {
        serde_json::to_vec(&Payload {
            user: &self.user,
            site: &self.site,
            client: self.client.as_deref(),
            event: self.event,
            at_ms: self.at_ms,
            edge: &self.edge,
        })
        .unwrap_or_default()
    }
}

impl prometheus_client::encoding::EncodeLabelValue for Move {
    fn encode(
        &self,
        encoder: &mut prometheus_client::encoding::LabelValueEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        std::fmt::Write::write_str(encoder, self.as_str())
    }
}

/// A transition for tests: alice of acme came online on edge1.
#[cfg(test)]
pub(crate) fn sample_online() -> Transition {
    Transition {
        user: "alice".into(),
        site: "s1".into(),
        client: Some("acme".into()),
        event: Move::Online,
        at_ms: 1_795_698_000_123,
        edge: "edge1".into(),
        id: event_id(&["edge1", "b", "7", "alice", "online"]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_derived_the_same_way_and_differ_by_part() {
        let a = event_id(&["edge1", "b", "7", "alice", "online"]);
        assert_eq!(a, event_id(&["edge1", "b", "7", "alice", "online"]));
        assert_ne!(a, event_id(&["edge1", "b", "7", "alice", "offline"]));
        assert_ne!(a, event_id(&["edge1", "b", "8", "alice", "online"]));
        // Parts are length-prefixed: moving a boundary changes the id.
        assert_ne!(event_id(&["ab", "c"]), event_id(&["a", "bc"]));
        assert!(a.starts_with("pe-") && a.len() == 35);
        assert!(herald_protocol::envelope::is_valid_name(&a));
    }

    #[test]
    fn the_payload_names_every_field() {
        let v: serde_json::Value = serde_json::from_slice(&sample_online().payload()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"user":"alice","site":"s1","client":"acme","event":"online",
                "at_ms":1_795_698_000_123u64,"edge":"edge1"})
        );
        let mut off = sample_online();
        off.event = Move::Offline;
        off.client = None;
        let v: serde_json::Value = serde_json::from_slice(&off.payload()).unwrap();
        assert_eq!(v["event"], "offline");
        assert_eq!(v["client"], serde_json::Value::Null);
    }
}
