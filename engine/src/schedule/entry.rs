//! What the delayed store holds: an [`Entry`] (a notification with its due
//! time) and the [`Status`] the API reports for it.

use std::fmt;
use std::str::FromStr;

use herald_protocol::envelope::Notification;

/// Milliseconds since the Unix epoch, by the accepting server's clock.
pub type Millis = u64;

/// A delayed notification as stored: the notification itself, when it is
/// due, and how it is to be delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The notification; its `id` is the entry's key (idempotency and
    /// cancel key).
    pub notification: Notification,
    /// When it falls due (fixed at acceptance; never fired earlier).
    pub due_ms: Millis,
    /// When it was accepted.
    pub accepted_ms: Millis,
    /// Hold it until its user is online (scope `user`, one user).
    pub when_online: bool,
    /// How many times it has been claimed for firing (1 on the first fire;
    /// more after a crashed firer's lease expired).
    pub attempts: u32,
}

impl Entry {
    /// The notification id.
    pub fn id(&self) -> &str {
        &self.notification.id
    }

    /// The one user a `when_online` entry is for.
    pub fn online_user(&self) -> Option<&str> {
        if self.when_online {
            self.notification.users.first().map(String::as_str)
        } else {
            None
        }
    }
}

/// Where an entry is in its life.
///
/// ```text
/// scheduled --due, claimed--> firing --link took it--> delivered
///     |                          |  \--user offline--> held --user online--> firing
///     |                          \--lease expired (firer crashed)--> firing again
///     \--cancel--> cancelled         held --cancel--> cancelled
///                                    held --hold limit--> expired
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum State {
    /// Waiting for its due time.
    Scheduled,
    /// Claimed by a firer under a lease; no longer cancellable.
    Firing,
    /// Due, but its user is offline: waits for the user.
    Held,
    /// Handed to the link (edges or local mailboxes).
    Delivered,
    /// Cancelled before it fired.
    Cancelled,
    /// Held past its hold limit without the user coming online.
    Expired,
}

impl State {
    /// Every state, in lifecycle order.
    pub const ALL: [State; 6] = [
        State::Scheduled,
        State::Firing,
        State::Held,
        State::Delivered,
        State::Cancelled,
        State::Expired,
    ];

    /// The API name.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Scheduled => "scheduled",
            State::Firing => "firing",
            State::Held => "held",
            State::Delivered => "delivered",
            State::Cancelled => "cancelled",
            State::Expired => "expired",
        }
    }

    /// Whether the entry is finished (no body kept; only its status, until
    /// the retention passes).
    pub fn is_final(self) -> bool {
        matches!(self, State::Delivered | State::Cancelled | State::Expired)
    }

    /// How many states there are: codes are `0..COUNT`.
    pub const COUNT: usize = 6;

    /// A one-byte code for stores.
    pub fn code(self) -> u8 {
        match self {
            State::Scheduled => 0,
            State::Firing => 1,
            State::Held => 2,
            State::Delivered => 3,
            State::Cancelled => 4,
            State::Expired => 5,
        }
    }

    /// The state of a [`State::code`].
    pub fn from_code(code: u8) -> Option<State> {
        State::ALL.get(code as usize).copied()
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unknown state name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown state {0:?}: expected scheduled, firing, held, delivered, cancelled or expired")]
pub struct UnknownState(pub String);

impl FromStr for State {
    type Err = UnknownState;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        State::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownState(s.to_owned()))
    }
}

/// What `GET /v1/notifications/{id}` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The notification id.
    pub id: String,
    /// Its state.
    pub state: State,
    /// Its topic, if it has one.
    pub topic: Option<String>,
    /// When it was accepted.
    pub accepted_ms: Millis,
    /// When it is (or was) due.
    pub due_ms: Millis,
    /// When it entered its current state.
    pub updated_ms: Millis,
    /// Times claimed for firing.
    pub attempts: u32,
}

impl Status {
    /// The status of a live entry in `state` since `updated_ms`.
    pub fn of(entry: &Entry, state: State, updated_ms: Millis) -> Status {
        Status {
            id: entry.notification.id.clone(),
            state,
            topic: entry.notification.topic.clone(),
            accepted_ms: entry.accepted_ms,
            due_ms: entry.due_ms,
            updated_ms,
            attempts: entry.attempts,
        }
    }
}
