//! Socket.IO 4 over Engine.IO 4's websocket transport, client side, as far as a subscriber
//! needs it. Pure: no I/O.
//!
//! Every WebSocket text message is one Engine.IO packet, its type a digit:
//!
//! | packet | meaning |
//! |---|---|
//! | `0{"sid":...,"pingInterval":25000,...}` | open (the server's first message) |
//! | `1` | close |
//! | `2` / `3` | ping (from the server) / pong (the client must answer within `pingTimeout`) |
//! | `4...` | a Socket.IO packet (below) |
//! | `6` | noop |
//!
//! Socket.IO packets inside `4`, their type a digit, then the namespace (`/name,`, absent for
//! the main namespace `/`), an ack id (digits) and a JSON payload:
//!
//! | packet | meaning |
//! |---|---|
//! | `40` (client) | connect to the main namespace |
//! | `40{"sid":...}` (server) | connected |
//! | `41` | disconnect |
//! | `42["event",arg,...]` | an event |
//! | `44{"message":"..."}` | the connect was refused |
//!
//! Binary packets (`45`, `46`) and acks are not used by the bench's peer and are reported as
//! [`Packet::Other`].

use serde_json::Value;

/// The client's connect to the main namespace.
pub(crate) const CONNECT: &str = "40";
/// The server's ping, whole (Engine.IO `2`); Socket.IO ends a session that does not answer.
pub(crate) const PING: &[u8] = b"2";
/// The client's answer to a ping.
pub(crate) const PONG: &str = "3";

/// One packet from the server.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Packet {
    /// Engine.IO open.
    Open,
    /// Engine.IO close, or Socket.IO disconnect.
    Close,
    Ping,
    /// Connected to the main namespace.
    Connected,
    /// The connect was refused, with the server's message.
    ConnectError(String),
    /// An event on the main namespace: its name and its arguments.
    Event {
        name: String,
        args: Vec<Value>,
    },
    /// Anything else (pong, noop, upgrade, acks, binary packets, other namespaces).
    Other,
}

/// Why a message is not a Socket.IO packet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SocketIoError {
    #[error("empty packet")]
    Empty,
    #[error("unknown packet type {0:?}")]
    UnknownType(String),
    #[error("bad payload: {0}")]
    BadPayload(String),
}

/// Parses one WebSocket text message.
pub(crate) fn parse(message: &[u8]) -> Result<Packet, SocketIoError> {
    let (&engine, rest) = message.split_first().ok_or(SocketIoError::Empty)?;
    match engine {
        b'0' => Ok(Packet::Open),
        b'1' => Ok(Packet::Close),
        b'2' => Ok(Packet::Ping),
        b'3' | b'5' | b'6' => Ok(Packet::Other),
        b'4' => parse_socket(rest),
        other => Err(SocketIoError::UnknownType(char::from(other).to_string())),
    }
}

fn parse_socket(packet: &[u8]) -> Result<Packet, SocketIoError> {
    let (&kind, payload) = packet.split_first().ok_or(SocketIoError::Empty)?;
    // Another namespace's packet is not for this client's subscription.
    if payload.first() == Some(&b'/') {
        return Ok(Packet::Other);
    }
    let bad = |e: serde_json::Error| SocketIoError::BadPayload(e.to_string());
    match kind {
        b'0' => Ok(Packet::Connected),
        b'1' => Ok(Packet::Close),
        b'2' => {
            // An ack id may come before the array; the bench's peer asks for none.
            let start = payload
                .iter()
                .position(|&b| !b.is_ascii_digit())
                .unwrap_or(payload.len());
            let mut args: Vec<Value> = serde_json::from_slice(&payload[start..]).map_err(bad)?;
            if args.is_empty() {
                return Err(SocketIoError::BadPayload("an event without a name".into()));
            }
            let Value::String(name) = args.remove(0) else {
                return Err(SocketIoError::BadPayload(
                    "an event name that is not a string".into(),
                ));
            };
            Ok(Packet::Event { name, args })
        }
        b'4' => {
            let error: Value = serde_json::from_slice(payload).map_err(bad)?;
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            Ok(Packet::ConnectError(message))
        }
        b'3' | b'5' | b'6' => Ok(Packet::Other),
        other => Err(SocketIoError::UnknownType(format!(
            "4{}",
            char::from(other)
        ))),
    }
}

/// The text of each argument of `event` `name` that is a string (the bench's notifications:
/// the peer emits each as `42["n","..."]`).
pub(crate) fn event_texts(packet: Packet, name: &str) -> Vec<String> {
    match packet {
        Packet::Event { name: n, args } if n == name => args
            .into_iter()
            .filter_map(|a| match a {
                Value::String(s) => Some(s),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_packets() {
        assert_eq!(
            parse(br#"0{"sid":"x","pingInterval":25000,"pingTimeout":20000}"#),
            Ok(Packet::Open)
        );
        assert_eq!(parse(b"1"), Ok(Packet::Close));
        assert_eq!(parse(PING), Ok(Packet::Ping));
        assert_eq!(parse(b"3"), Ok(Packet::Other));
        assert_eq!(parse(b"6"), Ok(Packet::Other));
        assert_eq!(parse(b""), Err(SocketIoError::Empty));
        assert_eq!(parse(b"4"), Err(SocketIoError::Empty));
        assert!(matches!(parse(b"9"), Err(SocketIoError::UnknownType(_))));
    }

    #[test]
    fn socket_packets() {
        assert_eq!(parse(br#"40{"sid":"abc"}"#), Ok(Packet::Connected));
        assert_eq!(parse(b"41"), Ok(Packet::Close));
        assert_eq!(
            parse(br#"44{"message":"the query needs channel"}"#),
            Ok(Packet::ConnectError("the query needs channel".into()))
        );
        assert_eq!(
            parse(br#"42["n","7 123 xx"]"#),
            Ok(Packet::Event {
                name: "n".into(),
                args: vec![Value::String("7 123 xx".into())]
            })
        );
        // With an ack id.
        assert_eq!(
            parse(br#"4212["n",1]"#),
            Ok(Packet::Event {
                name: "n".into(),
                args: vec![Value::from(1)]
            })
        );
        assert_eq!(parse(br#"42/admin,["n","x"]"#), Ok(Packet::Other));
        assert!(matches!(parse(b"42[]"), Err(SocketIoError::BadPayload(_))));
        assert!(matches!(parse(b"42[1]"), Err(SocketIoError::BadPayload(_))));
        assert!(matches!(
            parse(br#"42["n""#),
            Err(SocketIoError::BadPayload(_))
        ));
        assert!(matches!(parse(b"49"), Err(SocketIoError::UnknownType(_))));
    }

    #[test]
    fn the_texts_of_an_event() {
        let packet = parse(br#"42["n","a",2,"b"]"#).unwrap();
        assert_eq!(event_texts(packet.clone(), "n"), ["a", "b"]);
        assert!(event_texts(packet, "other").is_empty());
        assert!(event_texts(Packet::Ping, "n").is_empty());
    }
}
