//! The HTTP publish API's bodies (pure): a batch of delayed notifications as Herald's
//! `POST /v1/notifications` takes it (`docs/delayed-notifications.md`), and its `202` answer.
//!
//! A batch is a JSON array; each notification names its `id` ([`ids::message_id`]), one user, the
//! event `bench.delayed`, `deliver_at` as integer epoch ms, a JSON payload of the asked size,
//! and a `topic` when given (a callback topic: Herald calls its `callback_url` when due). Ids,
//! user and topic names are the bench's own (letters, digits, `.` and `-`), so the body is
//! written directly, without escaping.

use std::io::Write as _;
use std::ops::Range;

use serde::Deserialize;

use super::plan::{Plan, Users};
use crate::harness::delayed_ids as ids;

/// The `event` of every notification.
pub(crate) const EVENT: &str = "bench.delayed";

/// The JSON array for notifications `seqs` of `plan`, of `topic` when given.
pub(crate) fn batch(
    plan: &Plan,
    seqs: Range<u64>,
    users: &Users,
    payload_bytes: usize,
    topic: Option<&str>,
    callback_only: bool,
) -> Vec<u8> {
    let per = payload_bytes + 120;
    let mut out = Vec::with_capacity(per * seqs.clone().count() + 2);
    out.push(b'[');
    for (i, seq) in seqs.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let _ = write!(
            out,
            r#"{{"id":"{}","users":["{}"],"event":"{EVENT}","deliver_at":{},"#,
            ids::message_id(seq),
            users.user(seq),
            plan.due_ms(seq)
        );
        if let Some(topic) = topic {
            let _ = write!(out, r#""topic":"{topic}","#);
        }
        if callback_only {
            out.extend_from_slice(br#""browsers":false,"#);
        }
        out.extend_from_slice(br#""payload":"#);
        out.extend_from_slice(&crate::harness::amqp::payload(seq, payload_bytes));
        out.push(b'}');
    }
    out.push(b']');
    out
}

/// One entry of `scheduled` in the `202` answer.
#[derive(Debug, Deserialize)]
struct Scheduled {
    id: String,
    due_at_ms: u64,
    duplicate: bool,
}

#[derive(Debug, Deserialize)]
struct Accepted {
    #[serde(default)]
    scheduled: Vec<Scheduled>,
}

/// What a `202` said about a batch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Answer {
    /// Stored now.
    pub(crate) accepted: u64,
    /// Already stored (a resubmitted id): nothing changed.
    pub(crate) duplicates: u64,
    /// `due_at_ms` differs from the `deliver_at` asked (Herald fixes the due time; with no
    /// jitter configured it must be the one asked).
    pub(crate) due_mismatches: u64,
    /// `(seq, due_at_ms)` of each notification, in the answer's order.
    pub(crate) dues: Vec<(u64, u64)>,
}

/// Reads the `202` answer to a batch of `plan`'s notifications `seqs`: every one must be in
/// `scheduled`, in order.
pub(crate) fn answer(body: &[u8], plan: &Plan, seqs: Range<u64>) -> Result<Answer, String> {
    let parsed: Accepted = serde_json::from_slice(body)
        .map_err(|e| format!("202 answer is not the expected JSON: {e}"))?;
    let asked = seqs.clone().count();
    if parsed.scheduled.len() != asked {
        return Err(format!(
            "202 answer schedules {} notifications, the batch had {asked}",
            parsed.scheduled.len()
        ));
    }
    let mut out = Answer {
        dues: Vec::with_capacity(asked),
        ..Answer::default()
    };
    for (s, seq) in parsed.scheduled.iter().zip(seqs) {
        if ids::parse(&s.id) != Some(seq) {
            return Err(format!(
                "202 answer: {:?} where {} was expected",
                s.id,
                ids::message_id(seq)
            ));
        }
        if s.duplicate {
            out.duplicates += 1;
        } else {
            out.accepted += 1;
        }
        if s.due_at_ms != plan.due_ms(seq) {
            out.due_mismatches += 1;
        }
        out.dues.push((seq, s.due_at_ms));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduled::plan::Dues;

    fn plan() -> Plan {
        Plan {
            first: 10,
            count: 3,
            dues: Dues::Steady {
                start_ms: 1_800_000_000_000,
                rate: 1000,
            },
        }
    }

    #[test]
    fn batches_are_json_arrays_of_delayed_notifications() {
        let users = Users::of_workers(&[2]);
        let body = batch(&plan(), 10..13, &users, 200, None, false);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let items = v.as_array().unwrap();
        assert_eq!(items.len(), 3);
        assert_eq!(items[0]["id"], ids::message_id(10).as_str());
        assert_eq!(items[0]["users"], serde_json::json!(["bench-0-0"]));
        assert_eq!(items[1]["users"], serde_json::json!(["bench-0-1"]));
        assert_eq!(items[2]["event"], EVENT);
        assert_eq!(items[2]["deliver_at"], 1_800_000_000_002u64);
        assert_eq!(items[0]["payload"]["seq"], 10);
        let payload = serde_json::to_vec(&items[0]["payload"]).unwrap();
        assert_eq!(payload.len(), 200);
        assert_eq!(batch(&plan(), 10..10, &users, 200, None, false), b"[]");
        assert!(items[0].get("topic").is_none());
        assert!(items[0].get("browsers").is_none());
        let body = batch(&plan(), 10..12, &users, 20, Some("bench.calls"), true);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v[1]["topic"], "bench.calls");
        assert_eq!(v[1]["browsers"], false, "callback-only");
        assert_eq!(v[1]["payload"]["seq"], 11);
    }

    /// Herald's own limits take the bench's notifications as valid.
    #[test]
    fn herald_validates_the_notifications() {
        let users = Users::of_workers(&[2]);
        let body = batch(&plan(), 10..11, &users, 200, Some("bench.calls"), true);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let one = &v[0];
        let n = herald_protocol::envelope::Notification {
            id: one["id"].as_str().unwrap().into(),
            scope: herald_protocol::envelope::Scope::User,
            users: vec![one["users"][0].as_str().unwrap().into()],
            clients: vec![],
            sites: vec![],
            event: one["event"].as_str().unwrap().into(),
            topic: one["topic"].as_str().map(Into::into),
            content_type: "application/json".into(),
            payload: serde_json::to_vec(&one["payload"]).unwrap().into(),
            payload_is_utf8: true,
            ttl: None,
            encodings: Default::default(),
            accepted: Default::default(),
        };
        let mut n = n;
        n.validate(&herald_protocol::envelope::Limits::default())
            .unwrap();
    }

    #[test]
    fn answers_are_checked_against_the_batch() {
        let p = plan();
        let (ten, eleven) = (ids::message_id(10), ids::message_id(11));
        let ok = format!(
            r#"{{"ids":["{ten}","{eleven}"],"scheduled":[
            {{"id":"{ten}","due_at":"x","due_at_ms":1800000000000,"duplicate":false}},
            {{"id":"{eleven}","due_at":"x","due_at_ms":1800000000005,"duplicate":true}}]}}"#
        );
        let ok = ok.as_bytes();
        let a = answer(ok, &p, 10..12).unwrap();
        assert_eq!((a.accepted, a.duplicates, a.due_mismatches), (1, 1, 1));
        assert_eq!(a.dues, [(10, 1_800_000_000_000), (11, 1_800_000_000_005)]);
        assert!(answer(ok, &p, 10..13).unwrap_err().contains("had 3"));
        assert!(
            answer(ok, &p, 11..13)
                .unwrap_err()
                .contains(&format!("{eleven} was expected"))
        );
        assert!(answer(b"{\"ids\":[]}", &p, 10..11).is_err());
        assert!(answer(b"not json", &p, 10..11).is_err());
    }
}
