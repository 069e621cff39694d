//! Where a callback may go. A backend names the URL, and Herald makes the
//! request from inside its own network, so an unchecked URL would let
//! anyone who can register a topic reach internal services or the cloud
//! metadata endpoint (server-side request forgery).
//!
//! Two checks, both pure:
//! - at registration, [`parse_url`]: `http`/`https` only, at most
//!   [`MAX_URL_BYTES`], a host present; an IP literal or a `localhost` name
//!   is classified right away.
//! - at connection time, [`check`] on every address the host name resolved
//!   to (a name can resolve to anything, and differently tomorrow), before
//!   connecting to it. That step belongs to the sender.
//!
//! Refused unless allowed (`allowed` lists the [`Class`]es a deployment
//! opts into, e.g. `Loopback` for a test set-up): loopback, private (RFC
//! 1918, IPv6 ULA, the deprecated site-local), link-local, the metadata
//! addresses, unspecified (and IPv4 `0.0.0.0/8`, which Linux treats as
//! this host), broadcast, multicast, shared address space (CGNAT,
//! `100.64.0.0/10`), the reserved `240.0.0.0/4`, and the ranges of IANA's
//! special-purpose registries that are not globally reachable
//! (documentation, benchmarking, IETF protocol assignments, discard-only,
//! local-use NAT64; [`Class::Reserved`]). IPv6 forms that embed an IPv4
//! address (mapped `::ffff:a.b.c.d`, the deprecated compatible
//! `::a.b.c.d`, NAT64 `64:ff9b::a.b.c.d`, 6to4 `2002:AABB:CCDD::` and
//! Teredo's client and server) are classified by that IPv4 address.
//!
//! A third check is not pure: an address that passes all of the above but
//! is one of this host's own ([`super::host`], [`Class::ThisHost`]) is
//! refused when a callback connects, unless allowed as the private classes
//! are.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use url::{Host, Url};

/// The longest URL accepted, in bytes.
pub const MAX_URL_BYTES: usize = 2048;

/// A kind of address a callback is refused unless it is allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// `127.0.0.0/8`, `::1`, and the names `localhost`, `*.localhost`.
    Loopback,
    /// `10/8`, `172.16/12`, `192.168/16`, `fc00::/7`, `fec0::/10`.
    Private,
    /// `169.254/16`, `fe80::/10`.
    LinkLocal,
    /// The cloud metadata endpoints `169.254.169.254` and `fd00:ec2::254`;
    /// allowing link-local or private addresses does not allow these.
    Metadata,
    /// `0.0.0.0/8`, `::`.
    Unspecified,
    /// `255.255.255.255`.
    Broadcast,
    /// `224.0.0.0/4`, `ff00::/8`.
    Multicast,
    /// `100.64.0.0/10`, the carrier-grade NAT shared address space.
    Shared,
    /// `240.0.0.0/4` (other than broadcast), and the IANA special-purpose
    /// ranges that are not globally reachable: `192.0.0.0/24` (but for
    /// `.9` and `.10`), the TEST-NETs `192.0.2.0/24`, `198.51.100.0/24`,
    /// `203.0.113.0/24`, benchmarking `198.18.0.0/15`, the 6to4 relay
    /// anycast `192.88.99.0/24`; `100::/64`, `2001::/23` (but for its
    /// global parts), `2001:db8::/32`, `3fff::/20`, `5f00::/16`.
    Reserved,
    /// An address of one of this host's own interfaces that would
    /// otherwise pass for public ([`super::host`]): checked when a
    /// callback connects, not at registration.
    ThisHost,
}

impl Class {
    /// The name in errors and configuration: `loopback`, `private`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Loopback => "loopback",
            Class::Private => "private",
            Class::LinkLocal => "link-local",
            Class::Metadata => "metadata",
            Class::Unspecified => "unspecified",
            Class::Broadcast => "broadcast",
            Class::Multicast => "multicast",
            Class::Shared => "shared (CGNAT)",
            Class::Reserved => "reserved",
            Class::ThisHost => "this host's own address",
        }
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The class of `ip` when it is one callbacks are refused, `None` when it
/// is an ordinary public address.
pub fn classify(ip: IpAddr) -> Option<Class> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<Class> {
    let [a, b, c, d] = ip.octets();
    Some(match (a, b) {
        (0, _) => Class::Unspecified,
        (127, _) => Class::Loopback,
        (10, _) | (172, 16..=31) | (192, 168) => Class::Private,
        (169, 254) if (c, d) == (169, 254) => Class::Metadata,
        (169, 254) => Class::LinkLocal,
        (100, 64..=127) => Class::Shared,
        (224..=239, _) => Class::Multicast,
        (255, 255) if (c, d) == (255, 255) => Class::Broadcast,
        (240..=255, _) => Class::Reserved,
        // IANA IPv4 special-purpose registry, not globally reachable: IETF
        // protocol assignments (but for the anycast 192.0.0.9 and .10),
        // the documentation TEST-NETs, benchmarking, the deprecated 6to4
        // relay anycast.
        (192, 0) if c == 0 && !matches!(d, 9 | 10) => Class::Reserved,
        (192, 0) if c == 2 => Class::Reserved,
        (192, 88) if c == 99 => Class::Reserved,
        (198, 18 | 19) => Class::Reserved,
        (198, 51) if c == 100 => Class::Reserved,
        (203, 0) if c == 113 => Class::Reserved,
        _ => return None,
    })
}

fn classify_v6(ip: Ipv6Addr) -> Option<Class> {
    const METADATA: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);
    if ip.is_unspecified() {
        return Some(Class::Unspecified);
    }
    if ip.is_loopback() {
        return Some(Class::Loopback);
    }
    if ip == METADATA {
        return Some(Class::Metadata);
    }
    let s = ip.segments();
    let embedded = |hi: usize| {
        let [a, b] = s[hi].to_be_bytes();
        let [c, d] = s[hi + 1].to_be_bytes();
        Ipv4Addr::new(a, b, c, d)
    };
    match s {
        // IPv4-mapped ::ffff:a.b.c.d and IPv4-compatible ::a.b.c.d.
        [0, 0, 0, 0, 0, 0xffff | 0, _, _] => classify_v4(embedded(6)),
        // NAT64, the well-known prefix 64:ff9b::/96.
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => classify_v4(embedded(6)),
        // Local-use NAT64 (64:ff9b:1::/48): a network's own translator.
        [0x64, 0xff9b, 1, ..] => Some(Class::Private),
        // 6to4 (2002::/16): the IPv4 address in bits 16-47.
        [0x2002, ..] => classify_v4(embedded(1)),
        // Teredo (2001::/32): the server's IPv4 in bits 32-63, the
        // client's inverted in the last 32: refused when either is.
        [0x2001, 0, ..] => {
            let [a, b, c, d] = embedded(6).octets();
            classify_v4(Ipv4Addr::new(!a, !b, !c, !d)).or(classify_v4(embedded(2)))
        }
        [0x2001, second, ..] if second < 0x200 => ietf_assignment(s),
        // Discard-only (100::/64), documentation (2001:db8::/32,
        // 3fff::/20), SRv6 SIDs (5f00::/16).
        [0x100, 0, 0, 0, ..] => Some(Class::Reserved),
        [0x2001, 0xdb8, ..] => Some(Class::Reserved),
        [0x3fff, second, ..] if second < 0x1000 => Some(Class::Reserved),
        [0x5f00, ..] => Some(Class::Reserved),
        [first, ..] if first & 0xfe00 == 0xfc00 => Some(Class::Private),
        [first, ..] if first & 0xffc0 == 0xfec0 => Some(Class::Private),
        [first, ..] if first & 0xffc0 == 0xfe80 => Some(Class::LinkLocal),
        [first, ..] if first & 0xff00 == 0xff00 => Some(Class::Multicast),
        _ => None,
    }
}

/// The IPv4 addresses an IPv6 address embeds, in the forms [`classify`]
/// reads them from: mapped, compatible, NAT64 (well-known prefix), 6to4,
/// and Teredo's server and (inverted) client.
pub fn embedded_ipv4(ip: Ipv6Addr) -> [Option<Ipv4Addr>; 2] {
    let s = ip.segments();
    let embedded = |hi: usize| {
        let [a, b] = s[hi].to_be_bytes();
        let [c, d] = s[hi + 1].to_be_bytes();
        Ipv4Addr::new(a, b, c, d)
    };
    match s {
        [0, 0, 0, 0, 0, 0xffff | 0, _, _] if !ip.is_unspecified() && !ip.is_loopback() => {
            [Some(embedded(6)), None]
        }
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => [Some(embedded(6)), None],
        [0x2002, ..] => [Some(embedded(1)), None],
        [0x2001, 0, ..] => {
            let [a, b, c, d] = embedded(6).octets();
            [Some(embedded(2)), Some(Ipv4Addr::new(!a, !b, !c, !d))]
        }
        _ => [None, None],
    }
}

/// 2001::/23, the IETF protocol assignments (Teredo apart): not globally
/// reachable but for the ranges the IANA registry marks so.
fn ietf_assignment(s: [u16; 8]) -> Option<Class> {
    let global = match s {
        // PCP and TURN anycast.
        [0x2001, 1, 0, 0, 0, 0, 0, 1 | 2] => true,
        // AMT; AS112-v6; ORCHIDv2; Drone Remote ID.
        [0x2001, 3, ..] | [0x2001, 4, 0x112, ..] => true,
        [0x2001, second, ..] => (0x20..0x40).contains(&second),
        _ => false,
    };
    (!global).then_some(Class::Reserved)
}

/// A destination address that was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("destination {ip} is {class}, which callbacks may not reach unless allowed")]
pub struct Refused {
    /// The address.
    pub ip: IpAddr,
    /// Its class.
    pub class: Class,
}

/// Whether a callback may connect to `ip`, given the classes this
/// deployment allows.
pub fn check(ip: IpAddr, allowed: &[Class]) -> Result<(), Refused> {
    match classify(ip) {
        Some(class) if !allowed.contains(&class) => Err(Refused { ip, class }),
        _ => Ok(()),
    }
}

/// Why a URL was refused at registration. Each variant names the field
/// (`callback_url`, `recheck_url`) for the API's error body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    /// Longer than [`MAX_URL_BYTES`].
    #[error("{field}: {len} bytes; the limit is {MAX_URL_BYTES}")]
    TooLong {
        /// The field.
        field: &'static str,
        /// The URL's length.
        len: usize,
    },
    /// Not a URL.
    #[error("{field}: not a URL: {reason}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// The parser's complaint.
        reason: String,
    },
    /// A scheme other than `http` or `https`.
    #[error("{field}: scheme {scheme:?} is not http or https")]
    Scheme {
        /// The field.
        field: &'static str,
        /// The refused scheme.
        scheme: String,
    },
    /// No host.
    #[error("{field}: the URL has no host")]
    NoHost {
        /// The field.
        field: &'static str,
    },
    /// The host is an address (or `localhost`) of a refused class.
    #[error("{field}: {host} is {class}, which callbacks may not reach unless allowed")]
    Refused {
        /// The field.
        field: &'static str,
        /// The host as written in the URL.
        host: String,
        /// Its class.
        class: Class,
    },
}

impl UrlError {
    /// The offending field.
    pub fn field(&self) -> &'static str {
        match self {
            UrlError::TooLong { field, .. }
            | UrlError::Invalid { field, .. }
            | UrlError::Scheme { field, .. }
            | UrlError::NoHost { field }
            | UrlError::Refused { field, .. } => field,
        }
    }
}

/// Validates a callback or recheck URL given in `field` at registration.
/// The URL is parsed as WHATWG URLs are (the `url` crate, which the HTTP
/// client uses too, so the host checked is the host connected to). A host
/// given as an address, or named `localhost`/`*.localhost` (always
/// loopback, RFC 6761), is checked against `allowed` now; other names are
/// checked by [`check`] once resolved.
pub fn parse_url(field: &'static str, text: &str, allowed: &[Class]) -> Result<Url, UrlError> {
    if text.len() > MAX_URL_BYTES {
        return Err(UrlError::TooLong {
            field,
            len: text.len(),
        });
    }
    let url = Url::parse(text).map_err(|e| UrlError::Invalid {
        field,
        reason: e.to_string(),
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(UrlError::Scheme {
            field,
            scheme: url.scheme().to_owned(),
        });
    }
    let class = match url.host() {
        None => return Err(UrlError::NoHost { field }),
        Some(Host::Domain("")) => return Err(UrlError::NoHost { field }),
        Some(Host::Ipv4(ip)) => classify_v4(ip),
        Some(Host::Ipv6(ip)) => classify_v6(ip),
        Some(Host::Domain(name)) => {
            let name = name.strip_suffix('.').unwrap_or(name);
            (name == "localhost" || name.ends_with(".localhost")).then_some(Class::Loopback)
        }
    };
    match class {
        Some(class) if !allowed.contains(&class) => Err(UrlError::Refused {
            field,
            host: url.host_str().unwrap_or_default().to_owned(),
            class,
        }),
        _ => Ok(url),
    }
}

#[cfg(test)]
mod tests;
