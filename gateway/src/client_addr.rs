//! The client's address: the connection's own, or what a trusted proxy
//! says it is (`[proxy]`).
//!
//! With `proxy.protocol` on, [`crate::proxy_header`] reads it from the
//! PROXY header once per connection, before anything else. With it off,
//! each HTTP request from a trusted proxy names its client in
//! `X-Forwarded-For`: the rightmost address there that is not itself a
//! trusted proxy (every proxy appends the address it got the request from,
//! so the entries left of the first untrusted one could be anything the
//! client wrote). That address carries port 0: the header has none.
//!
//! The resolved address is what the handlers see as `ConnectInfo`, what
//! sessions log, and what `[connection_rate]` counts.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use crate::config::ProxyConfig;
use crate::conn_rate::ConnectionRate;

/// How client addresses are found and limited.
#[derive(Debug)]
pub struct ClientAddrs {
    proxy: ProxyConfig,
    rate: Option<Arc<ConnectionRate>>,
}

impl ClientAddrs {
    /// From `[proxy]` and the `[connection_rate]` limit, when on.
    pub fn new(proxy: ProxyConfig, rate: Option<Arc<ConnectionRate>>) -> Self {
        ClientAddrs { proxy, rate }
    }

    /// Whether connections are read for a PROXY header first.
    pub fn proxy_protocol(&self) -> bool {
        self.proxy.protocol
    }

    /// Whether `peer` is a trusted proxy.
    pub fn is_trusted(&self, peer: IpAddr) -> bool {
        self.proxy.is_trusted(peer)
    }

    /// Whether the requests of a connection from `peer` name their client
    /// in `X-Forwarded-For` (PROXY protocol off, `peer` trusted): then the
    /// connection rate applies to each connection's first request, not at
    /// accept.
    pub fn uses_forwarded_for(&self, peer: SocketAddr) -> bool {
        !self.proxy.protocol && self.proxy.is_trusted(peer.ip())
    }

    /// The client of a request from `peer` with these `X-Forwarded-For`
    /// header values (in the order received), when `peer` is trusted and
    /// the PROXY protocol is off; else `peer`. A value that is no address
    /// ends the walk: the client is the last trusted hop seen before it
    /// (or `peer`), never something a client could have forged.
    pub fn forwarded_for<'a>(
        &self,
        peer: SocketAddr,
        values: impl IntoIterator<Item = &'a [u8]>,
    ) -> SocketAddr {
        if !self.uses_forwarded_for(peer) {
            return peer;
        }
        let entries: Vec<&[u8]> = values
            .into_iter()
            .flat_map(|v| v.split(|&b| b == b','))
            .collect();
        let mut client = peer;
        for entry in entries.iter().rev() {
            let Some(ip) = std::str::from_utf8(entry)
                .ok()
                .and_then(|s| parse_forwarded_ip(s.trim()))
            else {
                break;
            };
            client = SocketAddr::new(ip, 0);
            if !self.proxy.is_trusted(ip) {
                break;
            }
        }
        client
    }

    /// Whether a new connection from `client` may be served now, else the
    /// seconds to wait (`[connection_rate]`; always yes when it is off).
    /// The trusted proxies themselves are never limited: their own
    /// connections (health checks, a request naming no client) are not
    /// their users'.
    pub fn admit(&self, client: IpAddr) -> Result<(), u64> {
        match &self.rate {
            Some(_) if self.proxy.is_trusted(client) => Ok(()),
            Some(rate) => rate.admit(client.to_canonical(), Instant::now()),
            None => Ok(()),
        }
    }

    /// Whether the connection rate is on.
    pub fn rate_limited(&self) -> bool {
        self.rate.is_some()
    }
}

/// An `X-Forwarded-For` entry: an address, also as `[v6]` or with a port
/// (`1.2.3.4:5678`, `[::1]:80`) as some proxies write it.
fn parse_forwarded_ip(entry: &str) -> Option<IpAddr> {
    if let Ok(ip) = entry.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    if let Ok(addr) = entry.parse::<SocketAddr>() {
        return Some(addr.ip().to_canonical());
    }
    entry
        .strip_prefix('[')
        .and_then(|e| e.strip_suffix(']'))
        .and_then(|e| e.parse::<IpAddr>().ok())
}

/// The whole answer, with `Connection: close`, to a connection over its
/// address's rate on a path that writes its own HTTP (the native ones).
pub(crate) fn rate_limited_answer(retry_after: u64) -> String {
    let body = format!("too many new connections from this address: retry after {retry_after} s\n");
    format!(
        "HTTP/1.1 429 Too Many Requests\r\nContent-Type: text/plain; charset=utf-8\r\nRetry-After: {retry_after}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(protocol: bool, trusted: &[&str]) -> ClientAddrs {
        ClientAddrs::new(
            ProxyConfig {
                protocol,
                trusted: trusted.iter().map(|t| t.parse().unwrap()).collect(),
            },
            None,
        )
    }

    fn peer(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_rightmost_untrusted_address_is_the_client() {
        let a = addrs(false, &["127.0.0.1", "10.0.0.0/8"]);
        let haproxy = peer("127.0.0.1:40000");
        let client = |values: &[&str]| {
            a.forwarded_for(haproxy, values.iter().map(|v| v.as_bytes()))
                .to_string()
        };
        assert_eq!(client(&["192.0.2.7"]), "192.0.2.7:0");
        // The client wrote a forged first entry; the proxies appended.
        assert_eq!(client(&["6.6.6.6, 192.0.2.7, 10.1.1.1"]), "192.0.2.7:0");
        // Several header lines are one list, in order.
        assert_eq!(client(&["6.6.6.6", "192.0.2.7", "10.1.1.1"]), "192.0.2.7:0");
        assert_eq!(client(&["[2001:db8::1]:443"]), "[2001:db8::1]:0");
        assert_eq!(client(&["192.0.2.9:5555"]), "192.0.2.9:0");
        // Every entry a proxy: the leftmost.
        assert_eq!(client(&["10.2.2.2, 10.1.1.1"]), "10.2.2.2:0");
        // Garbage ends the walk at the last trusted hop.
        assert_eq!(client(&["192.0.2.7, junk, 10.1.1.1"]), "10.1.1.1:0");
        assert_eq!(client(&["junk"]), "127.0.0.1:40000");
        assert_eq!(client(&[]), "127.0.0.1:40000");
    }

    #[test]
    fn untrusted_peers_and_the_proxy_protocol_ignore_the_header() {
        let direct = peer("192.0.2.50:1234");
        let a = addrs(false, &["127.0.0.1"]);
        assert_eq!(a.forwarded_for(direct, [b"6.6.6.6".as_slice()]), direct);
        let p = addrs(true, &["127.0.0.1"]);
        let haproxy = peer("127.0.0.1:40000");
        assert_eq!(p.forwarded_for(haproxy, [b"6.6.6.6".as_slice()]), haproxy);
        let none = addrs(false, &[]);
        assert_eq!(
            none.forwarded_for(haproxy, [b"6.6.6.6".as_slice()]),
            haproxy
        );
    }
}
