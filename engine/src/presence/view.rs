//! Presence for operators and backends: who is online, with how many
//! sessions over which transports, on which edges and since when, and how
//! many users and sessions each client company has online
//! (`GET /v1/presence/...`, served by [`crate::publish`]).
//!
//! One answer, two sources behind [`PresenceView`]: standalone Herald asks
//! its own hub; the distributed routers read what the edges reported
//! (`schedule::store::redis::presence`). Both describe a user's sessions
//! on one edge the same way, as [`MailboxSessions`] (one per site the user
//! has a live session on), and [`summarize`] turns those into the answer.
//!
//! Online means a session exists: a user whose last session closed is
//! offline at once, even while their mailbox waits out its TTL for a
//! reconnect.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

use crate::schedule::error::StoreError;

/// Most sites (mailboxes) reported for one user on one edge; a user with
/// more is reported with the sites holding the most sessions (the rest
/// are left out of the counts).
pub const MAX_SITES_PER_USER: usize = 16;
/// Most transport names in one mailbox's counts.
pub const MAX_TRANSPORTS: usize = 8;
/// Longest transport name.
pub const MAX_TRANSPORT_NAME: usize = 32;
/// The transport name of sessions an edge of an older version reported
/// without detail: the user is online there with at least one session.
pub const UNKNOWN_TRANSPORT: &str = "unknown";

/// A user's live sessions at one site on one edge.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MailboxSessions {
    /// The site (empty when the token named none).
    pub site: String,
    /// The client company of the user's token, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// When the first of these sessions began (wall clock, ms since the
    /// Unix epoch); 0 when unknown.
    pub since_ms: u64,
    /// Live sessions by transport name (`websocket`, `xhr_streaming`...).
    #[serde(rename = "sessions")]
    pub by_transport: BTreeMap<String, u32>,
}

impl MailboxSessions {
    /// Sessions over every transport.
    pub fn total(&self) -> u64 {
        self.by_transport.values().map(|&n| u64::from(n)).sum()
    }
}

/// What an edge says about one user: their live mailboxes there (none
/// when their last session there ended).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserSessions {
    /// The user id.
    pub user: String,
    /// One entry per site with a live session, at most
    /// [`MAX_SITES_PER_USER`].
    pub mailboxes: Vec<MailboxSessions>,
    /// When a session of this user that came from a mailbox this edge
    /// does not have (another edge's, or one that expired) last heard from
    /// it, as the client said (STOMP `offline-ms`; edge's wall clock, ms
    /// since the Unix epoch): what was sent for the user since then may
    /// never have reached them. 0 when no session said so. Routers routing
    /// by edge re-send from here rather than from the sessions' start.
    pub missed_since_ms: u64,
}

/// Sessions, counted.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Sessions {
    /// All of them.
    pub total: u64,
    /// By transport name.
    pub by_transport: BTreeMap<String, u64>,
}

/// A user on one edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgePresence {
    /// The edge id (`edge.id`; `standalone` for a standalone server
    /// without one).
    pub edge: String,
    /// The user's live sessions there.
    pub sessions: u64,
    /// When the first of them began; None when unknown.
    pub since_ms: Option<u64>,
}

/// The answer about one user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserPresence {
    /// The user id.
    pub user: String,
    /// A live session exists.
    pub online: bool,
    /// When the earliest live session began; None offline or unknown.
    pub since_ms: Option<u64>,
    /// Live sessions.
    pub sessions: Sessions,
    /// Where, by edge id.
    pub edges: Vec<EdgePresence>,
}

/// One client company's count.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ClientCount {
    /// The company (the tokens' `client` claim).
    pub client: String,
    /// Users with a live session.
    pub users: u64,
    /// Their live sessions.
    pub sessions: u64,
}

/// One page of client counts, in client-name order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientPage {
    /// Companies with at least one user online, after the cursor.
    pub items: Vec<ClientCount>,
    /// The last client name this page looked at, when more may follow.
    pub next: Option<String>,
}

/// A future a [`PresenceView`] returns.
pub type ViewFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Where the presence endpoints read from.
pub trait PresenceView: Send + Sync + 'static {
    /// The user, counting only mailboxes at `site` when given.
    fn user<'a>(&'a self, user: &'a str, site: Option<&'a str>) -> ViewFuture<'a, UserPresence>;
    /// Companies with users online, in name order, after `after`, at most
    /// `limit`.
    fn clients<'a>(&'a self, after: Option<&'a str>, limit: usize) -> ViewFuture<'a, ClientPage>;
    /// One company (zero counts when nobody of it is online).
    fn client<'a>(&'a self, client: &'a str) -> ViewFuture<'a, ClientCount>;
}

/// Which presence endpoint a request asked.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum Endpoint {
    /// `GET /v1/presence/users/{uid}`.
    User,
    /// `GET /v1/presence/clients`.
    Clients,
    /// `GET /v1/presence/clients/{client}`.
    Client,
}

/// How a presence request ended.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum Outcome {
    /// Answered (200).
    Ok,
    /// A field was wrong (422).
    Invalid,
    /// The key was missing, wrong or not allowed `admin` (401, 403).
    Refused,
    /// The source could not answer (503: Redis down).
    Unavailable,
}

macro_rules! label {
    ($ty:ty { $($v:ident => $s:literal),* $(,)? }) => {
        impl $ty {
            /// The label value.
            pub fn as_str(self) -> &'static str {
                match self { $(<$ty>::$v => $s,)* }
            }
        }
        impl prometheus_client::encoding::EncodeLabelValue for $ty {
            fn encode(
                &self,
                encoder: &mut prometheus_client::encoding::LabelValueEncoder<'_>,
            ) -> Result<(), std::fmt::Error> {
                std::fmt::Write::write_str(encoder, self.as_str())
            }
        }
    };
}
label!(Endpoint { User => "user", Clients => "clients", Client => "client" });
label!(Outcome { Ok => "ok", Invalid => "invalid", Refused => "refused", Unavailable => "unavailable" });

/// Labels of [`PresenceMetrics::requests`].
#[derive(Debug, Clone, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct RequestLabels {
    /// The endpoint.
    pub endpoint: Endpoint,
    /// How it ended.
    pub outcome: Outcome,
}

/// Counters of the presence endpoints.
#[derive(Debug, Clone, Default)]
pub struct PresenceMetrics {
    /// Requests, by endpoint and outcome.
    pub requests: prometheus_client::metrics::family::Family<
        RequestLabels,
        prometheus_client::metrics::counter::Counter,
    >,
}

impl PresenceMetrics {
    /// Register `herald_presence_requests_total`, every endpoint at zero
    /// for `ok` (so rates see the first request and a scrape lists the
    /// family).
    pub fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        for endpoint in [Endpoint::User, Endpoint::Clients, Endpoint::Client] {
            let _ = self.requests.get_or_create(&RequestLabels {
                endpoint,
                outcome: Outcome::Ok,
            });
        }
        registry.register(
            "herald_presence_requests",
            "Presence API requests (GET /v1/presence/...), by endpoint and outcome (ok, invalid: a 422 naming the field, refused: the API key, unavailable)",
            self.requests.clone(),
        );
    }

    /// Count one request.
    pub fn count(&self, endpoint: Endpoint, outcome: Outcome) {
        self.requests
            .get_or_create(&RequestLabels { endpoint, outcome })
            .inc();
    }
}

/// The answer about `user` from what each edge holds of them, counting
/// only mailboxes at `site` when given. Edges without a live session are
/// left out; edges are in id order.
pub fn summarize(
    user: &str,
    edges: Vec<(String, Vec<MailboxSessions>)>,
    site: Option<&str>,
) -> UserPresence {
    let mut out = UserPresence {
        user: user.to_owned(),
        online: false,
        since_ms: None,
        sessions: Sessions::default(),
        edges: Vec::new(),
    };
    for (edge, mailboxes) in edges {
        let mut on_edge = 0;
        let mut since: Option<u64> = None;
        for m in mailboxes
            .iter()
            .filter(|m| site.is_none_or(|s| s == m.site))
        {
            let total = m.total();
            if total == 0 {
                continue;
            }
            on_edge += total;
            for (transport, n) in &m.by_transport {
                *out.sessions
                    .by_transport
                    .entry(transport.clone())
                    .or_default() += u64::from(*n);
            }
            if m.since_ms > 0 {
                since = Some(since.map_or(m.since_ms, |s| s.min(m.since_ms)));
            }
        }
        if on_edge == 0 {
            continue;
        }
        out.sessions.total += on_edge;
        if let Some(s) = since {
            out.since_ms = Some(out.since_ms.map_or(s, |o| o.min(s)));
        }
        out.edges.push(EdgePresence {
            edge,
            sessions: on_edge,
            since_ms: since,
        });
    }
    out.online = out.sessions.total > 0;
    out.edges.sort_by(|a, b| a.edge.cmp(&b.edge));
    out
}

/// A transport name as reports may carry it: 1 to [`MAX_TRANSPORT_NAME`]
/// of `a-z 0-9 _`.
pub fn is_transport_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_TRANSPORT_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mailbox(site: &str, since: u64, t: &[(&str, u32)]) -> MailboxSessions {
        MailboxSessions {
            site: site.into(),
            client: Some("acme".into()),
            since_ms: since,
            by_transport: t.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
        }
    }

    #[test]
    fn edges_and_transports_add_up_and_since_is_the_earliest() {
        let p = summarize(
            "alice",
            vec![
                ("e2".into(), vec![mailbox("a", 200, &[("websocket", 2)])]),
                (
                    "e1".into(),
                    vec![
                        mailbox("a", 300, &[("xhr_streaming", 1)]),
                        mailbox("b", 100, &[("websocket", 1)]),
                    ],
                ),
                ("e3".into(), vec![mailbox("a", 50, &[])]),
            ],
            None,
        );
        assert!(p.online);
        assert_eq!(p.since_ms, Some(100));
        assert_eq!(p.sessions.total, 4);
        assert_eq!(p.sessions.by_transport["websocket"], 3);
        assert_eq!(p.sessions.by_transport["xhr_streaming"], 1);
        let edges: Vec<_> = p
            .edges
            .iter()
            .map(|e| (e.edge.as_str(), e.sessions, e.since_ms))
            .collect();
        assert_eq!(
            edges,
            vec![("e1", 2, Some(100)), ("e2", 2, Some(200))],
            "an edge without a live session is left out"
        );
    }

    #[test]
    fn a_site_counts_only_its_mailboxes() {
        let edges = vec![(
            "e1".to_owned(),
            vec![
                mailbox("a", 300, &[("xhr_streaming", 1)]),
                mailbox("b", 100, &[("websocket", 1)]),
            ],
        )];
        let p = summarize("alice", edges.clone(), Some("a"));
        assert_eq!((p.sessions.total, p.since_ms), (1, Some(300)));
        let none = summarize("alice", edges, Some("c"));
        assert!(!none.online && none.edges.is_empty() && none.since_ms.is_none());
    }

    #[test]
    fn transport_names_are_bounded() {
        assert!(is_transport_name("xhr_streaming"));
        assert!(!is_transport_name(""));
        assert!(!is_transport_name("Web Socket"));
        assert!(!is_transport_name(&"a".repeat(33)));
    }
}
