//! What the router's AMQP intakes share: each consumes on a connection of
//! its own (named `<amqp.connection_name> <suffix>` in the broker's
//! management UI), with its own reconnect loop ([`Supervisor`]), as one
//! [`Task`] stopped by the AMQP side's shutdown token.
//!
//! | intake | task | connection |
//! |---|---|---|
//! | [`crate::ingest::Ingest`] | `intake` | the router's own |
//! | [`crate::routing_intake::RoutingIntake`] | `routing-intake` | `… routing` |
//! | [`crate::presence_intake::PresenceIntake`] | `presence-intake` | `… presence` |
//! | [`crate::stats_intake::StatsIntake`] | `stats-intake` | `… stats` |

use std::future::Future;
use std::sync::Arc;

use herald_amqp::{AmqpMetrics, SessionError, Supervisor};
use herald_engine::task::Task;
use lapin::Connection;
use tokio_util::sync::CancellationToken;

use crate::config::Config;

/// A consumer the router runs on a supervised connection.
pub trait Intake: Clone + Send + Sync + 'static {
    /// The task's name, for logs.
    const TASK: &'static str;
    /// Appended to the connection's name; empty: the router's own name.
    const CONNECTION: &'static str;

    /// Consume on `connection` until `shutdown` fires or the connection
    /// fails (the supervisor then reconnects).
    fn consume(
        &self,
        connection: Arc<Connection>,
        shutdown: CancellationToken,
    ) -> impl Future<Output = Result<(), SessionError>> + Send;
}

/// `intake` as a task on a connection of its own, its connection events
/// counted in `metrics`.
pub fn task<I: Intake>(intake: I, config: &Config, metrics: AmqpMetrics) -> impl Task {
    let mut supervisor = config.supervisor();
    if !I::CONNECTION.is_empty() {
        supervisor.connection_name = format!("{} {}", supervisor.connection_name, I::CONNECTION);
    }
    Supervisor::new(supervisor, metrics).into_task(I::TASK, move |connection, shutdown| {
        let intake = intake.clone();
        async move { intake.consume(connection, shutdown).await }
    })
}

/// Each intake's inherent `run` is its session; these say where it runs.
macro_rules! intake {
    ($type:ty, $task:literal, $connection:literal) => {
        impl Intake for $type {
            const TASK: &'static str = $task;
            const CONNECTION: &'static str = $connection;

            fn consume(
                &self,
                connection: Arc<Connection>,
                shutdown: CancellationToken,
            ) -> impl Future<Output = Result<(), SessionError>> + Send {
                self.run(connection, shutdown)
            }
        }
    };
}

intake!(crate::ingest::Ingest, "intake", "");
intake!(
    crate::routing_intake::RoutingIntake,
    "routing-intake",
    "routing"
);
intake!(
    crate::presence_intake::PresenceIntake,
    "presence-intake",
    "presence"
);
intake!(crate::stats_intake::StatsIntake, "stats-intake", "stats");
