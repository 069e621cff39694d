//! Notification ids as the duplicate windows remember them: a 128-bit
//! keyed hash of the id (SipHash under two keys drawn at random per
//! process), so a window holds 16 bytes an id whatever its length. Two
//! different ids take the same hash with a probability of 2^-128; a
//! million ids held make a false "duplicate" about as likely as 2^-88, and
//! nobody can aim for one without the keys. Used by the publish API's
//! ledger ([`crate::publish::ledger`]) and the gateway's delivery filter.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};

/// An id as remembered: its 128-bit keyed hash.
pub type IdKey = (u64, u64);

/// A map or set keyed by [`IdKey`]s, hashed by passing their bits on.
pub type IdHashing = BuildHasherDefault<IdKeyHasher>;

/// Makes [`IdKey`]s, under keys of its own.
#[derive(Debug, Default)]
pub struct IdHasher([RandomState; 2]);

impl IdHasher {
    /// A hasher under fresh random keys.
    pub fn new() -> Self {
        IdHasher([RandomState::new(), RandomState::new()])
    }

    /// `id`'s key.
    pub fn key(&self, id: &str) -> IdKey {
        let [a, b] = &self.0;
        (a.hash_one(id), b.hash_one(id))
    }
}

/// Hashes an [`IdKey`] for a table by passing its bits on: they are
/// already a keyed hash.
#[derive(Debug, Default)]
pub struct IdKeyHasher(u64);

impl Hasher for IdKeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 ^= n;
    }
}
