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
        let mut ids = Vec::new();
        for kv in self
            .held
            .range(prefix.as_slice()..end.as_slice())
            .map_err(io)?
        {
            if ids.len() >= limit {
                break;
            }
            let (k, _) = kv.map_err(io)?;
            if let Some((_, id)) = id_after(k.value(), prefix.len()) {
                ids.push(id.to_owned());
            }
        }
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let Some((seq, s)) = self.get(&id)? else {
                continue;
            };
            if s.header.state != State::Held || claims.get(seq).is_some() {
                continue;
            }
            let deadline = now.saturating_add(lease_ms);
            let Some(e) = first_claim(&mut claims, seq, id, &s, now, deadline) else {
                continue;
            };
            out.push(e);
        }
        Ok(out)
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
