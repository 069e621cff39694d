//! The STOMP core on plain values: a [`Host`] made of a real in-memory hub,
//! a real verifier and a presence log, a [`Sink`] that records what would
//! be written, and instants passed in. No sockets, no runtime.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use herald_protocol::envelope::{Notification, Scope, names};
use herald_protocol::stomp::{self, Command, Version};
use parking_lot::Mutex;
use tokio::time::Instant;

use super::*;
use crate::auth::{AuthError, Claims, Verified, Verifier, sign_hs256};
use crate::config::{MailboxConfig, SessionConfig};
use crate::hub::{Attached, Hub, Identity, Missed, Replay, Resume, TooManySessions};
use crate::metrics::{ErrorLabels, Metrics, RefuseLabels, RefuseReason, Transport};
use crate::outbox::{Outbox, Subscription};

const SECRET: &[u8] = b"core-test-secret-core-test-secret!!";
const WS: Transport = Transport::Websocket;

/// The gateway as the core sees it, on values.
struct TestHost {
    config: SessionConfig,
    hub: Hub,
    verifier: Verifier,
    metrics: Arc<Metrics>,
    /// `(user, online)` in the order the core reported them.
    presence: Mutex<Vec<(String, bool)>>,
}

impl TestHost {
    fn new(session: SessionConfig, mailbox: MailboxConfig) -> Arc<Self> {
        let metrics = Arc::new(Metrics::default());
        Arc::new(TestHost {
            config: session,
            hub: Hub::new(&mailbox, Arc::clone(&metrics)),
            verifier: Verifier::hs256(SECRET, 0),
            metrics,
            presence: Mutex::new(Vec::new()),
        })
    }

    fn standard() -> Arc<Self> {
        Self::new(SessionConfig::default(), MailboxConfig::default())
    }

    fn presence(&self) -> Vec<(String, bool)> {
        self.presence.lock().clone()
    }

    fn refused(&self, reason: RefuseReason) -> u64 {
        self.metrics
            .refused
            .get_or_create(&RefuseLabels { reason })
            .get()
    }

    fn errors(&self, kind: ProtocolError) -> u64 {
        self.metrics
            .errors
            .get_or_create(&ErrorLabels { kind })
            .get()
    }

    fn open_sessions(&self) -> i64 {
        self.metrics
            .sessions
            .get_or_create(&TransportLabels { transport: WS })
            .get()
    }

    fn deliver(&self, user: &str, id: &str) {
        let n = Arc::new(Notification {
            id: id.into(),
            scope: Scope::User,
            users: vec![user.into()],
            clients: vec![],
            sites: vec![],
            event: "e".into(),
            topic: None,
            content_type: "text/plain".into(),
            payload: Bytes::from_static(b"hi"),
            payload_is_utf8: true,
            ttl: None,
            encodings: Default::default(),
            accepted: Default::default(),
        });
        self.hub.deliver(&n, Instant::now());
    }
}

impl Host for TestHost {
    fn config(&self) -> &SessionConfig {
        &self.config
    }

    fn server_name(&self) -> String {
        "Herald/test".into()
    }

    fn verify(&self, token: &str) -> Result<Verified, AuthError> {
        self.verifier.verify(token)
    }

    fn attach(
        &self,
        who: &Identity,
        outbox: &Arc<Outbox>,
        missed: Option<&Missed>,
    ) -> Result<Attached, TooManySessions> {
        self.hub
            .attach(who, outbox, self.config.max_per_user, missed)
    }

    fn subscribe(
        &self,
        who: &Identity,
        outbox: &Arc<Outbox>,
        sub: Subscription,
        resume: Option<&Resume>,
        now: Instant,
    ) -> Replay {
        self.hub.subscribe(who, outbox, sub, resume, now)
    }

    fn missed(&self, who: &Identity, missed: &Missed) {
        self.hub.note_missed(who, missed);
    }

    fn refill(&self, who: &Identity, outbox: &Arc<Outbox>, now: Instant) {
        self.hub.refill(who, outbox, now);
    }

    fn detach(&self, who: &Identity, outbox: &Arc<Outbox>, now: Instant) -> bool {
        self.hub.detach(who, outbox, now)
    }

    fn user_online(&self, who: &Identity) {
        self.presence.lock().push((who.user.to_string(), true));
    }

    fn user_offline(&self, who: &Identity) {
        self.presence.lock().push((who.user.to_string(), false));
    }

    fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

/// What the core wrote.
#[derive(Debug, Clone, PartialEq)]
enum Out {
    Frame {
        command: Command,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    Message {
        sub: String,
        seq: u64,
        epoch: u64,
        id: String,
    },
    Heartbeat,
}

impl Out {
    fn command(&self) -> Option<Command> {
        match self {
            Out::Frame { command, .. } => Some(*command),
            Out::Message { .. } => Some(Command::Message),
            Out::Heartbeat => None,
        }
    }

    fn header(&self, name: &str) -> Option<&str> {
        let Out::Frame { headers, .. } = self else {
            return None;
        };
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A sink that records; `queued` counts what the "socket" has not taken.
#[derive(Default)]
struct Wire {
    out: Vec<Out>,
    queued: usize,
}

impl Wire {
    /// Everything written since the last take; the socket took it all.
    fn take(&mut self) -> Vec<Out> {
        self.queued = 0;
        std::mem::take(&mut self.out)
    }

    fn push(&mut self, o: Out) {
        self.queued += 1;
        self.out.push(o);
    }
}

impl Sink for Wire {
    fn frame(&mut self, command: Command, headers: &[(&str, &str)], body: &[u8], _: Version) {
        self.push(Out::Frame {
            command,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body: body.to_vec(),
        });
    }

    fn message(&mut self, subscription: &str, seq: u64, epoch: u64, n: &Notification, _: Version) {
        self.push(Out::Message {
            sub: subscription.into(),
            seq,
            epoch,
            id: n.id.clone(),
        });
    }

    fn heartbeat(&mut self) {
        self.push(Out::Heartbeat);
    }

    fn queued(&self) -> usize {
        self.queued
    }
}

fn token(user: &str) -> String {
    let exp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600;
    sign_hs256(
        SECRET,
        &Claims {
            sub: user.into(),
            client: None,
            site: None,
            exp,
        },
    )
}

fn bytes(command: Command, headers: &[(&str, &str)]) -> BytesMut {
    let mut b = BytesMut::new();
    stomp::encode_frame(command, headers, b"", Version::V1_2, &mut b);
    b
}

/// One session on a host, with the clock in the test's hands.
struct Client {
    core: StompCore,
    wire: Wire,
    now: Instant,
}

impl Client {
    fn new(host: &Arc<TestHost>) -> Self {
        Self::with_http_token(host, None)
    }

    fn with_http_token(host: &Arc<TestHost>, http_token: Option<String>) -> Self {
        let now = Instant::now();
        Client {
            core: StompCore::new(Arc::clone(host) as Arc<dyn Host>, WS, http_token, now),
            wire: Wire::default(),
            now,
        }
    }

    fn send(&mut self, command: Command, headers: &[(&str, &str)]) -> Vec<Out> {
        let b = bytes(command, headers);
        self.core.on_stomp_bytes(&b, self.now, &mut self.wire);
        self.wire.take()
    }

    fn connect(&mut self, extra: &[(&str, &str)]) -> Out {
        let mut h = vec![("accept-version", "1.2"), ("host", "herald")];
        h.extend_from_slice(extra);
        let mut out = self.send(Command::Connect, &h);
        assert_eq!(out.len(), 1, "one answer to CONNECT: {out:?}");
        out.remove(0)
    }

    fn connect_as(&mut self, user: &str) -> Out {
        let t = token(user);
        let answer = self.connect(&[("passcode", &t)]);
        assert_eq!(answer.command(), Some(Command::Connected), "{answer:?}");
        answer
    }

    fn subscribe(&mut self, id: &str, extra: &[(&str, &str)]) -> Vec<Out> {
        let mut h = vec![("id", id), ("destination", "/user/notifications")];
        h.extend_from_slice(extra);
        self.send(Command::Subscribe, &h)
    }

    fn pull(&mut self) -> Vec<Out> {
        self.core.pull(&mut self.wire, usize::MAX, self.now);
        self.wire.take()
    }

    fn timer(&mut self, after: Duration) -> Vec<Out> {
        self.now += after;
        self.core.on_timer(self.now, &mut self.wire);
        self.wire.take()
    }
}

/// The one ERROR written, with its close code.
fn error_of(out: &[Out], core: &StompCore) -> (String, u16) {
    assert_eq!(out.len(), 1, "exactly one frame: {out:?}");
    assert_eq!(out[0].command(), Some(Command::Error), "{out:?}");
    let message = out[0].header("message").unwrap().to_owned();
    (message, core.close_code().expect("the session closes"))
}

fn seqs(out: &[Out]) -> Vec<(String, u64)> {
    out.iter()
        .map(|o| match o {
            Out::Message { sub, seq, .. } => (sub.clone(), *seq),
            other => panic!("expected a MESSAGE, got {other:?}"),
        })
        .collect()
}

#[test]
fn connect_with_a_good_token_answers_connected_and_counts_the_session() {
    let host = TestHost::standard();
    let mut c = Client::new(&host);
    let answer = c.connect_as("alice");
    assert_eq!(answer.header("version"), Some("1.2"));
    assert_eq!(answer.header("user-name"), Some("alice"));
    assert_eq!(answer.header("server"), Some("Herald/test"));
    assert_eq!(
        answer.header(names::SEQ),
        Some("0"),
        "a new mailbox is empty"
    );
    assert!(answer.header(names::EPOCH).is_some());
    assert!(answer.header("session").is_some());
    assert_eq!(c.core.close_code(), None);
    assert_eq!(host.open_sessions(), 1);
    assert_eq!(
        host.metrics
            .sessions_opened
            .get_or_create(&TransportLabels { transport: WS })
            .get(),
        1
    );
    assert_eq!(host.presence(), vec![("alice".into(), true)]);
    // A second session of the same user: already online, nothing to report.
    let mut again = Client::new(&host);
    again.connect_as("alice");
    assert_eq!(host.presence().len(), 1);
    assert_eq!(host.open_sessions(), 2);
}

#[test]
fn a_bad_token_is_refused_with_error_and_policy_violation() {
    let host = TestHost::standard();
    let mut c = Client::new(&host);
    let out = vec![c.connect(&[("passcode", "not-a-jwt")])];
    let (message, code) = error_of(&out, &c.core);
    assert!(message.starts_with("token is malformed"), "{message}");
    assert_eq!(code, 1008);
    assert_eq!(host.refused(RefuseReason::Auth), 1);
    assert_eq!(host.errors(ProtocolError::Refused), 1);
    assert_eq!(host.open_sessions(), 0);
    assert!(host.presence().is_empty());

    let forged = sign_hs256(
        b"another-secret-another-secret-another",
        &Claims {
            sub: "alice".into(),
            client: None,
            site: None,
            exp: u64::MAX / 2,
        },
    );
    let mut c = Client::new(&host);
    let out = vec![c.connect(&[("passcode", &forged)])];
    assert_eq!(
        error_of(&out, &c.core),
        (AuthError::BadSignature.to_string(), 1008)
    );
}

#[test]
fn a_user_at_max_per_user_is_refused_with_error_until_a_session_ends() {
    let host = TestHost::new(
        SessionConfig {
            max_per_user: 2,
            ..SessionConfig::default()
        },
        MailboxConfig::default(),
    );
    let mut first = Client::new(&host);
    first.connect_as("alice");
    Client::new(&host).connect_as("alice");
    let mut third = Client::new(&host);
    let t = token("alice");
    let out = vec![third.connect(&[("passcode", &t)])];
    let (message, code) = error_of(&out, &third.core);
    assert_eq!(
        message,
        "too many sessions for this user: at most 2 at once on this server (session.max_per_user)"
    );
    assert_eq!(code, 1008);
    assert_eq!(host.refused(RefuseReason::UserSessionLimit), 1);
    assert_eq!(host.open_sessions(), 2, "the refused one never counted");
    // Another user is not affected; a session that ends frees a slot.
    Client::new(&host).connect_as("bob");
    third.core.finish();
    first.core.finish();
    Client::new(&host).connect_as("alice");
}

#[test]
fn a_missing_token_is_refused_unless_the_http_request_carried_one() {
    let host = TestHost::standard();
    let mut c = Client::new(&host);
    let out = vec![c.connect(&[])];
    assert_eq!(
        error_of(&out, &c.core),
        (AuthError::Missing.to_string(), 1008)
    );
    assert_eq!(host.refused(RefuseReason::Auth), 1);

    let mut c = Client::with_http_token(&host, Some(token("bob")));
    let answer = c.connect(&[]);
    assert_eq!(answer.header("user-name"), Some("bob"));
}

#[test]
fn the_highest_common_version_wins_and_an_unknown_one_is_refused() {
    let host = TestHost::standard();
    let t = token("alice");
    let mut c = Client::new(&host);
    let answer = c.send(
        Command::Connect,
        &[("accept-version", "1.0,1.1"), ("passcode", &t)],
    );
    assert_eq!(answer[0].header("version"), Some("1.1"));

    let mut c = Client::new(&host);
    let out = c.send(
        Command::Connect,
        &[("accept-version", "2.0"), ("passcode", &t)],
    );
    let (message, code) = error_of(&out, &c.core);
    assert!(message.contains("1.0,1.1,1.2"), "{message}");
    assert_eq!(code, 1002);
    assert_eq!(host.open_sessions(), 1, "only the 1.1 session opened");
}

#[test]
fn heart_beats_are_negotiated_sent_when_idle_and_enforced() {
    let host = TestHost::standard(); // the server can send and wants every 10 s
    let mut c = Client::new(&host);
    let t = token("alice");
    let answer = c.connect(&[("passcode", &t), ("heart-beat", "15000,5000")]);
    // Send every max(10 s, 5 s); expect every max(10 s, 15 s).
    assert_eq!(answer.header("heart-beat"), Some("10000,15000"));
    let start = c.now;
    c.core.sent(start);
    assert_eq!(
        c.core.next_deadline(),
        Some(start + Duration::from_secs(10))
    );
    assert!(c.timer(Duration::from_secs(9)).is_empty());
    assert_eq!(c.timer(Duration::from_secs(1)), vec![Out::Heartbeat]);
    assert_eq!(c.core.last_send(), start + Duration::from_secs(10));
    // Twice the client's interval with nothing from it: it is gone.
    c.core.received(start + Duration::from_secs(10));
    c.now = start + Duration::from_secs(39);
    c.core.sent(c.now);
    assert!(c.timer(Duration::ZERO).is_empty());
    let out = c.timer(Duration::from_secs(1));
    let (message, code) = error_of(&out, &c.core);
    assert!(message.starts_with("heart-beat timeout"), "{message}");
    assert_eq!(code, 1001);
    assert_eq!(
        c.core.next_deadline(),
        None,
        "a closing session has no timers"
    );
}

#[test]
fn no_heart_beats_when_either_side_declines() {
    let host = TestHost::standard();
    let mut c = Client::new(&host);
    let t = token("alice");
    let answer = c.connect(&[("passcode", &t), ("heart-beat", "0,0")]);
    assert_eq!(answer.header("heart-beat"), Some("0,0"));
    // Only the token's expiry, 10 minutes away, is left.
    let next = c.core.next_deadline().unwrap();
    assert!(
        next > c.now + Duration::from_secs(599),
        "{:?}",
        next - c.now
    );
}

#[test]
fn no_connect_in_time_is_refused() {
    let host = TestHost::standard();
    let mut c = Client::new(&host);
    let deadline = c.now + Duration::from_millis(host.config.connect_timeout_ms);
    assert_eq!(c.core.next_deadline(), Some(deadline));
    let out = c.timer(Duration::from_millis(host.config.connect_timeout_ms));
    assert_eq!(
        error_of(&out, &c.core),
        ("no CONNECT frame in time".into(), 1008)
    );
    assert_eq!(host.refused(RefuseReason::ConnectTimeout), 1);
}

#[test]
fn subscribe_answers_the_receipt_and_delivers_to_every_subscription() {
    let host = TestHost::standard();
    let mut c = Client::new(&host);
    c.connect_as("alice");
    let out = c.subscribe("s1", &[("receipt", "r1")]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].command(), Some(Command::Receipt));
    assert_eq!(out[0].header("receipt-id"), Some("r1"));
    assert!(c.core.can_pull());
    assert!(!c.core.has_pending());
    host.deliver("alice", "n1");
    assert!(c.core.has_pending());
    assert_eq!(seqs(&c.pull()), vec![("s1".into(), 1)]);
    // A second subscription gets the same stream.
    assert!(c.subscribe("s2", &[]).is_empty());
    host.deliver("alice", "n2");
    host.deliver("bob", "not-for-alice");
    assert_eq!(seqs(&c.pull()), vec![("s1".into(), 2), ("s2".into(), 2)]);
}

#[test]
fn pull_stops_at_the_limit_and_resumes() {
    let host = TestHost::standard();
    let mut c = Client::new(&host);
    c.connect_as("alice");
    c.subscribe("s1", &[]);
    for i in 0..3 {
        host.deliver("alice", &format!("n{i}"));
    }
    c.core.pull(&mut c.wire, 2, c.now);
    assert_eq!(
        seqs(&c.wire.take()),
        vec![("s1".into(), 1), ("s1".into(), 2)]
    );
    assert!(c.core.has_pending());
    assert_eq!(seqs(&c.pull()), vec![("s1".into(), 3)]);
}

#[test]
fn a_reused_subscription_id_or_a_foreign_destination_is_an_error() {
    let host = TestHost::standard();
    let mut c = Client::new(&host);
    c.connect_as("alice");
    c.subscribe("s1", &[]);
    let out = c.subscribe("s1", &[("receipt", "r2")]);
    let (message, code) = error_of(&out, &c.core);
    assert!(message.contains("already in use"), "{message}");
    assert_eq!(code, 1002);
    assert_eq!(out[0].header("receipt-id"), Some("r2"));
    assert_eq!(host.errors(ProtocolError::Refused), 1);

    let mut c = Client::new(&host);
    c.connect_as("alice");
    let out = c.send(
        Command::Subscribe,
        &[("id", "s1"), ("destination", "/topic/everything")],
    );
    let (message, code) = error_of(&out, &c.core);
    assert!(message.contains("/user/notifications"), "{message}");
    assert_eq!(code, 1002);
    assert!(!c.core.can_pull(), "a closing session pulls nothing");
}

#[test]
fn resume_replays_what_came_after_the_last_seen_sequence() {
    let host = TestHost::standard();
    let mut first = Client::new(&host);
    let answer = first.connect_as("alice");
    let epoch = answer.header(names::EPOCH).unwrap().to_owned();
    first.subscribe("s1", &[]);
    for i in 1..=3 {
        host.deliver("alice", &format!("n{i}"));
    }
    assert_eq!(first.pull().len(), 3);
    first.core.finish();
    // The client saw seq 1 only; the mailbox outlived the session.
    let mut again = Client::new(&host);
    let t = token("alice");
    let answer = again.connect(&[
        ("passcode", &t),
        (names::LAST_SEQ, "1"),
        (names::EPOCH, &epoch),
    ]);
    assert_eq!(answer.header(names::SEQ), Some("3"));
    assert_eq!(answer.header(names::EPOCH), Some(epoch.as_str()));
    again.subscribe("s1", &[]);
    assert_eq!(
        seqs(&again.pull()),
        vec![("s1".into(), 2), ("s1".into(), 3)]
    );
    assert_eq!(host.metrics.replayed.get(), 2);
    // Resume on the SUBSCRIBE itself, for a second subscription.
    again.subscribe("s2", &[(names::LAST_SEQ, "2"), (names::EPOCH, &epoch)]);
    assert_eq!(seqs(&again.pull()), vec![("s2".into(), 3)]);
}

/// A replay longer than the session's queue (the mailbox may hold more
/// than a queue now) is read through the queue as the client drains, and
/// live messages follow it without a gap or a repeat.
#[test]
fn a_replay_longer_than_the_queue_is_read_as_the_client_drains() {
    let session = SessionConfig {
        queue_messages: 4,
        ..SessionConfig::default()
    };
    let mailbox = MailboxConfig {
        buffer_messages: 50,
        ..MailboxConfig::default()
    };
    let host = TestHost::new(session, mailbox);
    let mut first = Client::new(&host);
    let epoch = first
        .connect_as("alice")
        .header(names::EPOCH)
        .unwrap()
        .to_owned();
    first.core.finish();
    for i in 1..=30 {
        host.deliver("alice", &format!("n{i}"));
    }
    let mut c = Client::new(&host);
    let t = token("alice");
    c.connect(&[
        ("passcode", &t),
        (names::LAST_SEQ, "0"),
        (names::EPOCH, &epoch),
    ]);
    c.subscribe("s1", &[]);
    assert!(c.core.outbox().len() <= 4);
    c.core.pull(&mut c.wire, 10, c.now);
    let mut got = seqs(&c.wire.take());
    host.deliver("alice", "n31"); // live, mid-replay
    got.extend(seqs(&c.pull()));
    let expected: Vec<(String, u64)> = (1..=31).map(|seq| ("s1".into(), seq)).collect();
    assert_eq!(got, expected);
    assert_eq!(host.metrics.replayed.get(), 30);
    assert_eq!(c.core.close_code(), None);
}

#[test]
fn without_a_resume_point_the_first_subscribe_starts_at_connect() {
    let host = TestHost::standard();
    let mut c = Client::new(&host);
    c.connect_as("alice");
    // Between CONNECTED and SUBSCRIBE: not lost.
    host.deliver("alice", "n1");
    c.subscribe("s1", &[]);
    assert_eq!(seqs(&c.pull()), vec![("s1".into(), 1)]);
}

#[test]
fn a_sequence_no_longer_buffered_is_a_gap_marker() {
    let mailbox = MailboxConfig {
        buffer_messages: 2,
        ..MailboxConfig::default()
    };
    let host = TestHost::new(SessionConfig::default(), mailbox);
    let mut first = Client::new(&host);
    let epoch = first
        .connect_as("alice")
        .header(names::EPOCH)
        .unwrap()
        .to_owned();
    for i in 1..=5 {
        host.deliver("alice", &format!("n{i}"));
    }
    first.core.finish();
    let mut c = Client::new(&host);
    let t = token("alice");
    c.connect(&[
        ("passcode", &t),
        (names::LAST_SEQ, "1"),
        (names::EPOCH, &epoch),
    ]);
    c.subscribe("s1", &[]);
    let out = c.pull();
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].command(), Some(Command::Message));
    assert_eq!(out[0].header(names::EVENT), Some(names::GAP_EVENT));
    assert_eq!(out[0].header("reason"), Some("buffer-exceeded"));
    assert_eq!(out[0].header(names::SEQ), Some("5"), "resume from the head");
    assert_eq!(out[0].header("subscription"), Some("s1"));
    assert_eq!(host.metrics.gaps.get(), 1);
    // Another epoch (the mailbox was made anew) is a gap too.
    let mut c = Client::new(&host);
    c.connect(&[
        ("passcode", &t),
        (names::LAST_SEQ, "1"),
        (names::EPOCH, "7"),
    ]);
    c.subscribe("s1", &[]);
    let out = c.pull();
    assert_eq!(out[0].header("reason"), Some("epoch-changed"));
}

#[test]
fn a_resume_from_another_mailbox_with_offline_ms_is_reported_as_missed() {
    let host = TestHost::standard();
    let t = token("alice");
    let before = herald_engine::schedule::timing::now_ms();
    let mut c = Client::new(&host);
    // Its edge died: epoch 7 is no mailbox of this host.
    c.connect(&[
        ("passcode", &t),
        (names::LAST_SEQ, "4"),
        (names::EPOCH, "7"),
        (names::OFFLINE_MS, "2500"),
    ]);
    c.subscribe("s1", &[]);
    assert_eq!(c.pull()[0].header("reason"), Some("epoch-changed"));
    let missed = host.hub.user_sessions("alice").missed_since_ms;
    assert!(
        missed >= before - 2_500 && missed <= herald_engine::schedule::timing::now_ms() - 2_500,
        "{missed}"
    );
    // A position restored after a page reload comes on the SUBSCRIBE.
    let bob = token("bob");
    let mut reloaded = Client::new(&host);
    reloaded.connect(&[("passcode", &bob)]);
    assert_eq!(host.hub.user_sessions("bob").missed_since_ms, 0);
    reloaded.subscribe(
        "s1",
        &[
            (names::LAST_SEQ, "9"),
            (names::EPOCH, "7"),
            (names::OFFLINE_MS, "60000"),
        ],
    );
    let bob_missed = host.hub.user_sessions("bob").missed_since_ms;
    assert!(
        bob_missed >= before - 60_000
            && bob_missed <= herald_engine::schedule::timing::now_ms() - 60_000,
        "{bob_missed}"
    );
    // A bad value is refused with an ERROR naming it.
    let mut bad = Client::new(&host);
    let answer = bad.connect(&[
        ("passcode", &t),
        (names::LAST_SEQ, "4"),
        (names::EPOCH, "7"),
        (names::OFFLINE_MS, "soon"),
    ]);
    let (message, code) = error_of(&[answer], &bad.core);
    assert!(message.contains("offline-ms"), "{message}");
    assert_eq!(code, 1002);
}

#[test]
fn frames_out_of_place_are_errors() {
    let host = TestHost::standard();
    let mut c = Client::new(&host);
    let out = c.subscribe("s1", &[]);
    assert_eq!(
        error_of(&out, &c.core),
        ("expected CONNECT, got SUBSCRIBE".into(), 1002)
    );

    let mut c = Client::new(&host);
    c.connect_as("alice");
    let out = c.send(Command::Send, &[("destination", "/user/notifications")]);
    let (message, code) = error_of(&out, &c.core);
    assert!(message.starts_with("SEND is not supported"), "{message}");
    assert_eq!(code, 1002);
    // Nothing more is read once the session is closing.
    assert!(c.subscribe("s1", &[]).is_empty());
}

#[test]
fn broken_bytes_close_with_the_code_of_their_kind() {
    let session = SessionConfig {
        max_frame_bytes: 256,
        ..SessionConfig::default()
    };
    let host = TestHost::new(session, MailboxConfig::default());
    let mut c = Client::new(&host);
    let big = "x".repeat(300);
    let out = c.send(Command::Connect, &[("accept-version", "1.2"), ("x", &big)]);
    let (_, code) = error_of(&out, &c.core);
    assert_eq!(code, 1009);
    assert_eq!(host.errors(ProtocolError::Oversized), 1);

    let mut c = Client::new(&host);
    c.core
        .on_stomp_bytes(b"NOT-A-COMMAND\n\n\0", c.now, &mut c.wire);
    let out = c.wire.take();
    let (_, code) = error_of(&out, &c.core);
    assert_eq!(code, 1002);
    assert_eq!(host.errors(ProtocolError::MalformedFrame), 1);
}

#[test]
fn a_header_that_is_not_utf8_closes_with_invalid_payload_data() {
    let host = TestHost::standard();
    let mut c = Client::new(&host);
    c.connect_as("alice");
    c.core
        .on_stomp_bytes(b"SUBSCRIBE\nid:\xff\n\n\0", c.now, &mut c.wire);
    let out = c.wire.take();
    let (message, code) = error_of(&out, &c.core);
    assert_eq!(message, "the header on line 2 is not valid UTF-8");
    assert_eq!(code, 1007);
    assert_eq!(host.errors(ProtocolError::InvalidUtf8), 1);
}

#[test]
fn a_body_on_a_subscribe_is_refused_and_does_not_swallow_the_next_frame() {
    let host = TestHost::standard();
    let mut c = Client::new(&host);
    c.connect_as("alice");
    // A SUBSCRIBE without its NUL, then an UNSUBSCRIBE: read up to the next
    // NUL, the UNSUBSCRIBE would be the SUBSCRIBE's body.
    c.core.on_stomp_bytes(
        b"SUBSCRIBE\nid:s1\ndestination:/user/notifications\n\nUNSUBSCRIBE\nid:s1\n\n\0",
        c.now,
        &mut c.wire,
    );
    let out = c.wire.take();
    let (message, code) = error_of(&out, &c.core);
    assert!(
        message.starts_with("SUBSCRIBE frames must not have a body"),
        "{message}"
    );
    assert_eq!(code, 1002);
    assert_eq!(host.errors(ProtocolError::MalformedFrame), 1);
    assert!(!c.core.can_pull(), "the session closes");
}

#[test]
fn a_frame_split_across_reads_is_decoded_once_whole() {
    let host = TestHost::standard();
    let mut c = Client::new(&host);
    let t = token("alice");
    let b = bytes(
        Command::Connect,
        &[("accept-version", "1.2"), ("passcode", &t)],
    );
    let (head, tail) = b.split_at(10);
    c.core.on_stomp_bytes(head, c.now, &mut c.wire);
    assert!(c.wire.take().is_empty());
    c.core.on_stomp_bytes(tail, c.now, &mut c.wire);
    assert_eq!(c.wire.take()[0].command(), Some(Command::Connected));
}

#[test]
fn disconnect_answers_the_receipt_and_closes_normally() {
    let host = TestHost::standard();
    let mut c = Client::new(&host);
    c.connect_as("alice");
    let out = c.send(Command::Disconnect, &[("receipt", "bye")]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].header("receipt-id"), Some("bye"));
    assert_eq!(c.core.close_code(), Some(1000));
}

fn slow_consumers(host: &TestHost) -> u64 {
    host.metrics
        .dropped
        .get_or_create(&crate::metrics::DropLabels {
            reason: DropReason::SlowConsumer,
        })
        .get()
}

/// Issue 19, hole 7: 400 notifications due at once for one user, more
/// than the session's queue holds and less than the mailbox does. A client
/// that reads at a normal pace (a few frames per socket write) gets all of
/// them, in order, and is not cut.
#[test]
fn a_burst_beyond_the_queue_that_the_mailbox_holds_reaches_a_reading_client() {
    let session = SessionConfig {
        queue_messages: 256,
        ..SessionConfig::default()
    };
    let mailbox = MailboxConfig {
        buffer_messages: 1000,
        ..MailboxConfig::default()
    };
    let host = TestHost::new(session, mailbox);
    let mut c = Client::new(&host);
    c.connect_as("alice");
    c.subscribe("s1", &[]);
    for i in 1..=400 {
        host.deliver("alice", &format!("n{i}"));
    }
    assert!(
        c.core.outbox().len() <= 256,
        "the session holds its window, not the burst"
    );
    let mut got = Vec::new();
    loop {
        // The socket takes 32 frames per write.
        c.core.pull(&mut c.wire, 32, c.now);
        let out = c.wire.take();
        if out.is_empty() {
            break;
        }
        got.extend(seqs(&out));
        c.now += Duration::from_millis(1);
        c.core.sent(c.now);
    }
    assert_eq!(c.core.close_code(), None, "not cut");
    let expected: Vec<(String, u64)> = (1..=400).map(|seq| ("s1".into(), seq)).collect();
    assert_eq!(got, expected, "all of them, in order, once");
    assert_eq!(slow_consumers(&host), 0);
    assert_eq!(host.metrics.sessions_behind.get(), 1);
    // Caught up: the next one goes straight through.
    host.deliver("alice", "n401");
    assert_eq!(seqs(&c.pull()), vec![("s1".into(), 401)]);
}

/// The chat backlog of the field reports, 100,000 for one user at once
/// (ten thousand times the mailbox's replay bound here) for a client that
/// reads: what the session was not sent yet is not evicted under it, so it
/// reads every message, in order, and is never cut. (Over a real WebSocket
/// and through the delayed store: `gateway/tests/burst.rs`, 10,000.)
#[test]
fn a_burst_past_the_replay_bound_reaches_a_reading_client_whole() {
    let session = SessionConfig {
        queue_messages: 4,
        ..SessionConfig::default()
    };
    let mailbox = MailboxConfig {
        buffer_messages: 10,
        ..MailboxConfig::default()
    };
    let host = TestHost::new(session, mailbox);
    let mut c = Client::new(&host);
    c.connect_as("alice");
    c.subscribe("s1", &[]);
    const BURST: u64 = 100_000;
    for i in 1..=BURST {
        host.deliver("alice", &format!("n{i}"));
    }
    assert!(c.core.outbox().len() <= 4, "bounded by the window");
    let mut next = 1;
    while next <= BURST {
        c.core.pull(&mut c.wire, 64, c.now);
        let got = seqs(&c.wire.take());
        assert!(!got.is_empty(), "stalled at {next}");
        for (sub, seq) in got {
            assert_eq!((sub.as_str(), seq), ("s1", next), "in order, none lost");
            next += 1;
        }
    }
    assert_eq!(slow_consumers(&host), 0);
    assert_eq!(c.core.close_code(), None);
    // Caught up: live again.
    host.deliver("alice", "n-after");
    assert_eq!(seqs(&c.pull()), vec![("s1".into(), BURST + 1)]);
}

/// A client that reads nothing is still cut as a slow consumer once its
/// mailbox evicts what it was not sent (here at once: no room for unsent
/// messages past the replay bound, `mailbox.unsent_bytes` 1), and holds no
/// more than its window meanwhile, however much arrives.
#[test]
fn a_client_that_never_reads_is_cut_when_its_mailbox_evicts_what_it_was_not_sent() {
    let session = SessionConfig {
        queue_messages: 4,
        ..SessionConfig::default()
    };
    let mailbox = MailboxConfig {
        buffer_messages: 10,
        unsent_bytes: 1,
        ..MailboxConfig::default()
    };
    let host = TestHost::new(session, mailbox);
    let mut c = Client::new(&host);
    c.connect_as("alice");
    c.subscribe("s1", &[]);
    // It took two messages into its socket buffer, and reads no more.
    host.deliver("alice", "n1");
    host.deliver("alice", "n2");
    c.core.pull(&mut c.wire, 2, c.now);
    assert_eq!(c.wire.queued, 2);
    // Window 4 + mailbox 10 past what it took: 16 arrive without a cut.
    for i in 3..=16 {
        host.deliver("alice", &format!("n{i}"));
        assert!(c.core.outbox().len() <= 4, "bounded by the window");
    }
    assert!(!c.core.outbox().is_cut());
    assert_eq!(slow_consumers(&host), 0);
    // The 17th evicts seq 7, which it was never sent.
    host.deliver("alice", "n17");
    assert!(c.core.outbox().is_cut());
    assert_eq!(c.core.outbox().len(), 0, "a cut session holds nothing");
    assert_eq!(slow_consumers(&host), 1);
    c.wire.take();
    c.core.pull(&mut c.wire, usize::MAX, c.now);
    let out = c.wire.take();
    let (message, code) = error_of(&out, &c.core);
    assert!(message.starts_with("slow consumer"), "{message}");
    assert_eq!(code, 1008);
    // Later messages cost it nothing.
    for i in 18..=100 {
        host.deliver("alice", &format!("n{i}"));
    }
    assert_eq!(c.core.outbox().len(), 0);
    assert_eq!(slow_consumers(&host), 1, "counted once");
}

/// `session.max_lag_ms`: a client that takes nothing of what waits for it
/// for that long is cut, whatever `when_full` says; write progress resets
/// the clock, and an idle session has no lag clock at all.
#[test]
fn a_client_that_takes_nothing_for_max_lag_is_cut() {
    let session = SessionConfig {
        max_lag_ms: 30_000,
        when_full: crate::config::WhenFull::DropOldest,
        ..SessionConfig::default()
    };
    let host = TestHost::new(session, MailboxConfig::default());
    let mut c = Client::new(&host);
    c.connect(&[("passcode", &token("alice")), ("heart-beat", "0,0")]);
    c.subscribe("s1", &[]);
    c.core.pull(&mut c.wire, usize::MAX, c.now);
    let idle = c.core.next_deadline();
    assert!(
        idle.is_none_or(|d| d > c.now + Duration::from_secs(60)),
        "no lag clock while nothing waits"
    );
    host.deliver("alice", "n1");
    host.deliver("alice", "n2");
    // The socket took nothing.
    c.core.pull(&mut c.wire, 1, c.now);
    let start = c.now;
    assert_eq!(
        c.core.next_deadline(),
        Some(start + Duration::from_secs(30))
    );
    c.now += Duration::from_secs(20);
    c.core.on_timer(c.now, &mut c.wire);
    assert_eq!(
        c.wire.out.len(),
        1,
        "still only the MESSAGE it did not take"
    );
    // It took some bytes: the clock starts again.
    c.core.sent(c.now);
    let progress = c.now;
    c.now = start + Duration::from_secs(30);
    c.core.on_timer(c.now, &mut c.wire);
    assert_eq!(c.core.close_code(), None);
    assert_eq!(
        c.core.next_deadline(),
        Some(progress + Duration::from_secs(30))
    );
    c.now = progress + Duration::from_secs(30);
    c.core.on_timer(c.now, &mut c.wire);
    let out = c.wire.take();
    let error = out.last().unwrap();
    assert_eq!(error.command(), Some(Command::Error), "{out:?}");
    let message = error.header("message").unwrap();
    assert!(message.starts_with("slow consumer"), "{message}");
    assert!(message.contains("max_lag_ms"), "{message}");
    assert_eq!(c.core.close_code(), Some(1008));
    assert_eq!(slow_consumers(&host), 1);
}

/// A client that reads everything is never cut by the lag clock, however
/// long it stays connected.
#[test]
fn the_lag_clock_stops_when_the_client_has_taken_everything() {
    let host = TestHost::standard();
    let mut c = Client::new(&host);
    c.connect(&[("passcode", &token("alice")), ("heart-beat", "0,0")]);
    c.subscribe("s1", &[]);
    host.deliver("alice", "n1");
    assert_eq!(c.pull().len(), 1);
    c.core.sent(c.now);
    // Everything was taken: the next pull finds nothing waiting.
    assert!(c.pull().is_empty());
    // (The token is good for 10 minutes.)
    assert!(c.timer(Duration::from_secs(500)).is_empty());
    assert_eq!(c.core.close_code(), None);
}

/// `drop-oldest`: a client so far behind that its mailbox evicts what it
/// was not sent (past `mailbox.unsent_bytes`, here 1) keeps its session; a
/// gap marker stands for what it lost.
#[test]
fn drop_oldest_turns_what_a_lagging_client_lost_into_one_gap_marker() {
    let session = SessionConfig {
        queue_messages: 2,
        when_full: crate::config::WhenFull::DropOldest,
        ..SessionConfig::default()
    };
    let mailbox = MailboxConfig {
        buffer_messages: 3,
        unsent_bytes: 1,
        ..MailboxConfig::default()
    };
    let host = TestHost::new(session, mailbox);
    let mut c = Client::new(&host);
    c.connect_as("alice");
    c.subscribe("s1", &[]);
    for i in 1..=10 {
        host.deliver("alice", &format!("n{i}"));
    }
    let out = c.pull();
    assert_eq!(c.core.close_code(), None, "{out:?}");
    let seq_or_gap: Vec<String> = out
        .iter()
        .map(|o| match o {
            Out::Message { seq, .. } => seq.to_string(),
            other => format!(
                "gap {} {}",
                other.header(names::SEQ).unwrap(),
                other.header("reason").unwrap()
            ),
        })
        .collect();
    // The window kept 1-2, the mailbox keeps 8-10: 3-7 were lost.
    assert_eq!(
        seq_or_gap,
        ["1", "2", "gap 7 queue-overflow", "8", "9", "10"]
    );
    assert_eq!(
        host.metrics
            .dropped
            .get_or_create(&crate::metrics::DropLabels {
                reason: DropReason::QueueFullDropOldest,
            })
            .get(),
        5
    );
    assert_eq!(slow_consumers(&host), 0);
}

#[test]
fn shutdown_says_so_and_goes_away() {
    let host = TestHost::standard();
    let mut c = Client::new(&host);
    c.connect_as("alice");
    c.core.shutdown(&mut c.wire);
    let out = c.wire.take();
    assert_eq!(
        error_of(&out, &c.core),
        ("server shutting down".into(), 1001)
    );
    // Only once.
    c.core.shutdown(&mut c.wire);
    assert!(c.wire.take().is_empty());
}

#[test]
fn finish_leaves_the_mailbox_and_the_last_one_out_reports_offline() {
    let host = TestHost::standard();
    let mut a = Client::new(&host);
    a.connect_as("alice");
    let mut b = Client::new(&host);
    b.connect_as("alice");
    a.core.finish();
    assert_eq!(host.open_sessions(), 1);
    assert_eq!(host.presence(), vec![("alice".into(), true)]);
    b.core.finish();
    assert_eq!(host.open_sessions(), 0);
    assert_eq!(
        host.presence(),
        vec![("alice".into(), true), ("alice".into(), false)]
    );
    // A session that never connected leaves nothing behind.
    Client::new(&host).core.finish();
    assert_eq!(host.presence().len(), 2);
    assert_eq!(host.hub.mailbox_count(), 1, "the mailbox waits out its TTL");
}

fn token_expiring_in(user: &str, secs: u64) -> String {
    let exp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + secs;
    sign_hs256(
        SECRET,
        &Claims {
            sub: user.into(),
            client: None,
            site: None,
            exp,
        },
    )
}

#[test]
fn a_session_ends_with_token_expired_when_its_token_does() {
    let host = TestHost::standard(); // leeway 0
    let mut c = Client::new(&host);
    let t = token_expiring_in("alice", 2);
    let answer = c.connect(&[("passcode", &t), ("heart-beat", "0,0")]);
    assert_eq!(answer.command(), Some(Command::Connected), "{answer:?}");
    c.subscribe("s1", &[]);
    // exp is whole seconds: between 1 and 2 s from now.
    let expiry = c
        .core
        .next_deadline()
        .expect("the token's expiry is a deadline");
    assert!(
        expiry > c.now + Duration::from_secs(1) && expiry <= c.now + Duration::from_secs(2),
        "{:?} after connect",
        expiry - c.now
    );
    let before = expiry - c.now - Duration::from_millis(1);
    assert!(c.timer(before).is_empty(), "not a moment early");
    assert_eq!(c.core.close_code(), None);
    let out = c.timer(Duration::from_millis(1));
    assert_eq!(error_of(&out, &c.core), ("token expired".into(), 1008));
    assert!(!c.core.can_pull(), "nothing more goes out");
    assert_eq!(host.metrics.sessions_token_expired.get(), 1);
    assert_eq!(
        host.errors(ProtocolError::Refused),
        0,
        "not a protocol error"
    );
    assert_eq!(c.core.next_deadline(), None);
}

#[test]
fn the_token_expiry_is_the_next_deadline_only_when_it_comes_first() {
    let host = TestHost::standard();
    // Heart-beats every 10 s, the token good for 10 minutes: heart-beats first.
    let mut c = Client::new(&host);
    c.connect(&[("passcode", &token("alice")), ("heart-beat", "10000,10000")]);
    c.core.sent(c.now);
    assert_eq!(
        c.core.next_deadline(),
        Some(c.now + Duration::from_secs(10))
    );
    // A token good for 2 s comes before them.
    let mut c = Client::new(&host);
    let t = token_expiring_in("alice", 2);
    c.connect(&[("passcode", &t), ("heart-beat", "10000,10000")]);
    c.core.sent(c.now);
    assert!(c.core.next_deadline().unwrap() <= c.now + Duration::from_secs(2));
    // A token that practically never expires: a deadline nobody waits for.
    let far = sign_hs256(
        SECRET,
        &Claims {
            sub: "alice".into(),
            client: None,
            site: None,
            exp: u64::MAX / 2,
        },
    );
    let mut c = Client::new(&host);
    c.connect(&[("passcode", &far), ("heart-beat", "0,0")]);
    let century = Duration::from_secs(100 * 365 * 24 * 3600);
    assert!(c.core.next_deadline().is_none_or(|d| d > c.now + century));
}
