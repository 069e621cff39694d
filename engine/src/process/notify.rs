//! systemd's readiness protocol (`sd_notify(3)`), for units of
//! `Type=notify`: one datagram per state change to the Unix socket named by
//! `$NOTIFY_SOCKET` (a path, or `@name` for an abstract socket).
//!
//! - `READY=1` once the process takes work: it listens and what its
//!   `/readyz` asks for holds ([`announce_ready`]): an edge is linked to a
//!   root, a router reached its broker (and Redis);
//! - `STOPPING=1` when the drain starts;
//! - `STATUS=…`, a line `systemctl status` shows: what readiness waits for.
//!
//! Without `$NOTIFY_SOCKET` (not started by systemd, or a unit of another
//! type) nothing is sent. A send that fails is logged once at debug and
//! otherwise ignored: systemd's timeout (`TimeoutStartSec`) is what reports
//! a process that never became ready.

use std::future::Future;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::health::Reason;

/// How often [`announce_ready`] asks the readiness conditions again while
/// they fail: a cheap look at in-process state (the router's Redis `PING`
/// is bounded by its own timeout), done only until `READY=1` is sent.
pub const READINESS_POLL: Duration = Duration::from_millis(100);

/// Where the notifications go, or nowhere.
#[derive(Debug)]
pub struct Notifier {
    target: Option<Target>,
}

#[derive(Debug)]
struct Target {
    socket: UnixDatagram,
    address: Address,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Address {
    Path(PathBuf),
    /// Linux's abstract namespace: `@name` in `$NOTIFY_SOCKET`.
    Abstract(Vec<u8>),
}

impl Address {
    /// `$NOTIFY_SOCKET`'s value: an absolute path or `@name`; anything else
    /// (systemd also knows `vsock:`, for virtual machines) is not for us.
    fn parse(value: &std::ffi::OsStr) -> Option<Address> {
        use std::os::unix::ffi::OsStrExt;
        let bytes = value.as_bytes();
        match bytes.first()? {
            b'/' => Some(Address::Path(PathBuf::from(value))),
            b'@' if bytes.len() > 1 => Some(Address::Abstract(bytes[1..].to_vec())),
            _ => None,
        }
    }
}

impl Notifier {
    /// The socket `$NOTIFY_SOCKET` names, or a notifier that sends nothing
    /// when it is unset, empty or not a Unix socket address (logged).
    pub fn from_env() -> Notifier {
        match std::env::var_os("NOTIFY_SOCKET") {
            Some(v) if !v.is_empty() => Notifier::to(&v),
            _ => Notifier::none(),
        }
    }

    /// A notifier that sends nothing.
    pub fn none() -> Notifier {
        Notifier { target: None }
    }

    fn to(value: &std::ffi::OsStr) -> Notifier {
        let Some(address) = Address::parse(value) else {
            tracing::warn!(
                notify_socket = %value.to_string_lossy(),
                "NOTIFY_SOCKET is not a Unix socket path or @name: systemd is not notified"
            );
            return Notifier::none();
        };
        match UnixDatagram::unbound() {
            Ok(socket) => Notifier {
                target: Some(Target { socket, address }),
            },
            Err(e) => {
                tracing::warn!(error = %e, "cannot open a socket for NOTIFY_SOCKET: systemd is not notified");
                Notifier::none()
            }
        }
    }

    /// Whether notifications go anywhere.
    pub fn is_enabled(&self) -> bool {
        self.target.is_some()
    }

    /// Send `state` (newline-separated `KEY=value` lines) as one datagram.
    pub fn send(&self, state: &str) {
        let Some(t) = &self.target else { return };
        let sent = match &t.address {
            Address::Path(path) => t.socket.send_to(state.as_bytes(), path),
            Address::Abstract(name) => {
                use std::os::linux::net::SocketAddrExt;
                std::os::unix::net::SocketAddr::from_abstract_name(name)
                    .and_then(|addr| t.socket.send_to_addr(state.as_bytes(), &addr))
            }
        };
        if let Err(e) = sent {
            tracing::debug!(error = %e, state, "sd_notify failed");
        }
    }

    /// `READY=1`, with a status line.
    pub fn ready(&self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={}", one_line(status)));
    }

    /// `STOPPING=1`, with a status line.
    pub fn stopping(&self, status: &str) {
        self.send(&format!("STOPPING=1\nSTATUS={}", one_line(status)));
    }

    /// A status line alone.
    pub fn status(&self, status: &str) {
        self.send(&format!("STATUS={}", one_line(status)));
    }
}

/// A status is one line: a newline would start another assignment.
fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

/// Tell systemd when the process is ready and when it stops: once
/// `not_ready` (the conditions of `/readyz`, asked every
/// [`READINESS_POLL`]) answers nothing, `READY=1`; when `shutdown` fires,
/// `STOPPING=1`. The caller spawns this once it listens, so `READY=1` never
/// comes before the port accepts. While not ready the status names the
/// reasons (`systemctl status` shows them). Returns after `STOPPING=1`;
/// does nothing at all (beyond waiting for `shutdown`) without
/// `$NOTIFY_SOCKET`.
pub async fn announce_ready<F, Fut>(
    notifier: Notifier,
    program: &str,
    mut not_ready: F,
    shutdown: CancellationToken,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Vec<Reason>>,
{
    if !notifier.is_enabled() {
        shutdown.cancelled().await;
        return;
    }
    let waiting = async {
        let mut last: Vec<Reason> = Vec::new();
        let mut tick = tokio::time::interval(READINESS_POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let reasons = not_ready().await;
            if reasons.is_empty() {
                notifier.ready(&format!("{program}: ready"));
                tracing::info!("systemd notified: ready");
                return;
            }
            if reasons != last {
                notifier.status(&format!("{program}: not ready: {}", reasons.join(", ")));
                last = reasons;
            }
        }
    };
    tokio::select! {
        _ = waiting => shutdown.cancelled().await,
        _ = shutdown.cancelled() => {}
    }
    notifier.stopping(&format!("{program}: draining"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn notify_socket_values() {
        assert_eq!(
            Address::parse(OsStr::new("/run/systemd/notify")),
            Some(Address::Path("/run/systemd/notify".into()))
        );
        assert_eq!(
            Address::parse(OsStr::new("@sd")),
            Some(Address::Abstract(b"sd".to_vec()))
        );
        assert_eq!(Address::parse(OsStr::new("@")), None);
        assert_eq!(Address::parse(OsStr::new("vsock:2:1")), None);
        assert_eq!(Address::parse(OsStr::new("relative")), None);
    }

    #[tokio::test]
    async fn ready_once_the_conditions_hold_then_stopping() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).unwrap();
        listener
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let shutdown = CancellationToken::new();
        let (tx, rx) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(announce_ready(
            Notifier::to(path.as_os_str()),
            "test",
            move || {
                let ok = *rx.borrow();
                async move { if ok { vec![] } else { vec!["no root link"] } }
            },
            shutdown.clone(),
        ));
        let recv = move || {
            let mut buf = [0u8; 512];
            let n = listener.recv(&mut buf).unwrap();
            (String::from_utf8_lossy(&buf[..n]).into_owned(), listener)
        };
        let (first, listener) = tokio::task::spawn_blocking(recv).await.unwrap();
        assert_eq!(first, "STATUS=test: not ready: no root link");
        tx.send(true).unwrap();
        let recv = move || {
            let mut buf = [0u8; 512];
            let n = listener.recv(&mut buf).unwrap();
            (String::from_utf8_lossy(&buf[..n]).into_owned(), listener)
        };
        let (ready, listener) = tokio::task::spawn_blocking(recv).await.unwrap();
        assert_eq!(ready, "READY=1\nSTATUS=test: ready");
        shutdown.cancel();
        task.await.unwrap();
        let mut buf = [0u8; 512];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1\nSTATUS=test: draining");
    }

    #[test]
    fn abstract_addresses_are_reached() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("herald-notify-test-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let listener = UnixDatagram::bind_addr(&addr).unwrap();
        Notifier::to(OsStr::new(&format!("@{name}"))).ready("x");
        let mut buf = [0u8; 64];
        listener
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\nSTATUS=x");
    }

    #[test]
    fn nothing_without_a_socket() {
        assert!(!Notifier::none().is_enabled());
        Notifier::none().ready("x");
    }
}
