//! The HTTP client callbacks go out through: one request at a time, with
//! every protection a destination chosen by whoever registers a topic
//! needs.
//!
//! - **Destinations are checked on every connection**, after DNS: a name
//!   resolves through [`GuardedResolver`], which drops every address of a
//!   refused class ([`destination::check`]) before a connection is made,
//!   so a name cannot rebind to a private address later. An IP literal in
//!   the URL is checked before each request. Both checks refuse this
//!   host's own addresses too ([`super::host`]).
//! - **No answer body is kept from a destination that is not plainly
//!   public** (one reached because `allow_private_networks` let it):
//!   [`Answer::public`] says so, and the attempt record keeps the status
//!   only, so a callback cannot read an internal service back through the
//!   status API.
//! - **No redirects** are followed: a 3xx is the answer.
//! - **No proxy** from the environment (`HTTP_PROXY`, ...): a proxy would
//!   resolve the name itself, past the check above.
//! - **No retries** by the client itself: a request is made once, and
//!   repeated only by the topic's retry policy (recorded, signed anew).
//! - **A per-attempt timeout** covers connect, request and the body.
//! - **Bodies are read up to a bound** (`max_body_bytes`); the rest is
//!   dropped, and the answer says it was cut.
//! - **Per-host concurrency**: at most `per_host` requests to one host at
//!   once; more wait (within their timeout) for a slot. The table of hosts
//!   is bounded (`max_hosts`; when full, idle hosts are forgotten, and if
//!   none is idle the request is refused as [`Failure::Busy`]).
//! - **A circuit breaker per host** ([`super::breaker`]): a host that keeps
//!   failing is paused and tried again by itself.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::sync::Semaphore;
use url::{Host, Url};

use super::breaker::{Admit, BreakerConfig, Breakers, Transition};
use super::destination::Class;
use super::guard::{Guard, GuardedResolver};
use super::host::HostAddrs;

/// Settings of the client.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Address classes callbacks may reach beyond public addresses.
    pub allowed: Vec<Class>,
    /// Most bytes of an answer's body read.
    pub max_body_bytes: usize,
    /// Requests to one host at once, at most.
    pub per_host: usize,
    /// Hosts with a concurrency slot table, at most.
    pub max_hosts: usize,
    /// The breaker.
    pub breaker: BreakerConfig,
    /// Idle connections kept per host.
    pub idle_per_host: usize,
    /// This host's own addresses.
    pub host: Arc<HostAddrs>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            allowed: Vec::new(),
            max_body_bytes: 64 * 1024,
            per_host: 32,
            max_hosts: 10_000,
            breaker: BreakerConfig::default(),
            idle_per_host: 32,
            host: Arc::new(HostAddrs::system()),
        }
    }
}

/// A request to make.
#[derive(Debug, Clone)]
pub struct Request {
    /// GET (recheck) or POST (call).
    pub method: http::Method,
    /// Where.
    pub url: Url,
    /// Extra headers (signature, `herald-*`, content type).
    pub headers: http::HeaderMap,
    /// The body (empty for GET).
    pub body: Bytes,
    /// The whole attempt's limit.
    pub timeout: Duration,
}

/// An answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The status.
    pub status: u16,
    /// The body, up to `max_body_bytes`.
    pub body: Bytes,
    /// Whether the body was longer and cut.
    pub truncated: bool,
    /// The `Retry-After` header, if any.
    pub retry_after: Option<String>,
    /// Whether the answer came from a plainly public address (neither of
    /// a class callbacks are refused unless allowed, nor this host's own):
    /// only then may its body be kept and shown.
    pub public: bool,
}

/// No answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// Nothing within the timeout.
    #[error("timed out after {0} ms")]
    Timeout(u64),
    /// Connection refused or reset, TLS, DNS, ...
    #[error("network error: {0}")]
    Network(String),
    /// The destination is a refused address.
    #[error("refused destination: {0}")]
    Refused(String),
    /// The host's breaker is open: not tried.
    #[error("{host} is paused after repeated failures until {until_ms}")]
    Paused {
        /// The host.
        host: String,
        /// When it may be tried again (epoch ms).
        until_ms: u64,
    },
    /// No concurrency slot could be given (too many hosts busy at once).
    #[error("too many callback hosts busy at once")]
    Busy,
}

impl Failure {
    /// Whether the failure says something about the host (and counts
    /// towards its breaker).
    fn counts_against_host(&self) -> bool {
        matches!(self, Failure::Timeout(_) | Failure::Network(_))
    }
}

/// What the client saw, for metrics.
pub trait ClientEvents: Send + Sync + 'static {
    /// A host's breaker changed.
    fn breaker(&self, host: &str, transition: Transition);
    /// A host was not tracked by the breaker (its table is full).
    fn untracked(&self);
}

/// Events nobody listens to.
#[derive(Debug, Default)]
pub struct NoEvents;

impl ClientEvents for NoEvents {
    fn breaker(&self, _host: &str, _transition: Transition) {}
    fn untracked(&self) {}
}

/// The callback client. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    config: ClientConfig,
    guard: Guard,
    slots: Mutex<HashMap<String, Arc<Semaphore>>>,
    breakers: Mutex<Breakers>,
    events: Arc<dyn ClientEvents>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client with `config`, reporting to `events`.
    pub fn new(config: ClientConfig, events: Arc<dyn ClientEvents>) -> Result<Client, String> {
        let guard = Guard::new(&config.allowed, Arc::clone(&config.host));
        let resolver = GuardedResolver {
            guard: guard.clone(),
        };
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            // A proxy from the environment would resolve the destination
            // itself, past the guarded resolver: callbacks go direct.
            .no_proxy()
            // Retries are the topic's policy's, each one recorded and
            // signed; the client never repeats a request on its own.
            .retry(reqwest::retry::never())
            .dns_resolver(Arc::new(resolver))
            .pool_max_idle_per_host(config.idle_per_host)
            .user_agent(concat!("herald/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("cannot build the callback HTTP client: {e}"))?;
        Ok(Client {
            inner: Arc::new(Inner {
                http,
                breakers: Mutex::new(Breakers::new(config.breaker)),
                config,
                guard,
                slots: Mutex::new(HashMap::new()),
                events,
            }),
        })
    }

    /// How many hosts are paused by their breaker.
    pub fn paused_hosts(&self) -> usize {
        self.inner.breakers.lock().open()
    }

    /// Make `request` at `now_ms` (epoch ms, for the breaker).
    pub async fn send(&self, request: Request, now_ms: u64) -> Result<Answer, Failure> {
        let host = host_key(&request.url);
        if let Some(ip) = literal_ip(&request.url) {
            self.inner
                .guard
                .check(ip)
                .map_err(|r| Failure::Refused(r.to_string()))?;
        }
        match self.inner.breakers.lock().admit(&host, now_ms) {
            Admit::Go | Admit::Trial => {}
            Admit::Untracked => self.inner.events.untracked(),
            Admit::Paused { until_ms } => return Err(Failure::Paused { host, until_ms }),
        }
        let started = Instant::now();
        let timeout = request.timeout;
        let outcome = match tokio::time::timeout(timeout, self.exchange(&host, request)).await {
            Ok(outcome) => outcome,
            Err(_) => Err(Failure::Timeout(timeout.as_millis() as u64)),
        };
        let answered_at = now_ms.saturating_add(started.elapsed().as_millis() as u64);
        let transition = {
            let mut breakers = self.inner.breakers.lock();
            match &outcome {
                Ok(a) if a.status >= 500 => breakers.failure(&host, answered_at),
                Ok(_) => breakers.success(&host),
                Err(f) if f.counts_against_host() => breakers.failure(&host, answered_at),
                Err(_) => None,
            }
        };
        if let Some(t) = transition {
            match t {
                Transition::Opened { until_ms } => tracing::warn!(
                    host = %host,
                    until_ms,
                    "callback host paused after repeated failures"
                ),
                Transition::Closed => tracing::info!(host = %host, "callback host resumed"),
            }
            self.inner.events.breaker(&host, t);
        }
        outcome
    }

    async fn exchange(&self, host: &str, request: Request) -> Result<Answer, Failure> {
        let slot = self.slot(host)?;
        let _permit = slot.acquire_owned().await.map_err(|_| Failure::Busy)?;
        // Built whole rather than through a RequestBuilder, whose headers
        // are merged one by one into a map of its own.
        let mut outgoing = reqwest::Request::new(request.method, request.url);
        *outgoing.headers_mut() = request.headers;
        *outgoing.body_mut() = Some(request.body.into());
        let response = self.inner.http.execute(outgoing).await.map_err(network)?;
        let status = response.status().as_u16();
        let public = response
            .remote_addr()
            .is_some_and(|a| self.inner.guard.is_public(a.ip()));
        let retry_after = response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let (body, truncated) = read_bounded(response, self.inner.config.max_body_bytes).await?;
        Ok(Answer {
            status,
            body,
            truncated,
            retry_after,
            public,
        })
    }

    /// The concurrency slots of `host`, made if new. When the table is
    /// full, hosts with no request in flight are forgotten first.
    fn slot(&self, host: &str) -> Result<Arc<Semaphore>, Failure> {
        let mut slots = self.inner.slots.lock();
        if let Some(s) = slots.get(host) {
            return Ok(Arc::clone(s));
        }
        if slots.len() >= self.inner.config.max_hosts {
            // Idle: nobody else holds the semaphore.
            slots.retain(|_, s| Arc::strong_count(s) > 1);
            if slots.len() >= self.inner.config.max_hosts {
                return Err(Failure::Busy);
            }
        }
        let s = Arc::new(Semaphore::new(self.inner.config.per_host.max(1)));
        slots.insert(host.to_owned(), Arc::clone(&s));
        Ok(s)
    }
}

/// `host:port` of a URL: the unit of concurrency and of the breaker.
pub fn host_key(url: &Url) -> String {
    format!(
        "{}:{}",
        url.host_str().unwrap_or_default(),
        url.port_or_known_default().unwrap_or(0)
    )
}

fn literal_ip(url: &Url) -> Option<IpAddr> {
    match url.host()? {
        Host::Ipv4(ip) => Some(IpAddr::V4(ip)),
        Host::Ipv6(ip) => Some(IpAddr::V6(ip)),
        Host::Domain(_) => None,
    }
}

fn network(e: reqwest::Error) -> Failure {
    // The resolver's refusal comes back wrapped: say it plainly.
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        let s_text = s.to_string();
        if s_text.starts_with("refused destination: ") {
            return Failure::Refused(
                s_text
                    .trim_start_matches("refused destination: ")
                    .to_owned(),
            );
        }
        text = format!("{text}: {s_text}");
        source = s.source();
    }
    Failure::Network(text)
}

async fn read_bounded(
    mut response: reqwest::Response,
    max: usize,
) -> Result<(Bytes, bool), Failure> {
    let mut body = BytesMut::new();
    while let Some(chunk) = response.chunk().await.map_err(network)? {
        let room = max - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body.freeze(), true));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body.freeze(), false))
}

#[cfg(test)]
mod tests;
