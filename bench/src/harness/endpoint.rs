//! The endpoint the bench dials: a `ws://host[:port]/path` or `http://host[:port]/path` URL
//! (the STOMP WebSocket endpoint, or a SockJS service's base URL), split into the parts the TCP
//! connect (host, port) and the requests (the path) need. Both schemes mean the same plain TCP
//! connection; the transport decides what is said on it.
//!
//! Only plain `ws://` and `http://` are supported: TLS would measure the bench's TLS stack, not
//! the gateway, and a TLS-terminating proxy in front of the gateway is measured without the
//! bench's help.

use std::net::SocketAddr;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    /// The URL as given.
    pub(crate) url: String,
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) path: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EndpointError {
    #[error("{url:?}: only ws:// and http:// URLs are supported")]
    Scheme { url: String },
    #[error("{url:?}: no host")]
    NoHost { url: String },
    #[error("{url:?}: bad port")]
    BadPort { url: String },
    #[error("{host}:{port}: {message}")]
    Resolve {
        host: String,
        port: u16,
        message: String,
    },
}

impl Endpoint {
    pub(crate) fn parse(url: &str) -> Result<Self, EndpointError> {
        let rest = url
            .strip_prefix("ws://")
            .or_else(|| url.strip_prefix("http://"))
            .ok_or_else(|| EndpointError::Scheme { url: url.into() })?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            // [::1]:8080
            let (host, after) = v6
                .split_once(']')
                .ok_or_else(|| EndpointError::NoHost { url: url.into() })?;
            (host, after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err(EndpointError::NoHost { url: url.into() });
        }
        let port = match port {
            Some(p) => p
                .parse()
                .map_err(|_| EndpointError::BadPort { url: url.into() })?,
            None => 80,
        };
        Ok(Self {
            url: url.into(),
            host: host.into(),
            port,
            path: path.into(),
        })
    }

    /// The `Host` header of the upgrade request: `host:port`, IPv6 literals in brackets.
    pub(crate) fn host_header(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// Resolves the host once (workers do this before opening sessions, so thousands of
    /// sessions do not each ask the resolver).
    pub(crate) async fn resolve(&self) -> Result<SocketAddr, EndpointError> {
        let resolve_err = |message: String| EndpointError::Resolve {
            host: self.host.clone(),
            port: self.port,
            message,
        };
        let mut addrs = tokio::net::lookup_host((self.host.as_str(), self.port))
            .await
            .map_err(|e| resolve_err(e.to_string()))?;
        addrs
            .next()
            .ok_or_else(|| resolve_err("no addresses".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let e = Endpoint::parse("ws://127.0.0.1:8080/ws").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.path.as_str()),
            ("127.0.0.1", 8080, "/ws")
        );
        assert_eq!(e.host_header(), "127.0.0.1:8080");
        let e = Endpoint::parse("ws://localhost").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.path.as_str()),
            ("localhost", 80, "/")
        );
        let e = Endpoint::parse("ws://[::1]:9000/ws?x=1").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.path.as_str()),
            ("::1", 9000, "/ws?x=1")
        );
        assert_eq!(e.host_header(), "[::1]:9000");
        let e = Endpoint::parse("http://127.0.0.1:8080/sockjs").unwrap();
        assert_eq!((e.port, e.path.as_str()), (8080, "/sockjs"));
    }

    #[test]
    fn rejects_bad_urls() {
        assert!(matches!(
            Endpoint::parse("wss://h/ws"),
            Err(EndpointError::Scheme { .. })
        ));
        assert!(matches!(
            Endpoint::parse("https://h/sockjs"),
            Err(EndpointError::Scheme { .. })
        ));
        assert!(matches!(
            Endpoint::parse("ws://:80/ws"),
            Err(EndpointError::NoHost { .. })
        ));
        assert!(matches!(
            Endpoint::parse("ws://h:http/ws"),
            Err(EndpointError::BadPort { .. })
        ));
    }

    #[tokio::test]
    async fn resolves_ip_literals() {
        let e = Endpoint::parse("ws://127.0.0.1:8080/ws").unwrap();
        assert_eq!(
            e.resolve().await.unwrap(),
            "127.0.0.1:8080".parse().unwrap()
        );
    }
}
