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
//! ```
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

use super::conn::{Conn, unavailable};
use crate::schedule::presence::PresenceReport;
use crate::schedule::presence::view::{
    ClientCount, ClientPage, MailboxSessions, PresenceView, UNKNOWN_TRANSPORT, UserPresence,
    ViewFuture, summarize,
};
use crate::schedule::presence::{Asked, Presence, PresenceBook, PresenceFuture, RecordFuture};
use crate::schedule::store::StoreError;

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

impl super::RedisStore {
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

    /// Record one report: who is where (the members), and the detail.
    async fn write(&self, report: &PresenceReport) -> Result<(), redis::RedisError> {
        let member = format!("{}:{}", report.edge, report.boot);
        let mut conn = self.conn.clone();
        // The companies each touched user had here, to take them out of
        // the companies they leave.
        let touched: Vec<&str> = report
            .offline
            .iter()
            .map(String::as_str)
            .chain(report.detail.iter().map(|u| u.user.as_str()))
            .collect();
        let mut before: HashMap<&str, BTreeSet<String>> = HashMap::new();
        if !touched.is_empty() {
            let mut p = redis::pipe();
            for user in &touched {
                p.cmd("HGET").arg(self.detail_key(user)).arg(&member);
            }
            let old: Vec<Option<String>> = p.query_async(&mut conn).await?;
            for (user, json) in touched.iter().zip(old) {
                let clients = json
                    .and_then(|j| serde_json::from_str::<Vec<MailboxSessions>>(&j).ok())
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|m| m.client);
                before.entry(user).or_default().extend(clients);
            }
        }
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
        for user in &report.offline {
            p.cmd("SREM").arg(self.user_key(user)).arg(&member).ignore();
            p.cmd("HDEL")
                .arg(self.detail_key(user))
                .arg(&member)
                .ignore();
            for client in before.get(user.as_str()).into_iter().flatten() {
                self.client_put(&mut p, client, &format!("{member}\n{user}"), 0);
            }
        }
        for user in &report.online {
            let key = self.user_key(user);
            p.cmd("SADD").arg(&key).arg(&member).ignore();
            p.cmd("PEXPIRE").arg(&key).arg(USER_TTL_MS).ignore();
        }
        for u in &report.detail {
            let key = self.user_key(&u.user);
            let detail = self.detail_key(&u.user);
            let field = format!("{member}\n{}", u.user);
            let mut now: BTreeMap<&str, u64> = BTreeMap::new();
            for m in &u.mailboxes {
                if let Some(c) = &m.client {
                    *now.entry(c).or_default() += m.total();
                }
            }
            if u.mailboxes.iter().all(|m| m.total() == 0) {
                // No session left there as the report was made.
                p.cmd("SREM").arg(&key).arg(&member).ignore();
                p.cmd("HDEL").arg(&detail).arg(&member).ignore();
            } else {
                let json = serde_json::to_string(&u.mailboxes).unwrap_or_default();
                p.cmd("SADD").arg(&key).arg(&member).ignore();
                p.cmd("PEXPIRE").arg(&key).arg(USER_TTL_MS).ignore();
                p.cmd("HSET").arg(&detail).arg(&member).arg(json).ignore();
                p.cmd("PEXPIRE").arg(&detail).arg(USER_TTL_MS).ignore();
            }
            for client in before.get(u.user.as_str()).into_iter().flatten() {
                if !now.contains_key(client.as_str()) {
                    self.client_put(&mut p, client, &field, 0);
                }
            }
            for (client, sessions) in now {
                self.client_put(&mut p, client, &field, sessions);
            }
        }
        let _: Value = p.query_async(&mut conn).await?;
        Ok(())
    }

    /// The presence API's answer about `user`.
    async fn read_user(
        &self,
        user: &str,
        site: Option<&str>,
    ) -> Result<UserPresence, redis::RedisError> {
        let mut conn = self.conn.clone();
        let mut p = redis::pipe();
        p.cmd("SMEMBERS").arg(self.user_key(user));
        p.cmd("HGETALL").arg(self.detail_key(user));
        let (members, detail): (Vec<String>, HashMap<String, String>) =
            p.query_async(&mut conn).await?;
        let alive = self
            .alive(
                &mut conn,
                members
                    .iter()
                    .filter_map(|m| m.split_once(':').map(|(e, _)| e)),
            )
            .await?;
        let mut edges: Vec<(String, Vec<MailboxSessions>)> = Vec::new();
        for m in &members {
            let Some((edge, boot)) = m.split_once(':') else {
                continue;
            };
            if alive.get(edge).map(String::as_str) != Some(boot) {
                continue;
            }
            let mailboxes = match detail.get(m) {
                Some(json) => serde_json::from_str(json).unwrap_or_default(),
                // An edge of an older version: online there, no detail.
                None => vec![MailboxSessions {
                    by_transport: [(UNKNOWN_TRANSPORT.to_owned(), 1)].into(),
                    ..MailboxSessions::default()
                }],
            };
            edges.push((edge.to_owned(), mailboxes));
        }
        Ok(summarize(user, edges, site))
    }

    /// Counts of each of `clients` from their hashes, removing the
    /// entries of edge processes that are gone for good.
    async fn read_clients(
        &self,
        conn: &mut Conn,
        clients: &[String],
    ) -> Result<Vec<ClientCount>, redis::RedisError> {
        if clients.is_empty() {
            return Ok(Vec::new());
        }
        let mut p = redis::pipe();
        for c in clients {
            p.cmd("HGETALL").arg(self.client_key(c));
        }
        let hashes: Vec<HashMap<String, String>> = p.query_async(conn).await?;
        let parse = |field: &str| -> Option<(String, String, String)> {
            let (member, user) = field.rsplit_once('\n')?;
            let (edge, boot) = member.split_once(':')?;
            Some((edge.to_owned(), boot.to_owned(), user.to_owned()))
        };
        let edges: BTreeSet<String> = hashes
            .iter()
            .flat_map(|h| h.keys())
            .filter_map(|f| parse(f).map(|(e, _, _)| e))
            .collect();
        let alive = self.alive(conn, edges.iter().map(String::as_str)).await?;
        let mut seen: HashMap<String, Option<String>> = HashMap::new();
        if !edges.is_empty() {
            let mut p = redis::pipe();
            for e in &edges {
                p.cmd("GET").arg(self.seen_key(e));
            }
            let boots: Vec<Option<String>> = p.query_async(conn).await?;
            seen = edges.iter().cloned().zip(boots).collect();
        }
        let mut gone = redis::pipe();
        let mut any_gone = false;
        let mut out = Vec::with_capacity(clients.len());
        for (client, hash) in clients.iter().zip(&hashes) {
            let mut users: BTreeSet<&str> = BTreeSet::new();
            let mut sessions = 0u64;
            for (field, n) in hash {
                let Some((edge, boot, _)) = parse(field) else {
                    continue;
                };
                if alive.get(&edge) == Some(&boot) {
                    if let Some((_, user)) = field.rsplit_once('\n') {
                        users.insert(user);
                    }
                    sessions += n.parse::<u64>().unwrap_or(0);
                } else if seen.get(&edge).and_then(Option::as_deref) != Some(boot.as_str()) {
                    self.client_put(&mut gone, client, field, 0);
                    any_gone = true;
                }
            }
            out.push(ClientCount {
                client: client.clone(),
                users: users.len() as u64,
                sessions,
            });
        }
        if any_gone {
            let _: Value = gone.query_async(conn).await?;
        }
        Ok(out)
    }

    /// One page of companies with users online.
    async fn read_page(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<ClientPage, redis::RedisError> {
        let mut conn = self.conn.clone();
        let start = match after {
            Some(a) => format!("({a}"),
            None => "-".to_owned(),
        };
        let names: Vec<String> = redis::cmd("ZRANGEBYLEX")
            .arg(self.names_key())
            .arg(start)
            .arg("+")
            .arg("LIMIT")
            .arg(0)
            .arg(limit)
            .query_async(&mut conn)
            .await?;
        let next = (names.len() == limit)
            .then(|| names.last().cloned())
            .flatten();
        let items = self
            .read_clients(&mut conn, &names)
            .await?
            .into_iter()
            .filter(|c| c.users > 0)
            .collect();
        Ok(ClientPage { items, next })
    }

    async fn answer(&self, who: &[Asked]) -> Result<Vec<bool>, redis::RedisError> {
        let mut conn = self.conn.clone();
        let mut members = redis::pipe();
        for a in who {
            members.cmd("SMEMBERS").arg(self.user_key(&a.user));
        }
        let sets: Vec<Vec<String>> = members.query_async(&mut conn).await?;
        let mut edges: Vec<&str> = sets
            .iter()
            .flatten()
            .filter_map(|m| m.split_once(':').map(|(edge, _)| edge))
            .collect();
        edges.sort_unstable();
        edges.dedup();
        if edges.is_empty() {
            return Ok(vec![false; who.len()]);
        }
        let mut boots = redis::pipe();
        for edge in &edges {
            boots.cmd("GET").arg(self.edge_key(edge));
        }
        let current: Vec<Option<String>> = boots.query_async(&mut conn).await?;
        let alive: HashMap<&str, &str> = edges
            .iter()
            .zip(&current)
            .filter_map(|(edge, boot)| boot.as_deref().map(|b| (*edge, b)))
            .collect();
        Ok(sets
            .iter()
            .map(|members| {
                members.iter().any(|m| {
                    m.split_once(':')
                        .is_some_and(|(edge, boot)| alive.get(edge) == Some(&boot))
                })
            })
            .collect())
    }
}

impl Presence for RedisPresence {
    fn online<'a>(&'a self, who: &'a [Asked]) -> PresenceFuture<'a> {
        Box::pin(async move {
            match self.answer(who).await {
                Ok(answers) => answers,
                Err(e) => {
                    // Unknown counts as offline: the entries are held, and
                    // the user's next connect releases them.
                    tracing::warn!(error = %e, "reading presence from Redis failed; holding");
                    vec![false; who.len()]
                }
            }
        })
    }
}

fn failed(e: redis::RedisError) -> StoreError {
    unavailable(e)
}

impl PresenceView for RedisPresence {
    fn user<'a>(&'a self, user: &'a str, site: Option<&'a str>) -> ViewFuture<'a, UserPresence> {
        Box::pin(async move { self.read_user(user, site).await.map_err(failed) })
    }

    fn clients<'a>(&'a self, after: Option<&'a str>, limit: usize) -> ViewFuture<'a, ClientPage> {
        Box::pin(async move { self.read_page(after, limit).await.map_err(failed) })
    }

    fn client<'a>(&'a self, client: &'a str) -> ViewFuture<'a, ClientCount> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let mut counts = self
                .read_clients(&mut conn, &[client.to_owned()])
                .await
                .map_err(failed)?;
            Ok(counts.pop().unwrap_or(ClientCount {
                client: client.to_owned(),
                users: 0,
                sessions: 0,
            }))
        })
    }
}

impl PresenceBook for RedisPresence {
    fn record<'a>(&'a self, report: &'a PresenceReport, _now_ms: u64) -> RecordFuture<'a> {
        Box::pin(async move { self.write(report).await.map_err(unavailable) })
    }
}
