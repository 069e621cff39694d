//! Entries for the firer's unit tests.

use bytes::Bytes;
use herald_protocol::envelope::{Encodings, Notification, Scope};

use crate::schedule::entry::{Entry, Phase};

/// A scheduled text entry for `user`, due at 1,000, on its `attempts`th
/// claim.
pub(crate) fn entry(id: &str, user: &str, attempts: u32) -> Entry {
    Entry {
        notification: Notification {
            id: id.into(),
            scope: Scope::User,
            users: vec![user.into()],
            clients: vec![],
            sites: vec![],
            event: "e".into(),
            topic: None,
            content_type: "text/plain".into(),
            payload: Bytes::from_static(b"x"),
            payload_is_utf8: true,
            ttl: None,
            encodings: Encodings::default(),
            accepted: Default::default(),
        },
        due_ms: 1_000,
        accepted_ms: 0,
        when_online: false,
        attempts,
        phase: Phase::Deliver,
        fire_ms: 0,
        calls: 0,
        target: Default::default(),
    }
}
