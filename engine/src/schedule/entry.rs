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
    /// more after a crashed firer's lease expired, after a hold, and for
    /// each callback retry; back to 0 when a dead letter is replayed).
    pub attempts: u32,
    /// What is left to do when it fires: everything, or only its callback
    /// (its browser part was delivered on an earlier fire). Set by the
    /// store when it claims the entry; new entries are [`Phase::Deliver`].
    pub phase: Phase,
    /// Its fire time when it was claimed (its place in the firing queue:
    /// its due time, a release's or a callback retry's time, or the end of
    /// an expired lease); 0 for an entry not claimed. Nothing fires before
    /// `max(due_ms, fire_ms)`: a retry claimed ahead waits for its time as
    /// a first fire waits for its due time. Not part of the record.
    pub fire_ms: Millis,
    /// Callback attempts made under its topic's retry policy: 0 until its
    /// first callback attempt has been recorded; + 1 for each attempt
    /// recorded as counted ([`RetryWait::counted`]); back to 0 when a dead
    /// letter is replayed. Kept by the store (not part of the record), so
    /// a claim after a hold, a crashed firer or a breaker's pause does not
    /// use up an attempt. The next attempt is `calls + 1`.
    ///
    /// [`RetryWait::counted`]: super::store::RetryWait::counted
    pub calls: u32,
    /// Its own callback settings, over its topic's.
    pub target: Target,
}

pub use crate::callback::target::Target;

/// What a claimed entry still has to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Phase {
    /// The first fire: deliver to its browser recipients, then make its
    /// callback (if it has one).
    #[default]
    Deliver,
    /// Its browser part was delivered: only its callback remains (claimed
    /// from `retry_wait`, or again after the lease of such a claim ran out,
    /// or replayed from `dead`).
    Callback,
}

/// Where a firing callback is, shown in its status (a sub-state of
/// [`State::Firing`]; the store forgets it when the entry leaves firing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// `GET recheck_url` is on its way.
    Rechecking,
    /// `POST callback_url` is on its way.
    Calling,
}

impl Step {
    /// The API name.
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Rechecking => "rechecking",
            Step::Calling => "calling",
        }
    }

    /// A one-byte code for stores (0 is "no step").
    pub fn code(self) -> u8 {
        match self {
            Step::Rechecking => 1,
            Step::Calling => 2,
        }
    }

    /// The step of a [`Step::code`]; `None` for 0 or an unknown code.
    pub fn from_code(code: u8) -> Option<Step> {
        match code {
            1 => Some(Step::Rechecking),
            2 => Some(Step::Calling),
            _ => None,
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
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
///     |                        | | |  \--user offline--> held --user online--> firing
///     |                        | | \--lease expired (firer crashed)--> firing again
///     \--cancel--> cancelled   | |     held --cancel--> cancelled
///                              | |     held --hold limit--> expired
///           callbacks:         | \--callback done--> delivered | recheck said no --> declined
///                              |  \--no attempt left--> dead --replay--> retry_wait (due now)
///                              \--callback failed--> retry_wait --due, claimed--> firing
///                                                    retry_wait --cancel--> cancelled
/// ```
///
/// While a callback is firing, its [`Step`] (rechecking, calling) says
/// which request is on its way. `dead` is final for the lifecycle but
/// keeps the body, so that it can be replayed; the other final states keep
/// only the status.
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
    /// Its callback failed and waits for its next attempt (its browser
    /// part, if any, was delivered): claimed when that time comes, like a
    /// scheduled entry.
    RetryWait,
    /// Its recheck said not to send: the callback was not made.
    Declined,
    /// Its callback failed on its last attempt: a dead letter. Keeps its
    /// body until purged, so that it can be replayed.
    Dead,
}

impl State {
    /// Every state, in code order ([`State::code`]).
    pub const ALL: [State; State::COUNT] = [
        State::Scheduled,
        State::Firing,
        State::Held,
        State::Delivered,
        State::Cancelled,
        State::Expired,
        State::RetryWait,
        State::Declined,
        State::Dead,
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
            State::RetryWait => "retry_wait",
            State::Declined => "declined",
            State::Dead => "dead",
        }
    }

    /// Whether the entry is finished: nothing fires it any more (a dead
    /// letter only when replayed), and [`Store::purge`] removes it after
    /// the retention period.
    ///
    /// [`Store::purge`]: super::store::Store::purge
    pub fn is_final(self) -> bool {
        matches!(
            self,
            State::Delivered | State::Cancelled | State::Expired | State::Declined | State::Dead
        )
    }

    /// Whether an entry in this state keeps its body (the notification):
    /// live entries, and dead letters (to be replayed). The other final
    /// states keep only their status.
    pub fn keeps_body(self) -> bool {
        !self.is_final() || self == State::Dead
    }

    /// How many states there are: codes are `0..COUNT`.
    pub const COUNT: usize = 9;

    /// A one-byte code for stores.
    pub fn code(self) -> u8 {
        match self {
            State::Scheduled => 0,
            State::Firing => 1,
            State::Held => 2,
            State::Delivered => 3,
            State::Cancelled => 4,
            State::Expired => 5,
            State::RetryWait => 6,
            State::Declined => 7,
            State::Dead => 8,
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
#[error(
    "unknown state {0:?}: expected scheduled, firing, held, delivered, cancelled, expired, retry_wait, declined or dead"
)]
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
    /// While firing a callback: the request on its way.
    pub step: Option<Step>,
    /// While in `retry_wait`: when its next attempt is due.
    pub next_attempt_ms: Option<Millis>,
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
            step: None,
            next_attempt_ms: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_names_round_trip() {
        for (code, state) in State::ALL.into_iter().enumerate() {
            assert_eq!(state.code() as usize, code);
            assert_eq!(State::from_code(state.code()), Some(state));
            assert_eq!(state.as_str().parse::<State>(), Ok(state));
        }
        assert_eq!(State::from_code(State::COUNT as u8), None);
        let e = "nope".parse::<State>().unwrap_err().to_string();
        assert!(e.contains("retry_wait, declined or dead"), "{e}");
        for step in [Step::Rechecking, Step::Calling] {
            assert_eq!(Step::from_code(step.code()), Some(step));
        }
        assert_eq!(Step::from_code(0), None);
    }

    #[test]
    fn dead_is_final_but_keeps_its_body() {
        let kept: Vec<State> = State::ALL.into_iter().filter(|s| s.keeps_body()).collect();
        assert_eq!(
            kept,
            [
                State::Scheduled,
                State::Firing,
                State::Held,
                State::RetryWait,
                State::Dead
            ]
        );
        let fin: Vec<State> = State::ALL.into_iter().filter(|s| s.is_final()).collect();
        assert_eq!(
            fin,
            [
                State::Delivered,
                State::Cancelled,
                State::Expired,
                State::Declined,
                State::Dead
            ]
        );
    }
}
