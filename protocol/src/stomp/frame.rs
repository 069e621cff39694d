//! STOMP commands and decoded frames.

use std::fmt;

use bytes::Bytes;

/// A STOMP command: the first line of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Command {
    /// Client: open a session (headers never escaped).
    Connect,
    /// Client: open a session, 1.1+ spelling of CONNECT (never escaped).
    Stomp,
    /// Server: the session is open (headers never escaped).
    Connected,
    /// Client: send a message to a destination.
    Send,
    /// Client: subscribe to a destination.
    Subscribe,
    /// Client: end a subscription.
    Unsubscribe,
    /// Client: acknowledge a message.
    Ack,
    /// Client: refuse a message (1.1+).
    Nack,
    /// Client: start a transaction.
    Begin,
    /// Client: commit a transaction.
    Commit,
    /// Client: roll back a transaction.
    Abort,
    /// Client: close the session.
    Disconnect,
    /// Server: a message for a subscription.
    Message,
    /// Server: acknowledges a client frame that asked for a receipt.
    Receipt,
    /// Server: something went wrong; the connection closes after it.
    Error,
}

impl Command {
    /// Every command, in specification order.
    pub const ALL: [Command; 15] = [
        Command::Connect,
        Command::Stomp,
        Command::Connected,
        Command::Send,
        Command::Subscribe,
        Command::Unsubscribe,
        Command::Ack,
        Command::Nack,
        Command::Begin,
        Command::Commit,
        Command::Abort,
        Command::Disconnect,
        Command::Message,
        Command::Receipt,
        Command::Error,
    ];

    /// Length of the longest command name (`UNSUBSCRIBE`).
    pub const MAX_LEN: usize = 11;

    /// The command as written on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Command::Connect => "CONNECT",
            Command::Stomp => "STOMP",
            Command::Connected => "CONNECTED",
            Command::Send => "SEND",
            Command::Subscribe => "SUBSCRIBE",
            Command::Unsubscribe => "UNSUBSCRIBE",
            Command::Ack => "ACK",
            Command::Nack => "NACK",
            Command::Begin => "BEGIN",
            Command::Commit => "COMMIT",
            Command::Abort => "ABORT",
            Command::Disconnect => "DISCONNECT",
            Command::Message => "MESSAGE",
            Command::Receipt => "RECEIPT",
            Command::Error => "ERROR",
        }
    }

    /// The command spelled exactly by `b` (commands are case-sensitive).
    pub fn parse(b: &[u8]) -> Option<Command> {
        Some(match b {
            b"CONNECT" => Command::Connect,
            b"STOMP" => Command::Stomp,
            b"CONNECTED" => Command::Connected,
            b"SEND" => Command::Send,
            b"SUBSCRIBE" => Command::Subscribe,
            b"UNSUBSCRIBE" => Command::Unsubscribe,
            b"ACK" => Command::Ack,
            b"NACK" => Command::Nack,
            b"BEGIN" => Command::Begin,
            b"COMMIT" => Command::Commit,
            b"ABORT" => Command::Abort,
            b"DISCONNECT" => Command::Disconnect,
            b"MESSAGE" => Command::Message,
            b"RECEIPT" => Command::Receipt,
            b"ERROR" => Command::Error,
            _ => return None,
        })
    }

    /// Whether this command's headers are escaped in 1.1 and 1.2. CONNECT,
    /// STOMP and CONNECTED never are, so that a 1.0 peer can read them
    /// before a version is agreed.
    pub fn escapes_headers(self) -> bool {
        !matches!(self, Command::Connect | Command::Stomp | Command::Connected)
    }

    /// Whether a frame of this command may carry a body. STOMP 1.2: "Only
    /// the SEND, MESSAGE, and ERROR frames MAY have a body. All other frames
    /// MUST NOT have a body." Herald holds 1.0 and 1.1 peers to the same
    /// rule: no client library sends a body on other frames, and a frame
    /// whose NUL is missing would otherwise swallow the frames after it.
    pub fn allows_body(self) -> bool {
        matches!(self, Command::Send | Command::Message | Command::Error)
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A decoded STOMP frame. Header names and values are unescaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The command.
    pub command: Command,
    /// Headers in wire order; a name may repeat.
    pub headers: Vec<(String, String)>,
    /// The body, without its terminating NUL.
    pub body: Bytes,
}

impl Frame {
    /// A frame with no headers and an empty body.
    pub fn new(command: Command) -> Frame {
        Frame {
            command,
            headers: Vec::new(),
            body: Bytes::new(),
        }
    }

    /// The value of header `name`.
    ///
    /// First occurrence wins (STOMP 1.2 rule for repeated headers).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Appends a header.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Frame {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Replaces the body.
    pub fn with_body(mut self, body: impl Into<Bytes>) -> Frame {
        self.body = body.into();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_round_trip() {
        for c in Command::ALL {
            assert_eq!(Command::parse(c.as_str().as_bytes()), Some(c));
            assert!(c.as_str().len() <= Command::MAX_LEN);
        }
        assert_eq!(Command::parse(b"connect"), None);
        assert_eq!(Command::parse(b""), None);
    }

    #[test]
    fn first_header_wins() {
        let f = Frame::new(Command::Send)
            .with_header("a", "1")
            .with_header("a", "2")
            .with_body("x");
        assert_eq!(f.header("a"), Some("1"));
        assert_eq!(f.header("b"), None);
        assert_eq!(f.body, Bytes::from_static(b"x"));
    }
}
