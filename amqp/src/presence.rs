//! Presence reports, edge to root: which users came online or went offline
//! on an edge. Pure: the AMQP form of a [`PresenceReport`], no I/O.
//!
//! An edge publishes a report to the fanout exchange `herald.presence` on
//! every root, at most every `edge.presence_batch_ms` while users come and
//! go, and an empty one every `edge.presence_heartbeat_ms` (a heartbeat).
//! Routers record presence per user as `edge:boot` members and an edge as
//! alive while its heartbeats keep coming, so the users of an edge that
//! died (or restarted: a new boot id) stop counting as online.
//!
//! | AMQP | type | meaning |
//! |---|---|---|
//! | property `type` | `herald.presence` | a presence report |
//! | header `edge` | string | the edge's id |
//! | header `boot` | string | random per edge process start |
//! | header `online` | array of strings | users whose first session started |
//! | header `offline` | array of strings | users whose last session ended |
//! | body | empty | |

use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldArray, FieldTable, LongString};

pub use herald_engine::schedule::presence::PresenceReport;

use crate::envelope::Rejection;

/// The `type` property of a presence report.
pub const PRESENCE_TYPE: &str = "herald.presence";
/// Default name of the presence exchange (fanout) on every root.
pub const PRESENCE_EXCHANGE: &str = "herald.presence";
/// Most users in one report (each of `online`, `offline`).
pub const MAX_REPORT_USERS: usize = 10_000;

/// Header names.
pub mod headers {
    /// The edge id.
    pub const EDGE: &str = "edge";
    /// The edge process's boot id.
    pub const BOOT: &str = "boot";
    /// Users who came online.
    pub const ONLINE: &str = "online";
    /// Users who went offline.
    pub const OFFLINE: &str = "offline";
}

/// The AMQP form of a [`PresenceReport`]: bring this trait into scope to
/// call `report.to_amqp()` and `PresenceReport::from_amqp(..)`.
pub trait PresenceAmqp: Sized {
    /// The properties of the report's message (its body is empty).
    fn to_amqp(&self) -> BasicProperties;
    /// Read a report; a message that is not one is refused with the field
    /// at fault.
    fn from_amqp(properties: &BasicProperties) -> Result<Self, Rejection>;
}

impl PresenceAmqp for PresenceReport {
    fn to_amqp(&self) -> BasicProperties {
        let text = |s: &str| AMQPValue::LongString(LongString::from(s));
        let array = |v: &[String]| {
            AMQPValue::FieldArray(FieldArray::from(
                v.iter().map(|s| text(s)).collect::<Vec<_>>(),
            ))
        };
        let mut table = FieldTable::default();
        table.insert(headers::EDGE.into(), text(&self.edge));
        table.insert(headers::BOOT.into(), text(&self.boot));
        table.insert(headers::ONLINE.into(), array(&self.online));
        table.insert(headers::OFFLINE.into(), array(&self.offline));
        BasicProperties::default()
            .with_type(PRESENCE_TYPE.into())
            .with_headers(table)
    }

    fn from_amqp(properties: &BasicProperties) -> Result<PresenceReport, Rejection> {
        let kind = properties.kind().as_ref().map(|k| k.as_str());
        if kind != Some(PRESENCE_TYPE) {
            return Err(Rejection::invalid(
                "type",
                format!("a presence report has type {PRESENCE_TYPE}"),
            ));
        }
        let empty = FieldTable::default();
        let table = properties.headers().as_ref().unwrap_or(&empty);
        let get = |name: &str| table.inner().get(name);
        let text = |field: &'static str| -> Result<String, Rejection> {
            match get(field) {
                Some(v) => crate::envelope::string(field, v),
                None => Err(Rejection::invalid(field, "the header is required")),
            }
        };
        let edge = text(headers::EDGE)?;
        let boot = text(headers::BOOT)?;
        if edge.is_empty() || boot.is_empty() || edge.contains(':') {
            return Err(Rejection::invalid(
                headers::EDGE,
                "edge and boot must be non-empty, and the edge id has no colon",
            ));
        }
        let online =
            crate::envelope::list(headers::ONLINE, get(headers::ONLINE), MAX_REPORT_USERS)?;
        let offline =
            crate::envelope::list(headers::OFFLINE, get(headers::OFFLINE), MAX_REPORT_USERS)?;
        Ok(PresenceReport {
            edge,
            boot,
            online,
            offline,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_round_trips() {
        let r = PresenceReport {
            edge: "edge-1".into(),
            boot: "9f2c".into(),
            online: vec!["alice".into(), "bob".into()],
            offline: vec!["carol".into()],
        };
        assert_eq!(PresenceReport::from_amqp(&r.to_amqp()), Ok(r));
    }

    #[test]
    fn other_messages_are_refused_by_field() {
        let e = PresenceReport::from_amqp(&BasicProperties::default()).unwrap_err();
        assert_eq!(e.field, "type");
        let no_edge = BasicProperties::default().with_type(PRESENCE_TYPE.into());
        assert_eq!(
            PresenceReport::from_amqp(&no_edge).unwrap_err().field,
            "edge"
        );
        let colon = PresenceReport {
            edge: "a:b".into(),
            boot: "1".into(),
            ..Default::default()
        };
        assert_eq!(
            PresenceReport::from_amqp(&colon.to_amqp())
                .unwrap_err()
                .field,
            "edge"
        );
    }
}
