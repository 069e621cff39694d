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
//! | header `seq` | integer, optional | the report's number in its edge process (1, 2, ...): routers derive presence event ids from it |
//! | header `online` | array of strings | users whose first session started |
//! | header `offline` | array of strings | users whose last session ended |
//! | header `detail` | string `json-v1`, optional | the body holds the sessions of the users whose sessions changed |
//! | header `mailbox-ttl-ms` | integer, optional | how long the edge keeps a mailbox after its last session left |
//! | header `sync-part`, `sync-parts` | integers, optional | the report is part `sync-part` of `sync-parts` of a snapshot (below) |
//! | header `missed-since` | table, optional | user → integer: for users of the detail whose session came from a mailbox this edge does not have, when it last heard from it (ms since the Unix epoch, edge's clock; below) |
//! | body | empty, or with `detail` the JSON below | |
//!
//! The detail (since this version) says, for every user whose sessions on
//! the edge changed during the batch, the sessions they have there as the
//! report is made, one entry per site:
//!
//! ```json
//! [{"user":"alice","mailboxes":[{"site":"","client":"acme",
//!   "since_ms":1764162000123,"sessions":{"websocket":2,"xhr_streaming":1}}]}]
//! ```
//!
//! (`mailboxes` empty: no session left there.) `missed-since` says, for a
//! user of the detail, since when they may have missed notifications: a
//! session that resumed here from another edge's mailbox (its edge died,
//! or HAProxy moved it) with the client's `offline-ms` (how long ago it
//! last heard from that session). Routers routing by edge re-send to this
//! edge what they sent elsewhere for the user since then
//! ([`crate::routing`]). It is a header, not a field of the detail, so
//! that routers of an older version (whose detail reader refuses unknown
//! fields) read the report as before; an edge keeps it under
//! [`MAX_MISSED_BYTES`] per report by splitting a batch into several
//! reports. The detail travels in the body, not
//! in a header, because a content header must fit one AMQP frame
//! (`frame_max`, 128 KiB on RabbitMQ by default) while a body spans
//! frames; it is bounded by [`MAX_DETAIL_BYTES`], [`MAX_REPORT_USERS`]
//! entries, `MAX_SITES_PER_USER` sites per user and `MAX_TRANSPORTS`
//! transport names per site. Compatibility both ways: a router of an older
//! version reads the headers and ignores the body; a report without
//! `detail` (an older edge) is read with an empty detail, its `online`
//! users counting with one session of transport `unknown`.
//!
//! A **snapshot** lists every mailbox the edge holds (a mailbox whose
//! sessions all left, kept for `mailbox.ttl_secs`, with `sessions` empty),
//! in parts of at most [`MAX_REPORT_USERS`] users with consecutive `seq`,
//! with `online` and `offline` empty. An edge sends one when a root link
//! comes up and every `edge.presence_sync_ms`, to
//! [`sync_name`]`(presence_exchange)`, which only the routers routing by
//! edge read (`routing.mode = "targeted"`, [`crate::routing`]).

use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldArray, FieldTable, LongString};

use std::collections::BTreeMap;

use herald_engine::presence::view::{
    MAX_SITES_PER_USER, MAX_TRANSPORTS, MailboxSessions, UserSessions, is_transport_name,
};
pub use herald_engine::presence::{PresenceReport, SyncPart};
use serde::{Deserialize, Serialize};

use crate::envelope::Rejection;

/// The `type` property of a presence report.
pub const PRESENCE_TYPE: &str = "herald.presence";
/// Default name of the presence exchange (fanout) on every root.
pub const PRESENCE_EXCHANGE: &str = "herald.presence";
/// Most users in one report (each of `online`, `offline`, and the detail).
pub const MAX_REPORT_USERS: usize = 10_000;
/// Largest detail body.
pub const MAX_DETAIL_BYTES: usize = 8 * 1024 * 1024;
/// Most bytes of user ids in one report's `missed-since` header (a
/// content header must fit one AMQP frame: 128 KiB on RabbitMQ by
/// default, with the other headers).
pub const MAX_MISSED_BYTES: usize = 64 * 1024;
/// The value of the `detail` header this version writes and reads.
pub const DETAIL_JSON_V1: &str = "json-v1";
/// Longest user, site or client id in the detail (bytes).
const MAX_ID: usize = 256;

/// Header names.
pub mod headers {
    /// The edge id.
    pub const EDGE: &str = "edge";
    /// The edge process's boot id.
    pub const BOOT: &str = "boot";
    /// The report's number in its edge process.
    pub const SEQ: &str = "seq";
    /// Users who came online.
    pub const ONLINE: &str = "online";
    /// Users who went offline.
    pub const OFFLINE: &str = "offline";
    /// The body's format, when it carries the detail.
    pub const DETAIL: &str = "detail";
    /// How long the edge keeps a mailbox after its last session (ms).
    pub const MAILBOX_TTL_MS: &str = "mailbox-ttl-ms";
    /// A snapshot's part number, from 1.
    pub const SYNC_PART: &str = "sync-part";
    /// How many parts the snapshot has.
    pub const SYNC_PARTS: &str = "sync-parts";
    /// Users of the detail who may have missed notifications since then.
    pub const MISSED_SINCE: &str = "missed-since";
}

/// The exchange an edge sends its snapshots to, beside
/// `presence_exchange`: `<presence_exchange>.sync` (fanout). Only the
/// routers routing by edge bind to it ([`crate::routing`]); the presence
/// book never reads a snapshot.
pub fn sync_name(presence_exchange: &str) -> String {
    format!("{presence_exchange}.sync")
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireUser {
    user: String,
    mailboxes: Vec<WireMailbox>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireMailbox {
    site: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    client: Option<String>,
    since_ms: u64,
    sessions: BTreeMap<String, u32>,
}

/// The AMQP form of a [`PresenceReport`]: bring this trait into scope to
/// call `report.to_amqp()` and `PresenceReport::from_amqp(..)`.
pub trait PresenceAmqp: Sized {
    /// The properties of the report's message.
    fn to_amqp(&self) -> BasicProperties;
    /// The report's body: the detail, or empty when there is none.
    fn body(&self) -> Vec<u8>;
    /// Read a report from its properties and body; a message that is not
    /// one is refused with the field at fault.
    fn from_amqp(properties: &BasicProperties, body: &[u8]) -> Result<Self, Rejection>;
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
        if self.seq > 0 {
            table.insert(
                headers::SEQ.into(),
                AMQPValue::LongLongInt(i64::try_from(self.seq).unwrap_or(i64::MAX)),
            );
        }
        table.insert(headers::ONLINE.into(), array(&self.online));
        table.insert(headers::OFFLINE.into(), array(&self.offline));
        if !self.detail.is_empty() {
            table.insert(headers::DETAIL.into(), text(DETAIL_JSON_V1));
        }
        let number = |n: u64| AMQPValue::LongLongInt(i64::try_from(n).unwrap_or(i64::MAX));
        if self.mailbox_ttl_ms > 0 {
            table.insert(headers::MAILBOX_TTL_MS.into(), number(self.mailbox_ttl_ms));
        }
        if let Some(sync) = self.sync {
            table.insert(headers::SYNC_PART.into(), number(sync.part.into()));
            table.insert(headers::SYNC_PARTS.into(), number(sync.parts.into()));
        }
        let mut missed = FieldTable::default();
        // An AMQP table's keys are short strings (255 bytes at most): a
        // longer user id goes without (its catch-up starts from its
        // sessions' start). A snapshot never carries it: routers catch up
        // on what a snapshot shows them anew whatever it says, and its
        // 10,000 users could overflow a header.
        let detail = if self.sync.is_some() {
            &[][..]
        } else {
            &self.detail[..]
        };
        for u in detail
            .iter()
            .filter(|u| u.missed_since_ms > 0 && u.user.len() <= 255)
        {
            missed.insert(u.user.as_str().into(), number(u.missed_since_ms));
        }
        if !missed.inner().is_empty() {
            table.insert(headers::MISSED_SINCE.into(), AMQPValue::FieldTable(missed));
        }
        BasicProperties::default()
            .with_type(PRESENCE_TYPE.into())
            .with_headers(table)
    }

    fn body(&self) -> Vec<u8> {
        if self.detail.is_empty() {
            return Vec::new();
        }
        let wire: Vec<WireUser> = self
            .detail
            .iter()
            .map(|u| WireUser {
                user: u.user.clone(),
                mailboxes: u
                    .mailboxes
                    .iter()
                    .map(|m| WireMailbox {
                        site: m.site.clone(),
                        client: m.client.clone(),
                        since_ms: m.since_ms,
                        sessions: m.by_transport.clone(),
                    })
                    .collect(),
            })
            .collect();
        serde_json::to_vec(&wire).unwrap_or_default()
    }

    fn from_amqp(properties: &BasicProperties, body: &[u8]) -> Result<PresenceReport, Rejection> {
        if let Some(rejection) = crate::envelope::unread_headers(properties) {
            return Err(rejection);
        }
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
        let seq = match get(headers::SEQ) {
            None => 0,
            Some(v) => seq_of(v).ok_or_else(|| {
                Rejection::invalid(headers::SEQ, "the report number is a non-negative integer")
            })?,
        };
        let online =
            crate::envelope::list(headers::ONLINE, get(headers::ONLINE), MAX_REPORT_USERS)?;
        let offline =
            crate::envelope::list(headers::OFFLINE, get(headers::OFFLINE), MAX_REPORT_USERS)?;
        let mut detail = match get(headers::DETAIL) {
            None => Vec::new(),
            Some(v) => {
                let format = crate::envelope::string(headers::DETAIL, v)?;
                if format != DETAIL_JSON_V1 {
                    return Err(Rejection::invalid(
                        headers::DETAIL,
                        format!("unknown format {format:?}: this router reads {DETAIL_JSON_V1}"),
                    ));
                }
                read_detail(body)?
            }
        };
        let number = |field: &'static str| match get(field) {
            None => Ok(None),
            Some(v) => seq_of(v)
                .map(Some)
                .ok_or_else(|| Rejection::invalid(field, "the header is a non-negative integer")),
        };
        if let Some(v) = get(headers::MISSED_SINCE) {
            read_missed(v, &mut detail)?;
        }
        let mailbox_ttl_ms = number(headers::MAILBOX_TTL_MS)?.unwrap_or(0);
        let sync = match (number(headers::SYNC_PART)?, number(headers::SYNC_PARTS)?) {
            (None, None) => None,
            (Some(part), Some(parts))
                if (1..=parts).contains(&part) && parts <= u64::from(u32::MAX) =>
            {
                Some(SyncPart {
                    part: part as u32,
                    parts: parts as u32,
                })
            }
            _ => {
                return Err(Rejection::invalid(
                    headers::SYNC_PART,
                    "sync-part and sync-parts come together, 1 <= sync-part <= sync-parts",
                ));
            }
        };
        Ok(PresenceReport {
            edge,
            boot,
            seq,
            online,
            offline,
            detail,
            mailbox_ttl_ms,
            sync,
        })
    }
}

/// A `seq` header's value, whatever integer type the sender chose.
fn seq_of(v: &AMQPValue) -> Option<u64> {
    match v {
        AMQPValue::LongLongInt(n) => u64::try_from(*n).ok(),
        AMQPValue::LongInt(n) => u64::try_from(*n).ok(),
        AMQPValue::LongUInt(n) => Some(u64::from(*n)),
        AMQPValue::ShortInt(n) => u64::try_from(*n).ok(),
        AMQPValue::ShortUInt(n) => Some(u64::from(*n)),
        AMQPValue::Timestamp(n) => Some(*n),
        _ => None,
    }
}

/// The `missed-since` header into `detail`: a table of users of the
/// detail to non-negative integers (a user the detail does not name says
/// nothing and is skipped).
fn read_missed(v: &AMQPValue, detail: &mut [UserSessions]) -> Result<(), Rejection> {
    let bad = || {
        Rejection::invalid(
            headers::MISSED_SINCE,
            format!(
                "missed-since is a table of at most {MAX_REPORT_USERS} users to non-negative integers (ms since the Unix epoch)"
            ),
        )
    };
    let AMQPValue::FieldTable(table) = v else {
        return Err(bad());
    };
    if table.inner().len() > MAX_REPORT_USERS {
        return Err(bad());
    }
    let index: std::collections::HashMap<&str, u64> = table
        .inner()
        .iter()
        .map(|(user, ms)| seq_of(ms).map(|ms| (user.as_str(), ms)).ok_or_else(bad))
        .collect::<Result<_, _>>()?;
    for u in detail.iter_mut() {
        if let Some(&ms) = index.get(u.user.as_str()) {
            u.missed_since_ms = ms;
        }
    }
    Ok(())
}

/// `id` is 1 to [`MAX_ID`] bytes without control characters (empty allowed
/// for a site).
fn id_ok(id: &str, empty_ok: bool) -> bool {
    (empty_ok || !id.is_empty()) && id.len() <= MAX_ID && !id.chars().any(char::is_control)
}

/// The detail body, checked against every bound.
fn read_detail(body: &[u8]) -> Result<Vec<UserSessions>, Rejection> {
    if body.len() > MAX_DETAIL_BYTES {
        return Err(Rejection::invalid(
            "body",
            format!("the detail is over {MAX_DETAIL_BYTES} bytes"),
        ));
    }
    let wire: Vec<WireUser> = serde_json::from_slice(body)
        .map_err(|e| Rejection::invalid("body", format!("the detail is not valid: {e}")))?;
    if wire.len() > MAX_REPORT_USERS {
        return Err(Rejection::invalid(
            "body",
            format!("the detail has more than {MAX_REPORT_USERS} users"),
        ));
    }
    wire.into_iter()
        .map(|u| {
            if !id_ok(&u.user, false) || u.mailboxes.len() > MAX_SITES_PER_USER {
                return Err(Rejection::invalid(
                    "body",
                    format!(
                        "a detail entry needs a user of 1 to {MAX_ID} bytes and at most {MAX_SITES_PER_USER} mailboxes"
                    ),
                ));
            }
            let mailboxes = u
                .mailboxes
                .into_iter()
                .map(|m| {
                    let ok = id_ok(&m.site, true)
                        && m.client.as_deref().is_none_or(|c| id_ok(c, false))
                        && m.sessions.len() <= MAX_TRANSPORTS
                        && m.sessions.keys().all(|t| is_transport_name(t));
                    if !ok {
                        return Err(Rejection::invalid(
                            "body",
                            format!(
                                "a mailbox of {:?} has a bad site or client, or more than {MAX_TRANSPORTS} transports, or a bad transport name",
                                u.user
                            ),
                        ));
                    }
                    Ok(MailboxSessions {
                        site: m.site,
                        client: m.client,
                        since_ms: m.since_ms,
                        by_transport: m.sessions,
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(UserSessions {
                user: u.user,
                mailboxes,
                missed_since_ms: 0,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detail() -> Vec<UserSessions> {
        vec![
            UserSessions {
                user: "alice".into(),
                mailboxes: vec![MailboxSessions {
                    site: "".into(),
                    client: Some("acme".into()),
                    since_ms: 1_764_162_000_123,
                    by_transport: [("websocket".to_owned(), 2), ("xhr_streaming".to_owned(), 1)]
                        .into(),
                }],
                missed_since_ms: 1_764_161_990_000,
            },
            UserSessions {
                user: "carol".into(),
                mailboxes: vec![],
                missed_since_ms: 0,
            },
        ]
    }

    fn with_missed(r: &PresenceReport, value: AMQPValue) -> BasicProperties {
        let mut table = r.to_amqp().headers().clone().unwrap_or_default();
        table.insert(headers::MISSED_SINCE.into(), value);
        r.to_amqp().with_headers(table)
    }

    #[test]
    fn missed_since_travels_in_a_header_an_older_router_does_not_read() {
        let r = PresenceReport {
            edge: "edge-1".into(),
            boot: "9f2c".into(),
            seq: 7,
            detail: detail(),
            mailbox_ttl_ms: 300_000,
            ..Default::default()
        };
        let props = r.to_amqp();
        let table = props.headers().as_ref().unwrap().inner();
        let Some(AMQPValue::FieldTable(missed)) = table.get(headers::MISSED_SINCE) else {
            panic!("no missed-since table: {table:?}");
        };
        // Only the users who said so.
        assert_eq!(missed.inner().len(), 1);
        assert_eq!(
            missed.inner().get("alice"),
            Some(&AMQPValue::LongLongInt(1_764_161_990_000))
        );
        // The body is the detail as before, so an older router reads it.
        let wire: Vec<WireUser> = serde_json::from_slice(&r.body()).unwrap();
        assert_eq!(wire.len(), 2);
        // A user the detail does not name is skipped.
        let mut extra = FieldTable::default();
        extra.insert("alice".into(), AMQPValue::LongInt(5));
        extra.insert("zoe".into(), AMQPValue::LongInt(6));
        let read =
            PresenceReport::from_amqp(&with_missed(&r, AMQPValue::FieldTable(extra)), &r.body())
                .unwrap();
        assert_eq!(read.detail[0].missed_since_ms, 5);
        assert_eq!(read.detail[1].missed_since_ms, 0);
        // A snapshot's part never carries it.
        let part = PresenceReport {
            sync: Some(SyncPart { part: 1, parts: 1 }),
            ..r.clone()
        };
        let props = part.to_amqp();
        assert!(
            props
                .headers()
                .as_ref()
                .unwrap()
                .inner()
                .get(headers::MISSED_SINCE)
                .is_none()
        );
    }

    #[test]
    fn a_bad_missed_since_is_refused_naming_it() {
        let r = PresenceReport {
            edge: "edge-1".into(),
            boot: "9f2c".into(),
            detail: detail(),
            ..Default::default()
        };
        let mut negative = FieldTable::default();
        negative.insert("alice".into(), AMQPValue::LongLongInt(-1));
        for bad in [
            AMQPValue::LongString("alice=5".into()),
            AMQPValue::FieldTable(negative),
        ] {
            let err = PresenceReport::from_amqp(&with_missed(&r, bad), &r.body()).unwrap_err();
            assert_eq!(err.field, headers::MISSED_SINCE, "{err:?}");
        }
    }

    #[test]
    fn a_report_round_trips() {
        let r = PresenceReport {
            edge: "edge-1".into(),
            boot: "9f2c".into(),
            seq: 42,
            online: vec!["alice".into(), "bob".into()],
            offline: vec!["carol".into()],
            detail: detail(),
            mailbox_ttl_ms: 300_000,
            sync: None,
        };
        assert_eq!(
            PresenceReport::from_amqp(&r.to_amqp(), &r.body()),
            Ok(r.clone())
        );
        // A snapshot's part, whose users say nothing of what they missed.
        let mut part = PresenceReport {
            sync: Some(SyncPart { part: 2, parts: 3 }),
            ..r
        };
        for u in &mut part.detail {
            u.missed_since_ms = 0;
        }
        assert_eq!(
            PresenceReport::from_amqp(&part.to_amqp(), &part.body()),
            Ok(part)
        );
    }

    #[test]
    fn a_report_of_an_older_edge_has_no_detail_and_its_body_is_not_read() {
        let old = PresenceReport {
            edge: "edge-1".into(),
            boot: "9f2c".into(),
            online: vec!["alice".into()],
            ..Default::default()
        };
        assert!(old.body().is_empty());
        assert!(
            old.to_amqp()
                .headers()
                .as_ref()
                .unwrap()
                .inner()
                .get(headers::DETAIL)
                .is_none()
        );
        // Whatever an older edge's body held, without `detail` it is not read.
        let read = PresenceReport::from_amqp(&old.to_amqp(), b"not json").unwrap();
        assert_eq!(read, old);
    }

    #[test]
    fn a_bad_detail_is_refused_naming_the_body() {
        let r = PresenceReport {
            edge: "edge-1".into(),
            boot: "9f2c".into(),
            detail: detail(),
            ..Default::default()
        };
        let props = r.to_amqp();
        for body in [
            &b"{"[..],
            br#"[{"user":"","mailboxes":[]}]"#,
            br#"[{"user":"a","mailboxes":[{"site":"","since_ms":0,"sessions":{"Web Socket":1}}]}]"#,
        ] {
            assert_eq!(
                PresenceReport::from_amqp(&props, body).unwrap_err().field,
                "body"
            );
        }
    }

    #[test]
    fn a_bad_seq_is_refused_naming_it() {
        let r = PresenceReport {
            edge: "edge-1".into(),
            boot: "9f2c".into(),
            ..Default::default()
        };
        let mut table = r.to_amqp().headers().clone().unwrap();
        table.insert(headers::SEQ.into(), AMQPValue::LongLongInt(-1));
        let props = r.to_amqp().with_headers(table);
        assert_eq!(
            PresenceReport::from_amqp(&props, b"").unwrap_err().field,
            "seq"
        );
    }

    #[test]
    fn other_messages_are_refused_by_field() {
        let e = PresenceReport::from_amqp(&BasicProperties::default(), b"").unwrap_err();
        assert_eq!(e.field, "type");
        let no_edge = BasicProperties::default().with_type(PRESENCE_TYPE.into());
        assert_eq!(
            PresenceReport::from_amqp(&no_edge, b"").unwrap_err().field,
            "edge"
        );
        let colon = PresenceReport {
            edge: "a:b".into(),
            boot: "1".into(),
            ..Default::default()
        };
        assert_eq!(
            PresenceReport::from_amqp(&colon.to_amqp(), b"")
                .unwrap_err()
                .field,
            "edge"
        );
    }
}
