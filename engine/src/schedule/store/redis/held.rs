//! Held entries and the per-user hint.
//!
//! An entry is held in its own shard (sharded by id), so a user's held
//! entries may sit in any shard. So that a user coming online does not cost
//! a request to every shard, each user has a *hint* in their own shard: a
//! hash whose fields `<shard>:<token>` name the shards that may hold entries
//! for them, one field per hold call (`token` is random, 64 bits).
//!
//! - [`Store::hold`](crate::schedule::store::Store::hold): read the
//!   entries' users; write `<s>:<token>` into each user's hint
//!   (acknowledged) before running the hold script in shard `s`, which
//!   holds the entries and adds `token` to `ht:<user>` in the same atomic
//!   step. Fields for which the script held nothing are removed again.
//! - `claim_held(user)`: read the hint; claim from the shards it names (one
//!   script call when it names one shard; with several, a peek across them
//!   first so the earliest (due, id) come first). A script that leaves
//!   `h:<user>` empty hands back (and deletes) the tokens in `ht:<user>`;
//!   exactly those fields are then removed from the hint. `cancel` and
//!   `expire` do the same when they empty `h:<user>`.
//!
//! **A held entry is never lost.** An entry held in shard `s` for `u` was
//! put there by a hold script with some token `t`, and the field `s:t` was
//! written before that script ran. The field is removed only after a script
//! found `h:u` empty in `s` with `t` in `ht:u`; `t` entered `ht:u` in the
//! same atomic step that held the entry, so the entry had been held and had
//! left `h:u` again before its field went. Holding it again means a new
//! hold call, with its own field. Fields are never overwritten (one per
//! token), so a slow hold racing a claim keeps its field.
//!
//! **A stale hint is harmless**: it costs one script call that finds
//! nothing (and cleans up what it can). The one leak is a router that dies
//! between writing a field and running its hold script: the field stays
//! (the entry is still firing and comes back after its lease), costing
//! that user one extra call per `claim_held`. Across Redis Cluster nodes
//! the hint and the hold are on different nodes: with `appendfsync
//! everysec` a node crash can lose the hint write but keep the hold; such
//! an entry is found only by `expire`. Use `appendfsync always` with
//! when-online entries (`docs/redis-store.md`).

use std::collections::{BTreeMap, BTreeSet};

use futures_util::future::try_join_all;
use redis::Value;

use super::RedisStore;
use super::layout::{Header, score};
use super::merge::{Resume, merge};
use super::reply::{array, blob, groups, num, text, unexpected};
use crate::schedule::entry::{Entry, Millis, State};
use crate::schedule::store::StoreError;

impl RedisStore {
    /// Remove hint fields of `user`.
    pub(super) async fn unhint(&self, user: &str, fields: Vec<String>) -> Result<(), StoreError> {
        if fields.is_empty() {
            return Ok(());
        }
        let mut cmd = redis::cmd("HDEL");
        cmd.arg(self.keys.hint(user)).arg(fields);
        self.query::<i64>(&cmd).await.map(drop)
    }

    pub(super) async fn hold_all(
        &self,
        ids: Vec<String>,
        expires: Millis,
        now: Millis,
    ) -> Result<(), StoreError> {
        // Whose entries are these? Only firing entries with a user can be held.
        let mut targets: BTreeMap<u16, Vec<(String, String)>> = BTreeMap::new();
        let headers = self.headers_of(&ids).await?;
        for (id, h) in headers {
            if let Some(Header {
                state: State::Firing,
                user: Some(user),
                ..
            }) = h
            {
                targets
                    .entry(self.keys.shard(&id))
                    .or_default()
                    .push((id, user));
            }
        }
        if targets.is_empty() {
            return Ok(());
        }
        let token = format!("{:016x}", rand::random::<u64>());
        // 1. The hint fields, before anything is held.
        let mut hints: BTreeMap<&str, BTreeSet<u16>> = BTreeMap::new();
        for (&s, list) in &targets {
            for (_, user) in list {
                hints.entry(user).or_default().insert(s);
            }
        }
        let field = |s: u16| format!("{s}:{token}");
        try_join_all(hints.iter().map(|(user, shards)| {
            let mut cmd = redis::cmd("HSET");
            cmd.arg(self.keys.hint(user));
            for &s in shards {
                cmd.arg(field(s)).arg(1);
            }
            async move { self.query::<i64>(&cmd).await }
        }))
        .await?;
        // 2. Hold.
        let held = try_join_all(targets.iter().map(|(&s, list)| {
            let mut args = vec![
                num(score(expires)),
                num(score(now)),
                token.clone().into_bytes(),
            ];
            args.extend(list.iter().map(|(id, _)| id.clone().into_bytes()));
            async move {
                let users = array(self.run(&self.scripts.hold, s, args).await?)?;
                let users = users
                    .into_iter()
                    .map(text)
                    .collect::<Result<BTreeSet<_>, _>>()?;
                Ok::<_, StoreError>((s, users))
            }
        }))
        .await?;
        // 3. Fields for which nothing was held go again.
        let mut stale: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (s, users) in &held {
            for (_, user) in &targets[s] {
                if !users.contains(user.as_str()) {
                    stale.entry(user).or_default().push(field(*s));
                }
            }
        }
        try_join_all(stale.into_iter().map(|(user, mut fields)| {
            fields.dedup();
            self.unhint(user, fields)
        }))
        .await?;
        Ok(())
    }

    pub(super) async fn claim_held_all(
        &self,
        user: &str,
        now: Millis,
        limit: usize,
        lease_ms: u64,
    ) -> Result<Vec<Entry>, StoreError> {
        let mut cmd = redis::cmd("HKEYS");
        cmd.arg(self.keys.hint(user));
        let fields: Vec<String> = self.query(&cmd).await?;
        let shards: Vec<u16> = fields
            .iter()
            .filter_map(|f| f.split_once(':').and_then(|(s, _)| s.parse().ok()))
            .collect::<BTreeSet<u16>>()
            .into_iter()
            .collect();
        if shards.is_empty() {
            return Ok(Vec::new());
        }
        let now = score(now);
        let until = score(now.saturating_add(lease_ms));
        // Which members to claim where: with one shard, its first `limit`
        // (the script picks them); with several, the earliest across them.
        let mut picks: BTreeMap<u16, Vec<Vec<u8>>> =
            shards.iter().map(|&s| (s, Vec::new())).collect();
        let single = shards.len() == 1;
        if !single && limit > 0 {
            let merged = merge(shards.len(), limit, false, |r: Resume<Vec<u8>>| {
                let mut cmd = redis::cmd("ZRANGE");
                cmd.arg(self.keys.held(shards[r.stream], user))
                    .arg("-")
                    .arg("+")
                    .arg("BYLEX")
                    .arg("LIMIT")
                    .arg(r.offset)
                    .arg(r.count);
                async move {
                    let ms: Vec<Vec<u8>> = self.query(&cmd).await?;
                    Ok(ms.into_iter().map(|m| (m, ())).collect())
                }
            })
            .await?;
            for (stream, m, ()) in merged.items {
                picks.entry(shards[stream]).or_default().push(m);
            }
        }
        let answers =
            try_join_all(picks.into_iter().map(|(s, members)| {
                let n = if single { limit } else { 0 };
                let mut args = vec![
                    user.as_bytes().to_vec(),
                    num(now),
                    num(until),
                    num(n as u64),
                ];
                args.extend(members);
                async move {
                    Ok::<_, StoreError>((s, self.run(&self.scripts.claim_held, s, args).await?))
                }
            }))
            .await?;
        let mut got = Vec::new();
        let mut done = Vec::new();
        for (s, answer) in answers {
            let [tokens, pairs] =
                <[Value; 2]>::try_from(array(answer)?).map_err(|_| unexpected("claim_held"))?;
            for t in array(tokens)? {
                done.push(format!("{s}:{}", text(t)?));
            }
            for [id, value] in groups(array(pairs)?, "claim_held")? {
                got.extend(self.take_claimed(&text(id)?, blob(value)?));
            }
        }
        self.unhint(user, done).await?;
        got.sort_by(|a, b| (a.due_ms, a.id()).cmp(&(b.due_ms, b.id())));
        Ok(got)
    }
}
