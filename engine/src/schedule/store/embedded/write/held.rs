//! The held transitions' bookkeeping: claiming what is held for a user
//! coming online, and what a transaction leaves unheld for the in-memory
//! [`HeldUsers`](super::super::held_users::HeldUsers). Same transaction,
//! same tables as the rest of [`Tables`].

use redb::ReadableTable;

use super::*;

/// What a transaction leaves unheld (see [`Tables::unheld`]).
#[derive(Debug, Default)]
pub(in super::super) struct Unheld {
    pub(in super::super) users: Vec<String>,
    pub(in super::super) nothing_held: bool,
}

impl Tables<'_> {
    /// Claim what is held for `user`, at most `limit` (in memory, as
    /// [`Tables::claim_due`]: they stay held in the tables until settled).
    /// Entries claimed already (a call before this one took them, and
    /// they are not settled yet) are passed over without counting toward
    /// `limit`, so a user with more held than one call takes gets the next
    /// ones from the next call, not the same ones again (which read as
    /// "nothing left" and left the rest held while the user was online).
    pub(in super::super) fn claim_held(
        &mut self,
        user: &str,
        now: Millis,
        limit: usize,
        lease_ms: u64,
    ) -> R<Vec<Entry>> {
        let claims = self.claims;
        let mut claims = claims.lock();
        let prefix = held_prefix(user);
        let end = prefix_end(&prefix);
        let deadline = now.saturating_add(lease_ms);
        let mut out = Vec::new();
        // Pages of `limit` keys, each starting past the last one read.
        let mut from = prefix.clone();
        loop {
            let mut ids = Vec::new();
            let mut read = 0usize;
            let mut last = None;
            for kv in self
                .held
                .range(from.as_slice()..end.as_slice())
                .map_err(io)?
            {
                if read >= limit {
                    break;
                }
                read += 1;
                let (k, _) = kv.map_err(io)?;
                let key = k.value();
                if let Some((_, id)) = id_after(key, prefix.len()) {
                    ids.push(id.to_owned());
                }
                last = Some(key.to_vec());
            }
            for id in ids {
                if out.len() >= limit {
                    break;
                }
                let Some((seq, s)) = self.get(&id)? else {
                    continue;
                };
                if s.header.state != State::Held || claims.get(seq).is_some() {
                    continue;
                }
                if let Some(e) = first_claim(&mut claims, seq, id, &s, now, deadline) {
                    out.push(e);
                }
            }
            match last {
                Some(mut key) if out.len() < limit && read >= limit => {
                    // The smallest key after it.
                    key.push(0);
                    from = key;
                }
                _ => return Ok(out),
            }
        }
    }

    /// What this transaction leaves unheld, to tell [`HeldUsers`] once it
    /// commits: the users whose held keys it removed and who have none
    /// left, and (when the set has overflowed) whether nothing is held at
    /// all. Only a removed held key can change either, so a transaction
    /// that removed none reads nothing. Call after
    /// [`Tables::flush_counters`].
    pub(in super::super) fn unheld(&mut self) -> R<Unheld> {
        let mut users = std::mem::take(&mut self.unheld_users);
        if users.is_empty() {
            return Ok(Unheld::default());
        }
        if self.held_users.overflowed() {
            let held = self
                .counts
                .get(State::Held.code())
                .map_err(io)?
                .map_or(0, |v| v.value());
            return Ok(Unheld {
                users: Vec::new(),
                nothing_held: held == 0,
            });
        }
        users.sort_unstable();
        users.dedup();
        let mut none_left = Vec::new();
        for user in users {
            let prefix = held_prefix(&user);
            let end = prefix_end(&prefix);
            let mut range = self
                .held
                .range(prefix.as_slice()..end.as_slice())
                .map_err(io)?;
            if range.next().is_none() {
                none_left.push(user);
            }
        }
        Ok(Unheld {
            users: none_left,
            nothing_held: false,
        })
    }
}
