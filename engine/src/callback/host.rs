//! This host's own addresses, which a callback may not reach any more than
//! loopback: a service bound to `0.0.0.0` answers on every one of them,
//! and an address that classifies as public ([`super::destination`]) is
//! still this machine when it is one of its interfaces'.
//!
//! The addresses are read from the interfaces (`getifaddrs`) when the
//! client is made, and read again by the first check more than
//! [`MAX_AGE`] after the last read, so an address added to an interface
//! (a floating IP moved here, a new VIP) is known within that time of the
//! next callback. A failed read keeps the addresses read before and is
//! logged; it is tried again after [`MAX_AGE`].

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::destination;

/// How long a read of the interfaces' addresses is trusted.
pub const MAX_AGE: Duration = Duration::from_secs(5);

/// Reads the interfaces' addresses.
type Read = dyn Fn() -> io::Result<Vec<IpAddr>> + Send + Sync;

/// This host's addresses, read again when stale (see the module docs).
pub struct HostAddrs {
    read: Box<Read>,
    state: Mutex<State>,
}

struct State {
    /// When the addresses were last read (or a read was tried).
    read_at: Instant,
    /// Sorted, for a binary search.
    addrs: Arc<[IpAddr]>,
}

impl HostAddrs {
    /// The addresses of this host's interfaces, read now.
    pub fn system() -> HostAddrs {
        HostAddrs::reading(interfaces)
    }

    /// Addresses from `read`, called now and whenever the last call is
    /// older than [`MAX_AGE`] at a check (tests give a fixed list).
    pub fn reading(
        read: impl Fn() -> io::Result<Vec<IpAddr>> + Send + Sync + 'static,
    ) -> HostAddrs {
        let addrs = read().unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot read this host's addresses; callbacks are not checked against them until a read succeeds");
            Vec::new()
        });
        HostAddrs {
            read: Box::new(read),
            state: Mutex::new(State {
                read_at: Instant::now(),
                addrs: sorted(addrs),
            }),
        }
    }

    /// Whether `ip` (or the IPv4 address an IPv6 form of it embeds) is one
    /// of this host's addresses as known at `now`.
    pub fn contains(&self, ip: IpAddr, now: Instant) -> bool {
        let addrs = self.current(now);
        let mine = |ip: IpAddr| addrs.binary_search(&ip).is_ok();
        match ip {
            IpAddr::V4(v4) => mine(IpAddr::V4(v4)),
            IpAddr::V6(v6) => {
                mine(IpAddr::V6(v6))
                    || destination::embedded_ipv4(v6)
                        .into_iter()
                        .flatten()
                        .any(|v4: Ipv4Addr| mine(IpAddr::V4(v4)))
            }
        }
    }

    /// The addresses, read again first when stale at `now`.
    fn current(&self, now: Instant) -> Arc<[IpAddr]> {
        let mut state = self.state.lock();
        if now.saturating_duration_since(state.read_at) >= MAX_AGE {
            state.read_at = now;
            match (self.read)() {
                Ok(addrs) => state.addrs = sorted(addrs),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read this host's addresses again; keeping those read before")
                }
            }
        }
        Arc::clone(&state.addrs)
    }
}

impl fmt::Debug for HostAddrs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostAddrs")
            .field("addrs", &self.state.lock().addrs)
            .finish_non_exhaustive()
    }
}

fn sorted(mut addrs: Vec<IpAddr>) -> Arc<[IpAddr]> {
    addrs.sort_unstable();
    addrs.dedup();
    addrs.into()
}

/// Every address of every interface, up or not.
fn interfaces() -> io::Result<Vec<IpAddr>> {
    Ok(if_addrs::get_if_addrs()?
        .into_iter()
        .map(|i| i.ip())
        .collect())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[test]
    fn the_system_read_finds_loopback() {
        let host = HostAddrs::system();
        let now = Instant::now();
        assert!(host.contains(IpAddr::from([127, 0, 0, 1]), now), "{host:?}");
        assert!(!host.contains(IpAddr::from([93, 184, 216, 34]), now));
    }

    #[test]
    fn an_embedded_ipv4_address_of_this_host_is_this_host() {
        let host = HostAddrs::reading(|| Ok(vec![IpAddr::from([93, 184, 216, 34])]));
        let now = Instant::now();
        for v6 in [
            "::ffff:93.184.216.34",
            "64:ff9b::93.184.216.34",
            "2002:5db8:d822::1",
        ] {
            let ip: IpAddr = v6.parse().unwrap();
            assert!(host.contains(ip, now), "{v6}");
        }
        assert!(!host.contains("2002:5db8:d823::1".parse().unwrap(), now));
    }

    #[test]
    fn addresses_are_read_again_once_stale_and_a_failed_read_keeps_the_last() {
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&calls);
        let host = HostAddrs::reading(move || match seen.fetch_add(1, Ordering::SeqCst) {
            0 => Ok(vec![IpAddr::from([93, 184, 216, 34])]),
            1 => Ok(vec![IpAddr::from([93, 184, 216, 35])]),
            _ => Err(io::Error::other("netlink says no")),
        });
        let start = Instant::now();
        let old = IpAddr::from([93, 184, 216, 34]);
        let new = IpAddr::from([93, 184, 216, 35]);
        assert!(host.contains(old, start));
        assert!(
            host.contains(old, start + MAX_AGE / 2),
            "fresh: not read again"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        let later = start + MAX_AGE * 2;
        assert!(host.contains(new, later) && !host.contains(old, later));
        let failed = later + MAX_AGE;
        assert!(host.contains(new, failed), "a failed read keeps the last");
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }
}
