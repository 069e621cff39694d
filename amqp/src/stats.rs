//! Stats reports, edge to root: an edge's figures (sessions, mailboxes,
//! deliveries, per-topic rolling windows) for the cluster-wide
//! `GET /v1/stats` the routers answer. Pure: the AMQP form of a
//! [`Part`], no I/O.
//!
//! An edge publishes a report every `edge.presence_heartbeat_ms` (with its
//! presence heartbeat) to the fanout exchange `<presence_exchange>.stats`
//! (`herald.presence.stats` by default) on every root; the routers of a
//! root share one queue of the same name, and the router that takes a
//! report keeps it in Redis, where every router reads it. A separate
//! message type on a separate exchange: presence reports are not touched.
//!
//! | AMQP | type | meaning |
//! |---|---|---|
//! | property `type` | `herald.stats` | a stats report |
//! | property `content_type` | `application/json` | |
//! | body | JSON, at most [`MAX_REPORT_BYTES`] | a [`Part`] of kind `edge` (docs/stats.md) |

use lapin::BasicProperties;

pub use herald_engine::stats::part::Part;

use crate::envelope::Rejection;

/// The `type` property of a stats report.
pub const STATS_TYPE: &str = "herald.stats";
/// Largest report body: an edge's table (100 topics and `other` by
/// default, about 2 KiB each) with room to spare.
pub const MAX_REPORT_BYTES: usize = 1024 * 1024;

/// The stats exchange (and the routers' queue) that goes with a presence
/// exchange (or queue) name.
pub fn stats_name(presence: &str) -> String {
    format!("{presence}.stats")
}

/// The properties and body of `part`'s report.
pub fn encode(part: &Part) -> (BasicProperties, Vec<u8>) {
    let body = serde_json::to_vec(part).unwrap_or_default();
    let props = BasicProperties::default()
        .with_type(STATS_TYPE.into())
        .with_content_type("application/json".into());
    (props, body)
}

/// Read a report; a message that is not one is refused with the field at
/// fault.
pub fn decode(properties: &BasicProperties, body: &[u8]) -> Result<Part, Rejection> {
    let kind = properties.kind().as_ref().map(|k| k.as_str());
    if kind != Some(STATS_TYPE) {
        return Err(Rejection::invalid(
            "type",
            format!("a stats report has type {STATS_TYPE}"),
        ));
    }
    if body.len() > MAX_REPORT_BYTES {
        return Err(Rejection::invalid(
            "body",
            format!("at most {MAX_REPORT_BYTES} bytes"),
        ));
    }
    let part: Part = serde_json::from_slice(body)
        .map_err(|e| Rejection::invalid("body", format!("not a stats part: {e}")))?;
    part.check()
        .map_err(|(field, message)| Rejection::invalid(field, message))?;
    if part.kind != "edge" {
        return Err(Rejection::invalid(
            "kind",
            "a stats report comes from an edge",
        ));
    }
    Ok(part)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part() -> Part {
        let mut p = Part {
            kind: "edge".into(),
            id: "edge-1".into(),
            at_ms: 1_800_000_000_000,
            mailboxes: 3,
            ..Part::default()
        };
        p.sessions.insert("websocket".into(), 2);
        p.topics.insert("other".into(), Default::default());
        p
    }

    #[test]
    fn a_report_round_trips() {
        let (props, body) = encode(&part());
        assert_eq!(decode(&props, &body), Ok(part()));
    }

    #[test]
    fn bad_reports_are_refused_by_field() {
        let (props, body) = encode(&part());
        assert_eq!(
            decode(&BasicProperties::default(), &body)
                .unwrap_err()
                .field,
            "type"
        );
        assert_eq!(decode(&props, b"{").unwrap_err().field, "body");
        let big = vec![b' '; MAX_REPORT_BYTES + 1];
        assert_eq!(decode(&props, &big).unwrap_err().field, "body");
        let router = Part {
            kind: "router".into(),
            ..part()
        };
        assert_eq!(
            decode(&props, &encode(&router).1).unwrap_err().field,
            "kind"
        );
        let nameless = Part {
            id: String::new(),
            ..part()
        };
        assert_eq!(
            decode(&props, &encode(&nameless).1).unwrap_err().field,
            "id"
        );
    }
}
