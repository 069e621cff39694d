//! The readers of [`RedisPresence`]: who is online ([`Presence`], for
//! `when-online`) and the presence API's answers ([`PresenceView`]).

use super::*;

impl RedisPresence {
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
            .alive(&mut conn, members.iter().filter_map(|m| member_edge(m)))
            .await?;
        let mut edges: Vec<(String, Vec<MailboxSessions>)> = Vec::new();
        for m in &members {
            let Some(edge) = member_edge(m) else {
                continue;
            };
            if !member_alive(m, &alive) {
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
        let alive = self
            .alive(
                &mut conn,
                sets.iter().flatten().filter_map(|m| member_edge(m)),
            )
            .await?;
        Ok(sets
            .iter()
            .map(|members| members.iter().any(|m| member_alive(m, &alive)))
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
