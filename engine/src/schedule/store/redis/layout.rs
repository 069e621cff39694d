//! What the Redis store writes: key names, the shard of an id, and an
//! entry's stored value (a small header the scripts read and update in
//! place, then the [`record`](crate::schedule::record)). Pure: no I/O.
//!
//! The header layout (big-endian) is shared with the Lua scripts
//! (`lua/prelude.lua`); change both together and bump [`LAYOUT`].
//!
//! ```text
//! 0  u8  layout (1)         | 1 u8 state code    | 2 u32 attempts
//! 6  u64 updated_ms         | 14 u64 deadline (lease_until when firing,
//!                           |    hold expiry when held, next attempt when
//!                           |    retry_wait, else 0)
//! 22 u64 due_ms             | 30 u64 accepted_ms | 38 u16 header length
//! 40 u8  flags: 1 topic, 2 user, 4 callback phase (browsers done),
//!               8 * step (0 none, 1 rechecking, 2 calling; while firing),
//!               32 has calls
//! 41 [u16 len, topic bytes] [u16 len, user bytes (when-online user)]
//!    [u32 calls (flag 32): the header's last 4 bytes]
//! .. record bytes (entries that keep their body: live ones and dead
//!    letters; another final entry is its header)
//! ```
//!
//! The callback states (codes 6 to 8), flag bits 4 to 16, and `calls`
//! (flag 32) were added without a new layout: a header of layout 1
//! written before them reads the same (calls 0), so stored data needs no
//! migration. New entries are stored with calls; one stored before gets
//! them on its first counted attempt (`put_calls` in `lua/prelude.lua`
//! writes its value again, its header 4 bytes longer). A build older than
//! them must not share a prefix with one that runs callbacks (it cannot
//! read those states, and it drops flag 32); see `docs/redis-store.md`.
//!
//! `due_ms` is big-endian so that the 8 bytes sort like the number: list
//! and held-by-user indexes are score-0 sorted sets whose members are
//! `due(8 bytes) ++ id`, ordered byte-wise, which is (due, id) order.

use bytes::{Buf, BufMut, Bytes};

use crate::schedule::entry::{Entry, Millis, Phase, State, Status, Step};
use crate::schedule::record;
use crate::schedule::store::StoreError;

/// The header layout this code writes and reads.
pub(super) const LAYOUT: u8 = 1;
/// Bytes of the header before the topic and user.
const FIXED: usize = 41;
const HAS_TOPIC: u8 = 1;
const HAS_USER: u8 = 2;
/// The browser part was delivered: claimed, the entry has phase
/// `Callback`.
const CALLBACK: u8 = 4;
/// The step (of a firing callback) is `flags / STEP_UNIT % 4`.
const STEP_UNIT: u8 = 8;
/// The header ends with `calls` (u32).
const HAS_CALLS: u8 = 32;

/// Redis sorted-set scores are doubles: every time is clamped to the
/// largest integer a double holds exactly (2^53 - 1 ms, the year 287,396).
pub(super) const MAX_MS: Millis = (1 << 53) - 1;

/// `ms` as a Redis score argument.
pub(super) fn score(ms: Millis) -> Millis {
    ms.min(MAX_MS)
}

/// The shard of an entry id (or of a user id, for its hint): FNV-1a 64 of
/// its bytes, modulo the shard count. Part of the stored layout: every
/// router sharing a Redis must compute the same shard.
pub(super) fn shard_of(key: &str, shards: u16) -> u16 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % u64::from(shards.max(1))) as u16
}

/// Key names under one prefix.
#[derive(Debug, Clone)]
pub(super) struct Keys {
    prefix: String,
    shards: u16,
}

impl Keys {
    pub(super) fn new(prefix: &str, shards: u16) -> Keys {
        Keys {
            prefix: prefix.to_owned(),
            shards,
        }
    }

    pub(super) fn shards(&self) -> u16 {
        self.shards
    }

    pub(super) fn shard(&self, id: &str) -> u16 {
        shard_of(id, self.shards)
    }

    /// A shard's key base, `<prefix>:{<shard>}`: every key of the shard is
    /// this plus a suffix, and the hash tag puts them in one slot.
    pub(super) fn base(&self, shard: u16) -> String {
        format!("{}:{{{shard}}}", self.prefix)
    }

    /// What an entry's key in `shard` is before its id: `<base>:e:`.
    pub(super) fn entry_prefix(&self, shard: u16) -> String {
        format!("{}:e:", self.base(shard))
    }

    pub(super) fn due(&self, shard: u16) -> String {
        format!("{}:due", self.base(shard))
    }

    pub(super) fn lease(&self, shard: u16) -> String {
        format!("{}:lease", self.base(shard))
    }

    /// The retry_wait entries of `shard` by fire time (they are in `due`
    /// too; counts subtract these).
    pub(super) fn retry_wait(&self, shard: u16) -> String {
        format!("{}:rw", self.base(shard))
    }

    pub(super) fn hold_expiry(&self, shard: u16) -> String {
        format!("{}:hx", self.base(shard))
    }

    pub(super) fn finished(&self, shard: u16) -> String {
        format!("{}:fin", self.base(shard))
    }

    /// The entries held in `shard` for `user`.
    pub(super) fn held(&self, shard: u16, user: &str) -> String {
        format!("{}:h:{user}", self.base(shard))
    }

    /// The shards that may hold entries for `user`: a hash in the user's
    /// own shard, field `<shard>:<token>` per hold.
    pub(super) fn hint(&self, user: &str) -> String {
        format!("{}:hint:{user}", self.base(self.shard(user)))
    }

    /// The attempt log of entry `id` (a list of records) in `shard`.
    pub(super) fn attempts(&self, shard: u16, id: &str) -> String {
        format!("{}:a:{id}", self.base(shard))
    }

    /// The idempotency ledger's key of `id` (`lua/ids.lua` builds it
    /// from the shard's base the same way).
    pub(super) fn id(&self, id: &str) -> String {
        format!("{}:id:{id}", self.base(self.shard(id)))
    }

    /// The key recording the shard count and layout of the prefix.
    pub(super) fn meta(&self) -> String {
        format!("{}:meta", self.prefix)
    }
}

/// The list a (state, topic) filter reads: `state` or `state:topic`,
/// appended to `<base>:l:`.
/// Firing and retry_wait entries are listed in scheduled's sets (`listed`
/// in `prelude.lua`): a page of any of them reads those and keeps the
/// state asked.
pub(super) fn list_suffix(state: State, topic: Option<&str>) -> String {
    let state = match state {
        State::Firing | State::RetryWait => State::Scheduled,
        other => other,
    };
    match topic {
        Some(t) => format!("{}:{t}", state.as_str()),
        None => state.as_str().to_owned(),
    }
}

/// An index member: `due(8 bytes, big-endian) ++ id`.
pub(super) fn member(due_ms: Millis, id: &str) -> Vec<u8> {
    let mut m = Vec::with_capacity(8 + id.len());
    m.put_u64(due_ms);
    m.put_slice(id.as_bytes());
    m
}

/// The (due, id) of an index member.
pub(super) fn split_member(m: &[u8]) -> Option<(Millis, String)> {
    if m.len() < 8 {
        return None;
    }
    let due = u64::from_be_bytes(m[..8].try_into().ok()?);
    let id = String::from_utf8(m[8..].to_vec()).ok()?;
    Some((due, id))
}

/// The stored value of a new entry: scheduled at `now`, attempts and calls
/// 0.
pub(super) fn encode_new(entry: &Entry, now: Millis) -> Vec<u8> {
    let topic = entry.notification.topic.as_deref();
    let user = entry.online_user();
    let record = record::encode(entry);
    let len = FIXED + topic.map_or(0, |t| 2 + t.len()) + user.map_or(0, |u| 2 + u.len()) + 4;
    let mut out = Vec::with_capacity(len + record.len());
    out.put_u8(LAYOUT);
    out.put_u8(State::Scheduled.code());
    out.put_u32(0);
    out.put_u64(score(now));
    out.put_u64(0);
    out.put_u64(score(entry.due_ms));
    out.put_u64(entry.accepted_ms);
    // Topics and user ids are validated far shorter than 64 KiB.
    out.put_u16(len as u16);
    out.put_u8(
        if topic.is_some() { HAS_TOPIC } else { 0 }
            | if user.is_some() { HAS_USER } else { 0 }
            | HAS_CALLS,
    );
    for s in [topic, user].into_iter().flatten() {
        out.put_u16(s.len() as u16);
        out.put_slice(s.as_bytes());
    }
    out.put_u32(0);
    debug_assert_eq!(out.len(), len);
    out.put_slice(&record);
    out
}

/// A decoded header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Header {
    pub(super) state: State,
    pub(super) attempts: u32,
    pub(super) updated_ms: Millis,
    pub(super) deadline_ms: Millis,
    pub(super) due_ms: Millis,
    pub(super) accepted_ms: Millis,
    /// Where the record starts.
    pub(super) len: usize,
    pub(super) topic: Option<String>,
    pub(super) user: Option<String>,
    /// The browser part was delivered (phase `Callback` when claimed).
    pub(super) callback: bool,
    /// The step of a firing callback.
    pub(super) step: Option<Step>,
    /// Callback attempts counted under its retry policy (0 in a header
    /// stored before they were kept).
    pub(super) calls: u32,
}

impl Header {
    /// Decode the header at the start of `raw` (a header, or a whole value).
    pub(super) fn decode(raw: &[u8]) -> Result<Header, String> {
        if raw.len() < FIXED {
            return Err(format!("header of {} bytes, need {FIXED}", raw.len()));
        }
        let mut r = raw;
        let layout = r.get_u8();
        if layout != LAYOUT {
            return Err(format!(
                "layout {layout} is not supported (this build reads {LAYOUT})"
            ));
        }
        let code = r.get_u8();
        let state = State::from_code(code).ok_or_else(|| format!("unknown state code {code}"))?;
        let attempts = r.get_u32();
        let updated_ms = r.get_u64();
        let deadline_ms = r.get_u64();
        let due_ms = r.get_u64();
        let accepted_ms = r.get_u64();
        let len = r.get_u16() as usize;
        let flags = r.get_u8();
        if len > raw.len() {
            return Err(format!("header length {len} past the {} bytes", raw.len()));
        }
        let mut r = &raw[FIXED..len];
        let mut text = |what: &str| -> Result<String, String> {
            if r.remaining() < 2 {
                return Err(format!("header truncated in {what}"));
            }
            let n = r.get_u16() as usize;
            if r.remaining() < n {
                return Err(format!("header truncated in {what}"));
            }
            let s =
                String::from_utf8(r[..n].to_vec()).map_err(|_| format!("{what} is not UTF-8"))?;
            r.advance(n);
            Ok(s)
        };
        let topic = (flags & HAS_TOPIC != 0)
            .then(|| text("topic"))
            .transpose()?;
        let user = (flags & HAS_USER != 0).then(|| text("user")).transpose()?;
        // The header's last 4 bytes, where the scripts read them.
        let calls = if flags & HAS_CALLS != 0 {
            if r.remaining() < 4 {
                return Err("header truncated in calls".into());
            }
            u32::from_be_bytes(raw[len - 4..len].try_into().map_err(|_| "calls")?)
        } else {
            0
        };
        let callback = flags & CALLBACK != 0;
        let step = Step::from_code(flags / STEP_UNIT % 4);
        Ok(Header {
            state,
            attempts,
            updated_ms,
            deadline_ms,
            due_ms,
            accepted_ms,
            len,
            topic,
            user,
            callback,
            step,
            calls,
        })
    }

    pub(super) fn status(&self, id: &str) -> Status {
        Status {
            id: id.to_owned(),
            state: self.state,
            topic: self.topic.clone(),
            accepted_ms: self.accepted_ms,
            due_ms: self.due_ms,
            updated_ms: self.updated_ms,
            attempts: self.attempts,
            step: self.step.filter(|_| self.state == State::Firing),
            next_attempt_ms: (self.state == State::RetryWait).then_some(self.deadline_ms),
        }
    }
}

/// The status in a stored header.
pub(super) fn status(id: &str, raw: &[u8]) -> Result<Status, StoreError> {
    Header::decode(raw)
        .map(|h| h.status(id))
        .map_err(|reason| corrupt(id, reason))
}

/// The entry in a whole stored value (live: header and record), with the
/// stored attempts and calls, and phase `Callback` when its header says
/// its browser part was delivered.
pub(super) fn entry(id: &str, raw: Bytes) -> Result<Entry, StoreError> {
    let h = Header::decode(&raw).map_err(|reason| corrupt(id, reason))?;
    let mut e = record::decode(raw.slice(h.len..)).map_err(|e| corrupt(id, e.to_string()))?;
    if e.notification.id != id {
        return Err(corrupt(
            id,
            format!("the record is for id {:?}", e.notification.id),
        ));
    }
    e.attempts = h.attempts;
    e.calls = h.calls;
    e.phase = if h.callback {
        Phase::Callback
    } else {
        Phase::Deliver
    };
    Ok(e)
}

fn corrupt(id: &str, reason: String) -> StoreError {
    StoreError::Corrupt {
        id: id.to_owned(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use herald_protocol::envelope::{Notification, Scope};

    use super::*;

    fn sample(topic: Option<&str>, when_online: bool) -> Entry {
        Entry {
            notification: Notification {
                id: "n-1".into(),
                scope: Scope::User,
                users: vec!["alice".into()],
                clients: vec![],
                sites: vec![],
                event: "e".into(),
                topic: topic.map(str::to_owned),
                content_type: "text/plain".into(),
                payload: Bytes::from_static(b"hello"),
                payload_is_utf8: true,
                ttl: Some(Duration::from_secs(3)),
                encodings: Default::default(),
                accepted: Default::default(),
            },
            due_ms: 1_800_000_000_500,
            accepted_ms: 1_800_000_000_000,
            when_online,
            attempts: 7,
            phase: Phase::Deliver,
            fire_ms: 0,
            calls: 0,
            target: Default::default(),
        }
    }

    #[test]
    fn a_new_value_has_a_scheduled_header_then_the_record() {
        for (topic, online) in [(None, false), (Some("billing"), true), (Some(""), false)] {
            let e = sample(topic, online);
            let raw = encode_new(&e, 1_800_000_000_001);
            let h = Header::decode(&raw).unwrap();
            assert_eq!(h.state, State::Scheduled);
            assert_eq!(h.attempts, 0);
            assert_eq!(h.updated_ms, 1_800_000_000_001);
            assert_eq!(h.due_ms, e.due_ms);
            assert_eq!(h.accepted_ms, e.accepted_ms);
            assert_eq!(h.topic.as_deref(), topic);
            assert_eq!(h.user.as_deref(), online.then_some("alice"));
            let back = entry("n-1", Bytes::from(raw.clone())).unwrap();
            assert_eq!(back, Entry { attempts: 0, ..e });
            // The header alone (a final entry) still decodes to a status.
            let s = status("n-1", &raw[..h.len]).unwrap();
            assert_eq!((s.due_ms, s.topic.as_deref()), (h.due_ms, topic));
        }
    }

    #[test]
    fn flags_carry_the_phase_and_the_step_without_a_new_layout() {
        let e = sample(Some("t"), true);
        let mut raw = encode_new(&e, 1);
        let h = Header::decode(&raw).unwrap();
        assert!(!h.callback && h.step.is_none(), "a new entry has neither");
        let flags = raw[40];
        assert_eq!(flags, HAS_TOPIC | HAS_USER | HAS_CALLS);
        // What the scripts write: firing, browsers done, calling.
        raw[1] = State::Firing.code();
        raw[40] = flags | CALLBACK | (2 * STEP_UNIT);
        let h = Header::decode(&raw).unwrap();
        assert!(h.callback);
        assert_eq!(h.step, Some(Step::Calling));
        assert_eq!(h.status("n-1").step, Some(Step::Calling));
        assert_eq!(
            (h.topic.as_deref(), h.user.as_deref()),
            (Some("t"), Some("alice"))
        );
        assert_eq!(
            entry("n-1", Bytes::from(raw.clone())).unwrap().phase,
            Phase::Callback
        );
        // Out of firing, a step left in the flags is not reported.
        raw[1] = State::RetryWait.code();
        raw[14..22].copy_from_slice(&77u64.to_be_bytes());
        let s = status("n-1", &raw).unwrap();
        assert_eq!(
            (s.state, s.step, s.next_attempt_ms),
            (State::RetryWait, None, Some(77))
        );
    }

    /// `raw` as layout 1 stored it before calls were kept: no flag 32, the
    /// header 4 bytes shorter.
    fn without_calls(raw: &[u8]) -> Vec<u8> {
        let len = usize::from(u16::from_be_bytes([raw[38], raw[39]]));
        let mut old = raw[..len - 4].to_vec();
        old[38..40].copy_from_slice(&((len - 4) as u16).to_be_bytes());
        old[40] &= !HAS_CALLS;
        old.extend_from_slice(&raw[len..]);
        old
    }

    #[test]
    fn calls_end_the_header_and_an_older_header_has_none() {
        let mut e = sample(Some("t"), true);
        e.target = crate::schedule::entry::Target {
            callback_url: Some("https://cb.example/".into()),
            recheck_url: None,
            browsers: false,
        };
        let mut raw = encode_new(&e, 1);
        let h = Header::decode(&raw).unwrap();
        assert_eq!(h.calls, 0);
        // What the scripts write: the header's last 4 bytes.
        raw[h.len - 4..h.len].copy_from_slice(&7u32.to_be_bytes());
        let back = entry("n-1", Bytes::from(raw.clone())).unwrap();
        assert_eq!(
            back,
            Entry {
                attempts: 0,
                calls: 7,
                ..e.clone()
            },
            "calls from the header, the target from the record"
        );
        let old = without_calls(&raw);
        let h = Header::decode(&old).unwrap();
        assert_eq!(
            (h.calls, h.len, h.topic.as_deref(), h.user.as_deref()),
            (0, FIXED + 2 + 1 + 2 + 5, Some("t"), Some("alice"))
        );
        let back = entry("n-1", Bytes::from(old)).unwrap();
        assert_eq!(back, Entry { attempts: 0, ..e });
        // A flag without room for calls is an error, not a panic.
        let mut short = encode_new(&sample(None, false), 1);
        short[38..40].copy_from_slice(&(FIXED as u16).to_be_bytes());
        assert!(Header::decode(&short).unwrap_err().contains("calls"));
    }

    #[test]
    fn due_bytes_sort_like_due_times() {
        let mut ms = [
            member(1_800_000_000_000, "b"),
            member(5, "z"),
            member(1_800_000_000_000, "a"),
            member(256, "a"),
        ];
        ms.sort();
        let back: Vec<_> = ms.iter().map(|m| split_member(m).unwrap()).collect();
        assert_eq!(
            back,
            vec![
                (5, "z".into()),
                (256, "a".into()),
                (1_800_000_000_000, "a".into()),
                (1_800_000_000_000, "b".into()),
            ]
        );
    }

    #[test]
    fn bad_headers_are_errors_not_panics() {
        let raw = encode_new(&sample(Some("t"), true), 1);
        for cut in 0..50 {
            let _ = Header::decode(&raw[..cut.min(raw.len())]);
        }
        let mut other = raw.clone();
        other[0] = 9;
        assert!(Header::decode(&other).unwrap_err().contains("layout 9"));
        assert!(matches!(
            entry("other-id", Bytes::from(raw)),
            Err(StoreError::Corrupt { .. })
        ));
    }

    #[test]
    fn shards_are_stable_and_spread() {
        // Part of the stored layout: these values must never change.
        assert_eq!(shard_of("", 16), (0xcbf2_9ce4_8422_2325u64 % 16) as u16);
        let mut per = [0u32; 16];
        for i in 0..16_000 {
            per[shard_of(&format!("id-{i}"), 16) as usize] += 1;
        }
        assert!(per.iter().all(|&n| (800..1200).contains(&n)), "{per:?}");
        let keys = Keys::new("herald", 16);
        assert_eq!(keys.base(7), "herald:{7}");
        assert!(keys.hint("alice").starts_with("herald:{"));
    }
}
