//! The STOMP session state machine. It takes decoded frames and answers
//! with what the shell must do; it never touches a socket, a clock or the
//! hub, so every rule here is tested on plain values.

use herald_protocol::envelope::names;
use herald_protocol::stomp::{Command, DecodeError, Frame, HeartBeat, Version, headers};
use herald_protocol::websocket::close_code;

use crate::filter::EventFilter;
use crate::hub::Resume;
use crate::metrics::ProtocolError;

/// The only destination a browser may subscribe to: its own stream.
pub const DESTINATION: &str = "/user/notifications";

/// A validated CONNECT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connect {
    /// Negotiated version.
    pub version: Version,
    /// Token from `passcode` or an `Authorization: Bearer` header.
    pub token: Option<String>,
    /// The client's heart-beat header.
    pub heartbeat: HeartBeat,
    /// Where the client left off (`last-seq` + `epoch`).
    pub resume: Option<Resume>,
    /// How long ago the client last heard from the session it resumes
    /// (`offline-ms`; only with `resume`).
    pub offline_ms: Option<u64>,
}

/// A validated SUBSCRIBE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscribe {
    /// Internal key.
    pub key: u32,
    /// The client's id.
    pub id: String,
    /// Event filter.
    pub filter: EventFilter,
    /// Explicit resume point on the SUBSCRIBE.
    pub resume: Option<Resume>,
    /// How long ago the client last heard from the session it resumes
    /// (`offline-ms`; only with `resume`).
    pub offline_ms: Option<u64>,
    /// Receipt to send.
    pub receipt: Option<String>,
}

/// A refusal: the shell sends ERROR and closes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Short text for the `message` header.
    pub message: String,
    /// The `receipt` of the offending frame, echoed as `receipt-id`.
    pub receipt: Option<String>,
    /// Metric kind.
    pub kind: ProtocolError,
    /// WebSocket close code after the ERROR.
    pub close_code: u16,
}

impl Failure {
    /// A refusal of a well-formed frame.
    pub fn refused(message: impl Into<String>, receipt: Option<String>) -> Self {
        Failure {
            message: message.into(),
            receipt,
            kind: ProtocolError::Refused,
            close_code: close_code::PROTOCOL_ERROR,
        }
    }

    /// Bytes the decoder could not read as a frame. The ERROR says what was
    /// wrong (the decoder's sentence); the close code says which kind of
    /// fault: 1009 over a limit, 1007 not UTF-8, 1002 anything else
    /// malformed. Every variant is named, so a new one has to pick.
    pub fn undecodable(e: &DecodeError) -> Self {
        let (kind, code) = match e {
            DecodeError::FrameTooLarge { .. }
            | DecodeError::TooManyHeaders { .. }
            | DecodeError::HeaderTooLong { .. } => {
                (ProtocolError::Oversized, close_code::MESSAGE_TOO_BIG)
            }
            DecodeError::InvalidUtf8 { .. } => {
                (ProtocolError::InvalidUtf8, close_code::INVALID_PAYLOAD)
            }
            DecodeError::UnknownCommand { .. }
            | DecodeError::MalformedHeader { .. }
            | DecodeError::InvalidEscape { .. }
            | DecodeError::BadContentLength { .. }
            | DecodeError::MissingNul
            | DecodeError::UnexpectedBody { .. } => {
                (ProtocolError::MalformedFrame, close_code::PROTOCOL_ERROR)
            }
        };
        Failure {
            message: e.to_string(),
            receipt: None,
            kind,
            close_code: code,
        }
    }
}

/// What the shell does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Authenticate, attach to the mailbox, answer CONNECTED.
    Connect(Connect),
    /// Add a subscription (and replay).
    Subscribe(Subscribe),
    /// Remove a subscription.
    Unsubscribe {
        /// Its id.
        id: String,
        /// Receipt to send.
        receipt: Option<String>,
    },
    /// Send the receipt (if any) and close normally.
    Disconnect {
        /// Receipt to send.
        receipt: Option<String>,
    },
    /// Send ERROR and close.
    Fail(Failure),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    AwaitingConnect,
    Connected,
}

/// Per-session STOMP state.
#[derive(Debug)]
pub struct StompSession {
    phase: Phase,
    version: Version,
    subscriptions: Vec<(u32, String)>,
    next_key: u32,
    max_subscriptions: usize,
}

fn parse_resume(frame: &Frame) -> Result<Option<Resume>, String> {
    match (frame.header(names::LAST_SEQ), frame.header(names::EPOCH)) {
        (None, None) => Ok(None),
        (Some(seq), Some(epoch)) => {
            let last_seq = seq
                .parse()
                .map_err(|_| format!("last-seq {seq:?} is not a sequence number"))?;
            let epoch = epoch
                .parse()
                .map_err(|_| format!("epoch {epoch:?} is not an epoch number"))?;
            Ok(Some(Resume { epoch, last_seq }))
        }
        _ => Err("last-seq and epoch go together: send both to resume, or neither".into()),
    }
}

fn parse_offline(frame: &Frame, resuming: bool) -> Result<Option<u64>, String> {
    let Some(ms) = frame.header(names::OFFLINE_MS) else {
        return Ok(None);
    };
    if !resuming {
        return Err(
            "offline-ms goes with last-seq and epoch: it says how long ago the resumed session was last heard from"
                .into(),
        );
    }
    ms.parse()
        .map(Some)
        .map_err(|_| format!("offline-ms {ms:?} is not a number of milliseconds"))
}

fn bearer(frame: &Frame) -> Option<String> {
    frame
        .header("Authorization")
        .or_else(|| frame.header("authorization"))
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| t.trim().to_owned())
}

impl StompSession {
    /// A session waiting for CONNECT.
    pub fn new(max_subscriptions: usize) -> Self {
        StompSession {
            phase: Phase::AwaitingConnect,
            version: Version::V1_0,
            subscriptions: Vec::new(),
            next_key: 0,
            max_subscriptions,
        }
    }

    /// The version frames are decoded and encoded with.
    pub fn version(&self) -> Version {
        self.version
    }

    /// Whether CONNECTED has been sent.
    pub fn is_connected(&self) -> bool {
        self.phase == Phase::Connected
    }

    /// The shell authenticated the CONNECT: the session is open.
    pub fn connected(&mut self, version: Version) {
        self.phase = Phase::Connected;
        self.version = version;
    }

    /// Handle one client frame.
    pub fn on_frame(&mut self, frame: &Frame) -> Action {
        let receipt = frame.header(headers::RECEIPT).map(str::to_owned);
        match (self.phase, frame.command) {
            (Phase::AwaitingConnect, Command::Connect | Command::Stomp) => self.on_connect(frame),
            (Phase::AwaitingConnect, other) => Action::Fail(Failure::refused(
                format!("expected CONNECT, got {}", other.as_str()),
                receipt,
            )),
            (Phase::Connected, Command::Connect | Command::Stomp) => Action::Fail(
                Failure::refused("already connected: CONNECT was sent twice", receipt),
            ),
            (Phase::Connected, Command::Subscribe) => self.on_subscribe(frame, receipt),
            (Phase::Connected, Command::Unsubscribe) => self.on_unsubscribe(frame, receipt),
            (Phase::Connected, Command::Disconnect) => Action::Disconnect { receipt },
            (Phase::Connected, Command::Send) => Action::Fail(Failure::refused(
                "SEND is not supported: backends publish over HTTP or AMQP",
                receipt,
            )),
            (Phase::Connected, Command::Ack | Command::Nack) => Action::Fail(Failure::refused(
                "ACK/NACK are not supported: subscriptions are ack:auto",
                receipt,
            )),
            (Phase::Connected, Command::Begin | Command::Commit | Command::Abort) => {
                Action::Fail(Failure::refused("transactions are not supported", receipt))
            }
            (Phase::Connected, other) => Action::Fail(Failure::refused(
                format!("{} is a server frame", other.as_str()),
                receipt,
            )),
        }
    }

    fn on_connect(&mut self, frame: &Frame) -> Action {
        let Some(version) = Version::negotiate(frame.header(headers::ACCEPT_VERSION)) else {
            return Action::Fail(Failure {
                message: format!("supported protocol versions are {}", Version::SUPPORTED),
                receipt: None,
                kind: ProtocolError::Refused,
                close_code: 1002,
            });
        };
        // Errors before CONNECTED are written in the negotiated version.
        self.version = version;
        let heartbeat = match frame.header(headers::HEART_BEAT) {
            None => HeartBeat::default(),
            Some(h) => match HeartBeat::parse(h) {
                Ok(hb) => hb,
                Err(e) => return Action::Fail(Failure::refused(e.to_string(), None)),
            },
        };
        let resume = match parse_resume(frame) {
            Ok(r) => r,
            Err(e) => return Action::Fail(Failure::refused(e, None)),
        };
        let offline_ms = match parse_offline(frame, resume.is_some()) {
            Ok(ms) => ms,
            Err(e) => return Action::Fail(Failure::refused(e, None)),
        };
        let token = frame
            .header(headers::PASSCODE)
            .filter(|p| !p.is_empty())
            .map(str::to_owned)
            .or_else(|| bearer(frame));
        Action::Connect(Connect {
            version,
            token,
            heartbeat,
            resume,
            offline_ms,
        })
    }

    fn on_subscribe(&mut self, frame: &Frame, receipt: Option<String>) -> Action {
        let fail = |m: String| Action::Fail(Failure::refused(m, receipt.clone()));
        let Some(destination) = frame.header(headers::DESTINATION) else {
            return fail("SUBSCRIBE needs a destination header".into());
        };
        if destination != DESTINATION {
            return fail(format!(
                "destination {destination:?} is not available: subscribe to {DESTINATION}, your own stream"
            ));
        }
        let id = match frame.header(headers::ID) {
            Some(id) if !id.is_empty() => id.to_owned(),
            // STOMP 1.0 makes the id optional.
            _ if self.version == Version::V1_0 => destination.to_owned(),
            _ => return fail("SUBSCRIBE needs an id header".into()),
        };
        if id.len() > 256 {
            return fail("subscription id is longer than 256 bytes".into());
        }
        if self.subscriptions.iter().any(|(_, s)| *s == id) {
            return fail(format!("subscription id {id:?} is already in use"));
        }
        if self.subscriptions.len() >= self.max_subscriptions {
            return fail(format!(
                "at most {} subscriptions per session",
                self.max_subscriptions
            ));
        }
        match frame.header(headers::ACK) {
            None | Some("auto") => {}
            Some(other) => {
                return fail(format!("ack:{other} is not supported: use ack:auto"));
            }
        }
        let filter = match EventFilter::parse(frame.header(names::EVENTS).unwrap_or("")) {
            Ok(f) => f,
            Err(e) => return fail(e.to_string()),
        };
        let resume = match parse_resume(frame) {
            Ok(r) => r,
            Err(e) => return fail(e),
        };
        let offline_ms = match parse_offline(frame, resume.is_some()) {
            Ok(ms) => ms,
            Err(e) => return fail(e),
        };
        let key = self.next_key;
        self.next_key += 1;
        self.subscriptions.push((key, id.clone()));
        Action::Subscribe(Subscribe {
            key,
            id,
            filter,
            resume,
            offline_ms,
            receipt,
        })
    }

    fn on_unsubscribe(&mut self, frame: &Frame, receipt: Option<String>) -> Action {
        let Some(id) = frame.header(headers::ID) else {
            return Action::Fail(Failure::refused("UNSUBSCRIBE needs an id header", receipt));
        };
        let before = self.subscriptions.len();
        self.subscriptions.retain(|(_, s)| s != id);
        if self.subscriptions.len() == before {
            return Action::Fail(Failure::refused(
                format!("no subscription with id {id:?}"),
                receipt,
            ));
        }
        Action::Unsubscribe {
            id: id.to_owned(),
            receipt,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(command: Command, headers: &[(&str, &str)]) -> Frame {
        let mut f = Frame::new(command);
        for (k, v) in headers {
            f = f.with_header(*k, *v);
        }
        f
    }

    fn connected() -> StompSession {
        let mut s = StompSession::new(2);
        s.connected(Version::V1_2);
        s
    }

    fn failure(a: Action) -> Failure {
        match a {
            Action::Fail(f) => f,
            other => panic!("expected a failure, got {other:?}"),
        }
    }

    #[test]
    fn connect_negotiates_and_finds_the_token() {
        let mut s = StompSession::new(8);
        let a = s.on_frame(&frame(
            Command::Connect,
            &[
                ("accept-version", "1.1,1.2"),
                ("passcode", "tok"),
                ("heart-beat", "5000,7000"),
                ("last-seq", "4"),
                ("epoch", "77"),
                ("offline-ms", "2500"),
            ],
        ));
        let Action::Connect(c) = a else {
            panic!("{a:?}")
        };
        assert_eq!(c.offline_ms, Some(2500));
        assert_eq!(c.version, Version::V1_2);
        assert_eq!(c.token.as_deref(), Some("tok"));
        assert_eq!(c.heartbeat, HeartBeat { cx: 5000, cy: 7000 });
        assert_eq!(
            c.resume,
            Some(Resume {
                epoch: 77,
                last_seq: 4
            })
        );
        let a = StompSession::new(8).on_frame(&frame(
            Command::Stomp,
            &[("accept-version", "1.2"), ("Authorization", "Bearer abc")],
        ));
        let Action::Connect(c) = a else {
            panic!("{a:?}")
        };
        assert_eq!(c.token.as_deref(), Some("abc"));
    }

    #[test]
    fn connect_errors_are_explained() {
        let f = failure(
            StompSession::new(8).on_frame(&frame(Command::Connect, &[("accept-version", "2.0")])),
        );
        assert!(f.message.contains("1.0,1.1,1.2"));
        let f = failure(StompSession::new(8).on_frame(&frame(
            Command::Connect,
            &[("accept-version", "1.2"), ("heart-beat", "x")],
        )));
        assert!(f.message.contains("heart-beat"));
        let f = failure(StompSession::new(8).on_frame(&frame(
            Command::Connect,
            &[("accept-version", "1.2"), ("last-seq", "3")],
        )));
        assert!(f.message.contains("together"));
        let f = failure(StompSession::new(8).on_frame(&frame(
            Command::Connect,
            &[
                ("accept-version", "1.2"),
                ("last-seq", "3"),
                ("epoch", "9"),
                ("offline-ms", "-4"),
            ],
        )));
        assert!(f.message.contains("offline-ms \"-4\""), "{}", f.message);
        let f = failure(StompSession::new(8).on_frame(&frame(
            Command::Connect,
            &[("accept-version", "1.2"), ("offline-ms", "40")],
        )));
        assert!(f.message.contains("goes with last-seq"), "{}", f.message);
        let f = failure(StompSession::new(8).on_frame(&frame(Command::Subscribe, &[])));
        assert!(f.message.contains("expected CONNECT"));
    }

    #[test]
    fn subscribe_rules() {
        let mut s = connected();
        let sub = |id: &str, dest: &str| {
            frame(
                Command::Subscribe,
                &[("id", id), ("destination", dest), ("receipt", "r1")],
            )
        };
        let f = failure(s.on_frame(&sub("0", "/user/bob/notifications")));
        assert!(f.message.contains("not available"));
        assert_eq!(f.receipt.as_deref(), Some("r1"));
        let Action::Subscribe(ok) = s.on_frame(&sub("0", DESTINATION)) else {
            panic!()
        };
        assert_eq!(ok.receipt.as_deref(), Some("r1"));
        assert!(
            failure(s.on_frame(&sub("0", DESTINATION)))
                .message
                .contains("in use")
        );
        assert!(matches!(
            s.on_frame(&sub("1", DESTINATION)),
            Action::Subscribe(_)
        ));
        assert!(
            failure(s.on_frame(&sub("2", DESTINATION)))
                .message
                .contains("at most 2")
        );
        let f = failure(s.on_frame(&frame(Command::Subscribe, &[("destination", DESTINATION)])));
        assert!(f.message.contains("id"));
    }

    #[test]
    fn a_subscribe_may_say_offline_ms_with_its_resume_point() {
        let mut s = connected();
        let sub = |id: &str, extra: &[(&str, &str)]| {
            let mut h = vec![("id", id), ("destination", DESTINATION)];
            h.extend_from_slice(extra);
            frame(Command::Subscribe, &h)
        };
        let Action::Subscribe(ok) = s.on_frame(&sub(
            "a",
            &[("last-seq", "3"), ("epoch", "9"), ("offline-ms", "1500")],
        )) else {
            panic!()
        };
        assert_eq!(ok.offline_ms, Some(1500));
        let f = failure(s.on_frame(&sub("b", &[("offline-ms", "1500")])));
        assert!(f.message.contains("goes with last-seq"), "{}", f.message);
    }

    #[test]
    fn subscribe_filters_and_ack_modes() {
        let mut s = connected();
        let a = s.on_frame(&frame(
            Command::Subscribe,
            &[
                ("id", "a"),
                ("destination", DESTINATION),
                ("events", "chat.*"),
            ],
        ));
        let Action::Subscribe(sub) = a else { panic!() };
        assert!(sub.filter.matches("chat.x"));
        assert!(!sub.filter.matches("order.x"));
        let f = failure(s.on_frame(&frame(
            Command::Subscribe,
            &[("id", "b"), ("destination", DESTINATION), ("ack", "client")],
        )));
        assert!(f.message.contains("ack:auto"));
    }

    #[test]
    fn unsupported_frames_and_unsubscribe() {
        let mut s = connected();
        assert!(
            failure(s.on_frame(&frame(Command::Send, &[])))
                .message
                .contains("HTTP or AMQP")
        );
        assert!(
            failure(s.on_frame(&frame(Command::Unsubscribe, &[("id", "x")])))
                .message
                .contains("no subscription")
        );
        s.on_frame(&frame(
            Command::Subscribe,
            &[("id", "x"), ("destination", DESTINATION)],
        ));
        assert!(matches!(
            s.on_frame(&frame(Command::Unsubscribe, &[("id", "x")])),
            Action::Unsubscribe { .. }
        ));
        assert_eq!(
            s.on_frame(&frame(Command::Disconnect, &[("receipt", "bye")])),
            Action::Disconnect {
                receipt: Some("bye".into())
            }
        );
    }

    #[test]
    fn stomp_1_0_subscription_id_is_optional() {
        let mut s = StompSession::new(4);
        s.connected(Version::V1_0);
        let Action::Subscribe(sub) =
            s.on_frame(&frame(Command::Subscribe, &[("destination", DESTINATION)]))
        else {
            panic!()
        };
        assert_eq!(sub.id, DESTINATION);
    }
}
