//! Which users have something held, kept in memory.
//!
//! Every session that starts asks the store for what is held for its user
//! ([`Store::claim_held`](crate::schedule::store::Store::claim_held)), and
//! nearly always nothing is. This set answers that on the caller's thread,
//! where a read of the tables would take a snapshot on the blocking pool
//! (a thread wake-up there and back, per connect).
//!
//! It is a superset of the users with a committed held key: a user is
//! added when the writer puts a held key of theirs (before the commit: a
//! claim that sees them early waits in the writer's queue behind it), and
//! removed only after a commit that left them none (so no claim misses a
//! committed hold). A failed commit leaves extra users, never missing ones.
//!
//! Bound: [`EmbeddedConfig::held_users`](super::EmbeddedConfig::held_users)
//! users. Policy when full: overflow: the set is dropped and every question
//! is answered "unknown" (the caller reads the tables, as without it) until
//! a commit leaves nothing held at all; tracking then starts again, empty.

use std::collections::HashSet;

use parking_lot::Mutex;
use redb::ReadableTable;

use super::io;
use super::layout::prefix_end;
use crate::schedule::store::StoreError;

/// The users with something held (a superset), or overflowed.
#[derive(Debug)]
pub(super) struct HeldUsers {
    inner: Mutex<Inner>,
    cap: usize,
}

#[derive(Debug, Default)]
struct Inner {
    users: HashSet<Box<str>>,
    overflowed: bool,
}

impl HeldUsers {
    pub(super) fn new(cap: usize) -> HeldUsers {
        HeldUsers {
            inner: Mutex::new(Inner::default()),
            cap,
        }
    }

    /// Whether `user` may have something held: `None` when the set has
    /// overflowed and only the tables know.
    pub(super) fn may_hold(&self, user: &str) -> Option<bool> {
        let inner = self.inner.lock();
        if inner.overflowed {
            None
        } else {
            Some(inner.users.contains(user))
        }
    }

    /// A held key of `user` is being written.
    pub(super) fn add(&self, user: &str) {
        let mut inner = self.inner.lock();
        if inner.overflowed || inner.users.contains(user) {
            return;
        }
        if inner.users.len() >= self.cap {
            inner.overflowed = true;
            inner.users = HashSet::new();
            tracing::warn!(
                users = self.cap,
                "more users have held notifications than the store tracks in memory; \
                 each connect reads the store until nothing is held"
            );
            return;
        }
        inner.users.insert(user.into());
    }

    /// A commit left these users no held key.
    pub(super) fn remove(&self, users: &[String]) {
        if users.is_empty() {
            return;
        }
        let mut inner = self.inner.lock();
        for u in users {
            inner.users.remove(u.as_str());
        }
    }

    /// Whether the set has overflowed.
    pub(super) fn overflowed(&self) -> bool {
        self.inner.lock().overflowed
    }

    /// A commit left nothing held at all: track again, from empty.
    pub(super) fn nothing_held(&self) {
        let mut inner = self.inner.lock();
        inner.users.clear();
        inner.overflowed = false;
    }

    /// Learn the users of the held index `held` (keys `user ++ 0 ++ ...`;
    /// a user id has no control character), one seek per user.
    pub(super) fn load(
        &self,
        held: &impl ReadableTable<&'static [u8], ()>,
    ) -> Result<usize, StoreError> {
        let mut from: Vec<u8> = Vec::new();
        let mut n = 0;
        loop {
            let next = {
                let mut range = held.range(from.as_slice()..).map_err(io)?;
                match range.next() {
                    Some(kv) => kv.map_err(io)?.0.value().to_vec(),
                    None => return Ok(n),
                }
            };
            let end = next.iter().position(|&b| b == 0).unwrap_or(next.len());
            let user = String::from_utf8_lossy(&next[..end]);
            self.add(&user);
            n += 1;
            from = prefix_end(&next[..(end + 1).min(next.len())]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_is_known_from_the_first_hold_until_removed() {
        let h = HeldUsers::new(10);
        assert_eq!(h.may_hold("alice"), Some(false));
        h.add("alice");
        h.add("alice");
        assert_eq!(h.may_hold("alice"), Some(true));
        assert_eq!(h.may_hold("bob"), Some(false));
        h.remove(&["alice".to_owned()]);
        assert_eq!(h.may_hold("alice"), Some(false));
    }

    #[test]
    fn past_the_bound_every_answer_is_unknown_until_nothing_is_held() {
        let h = HeldUsers::new(2);
        h.add("a");
        h.add("b");
        assert!(!h.overflowed());
        h.add("c");
        assert!(h.overflowed());
        assert_eq!(h.may_hold("a"), None);
        assert_eq!(h.may_hold("zed"), None);
        h.add("d");
        h.remove(&["a".to_owned()]);
        assert_eq!(h.may_hold("a"), None);
        h.nothing_held();
        assert_eq!(h.may_hold("a"), Some(false));
        h.add("a");
        assert_eq!(h.may_hold("a"), Some(true));
    }
}
