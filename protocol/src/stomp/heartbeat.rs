//! The STOMP `heart-beat` header and interval negotiation (STOMP 1.1+).

use std::time::Duration;

/// A `heart-beat` header: `cx,cy` in milliseconds. `cx` is how often the
/// sender can send heart-beats, `cy` how often it wants to receive them;
/// 0 means never.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeartBeat {
    /// Smallest interval at which the sender can send, in ms (0: cannot).
    pub cx: u32,
    /// Interval at which the sender wants to receive, in ms (0: does not).
    pub cy: u32,
}

/// A `heart-beat` header that is not two comma-separated numbers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid heart-beat header {0:?}: expected two numbers like 10000,10000")]
pub struct HeartBeatError(pub String);

impl HeartBeat {
    /// Parses `cx,cy`, e.g. `0,0` or `10000,10000`. Spaces and signs are
    /// not allowed; each number must fit a `u32`.
    pub fn parse(s: &str) -> Result<HeartBeat, HeartBeatError> {
        let err = || HeartBeatError(s.chars().take(64).collect());
        let (cx, cy) = s.split_once(',').ok_or_else(err)?;
        let number = |n: &str| -> Result<u32, HeartBeatError> {
            if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
                return Err(err());
            }
            n.parse().map_err(|_| err())
        };
        Ok(HeartBeat {
            cx: number(cx)?,
            cy: number(cy)?,
        })
    }

    /// The header value, `cx,cy`.
    pub fn to_header(self) -> String {
        format!("{},{}", self.cx, self.cy)
    }
}

/// Negotiated intervals for the server: (server->client send interval,
/// client->server expected interval); `None` = off.
///
/// - send = if `server.cx == 0 || client.cy == 0` { None } else { max(server.cx, client.cy) ms }
/// - recv = if `client.cx == 0 || server.cy == 0` { None } else { max(client.cx, server.cy) ms }
///
/// The receiver should allow some slack beyond `recv` before giving up.
pub fn negotiate_heartbeat(
    client: HeartBeat,
    server: HeartBeat,
) -> (Option<Duration>, Option<Duration>) {
    let interval = |can: u32, wants: u32| {
        (can != 0 && wants != 0).then(|| Duration::from_millis(u64::from(can.max(wants))))
    };
    (
        interval(server.cx, client.cy),
        interval(client.cx, server.cy),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        let hb = HeartBeat::parse("10000,20000").unwrap();
        assert_eq!(
            hb,
            HeartBeat {
                cx: 10000,
                cy: 20000
            }
        );
        assert_eq!(hb.to_header(), "10000,20000");
        assert_eq!(HeartBeat::parse("0,0").unwrap(), HeartBeat::default());
        assert_eq!(HeartBeat::parse("4294967295,0").unwrap().cx, u32::MAX);
    }

    #[test]
    fn rejects_malformed_values() {
        for bad in [
            "",
            "0",
            "0,",
            ",0",
            "0, 0",
            " 0,0",
            "+1,0",
            "-1,0",
            "1,2,3",
            "4294967296,0",
            "a,b",
        ] {
            let err = HeartBeat::parse(bad).unwrap_err();
            assert_eq!(err.0, bad);
        }
        assert_eq!(
            HeartBeat::parse("x").unwrap_err().to_string(),
            "invalid heart-beat header \"x\": expected two numbers like 10000,10000"
        );
    }

    #[test]
    fn negotiation_takes_the_slower_side_and_honours_zero() {
        let ms = |n| Some(Duration::from_millis(n));
        let client = HeartBeat {
            cx: 5000,
            cy: 20000,
        };
        let server = HeartBeat {
            cx: 10000,
            cy: 10000,
        };
        assert_eq!(negotiate_heartbeat(client, server), (ms(20000), ms(10000)));
        let client = HeartBeat { cx: 0, cy: 1000 };
        assert_eq!(negotiate_heartbeat(client, server), (ms(10000), None));
        assert_eq!(
            negotiate_heartbeat(HeartBeat::default(), server),
            (None, None)
        );
        assert_eq!(
            negotiate_heartbeat(client, HeartBeat::default()),
            (None, None)
        );
    }
}
