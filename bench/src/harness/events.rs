//! The conversation between the parent and its worker processes.
//!
//! Worker to parent: one JSON object per line on the worker's stdout ([`WorkerEvent`]). The
//! worker writes nothing else there; diagnostics go to stderr.
//!
//! Parent to worker: the worker's stdin. A line `close` (or end of file, e.g. because the parent
//! died) tells the worker to close its sessions and exit.
//!
//! ```text
//! parent                         worker i
//!   spawn ----------------------->  started
//!                                   progress ... (every second while connecting)
//!   <-----------------------------  ready {opened, failed, failures, connect window}
//!   (measure RSS, hold)
//!   <-----------------------------  received {messages} ... (record mode, every 250 ms)
//!   "close\n" ------------------->  (close sessions)
//!   <-----------------------------  arrivals {[seq, unix ns], ...} ... (record mode)
//!   <-----------------------------  closed {dropped, frames}
//!                                   exit 0
//! ```
//!
//! In record mode (`worker --record`, used by `herald-bench delayed`) every `MESSAGE` whose
//! `message-id` is one of the bench's delayed ids is stamped with the wall clock on arrival; the
//! stamps go to the parent after the sessions closed, in `arrivals` lines of at most
//! [`ARRIVALS_PER_LINE`] each.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The line that asks a worker to close its sessions.
pub(crate) const CLOSE_COMMAND: &str = "close";
/// How long closing sessions may take before a worker exits anyway.
pub(crate) const CLOSE_DEADLINE: Duration = Duration::from_secs(15);
/// Most arrivals in one `arrivals` line (about 30 bytes each: lines stay under 300 KB).
pub(crate) const ARRIVALS_PER_LINE: usize = 10_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub(crate) enum WorkerEvent {
    /// The worker runs and is about to open `sessions` sessions from `source`.
    Started {
        worker: usize,
        sessions: usize,
        source: Option<String>,
        nofile_limit: u64,
    },
    /// Handshakes finished so far.
    Progress {
        worker: usize,
        opened: u64,
        failed: u64,
    },
    /// Every session has either opened or failed.
    Ready {
        worker: usize,
        opened: u64,
        failed: u64,
        /// Failure counts by reason.
        failures: BTreeMap<String, u64>,
        /// Unix time (µs) when the first handshake started and the last one finished.
        connect_started_us: u64,
        connect_finished_us: u64,
    },
    /// Record mode: the bench's messages received so far, and the others (`foreign`).
    Received {
        worker: usize,
        messages: u64,
        foreign: u64,
    },
    /// Record mode: arrivals recorded, as `[seq, unix time in ns]` (sent after the sessions
    /// closed, before `closed`).
    Arrivals {
        worker: usize,
        arrivals: Vec<(u64, u64)>,
    },
    /// Sessions are closed; the worker is about to exit.
    Closed {
        worker: usize,
        /// Sessions the server (or network) ended before the worker closed them.
        dropped: u64,
        /// STOMP frames (including heart-beats) received on open sessions after the handshake.
        frames_received: u64,
    },
    /// The worker cannot go on (bad target, resolver failure...); it exits non-zero.
    Fatal { worker: usize, message: String },
}

impl WorkerEvent {
    pub(crate) fn worker(&self) -> usize {
        match self {
            Self::Started { worker, .. }
            | Self::Progress { worker, .. }
            | Self::Ready { worker, .. }
            | Self::Received { worker, .. }
            | Self::Arrivals { worker, .. }
            | Self::Closed { worker, .. }
            | Self::Fatal { worker, .. } => *worker,
        }
    }

    /// Writes the event as one line on stdout. Fails if the parent is gone (broken pipe).
    pub(crate) fn emit(&self) -> std::io::Result<()> {
        let line = serde_json::to_string(self).map_err(std::io::Error::other)?;
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}")?;
        out.flush()
    }

    pub(crate) fn parse(line: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(line)
    }
}

/// Microseconds since the Unix epoch: a clock every process on the machine shares, so the
/// parent can take the connect window across workers.
pub(crate) fn unix_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Nanoseconds since the Unix epoch: the wall clock Herald fixes due times with (`due_at_ms`),
/// so a worker's arrival stamp and a due time on the same machine compare directly.
pub(crate) fn unix_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_as_tagged_json_lines() {
        let events = [
            WorkerEvent::Started {
                worker: 1,
                sessions: 9000,
                source: Some("127.0.0.3".into()),
                nofile_limit: 20_000,
            },
            WorkerEvent::Progress {
                worker: 1,
                opened: 10,
                failed: 1,
            },
            WorkerEvent::Ready {
                worker: 1,
                opened: 8999,
                failed: 1,
                failures: BTreeMap::from([("timeout: receipt".to_owned(), 1)]),
                connect_started_us: 1,
                connect_finished_us: 2,
            },
            WorkerEvent::Received {
                worker: 1,
                messages: 7,
                foreign: 0,
            },
            WorkerEvent::Arrivals {
                worker: 1,
                arrivals: vec![(3, 1_795_000_000_123_456_789), (4, 1)],
            },
            WorkerEvent::Closed {
                worker: 1,
                dropped: 0,
                frames_received: 3,
            },
            WorkerEvent::Fatal {
                worker: 1,
                message: "boom".into(),
            },
        ];
        for event in events {
            let line = serde_json::to_string(&event).unwrap();
            assert!(!line.contains('\n'));
            assert_eq!(WorkerEvent::parse(&line).unwrap(), event);
            assert_eq!(event.worker(), 1);
        }
        let line = serde_json::to_string(&WorkerEvent::Progress {
            worker: 0,
            opened: 5,
            failed: 0,
        })
        .unwrap();
        assert_eq!(
            line,
            r#"{"event":"progress","worker":0,"opened":5,"failed":0}"#
        );
        let line = serde_json::to_string(&WorkerEvent::Arrivals {
            worker: 0,
            arrivals: vec![(3, 9)],
        })
        .unwrap();
        assert_eq!(
            line,
            r#"{"event":"arrivals","worker":0,"arrivals":[[3,9]]}"#
        );
    }
}
