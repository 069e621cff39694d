//! The PROXY protocol (HAProxy's, versions 1 and 2), receiving side: the
//! header a proxy writes at the start of a TCP connection to say whose it
//! is (`send-proxy` / `send-proxy-v2` on an HAProxy server line).
//!
//! # Wire format
//! - Version 1 is one text line of at most [`V1_MAX_LEN`] bytes:
//!   `PROXY TCP4 <src> <dst> <sport> <dport>\r\n` (`TCP6` alike, or
//!   `PROXY UNKNOWN …\r\n`).
//! - Version 2 is binary: the 12-byte [`V2_SIGNATURE`], a version/command
//!   byte (`0x21` PROXY, `0x20` LOCAL), a family/transport byte (`0x11`
//!   TCP over IPv4, `0x21` TCP over IPv6, …), a big-endian `u16` length, then
//!   that many bytes: the addresses (12 bytes for IPv4, 36 for IPv6, 216 for
//!   UNIX), then optional TLVs, which are skipped.
//!
//! # Contract
//! [`parse`] takes the bytes received so far (the gateway peeks at the
//! socket, so nothing is consumed here) and answers `Ok(None)` while more
//! are needed, `Ok(Some(header))` with the header's length to consume, or
//! an error naming what is wrong. A header longer than the caller's
//! `max_len` is [`ProxyError::TooLong`] as soon as its length is known (v2)
//! or the bytes run past it (v1): a caller never needs to buffer more than
//! `max_len` bytes. Bytes that do not start a PROXY header at all are
//! [`ProxyError::NotProxy`], decided from the first bytes ([`detect`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The first 12 bytes of every version 2 header.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// The start of every version 1 header.
pub const V1_PREFIX: &[u8] = b"PROXY ";
/// The longest version 1 header, `\r\n` included (the specification's
/// bound: `PROXY UNKNOWN` with two full IPv6 addresses and ports).
pub const V1_MAX_LEN: usize = 107;
/// Bytes of a version 2 header before its addresses.
pub const V2_FIXED_LEN: usize = 16;

/// Who the connection is from, as the header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addresses {
    /// A proxied TCP connection: the client's address and the address it
    /// connected to.
    Tcp {
        /// The client.
        source: SocketAddr,
        /// What the client connected to (the proxy's frontend).
        destination: SocketAddr,
    },
    /// The header names no client: a v2 `LOCAL` command (the proxy's own
    /// health check), a v1 `UNKNOWN`, or a family other than TCP over IPv4
    /// or IPv6 (UNIX sockets, unspecified). The connection is the proxy's
    /// own: its socket address is the one to use.
    Unknown,
}

/// A whole header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// 1 or 2.
    pub version: u8,
    /// What it says.
    pub addresses: Addresses,
    /// Its length in bytes, TLVs included: what the caller consumes.
    pub len: usize,
}

/// What is wrong with a header.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProxyError {
    /// The bytes start neither a v1 nor a v2 header.
    #[error("not a PROXY protocol header")]
    NotProxy,
    /// The header is longer than the caller allows.
    #[error("PROXY header of {len} bytes or more is over the limit of {max}")]
    TooLong {
        /// Its length, or how much was seen without its end (v1).
        len: usize,
        /// The caller's limit.
        max: usize,
    },
    /// A malformed version 1 line; says which part.
    #[error("malformed PROXY v1 header: {0}")]
    V1(&'static str),
    /// A version 2 header with a version other than 2 in its version byte.
    #[error("PROXY v2 header with version {0}")]
    V2Version(u8),
    /// A version 2 command other than LOCAL (0) or PROXY (1).
    #[error("PROXY v2 header with command {0}")]
    V2Command(u8),
    /// A version 2 PROXY command over a datagram (or unknown) transport
    /// for an IP family: not a TCP connection.
    #[error("PROXY v2 header with transport {0} (not TCP)")]
    V2Transport(u8),
    /// A version 2 family other than the four defined.
    #[error("PROXY v2 header with address family {0}")]
    V2Family(u8),
    /// A version 2 length too short for its family's addresses.
    #[error("PROXY v2 header of {len} address bytes, short of {need} for its family")]
    V2Short {
        /// The header's length field.
        len: usize,
        /// What the family needs.
        need: usize,
    },
}

/// Whether bytes start a PROXY header, from the first bytes alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detected {
    /// A v1 or v2 header starts here (its signature is whole).
    Proxy,
    /// These bytes are no PROXY header (an HTTP request, for one).
    NotProxy,
    /// Too few bytes to say: everything so far matches a signature.
    NeedMore,
}

/// Whether `bytes` start a PROXY header: at most 12 bytes decide.
pub fn detect(bytes: &[u8]) -> Detected {
    let matches = |signature: &[u8]| {
        let n = bytes.len().min(signature.len());
        bytes[..n] == signature[..n]
    };
    if bytes.len() >= V1_PREFIX.len() && bytes.starts_with(V1_PREFIX)
        || bytes.len() >= V2_SIGNATURE.len() && bytes.starts_with(&V2_SIGNATURE)
    {
        Detected::Proxy
    } else if bytes.is_empty() || matches(V1_PREFIX) || matches(&V2_SIGNATURE) {
        Detected::NeedMore
    } else {
        Detected::NotProxy
    }
}

/// Parse the header at the start of `bytes`, allowing at most `max_len`
/// bytes for it (at least [`V1_MAX_LEN`] makes sense; v2 needs
/// [`V2_FIXED_LEN`] plus its addresses and TLVs). See the module's contract.
pub fn parse(bytes: &[u8], max_len: usize) -> Result<Option<Header>, ProxyError> {
    match detect(bytes) {
        Detected::NeedMore => Ok(None),
        Detected::NotProxy => Err(ProxyError::NotProxy),
        Detected::Proxy if bytes[0] == b'P' => parse_v1(bytes, max_len.min(V1_MAX_LEN)),
        Detected::Proxy => parse_v2(bytes, max_len),
    }
}

fn parse_v1(bytes: &[u8], max: usize) -> Result<Option<Header>, ProxyError> {
    let window = &bytes[..bytes.len().min(max)];
    let Some(cr) = window.iter().position(|&b| b == b'\r' || b == b'\n') else {
        return if bytes.len() >= max {
            Err(ProxyError::TooLong {
                len: bytes.len(),
                max,
            })
        } else {
            Ok(None)
        };
    };
    if window[cr] == b'\n' {
        return Err(ProxyError::V1("line ends without CR"));
    }
    match window.get(cr + 1) {
        None if cr + 1 >= max => {
            return Err(ProxyError::TooLong { len: cr + 2, max });
        }
        None => return Ok(None),
        Some(b'\n') => {}
        Some(_) => return Err(ProxyError::V1("CR not followed by LF")),
    }
    let len = cr + 2;
    let line = std::str::from_utf8(&window[V1_PREFIX.len()..cr])
        .map_err(|_| ProxyError::V1("not ASCII"))?;
    let mut parts = line.split(' ');
    let family = parts.next().unwrap_or("");
    if family == "UNKNOWN" {
        // The rest is ignored, whatever it is.
        return Ok(Some(Header {
            version: 1,
            addresses: Addresses::Unknown,
            len,
        }));
    }
    let v6 = match family {
        "TCP4" => false,
        "TCP6" => true,
        _ => return Err(ProxyError::V1("protocol is not TCP4, TCP6 or UNKNOWN")),
    };
    let fields: Vec<&str> = parts.collect();
    let [src, dst, sport, dport] = fields[..] else {
        return Err(ProxyError::V1("not four fields after the protocol"));
    };
    let ip = |text: &str| -> Result<IpAddr, ProxyError> {
        if v6 {
            text.parse::<Ipv6Addr>()
                .map(IpAddr::V6)
                .map_err(|_| ProxyError::V1("bad IPv6 address"))
        } else {
            text.parse::<Ipv4Addr>()
                .map(IpAddr::V4)
                .map_err(|_| ProxyError::V1("bad IPv4 address"))
        }
    };
    let port = |text: &str| -> Result<u16, ProxyError> {
        let digits =
            !text.is_empty() && text.len() <= 5 && text.bytes().all(|b| b.is_ascii_digit());
        let leading_zero = text.len() > 1 && text.starts_with('0');
        if !digits || leading_zero {
            return Err(ProxyError::V1("bad port"));
        }
        text.parse().map_err(|_| ProxyError::V1("bad port"))
    };
    Ok(Some(Header {
        version: 1,
        addresses: Addresses::Tcp {
            source: SocketAddr::new(ip(src)?, port(sport)?),
            destination: SocketAddr::new(ip(dst)?, port(dport)?),
        },
        len,
    }))
}

fn parse_v2(bytes: &[u8], max: usize) -> Result<Option<Header>, ProxyError> {
    if bytes.len() < V2_FIXED_LEN {
        return Ok(None);
    }
    let version = bytes[12] >> 4;
    let command = bytes[12] & 0x0f;
    if version != 2 {
        return Err(ProxyError::V2Version(version));
    }
    if command > 1 {
        return Err(ProxyError::V2Command(command));
    }
    let family = bytes[13] >> 4;
    let transport = bytes[13] & 0x0f;
    if family > 3 {
        return Err(ProxyError::V2Family(family));
    }
    let body = usize::from(u16::from_be_bytes([bytes[14], bytes[15]]));
    let len = V2_FIXED_LEN + body;
    if len > max {
        return Err(ProxyError::TooLong { len, max });
    }
    let need = match family {
        1 => 12,
        2 => 36,
        3 => 216,
        _ => 0,
    };
    if body < need {
        return Err(ProxyError::V2Short { len: body, need });
    }
    if command == 1 && (family == 1 || family == 2) && transport != 1 {
        return Err(ProxyError::V2Transport(transport));
    }
    if bytes.len() < len {
        return Ok(None);
    }
    let a = &bytes[V2_FIXED_LEN..len];
    let addresses = match (command, family) {
        (1, 1) => {
            let ip = |i: usize| IpAddr::V4(Ipv4Addr::new(a[i], a[i + 1], a[i + 2], a[i + 3]));
            Addresses::Tcp {
                source: SocketAddr::new(ip(0), u16::from_be_bytes([a[8], a[9]])),
                destination: SocketAddr::new(ip(4), u16::from_be_bytes([a[10], a[11]])),
            }
        }
        (1, 2) => {
            let ip = |i: usize| {
                let mut octets = [0u8; 16];
                octets.copy_from_slice(&a[i..i + 16]);
                IpAddr::V6(Ipv6Addr::from(octets))
            };
            Addresses::Tcp {
                source: SocketAddr::new(ip(0), u16::from_be_bytes([a[32], a[33]])),
                destination: SocketAddr::new(ip(16), u16::from_be_bytes([a[34], a[35]])),
            }
        }
        // LOCAL, UNSPEC or UNIX: no client address to take.
        _ => Addresses::Unknown,
    };
    Ok(Some(Header {
        version: 2,
        addresses,
        len,
    }))
}

/// A version 2 PROXY header for a TCP connection from `source` to
/// `destination` (both IPv4 or both IPv6; a mixed pair is written as IPv6
/// with the IPv4 one mapped), without TLVs: what HAProxy's `send-proxy-v2`
/// writes. For tests and tools.
pub fn encode_v2(source: SocketAddr, destination: SocketAddr) -> Vec<u8> {
    let mut out = V2_SIGNATURE.to_vec();
    out.push(0x21);
    match (source.ip(), destination.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            out.extend_from_slice(&[0x11, 0, 12]);
            out.extend_from_slice(&s.octets());
            out.extend_from_slice(&d.octets());
        }
        (s, d) => {
            let v6 = |ip: IpAddr| match ip {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => v6,
            };
            out.extend_from_slice(&[0x21, 0, 36]);
            out.extend_from_slice(&v6(s).octets());
            out.extend_from_slice(&v6(d).octets());
        }
    }
    out.extend_from_slice(&source.port().to_be_bytes());
    out.extend_from_slice(&destination.port().to_be_bytes());
    out
}

/// A version 1 PROXY line for a TCP connection (both addresses of one
/// family). For tests and tools.
pub fn encode_v1(source: SocketAddr, destination: SocketAddr) -> Vec<u8> {
    let family = if source.is_ipv4() { "TCP4" } else { "TCP6" };
    format!(
        "PROXY {family} {} {} {} {}\r\n",
        source.ip(),
        destination.ip(),
        source.port(),
        destination.port()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 512;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn tcp(src: &str, dst: &str) -> Addresses {
        Addresses::Tcp {
            source: addr(src),
            destination: addr(dst),
        }
    }

    #[test]
    fn v1_tcp4_and_tcp6_parse_and_leave_the_request_after_them() {
        let mut bytes = b"PROXY TCP4 192.0.2.7 127.0.0.1 51234 8000\r\n".to_vec();
        let header_len = bytes.len();
        bytes.extend_from_slice(b"GET / HTTP/1.1\r\n");
        let h = parse(&bytes, MAX).unwrap().unwrap();
        assert_eq!(h.version, 1);
        assert_eq!(h.len, header_len);
        assert_eq!(h.addresses, tcp("192.0.2.7:51234", "127.0.0.1:8000"));
        let v6 = b"PROXY TCP6 2001:db8::1 ::1 443 8000\r\n";
        let h = parse(v6, MAX).unwrap().unwrap();
        assert_eq!(h.addresses, tcp("[2001:db8::1]:443", "[::1]:8000"));
        let unknown = b"PROXY UNKNOWN whatever follows\r\n";
        assert_eq!(
            parse(unknown, MAX).unwrap().unwrap().addresses,
            Addresses::Unknown
        );
        assert_eq!(parse(b"PROXY UNKNOWN\r\n", MAX).unwrap().unwrap().len, 15);
    }

    #[test]
    fn partial_headers_need_more_at_every_cut() {
        let v1 = encode_v1(addr("203.0.113.9:40000"), addr("127.0.0.1:8000"));
        let v2 = encode_v2(addr("203.0.113.9:40000"), addr("127.0.0.1:8000"));
        for whole in [&v1, &v2] {
            for cut in 0..whole.len() {
                assert_eq!(parse(&whole[..cut], MAX), Ok(None), "cut at {cut}");
            }
            let h = parse(whole, MAX).unwrap().unwrap();
            assert_eq!(h.len, whole.len());
            assert_eq!(h.addresses, tcp("203.0.113.9:40000", "127.0.0.1:8000"));
        }
    }

    #[test]
    fn http_and_other_bytes_are_not_proxy_headers() {
        for bytes in [
            &b"GET /ws HTTP/1.1\r\n"[..],
            b"POST /sockjs/1/2/xhr HTTP/1.1\r\n",
            b"PUT",
            b"PROXI",
            b"\r\n\r\n\0\r\nQUIX\n",
            b"\x16\x03\x01",
        ] {
            assert_eq!(parse(bytes, MAX), Err(ProxyError::NotProxy), "{bytes:?}");
        }
        assert_eq!(detect(b"P"), Detected::NeedMore);
        assert_eq!(detect(b"PROXY"), Detected::NeedMore);
        assert_eq!(detect(b"PROXY "), Detected::Proxy);
        assert_eq!(detect(b"\r\n\r\n"), Detected::NeedMore);
        assert_eq!(detect(b""), Detected::NeedMore);
    }

    #[test]
    fn v2_ipv4_ipv6_local_and_tlvs() {
        let v6 = encode_v2(addr("[2001:db8::5]:1234"), addr("[::1]:8000"));
        assert_eq!(
            parse(&v6, MAX).unwrap().unwrap().addresses,
            tcp("[2001:db8::5]:1234", "[::1]:8000")
        );
        // LOCAL (a health check from the proxy itself), no addresses.
        let mut local = V2_SIGNATURE.to_vec();
        local.extend_from_slice(&[0x20, 0x00, 0, 0]);
        let h = parse(&local, MAX).unwrap().unwrap();
        assert_eq!((h.addresses, h.len), (Addresses::Unknown, 16));
        // TLVs after the addresses are skipped, counted in the length.
        let mut with_tlv = encode_v2(addr("192.0.2.1:1"), addr("192.0.2.2:2"));
        with_tlv[15] += 7;
        with_tlv.extend_from_slice(&[0x01, 0x00, 0x04, b'h', b't', b't', b'p']);
        with_tlv.extend_from_slice(b"GET");
        let h = parse(&with_tlv, MAX).unwrap().unwrap();
        assert_eq!(h.len, with_tlv.len() - 3);
        assert_eq!(h.addresses, tcp("192.0.2.1:1", "192.0.2.2:2"));
        // UNIX sockets name no IP client.
        let mut unix = V2_SIGNATURE.to_vec();
        unix.extend_from_slice(&[0x21, 0x31, 0, 216]);
        unix.extend_from_slice(&[0u8; 216]);
        assert_eq!(
            parse(&unix, MAX).unwrap().unwrap().addresses,
            Addresses::Unknown
        );
    }

    #[test]
    fn malformed_v2_headers_name_their_fault() {
        let good = encode_v2(addr("192.0.2.1:1"), addr("192.0.2.2:2"));
        let with = |i: usize, b: u8| {
            let mut v = good.clone();
            v[i] = b;
            v
        };
        assert_eq!(parse(&with(12, 0x11), MAX), Err(ProxyError::V2Version(1)));
        assert_eq!(parse(&with(12, 0x22), MAX), Err(ProxyError::V2Command(2)));
        assert_eq!(parse(&with(13, 0x41), MAX), Err(ProxyError::V2Family(4)));
        assert_eq!(parse(&with(13, 0x12), MAX), Err(ProxyError::V2Transport(2)));
        assert_eq!(
            parse(&with(15, 4), MAX),
            Err(ProxyError::V2Short { len: 4, need: 12 })
        );
        // The length decides "too long" before the bytes arrive.
        let mut huge = good[..16].to_vec();
        huge[14] = 0xff;
        assert_eq!(
            parse(&huge, MAX),
            Err(ProxyError::TooLong {
                len: 16 + 0xff0c,
                max: MAX
            })
        );
    }

    proptest::proptest! {
        #[test]
        fn any_tcp_header_round_trips_and_waits_at_every_cut(
            v6 in proptest::bool::ANY,
            a in proptest::num::u128::ANY,
            b in proptest::num::u128::ANY,
            sport in proptest::num::u16::ANY,
            dport in proptest::num::u16::ANY,
            cut in 0usize..200,
            v1 in proptest::bool::ANY,
        ) {
            let ip = |x: u128| if v6 {
                IpAddr::V6(Ipv6Addr::from(x))
            } else {
                IpAddr::V4(Ipv4Addr::from(x as u32))
            };
            let (source, destination) = (SocketAddr::new(ip(a), sport), SocketAddr::new(ip(b), dport));
            let bytes = if v1 { encode_v1(source, destination) } else { encode_v2(source, destination) };
            let h = parse(&bytes, MAX).unwrap().unwrap();
            proptest::prop_assert_eq!(h.len, bytes.len());
            proptest::prop_assert_eq!(h.addresses, Addresses::Tcp { source, destination });
            let cut = cut.min(bytes.len() - 1);
            proptest::prop_assert_eq!(parse(&bytes[..cut], MAX), Ok(None));
        }
    }

    #[test]
    fn malformed_v1_lines_name_their_fault() {
        let cases: &[(&[u8], &str)] = &[
            (b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n", "protocol"),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n", "four fields"),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n", "four fields"),
            (b"PROXY TCP4 1.2.3.4  5.6.7.8 1 2\r\n", "four fields"),
            (b"PROXY TCP4 ::1 5.6.7.8 1 2\r\n", "IPv4"),
            (b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n", "IPv6"),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n", "port"),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n", "port"),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 -1 2\r\n", "port"),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n", "without CR"),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rX", "CR not followed"),
        ];
        for (bytes, says) in cases {
            let err = parse(bytes, MAX).unwrap_err().to_string();
            assert!(err.contains(says), "{bytes:?}: {err}");
        }
        let endless = [b"PROXY TCP4 ".as_slice(), &[b'1'; 200]].concat();
        assert!(matches!(
            parse(&endless, MAX),
            Err(ProxyError::TooLong {
                max: V1_MAX_LEN,
                ..
            })
        ));
        // A caller's limit below the v1 bound applies too.
        let line = encode_v1(addr("192.0.2.1:1"), addr("192.0.2.2:2"));
        assert!(matches!(
            parse(&line, 20),
            Err(ProxyError::TooLong { max: 20, .. })
        ));
    }
}
