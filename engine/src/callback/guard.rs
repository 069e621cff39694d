//! The connection-time check of a callback's destination: every address
//! a name resolves to, and an IP literal before each request, against the
//! classes a deployment allows ([`super::destination`]) and this host's
//! own addresses ([`super::host`]).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::destination::{self, Class, Refused};
use super::host::HostAddrs;

/// What a callback's destination is checked against when it connects:
/// the classes a deployment allows, and this host's own addresses.
#[derive(Debug, Clone)]
pub struct Guard {
    allowed: Arc<[Class]>,
    host: Arc<HostAddrs>,
}

impl Guard {
    /// A guard allowing `allowed` beyond public addresses.
    pub fn new(allowed: &[Class], host: Arc<HostAddrs>) -> Guard {
        Guard {
            allowed: allowed.into(),
            host,
        }
    }

    /// Whether a callback may connect to `ip`.
    pub fn check(&self, ip: IpAddr) -> Result<(), Refused> {
        destination::check(ip, &self.allowed)?;
        if destination::classify(ip).is_none()
            && !self.allowed.contains(&Class::ThisHost)
            && self.host.contains(ip, Instant::now())
        {
            return Err(Refused {
                ip,
                class: Class::ThisHost,
            });
        }
        Ok(())
    }

    /// Whether `ip` is plainly public: of no refused class, and not this
    /// host's.
    pub fn is_public(&self, ip: IpAddr) -> bool {
        destination::classify(ip).is_none() && !self.host.contains(ip, Instant::now())
    }

    /// The addresses of `found` a callback may connect to, or why none.
    pub fn admit(&self, host: &str, found: Vec<SocketAddr>) -> Result<Vec<SocketAddr>, String> {
        let mut first_refusal = None;
        let ok: Vec<SocketAddr> = found
            .into_iter()
            .filter(|a| match self.check(a.ip()) {
                Ok(()) => true,
                Err(r) => {
                    first_refusal.get_or_insert(r);
                    false
                }
            })
            .collect();
        if ok.is_empty() {
            let why = first_refusal.map_or_else(|| "no address".to_owned(), |r| r.to_string());
            return Err(format!("refused destination: {host} resolves to {why}"));
        }
        Ok(ok)
    }
}

/// A resolver that drops addresses callbacks may not reach ([`Guard`]). A
/// name with no address left fails to resolve, naming what it resolved to.
#[derive(Debug, Clone)]
pub struct GuardedResolver {
    pub(super) guard: Guard,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let guard = self.guard.clone();
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let addrs: Addrs = Box::new(guard.admit(&host, found)?.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINE: [u8; 4] = [93, 184, 216, 34];

    fn guard(allowed: &[Class]) -> Guard {
        Guard::new(
            allowed,
            Arc::new(HostAddrs::reading(|| Ok(vec![IpAddr::from(MINE)]))),
        )
    }

    #[test]
    fn this_hosts_public_address_is_refused_unless_allowed() {
        let ip = IpAddr::from(MINE);
        let refused = guard(&[]).check(ip).unwrap_err();
        assert_eq!(refused.class, Class::ThisHost);
        assert!(
            refused.to_string().contains("this host's own address"),
            "{refused}"
        );
        assert!(guard(&[Class::ThisHost]).check(ip).is_ok());
        let mapped: IpAddr = "::ffff:93.184.216.34".parse().unwrap();
        assert_eq!(guard(&[]).check(mapped).unwrap_err().class, Class::ThisHost);
        assert!(guard(&[]).check(IpAddr::from([93, 184, 216, 35])).is_ok());
    }

    #[test]
    fn only_a_public_address_that_is_not_this_hosts_is_public() {
        let g = guard(&[Class::Loopback, Class::ThisHost]);
        assert!(g.is_public(IpAddr::from([93, 184, 216, 35])));
        assert!(!g.is_public(IpAddr::from(MINE)));
        assert!(!g.is_public(IpAddr::from([127, 0, 0, 1])));
        assert!(!g.is_public(IpAddr::from([10, 1, 2, 3])));
    }

    #[test]
    fn a_name_keeps_only_its_admitted_addresses() {
        let g = guard(&[]);
        let other = SocketAddr::from(([93, 184, 216, 35], 443));
        let found = vec![SocketAddr::from((MINE, 443)), other];
        assert_eq!(g.admit("example.com", found).unwrap(), vec![other]);
        let why = g
            .admit("me.example", vec![SocketAddr::from((MINE, 443))])
            .unwrap_err();
        assert!(
            why.contains("me.example resolves to") && why.contains("this host"),
            "{why}"
        );
    }
}
