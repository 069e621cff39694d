//! Deadlines of an HTTP connection, the same in both binaries: how long a
//! connection may leave its answers unread, and how long a request body may
//! take to arrive (`[http]`).
//!
//! - [`write`]: [`WriteDeadline`], an IO wrapper whose writes fail with
//!   `TimedOut` once one has made no progress for `http.write_timeout_ms`
//!   (the client stopped reading and the socket's buffers are full); the
//!   server then closes the connection, as nginx does after its
//!   `send_timeout`. [`DeadlineListener`] hands every accepted socket of
//!   `axum::serve` over wrapped.
//! - [`body`]: a request body must arrive at `http.body_min_bytes_per_sec`
//!   on average once `http.body_grace_ms` has passed since its head
//!   ([`BodyRate`]; Kestrel's `MinRequestBodyDataRate`): a body of N bytes
//!   has at most grace + N / rate in all, however its bytes are spaced.
//!   [`DeadlineBody`] bounds a hyper body so, and [`Deadlines::bound_bodies`]
//!   makes a router's bodies such; a body past its deadline fails with
//!   [`BodyTimedOut`] and the request is answered 408 Request Timeout with
//!   `Connection: close`.
//!
//! Each refusal is counted once ([`DeadlineCounters`]: the gateway's
//! `herald_connections_refused_total` with reasons `write_timeout` and
//! `body_timeout`; the router registers the same series).

pub mod body;
pub mod write;

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use serde::Deserialize;

pub use body::{BodyRate, BodyTimedOut, DeadlineBody};
pub use write::{DeadlineListener, WriteDeadline};

/// The deadlines of HTTP connections, `[http]`. Each field is the key of
/// its name, described once in its row of
/// [`crate::config::table::SECTIONS`].
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Key `http.write_timeout_ms`.
    pub write_timeout_ms: u64,
    /// Key `http.body_grace_ms`.
    pub body_grace_ms: u64,
    /// Key `http.body_min_bytes_per_sec`.
    pub body_min_bytes_per_sec: u64,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            // nginx's send_timeout: a minute without the client taking a byte.
            write_timeout_ms: 60_000,
            // Kestrel's MinRequestBodyDataRate: 240 B/s after a 5 s grace.
            body_grace_ms: 5_000,
            body_min_bytes_per_sec: 240,
        }
    }
}

impl HttpConfig {
    /// Every rule on these keys, as problems named `http.*`.
    pub fn problems(&self) -> Vec<String> {
        [
            ("http.write_timeout_ms", self.write_timeout_ms),
            ("http.body_grace_ms", self.body_grace_ms),
            ("http.body_min_bytes_per_sec", self.body_min_bytes_per_sec),
        ]
        .into_iter()
        .filter(|&(_, value)| value == 0)
        .map(|(name, _)| format!("{name} must be greater than 0"))
        .collect()
    }

    /// How long a write may make no progress.
    pub fn write_timeout(&self) -> Duration {
        Duration::from_millis(self.write_timeout_ms)
    }

    /// The rate a body must keep.
    pub fn body_rate(&self) -> BodyRate {
        BodyRate::new(
            Duration::from_millis(self.body_grace_ms),
            self.body_min_bytes_per_sec,
        )
    }
}

/// Where the refusals of these deadlines are counted.
#[derive(Debug, Clone, Default)]
pub struct DeadlineCounters {
    /// Connections closed for a write that made no progress in time.
    pub write_timeout: Counter,
    /// Request bodies that fell behind their rate.
    pub body_timeout: Counter,
}

/// The reason label of [`DeadlineCounters::register`]'s family.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

impl DeadlineCounters {
    /// Counters of their own, registered as
    /// `herald_connections_refused_total{reason="write_timeout"|"body_timeout"}`
    /// (the router's; the gateway has these reasons in its own family).
    pub fn register(registry: &mut Registry) -> Self {
        let family = Family::<ReasonLabels, Counter>::default();
        // One statement each: `get_or_create` hands back a read guard, and
        // a second call for a new label waits for the write lock, so two
        // in one expression (the guard of the first still alive) deadlock.
        let write_timeout = family
            .get_or_create(&ReasonLabels {
                reason: "write_timeout",
            })
            .clone();
        let body_timeout = family
            .get_or_create(&ReasonLabels {
                reason: "body_timeout",
            })
            .clone();
        let counters = DeadlineCounters {
            write_timeout,
            body_timeout,
        };
        registry.register(
            "herald_connections_refused",
            "HTTP connections and requests refused, by reason",
            family,
        );
        counters
    }
}

/// The deadlines a server applies, with their counters.
#[derive(Debug, Clone)]
pub struct Deadlines {
    write_timeout: Duration,
    body: BodyRate,
    counters: DeadlineCounters,
}

impl Deadlines {
    /// The deadlines `config` sets, counted in `counters`.
    pub fn new(config: &HttpConfig, counters: DeadlineCounters) -> Self {
        Deadlines {
            write_timeout: config.write_timeout(),
            body: config.body_rate(),
            counters,
        }
    }

    /// `http.write_timeout_ms`.
    pub fn write_timeout(&self) -> Duration {
        self.write_timeout
    }

    /// The rate a request body must keep.
    pub fn body_rate(&self) -> BodyRate {
        self.body
    }

    /// `io` with its writes bounded, a timeout counted.
    pub fn wrap<T>(&self, io: T) -> WriteDeadline<T> {
        WriteDeadline::new(io, self.write_timeout, self.counters.write_timeout.clone())
    }

    /// Count a body that fell behind its rate (a server that reads bodies
    /// itself; [`DeadlineBody`] counts its own).
    pub fn body_timed_out(&self) {
        self.counters.body_timeout.inc();
    }

    /// `router` with every request body bounded by the body rate: a body
    /// that falls behind fails ([`BodyTimedOut`]) and the request is
    /// answered 408 with `Connection: close` whatever its handler made of
    /// the failure. Call it once every route is added.
    pub fn bound_bodies(&self, router: axum::Router) -> axum::Router {
        router.layer(axum::middleware::from_fn_with_state(
            (self.body, self.counters.body_timeout.clone()),
            body::bound,
        ))
    }
}
