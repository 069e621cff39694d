//! Presence in Redis, for the distributed routers: what edges report
//! ([`PresenceBook`]), who is online ([`Presence`]), and the presence API's
//! answers ([`PresenceView`]), shared by every router.
//!
//! ```text
//! <p>:pr:<user>          SET of "<edge>:<boot>": the edge processes the user
//!                        has a session on; expires 7 days after the user
//!                        last came online
//! <p>:prd:<user>         HASH "<edge>:<boot>" -> JSON [MailboxSessions]: the
//!                        user's sessions there (site, client, since,
//!                        by transport), from the reports' detail; expires
//!                        7 days after its last write
//! <p>:{pc}:c:<client>    HASH "<edge>:<boot>\n<user>" -> sessions: the
//!                        company's users online per edge process; expires
//!                        7 days after its last write
//! <p>:{pc}:names         ZSET of companies (score 0: name order, for pages)
//!                        with a hash above; expires like them
//! <p>:edge:<edge>        the edge's current boot id; expires `edge_ttl` after
//!                        its last report (a heartbeat comes every 10 s by
//!                        default)
//! <p>:edge-seen:<edge>   the same boot id, kept 7 days: which boot is the
//!                        edge's latest, after its liveness key expired
//! <p>:procs              SET of "<edge>:<boot>": every edge process that
//!                        reported, for the sweep; expires 7 days after
//!                        the last report
//! <p>:pu:<edge>:<boot>   SET of users with a session on that process, for
//!                        the sweep; expires 7 days after its last write
//! ```
//!
//! Online and offline events ([`crate::presence::transition`], stored by [`crate::presence::events`]): a
//! user's set also holds `=online` (no colon, so readers skip it) while
//! they were last announced online. The script that moves a user's member
//! ([`TRANSITION`]) compares it with whether a member of a live edge
//! process remains, and flips it: a report moves a user between offline
//! and online cluster-wide exactly once, however many roots deliver it.
//! The sweep ([`PresenceBook::sweep`]) takes the users of dead edge
//! processes (popped from their `pu` set, so two routers sweeping share
//! the work) through the same script, leaving their members in place (an
//! edge that comes back with the same boot counts again, as before).
//!
//! A user is online when one of their members names an edge whose key
//! holds that boot: the users of an edge that stopped reporting go offline
//! when its key expires, those of a restarted edge at once (new boot); the
//! presence API counts sessions and companies by the same rule. A member
//! without detail (from an edge of an older version) counts as one session
//! of transport `unknown`. The company keys share a hash tag, so the
//! script that keeps a company's hash and the names in step is atomic on a
//! cluster too. Entries of an edge process that is gone for good (its
//! edge has a newer boot, or was not heard of for 7 days) are removed from
//! a company's hash when the company is read, and expire with the user's
//! keys otherwise.
//!
//! Sites are not recorded for `when-online`: a distributed `when-online`
//! asks whether the user is online anywhere.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use redis::Value;

use crate::presence::PresenceReport;
use crate::presence::transition::{Move, Transition, event_id};
use crate::presence::view::{
    ClientCount, ClientPage, MailboxSessions, PresenceView, UNKNOWN_TRANSPORT, UserPresence,
    ViewFuture, summarize,
};
use crate::presence::{
    Asked, Presence, PresenceBook, PresenceFuture, RecordFuture, SweepFuture, Swept,
};
use crate::schedule::store::StoreError;
use crate::schedule::store::redis::RedisStore;
use crate::schedule::store::redis::conn::{Conn, unavailable};

mod read;

/// Keep a company's hash and the names in step. KEYS: names, hash. ARGV:
/// client, field, sessions (0 removes the field), ttl ms.
const CLIENT_PUT: &str = r"
if tonumber(ARGV[3]) > 0 then
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
  redis.call('ZADD', KEYS[1], 0, ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
else
  redis.call('HDEL', KEYS[2], ARGV[2])
  if redis.call('EXISTS', KEYS[2]) == 0 then
    redis.call('ZREM', KEYS[1], ARGV[1])
  end
end
return 0
";

/// Move a user's member and say whether that moved them between offline
/// and online cluster-wide. KEYS: the user's set. ARGV: `add`, `del` or
/// `none`; the member (`edge:boot`); ttl ms; then the members of edge
/// processes no longer alive. The set's member `=online` (no colon:
/// readers skip it) says the user was last announced online; the script
/// compares it with whether a live member remains and flips it, so a
/// second copy of the same report (or a second router sweeping) finds
/// nothing to flip. Returns 1 (went online), -1 (went offline) or 0.
const TRANSITION: &str = r"
local mark = '=online'
if ARGV[1] == 'add' then
  redis.call('SADD', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
elseif ARGV[1] == 'del' then
  redis.call('SREM', KEYS[1], ARGV[2])
end
local dead = {}
for i = 4, #ARGV do dead[ARGV[i]] = true end
local live = false
for _, m in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if string.find(m, ':', 1, true) and not dead[m] then
    live = true
    break
  end
end
local was = redis.call('SISMEMBER', KEYS[1], mark) == 1
if live and not was then
  redis.call('SADD', KEYS[1], mark)
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 1
elseif was and not live then
  redis.call('SREM', KEYS[1], mark)
  return -1
end
return 0
";

/// What a report leaves of a user on its edge process.
#[derive(Debug, Clone, Copy)]
enum Op<'a> {
    /// A session there (with the detail, when the report has it).
    Add(Option<&'a [MailboxSessions]>),
    /// None there.
    Del,
}

/// Of `set` (a user's members), those of edge processes not alive, but
/// never `reporting` (its edge is being marked alive).
fn dead_members<'a>(
    set: &'a [String],
    reporting: &str,
    alive: &HashMap<String, String>,
) -> Vec<&'a str> {
    set.iter()
        .filter(|m| m.as_str() != reporting)
        .filter(|m| member_dead(m, alive))
        .map(String::as_str)
        .collect()
}

/// The edge of a presence member (`edge:boot`).
fn member_edge(member: &str) -> Option<&str> {
    member.split_once(':').map(|(edge, _)| edge)
}

/// Whether `member` is the boot of its edge that [`RedisPresence::alive`]
/// found running.
fn member_alive(member: &str, alive: &HashMap<String, String>) -> bool {
    member
        .split_once(':')
        .is_some_and(|(edge, boot)| alive.get(edge).map(String::as_str) == Some(boot))
}

/// Whether `member` names an edge boot that is not running (a member that
/// is not `edge:boot` is neither alive nor dead: it is left alone).
fn member_dead(member: &str, alive: &HashMap<String, String>) -> bool {
    member.contains(':') && !member_alive(member, alive)
}

/// How long a user's presence set outlives their last "online".
const USER_TTL_MS: u64 = 7 * 24 * 3600 * 1000;

/// Presence in the store's Redis. Cheap to clone.
#[derive(Clone)]
pub struct RedisPresence {
    conn: Conn,
    prefix: String,
    edge_ttl: Duration,
}

impl std::fmt::Debug for RedisPresence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisPresence")
            .field("prefix", &self.prefix)
            .field("edge_ttl", &self.edge_ttl)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Presence on the same Redis, under the same prefix. An edge counts as
    /// alive for `edge_ttl` after its last report (keep it a few heartbeat
    /// intervals).
    pub fn presence(&self, edge_ttl: Duration) -> RedisPresence {
        RedisPresence {
            conn: self.conn.clone(),
            prefix: self.config.prefix.clone(),
            edge_ttl,
        }
    }
}

impl RedisPresence {
    fn user_key(&self, user: &str) -> String {
        format!("{}:pr:{user}", self.prefix)
    }

    fn edge_key(&self, edge: &str) -> String {
        format!("{}:edge:{edge}", self.prefix)
    }

    fn seen_key(&self, edge: &str) -> String {
        format!("{}:edge-seen:{edge}", self.prefix)
    }

    fn detail_key(&self, user: &str) -> String {
        format!("{}:prd:{user}", self.prefix)
    }

    /// Every edge process that reported (`edge:boot`), for the sweep.
    fn procs_key(&self) -> String {
        format!("{}:procs", self.prefix)
    }

    /// The users with a session on edge process `member`, for the sweep.
    fn proc_users_key(&self, member: &str) -> String {
        format!("{}:pu:{member}", self.prefix)
    }

    fn client_key(&self, client: &str) -> String {
        format!("{}:{{pc}}:c:{client}", self.prefix)
    }

    fn names_key(&self) -> String {
        format!("{}:{{pc}}:names", self.prefix)
    }

    /// Queue the script that sets (or, at 0, removes) `field` of `client`.
    fn client_put(&self, p: &mut redis::Pipeline, client: &str, field: &str, sessions: u64) {
        p.cmd("EVAL")
            .arg(CLIENT_PUT)
            .arg(2)
            .arg(self.names_key())
            .arg(self.client_key(client))
            .arg(client)
            .arg(field)
            .arg(sessions)
            .arg(USER_TTL_MS)
            .ignore();
    }

    /// The current boot of each of `edges` (None: not alive).
    async fn alive<'e>(
        &self,
        conn: &mut Conn,
        edges: impl IntoIterator<Item = &'e str>,
    ) -> Result<HashMap<String, String>, redis::RedisError> {
        let edges: BTreeSet<&str> = edges.into_iter().collect();
        if edges.is_empty() {
            return Ok(HashMap::new());
        }
        let mut p = redis::pipe();
        for edge in &edges {
            p.cmd("GET").arg(self.edge_key(edge));
        }
        let boots: Vec<Option<String>> = p.query_async(conn).await?;
        Ok(edges
            .into_iter()
            .zip(boots)
            .filter_map(|(e, b)| b.map(|b| (e.to_owned(), b)))
            .collect())
    }

    /// Record one report: who is where (the members), and the detail;
    /// returns the users it moved between offline and online
    /// cluster-wide (see [`TRANSITION`]).
    async fn write(
        &self,
        report: &PresenceReport,
        now_ms: u64,
    ) -> Result<Vec<Transition>, redis::RedisError> {
        let member = format!("{}:{}", report.edge, report.boot);
        let mut conn = self.conn.clone();
        // What the report leaves of each user here, in the order the
        // report is applied: offline, online, then the detail (the last
        // word wins).
        let mut ops: BTreeMap<&str, Op<'_>> = BTreeMap::new();
        for user in &report.offline {
            ops.insert(user, Op::Del);
        }
        for user in &report.online {
            ops.insert(user, Op::Add(None));
        }
        for u in &report.detail {
            let op = match u.mailboxes.iter().all(|m| m.total() == 0) {
                true => Op::Del,
                false => Op::Add(Some(&u.mailboxes)),
            };
            ops.insert(&u.user, op);
        }
        // The companies each touched user had here (to take them out of
        // the companies they leave, and name the site and company of an
        // offline event), and where else they are (edge processes no
        // longer alive do not count in the transition).
        let mut before: HashMap<&str, Vec<MailboxSessions>> = HashMap::new();
        let mut members: HashMap<&str, Vec<String>> = HashMap::new();
        if !ops.is_empty() {
            let mut p = redis::pipe();
            for user in ops.keys() {
                p.cmd("HGET").arg(self.detail_key(user)).arg(&member);
                p.cmd("SMEMBERS").arg(self.user_key(user));
            }
            let old: Vec<Value> = p.query_async(&mut conn).await?;
            for (user, pair) in ops.keys().zip(old.chunks(2)) {
                let json: Option<String> =
                    redis::from_redis_value(pair[0].clone()).unwrap_or_default();
                let mailboxes = json
                    .and_then(|j| serde_json::from_str::<Vec<MailboxSessions>>(&j).ok())
                    .unwrap_or_default();
                before.insert(user, mailboxes);
                let set: Vec<String> = redis::from_redis_value(pair[1].clone()).unwrap_or_default();
                members.insert(user, set);
            }
        }
        let alive = self
            .alive(
                &mut conn,
                members
                    .values()
                    .flatten()
                    .filter_map(|m| member_edge(m))
                    .filter(|e| *e != report.edge),
            )
            .await?;
        let mut p = redis::pipe();
        p.cmd("SET")
            .arg(self.edge_key(&report.edge))
            .arg(&report.boot)
            .arg("PX")
            .arg(self.edge_ttl.as_millis() as u64)
            .ignore();
        p.cmd("SET")
            .arg(self.seen_key(&report.edge))
            .arg(&report.boot)
            .arg("PX")
            .arg(USER_TTL_MS)
            .ignore();
        p.cmd("SADD").arg(self.procs_key()).arg(&member).ignore();
        p.cmd("PEXPIRE")
            .arg(self.procs_key())
            .arg(USER_TTL_MS)
            .ignore();
        let users_here = self.proc_users_key(&member);
        for (user, op) in &ops {
            let dead = dead_members(
                members.get(user).map(Vec::as_slice).unwrap_or(&[]),
                &member,
                &alive,
            );
            self.transition(&mut p, user, *op, &member, &dead);
            match op {
                Op::Add(_) => p.cmd("SADD").arg(&users_here).arg(*user).ignore(),
                Op::Del => p.cmd("SREM").arg(&users_here).arg(*user).ignore(),
            };
        }
        if !ops.is_empty() {
            p.cmd("PEXPIRE").arg(&users_here).arg(USER_TTL_MS).ignore();
        }
        for (user, op) in &ops {
            let detail = self.detail_key(user);
            let field = format!("{member}\n{user}");
            let old: BTreeSet<&str> = before
                .get(user)
                .into_iter()
                .flatten()
                .filter_map(|m| m.client.as_deref())
                .collect();
            let mut now: BTreeMap<&str, u64> = BTreeMap::new();
            match op {
                Op::Del => {
                    p.cmd("HDEL").arg(&detail).arg(&member).ignore();
                }
                Op::Add(None) => continue,
                Op::Add(Some(mailboxes)) => {
                    for m in mailboxes.iter() {
                        if let Some(c) = &m.client {
                            *now.entry(c).or_default() += m.total();
                        }
                    }
                    let json = serde_json::to_string(mailboxes).unwrap_or_default();
                    p.cmd("HSET").arg(&detail).arg(&member).arg(json).ignore();
                    p.cmd("PEXPIRE").arg(&detail).arg(USER_TTL_MS).ignore();
                }
            }
            for client in old {
                if !now.contains_key(client) {
                    self.client_put(&mut p, client, &field, 0);
                }
            }
            for (client, sessions) in now {
                self.client_put(&mut p, client, &field, sessions);
            }
        }
        let moved: Vec<i64> = p.query_async(&mut conn).await?;
        let mut out = Vec::new();
        for ((user, op), moved) in ops.iter().zip(moved) {
            let event = match moved {
                1 => Move::Online,
                -1 => Move::Offline,
                _ => continue,
            };
            let (mailbox, at_ms) = match (event, op) {
                (Move::Online, Op::Add(Some(m))) => {
                    let first = m
                        .iter()
                        .filter(|m| m.total() > 0)
                        .min_by_key(|m| m.since_ms);
                    (first.cloned(), first.map_or(now_ms, |m| m.since_ms))
                }
                (Move::Online, _) => (None, now_ms),
                (Move::Offline, _) => (before.get(user).and_then(|b| b.first().cloned()), now_ms),
            };
            let mark = match report.seq {
                0 => format!("t{at_ms}"),
                seq => seq.to_string(),
            };
            out.push(Transition {
                user: (*user).to_owned(),
                site: mailbox.as_ref().map(|m| m.site.clone()).unwrap_or_default(),
                client: mailbox.and_then(|m| m.client),
                event,
                at_ms,
                edge: report.edge.clone(),
                id: event_id(&[&report.edge, &report.boot, &mark, user, event.as_str()]),
            });
        }
        Ok(out)
    }

    /// Queue the [`TRANSITION`] script for `user`: `op` of `member`, with
    /// `dead` (members of edge processes no longer alive) not counting.
    fn transition(
        &self,
        p: &mut redis::Pipeline,
        user: &str,
        op: Op<'_>,
        member: &str,
        dead: &[&str],
    ) {
        let verb = match op {
            Op::Add(_) => "add",
            Op::Del => "del",
        };
        self.transition_verb(p, user, verb, member, dead);
    }

    fn transition_verb(
        &self,
        p: &mut redis::Pipeline,
        user: &str,
        verb: &str,
        member: &str,
        dead: &[&str],
    ) {
        p.cmd("EVAL")
            .arg(TRANSITION)
            .arg(1)
            .arg(self.user_key(user))
            .arg(verb)
            .arg(member)
            .arg(USER_TTL_MS)
            .arg(dead);
    }

    /// The sweep: see [`PresenceBook::sweep`].
    async fn sweep_dead(
        &self,
        now_ms: u64,
        limit: usize,
    ) -> Result<(Vec<Transition>, u64), redis::RedisError> {
        let mut conn = self.conn.clone();
        let procs: Vec<String> = redis::cmd("SMEMBERS")
            .arg(self.procs_key())
            .query_async(&mut conn)
            .await?;
        let alive = self
            .alive(&mut conn, procs.iter().filter_map(|m| member_edge(m)))
            .await?;
        let dead: Vec<&str> = procs
            .iter()
            .filter(|m| member_dead(m, &alive))
            .map(String::as_str)
            .collect();
        let mut out = Vec::new();
        let mut swept = 0u64;
        let mut budget = limit;
        for proc in &dead {
            if budget == 0 {
                break;
            }
            let key = self.proc_users_key(proc);
            let users: Vec<String> = redis::cmd("SPOP")
                .arg(&key)
                .arg(budget)
                .query_async(&mut conn)
                .await?;
            if users.len() < budget {
                // Emptied (SPOP removed the key): forget the process.
                let _: Value = redis::cmd("SREM")
                    .arg(self.procs_key())
                    .arg(*proc)
                    .query_async(&mut conn)
                    .await?;
            }
            if users.is_empty() {
                continue;
            }
            budget -= users.len();
            swept += users.len() as u64;
            let mut p = redis::pipe();
            for user in &users {
                p.cmd("HGET").arg(self.detail_key(user)).arg(*proc);
                self.transition_verb(&mut p, user, "none", proc, &dead);
            }
            let got: Vec<Value> = p.query_async(&mut conn).await?;
            let (edge, boot) = proc.split_once(':').unwrap_or((proc, ""));
            for (user, pair) in users.iter().zip(got.chunks(2)) {
                let moved: i64 = redis::from_redis_value(pair[1].clone()).unwrap_or(0);
                if moved != -1 {
                    continue;
                }
                let json: Option<String> =
                    redis::from_redis_value(pair[0].clone()).unwrap_or_default();
                let mailbox = json
                    .and_then(|j| serde_json::from_str::<Vec<MailboxSessions>>(&j).ok())
                    .and_then(|m| m.into_iter().next());
                out.push(Transition {
                    user: user.clone(),
                    site: mailbox.as_ref().map(|m| m.site.clone()).unwrap_or_default(),
                    client: mailbox.and_then(|m| m.client),
                    event: Move::Offline,
                    at_ms: now_ms,
                    edge: edge.to_owned(),
                    id: event_id(&[edge, boot, "expired", user, Move::Offline.as_str()]),
                });
            }
        }
        Ok((out, swept))
    }
}

impl PresenceBook for RedisPresence {
    fn record<'a>(&'a self, report: &'a PresenceReport, now_ms: u64) -> RecordFuture<'a> {
        Box::pin(async move { self.write(report, now_ms).await.map_err(unavailable) })
    }

    fn sweep(&self, now_ms: u64, limit: usize) -> SweepFuture<'_> {
        Box::pin(async move {
            let (moved, users) = self.sweep_dead(now_ms, limit).await.map_err(unavailable)?;
            if users > 0 {
                tracing::info!(
                    users,
                    offline = moved.len(),
                    "presence sweep: users of dead edge processes"
                );
            }
            Ok(Swept { users, moved })
        })
    }
}
