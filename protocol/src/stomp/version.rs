//! STOMP protocol versions and their negotiation.

use std::fmt;

/// A STOMP protocol version. Ordered: `V1_0 < V1_1 < V1_2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Version {
    /// STOMP 1.0: no header escaping, no heart-beats.
    V1_0,
    /// STOMP 1.1: escapes `\n`, `:` and `\` in headers; heart-beats.
    V1_1,
    /// STOMP 1.2: also escapes `\r`; `\r\n` line endings.
    V1_2,
}

impl Version {
    /// Every version Herald speaks, as an `accept-version` / `version` list.
    pub const SUPPORTED: &'static str = "1.0,1.1,1.2";

    /// The version as written in `accept-version` and `version` headers.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V1_0 => "1.0",
            Version::V1_1 => "1.1",
            Version::V1_2 => "1.2",
        }
    }

    /// The WebSocket subprotocol name (`Sec-WebSocket-Protocol`).
    pub fn subprotocol(self) -> &'static str {
        match self {
            Version::V1_0 => "v10.stomp",
            Version::V1_1 => "v11.stomp",
            Version::V1_2 => "v12.stomp",
        }
    }

    /// The version a WebSocket subprotocol name stands for.
    pub fn from_subprotocol(s: &str) -> Option<Version> {
        match s {
            "v10.stomp" => Some(Version::V1_0),
            "v11.stomp" => Some(Version::V1_1),
            "v12.stomp" => Some(Version::V1_2),
            _ => None,
        }
    }

    /// The version named by `s` (`1.0`, `1.1` or `1.2`).
    fn parse(s: &str) -> Option<Version> {
        match s {
            "1.0" => Some(Version::V1_0),
            "1.1" => Some(Version::V1_1),
            "1.2" => Some(Version::V1_2),
            _ => None,
        }
    }

    /// Highest version in a comma-separated `accept-version` header that we
    /// support; `None` header => `V1_0`; `Some` but nothing common => `None`.
    ///
    /// Unknown entries (`1.3`) are ignored; spaces around entries are
    /// tolerated.
    pub fn negotiate(accept_version: Option<&str>) -> Option<Version> {
        match accept_version {
            None => Some(Version::V1_0),
            Some(list) => list
                .split(',')
                .filter_map(|v| Version::parse(v.trim()))
                .max(),
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_picks_the_highest_common_version() {
        assert_eq!(Version::negotiate(None), Some(Version::V1_0));
        assert_eq!(Version::negotiate(Some("1.1,1.2")), Some(Version::V1_2));
        assert_eq!(Version::negotiate(Some("1.2, 1.0")), Some(Version::V1_2));
        assert_eq!(Version::negotiate(Some("1.0,1.1,1.3")), Some(Version::V1_1));
        assert_eq!(Version::negotiate(Some("2.0")), None);
        assert_eq!(Version::negotiate(Some("")), None);
    }

    #[test]
    fn names_round_trip() {
        for v in [Version::V1_0, Version::V1_1, Version::V1_2] {
            assert_eq!(Version::from_subprotocol(v.subprotocol()), Some(v));
            assert_eq!(Version::negotiate(Some(v.as_str())), Some(v));
            assert!(Version::SUPPORTED.contains(v.as_str()));
        }
        assert_eq!(Version::from_subprotocol("stomp"), None);
        assert!(Version::V1_0 < Version::V1_2);
    }
}
