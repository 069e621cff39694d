//! New connections per source address (`[connection_rate]`), for a gateway
//! browsers reach directly: a token bucket per address
//! ([`herald_engine::rate_limit::KeyedBuckets`], evict-oldest beyond
//! `max_addresses`). The accept loop asks before it serves a connection; a
//! connection over the rate is answered 429 with `Retry-After` and closed
//! ([`crate::server`]), counted in
//! `herald_connections_refused_total{reason="rate_limited"}`.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use herald_engine::rate_limit::{KeyedBuckets, Rate, retry_after_secs};
use parking_lot::Mutex;

use crate::metrics::{Metrics, RefuseReason};

/// The per-address connection rate.
#[derive(Debug)]
pub struct ConnectionRate {
    buckets: Mutex<KeyedBuckets<IpAddr>>,
    metrics: Arc<Metrics>,
}

impl ConnectionRate {
    /// `rate` per address, at most `max_addresses` remembered.
    pub fn new(rate: Rate, max_addresses: usize, metrics: Arc<Metrics>) -> Self {
        ConnectionRate {
            buckets: Mutex::new(KeyedBuckets::new(rate, max_addresses)),
            metrics,
        }
    }

    /// Whether a new connection from `ip` may be served now; else the
    /// seconds it should wait (for `Retry-After`). A refusal is counted.
    pub fn admit(&self, ip: IpAddr, now: Instant) -> Result<(), u64> {
        let (taken, tracked) = {
            let mut buckets = self.buckets.lock();
            let taken = buckets.take(ip, now);
            (taken, buckets.len())
        };
        self.metrics.connection_rate_addresses.set(tracked as i64);
        if taken.evicted > 0 {
            self.metrics
                .connection_rate_evicted
                .inc_by(taken.evicted as u64);
        }
        taken.verdict.map_err(|wait| {
            self.metrics.refuse(RefuseReason::RateLimited);
            retry_after_secs(wait)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::metrics::RefuseLabels;

    #[test]
    fn an_address_over_its_rate_waits_and_is_counted() {
        let metrics = Arc::new(Metrics::default());
        let limit = ConnectionRate::new(Rate::new(1.0, 2).unwrap(), 1, Arc::clone(&metrics));
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let t0 = Instant::now();
        assert_eq!(limit.admit(a, t0), Ok(()));
        assert_eq!(limit.admit(a, t0), Ok(()));
        assert_eq!(limit.admit(a, t0 + Duration::from_millis(100)), Err(1));
        let refused = metrics
            .refused
            .get_or_create(&RefuseLabels {
                reason: RefuseReason::RateLimited,
            })
            .get();
        assert_eq!(refused, 1);
        // One address remembered: b takes a's place while a still owes.
        assert_eq!(limit.admit(b, t0), Ok(()));
        assert_eq!(metrics.connection_rate_evicted.get(), 1);
        assert_eq!(metrics.connection_rate_addresses.get(), 1);
    }
}
