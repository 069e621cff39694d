//! One shape for every long-running task of a Herald process.
//!
//! A [`Task`] runs until the shutdown token it is given fires, then winds
//! down (finishes or hands back what it holds) and returns. A binary's
//! composition root builds its tasks and hands each to a [`Tasks`] set with
//! the token that stops it, so the root reads as a list; at the end it
//! cancels the tokens and waits for the set ([`Tasks::join`]), with its own
//! deadline. The shape is mini-redis's `run(listener, shutdown)` and
//! pingora's services: the caller owns the signal, the task owns its
//! wind-down.
//!
//! ```text
//!   let mut tasks = Tasks::default();
//!   tasks.spawn(expiry, shutdown.clone());
//!   tasks.spawn(uplink, shutdown.clone());
//!   ... serve until shutdown ...
//!   tasks.join().await;
//! ```

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// The future a [`Task`] runs as.
pub type TaskFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A long-running part of a process. See the module docs.
pub trait Task: Send + 'static {
    /// A short name, for logs (`task` field of its span).
    fn name(&self) -> &'static str;

    /// Run until `shutdown` fires, then wind down and return.
    fn run(self: Box<Self>, shutdown: CancellationToken) -> TaskFuture;
}

impl Task for Box<dyn Task> {
    fn name(&self) -> &'static str {
        (**self).name()
    }

    fn run(self: Box<Self>, shutdown: CancellationToken) -> TaskFuture {
        (*self).run(shutdown)
    }
}

/// A task made of a name and a closure: for a task whose state is only
/// what the closure captures.
pub fn task_fn<F, Fut>(name: &'static str, run: F) -> impl Task
where
    F: FnOnce(CancellationToken) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    FnTask { name, run }
}

struct FnTask<F> {
    name: &'static str,
    run: F,
}

impl<F, Fut> Task for FnTask<F>
where
    F: FnOnce(CancellationToken) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    fn name(&self) -> &'static str {
        self.name
    }

    fn run(self: Box<Self>, shutdown: CancellationToken) -> TaskFuture {
        Box::pin((self.run)(shutdown))
    }
}

/// The running tasks of a process, joined together at the end.
#[derive(Debug, Default)]
pub struct Tasks {
    running: Vec<(&'static str, JoinHandle<()>)>,
}

impl Tasks {
    /// Spawn `task`, stopped by `shutdown`, inside a span that names it.
    pub fn spawn(&mut self, task: impl Task, shutdown: CancellationToken) {
        let task: Box<dyn Task> = Box::new(task);
        let name = task.name();
        let span = tracing::info_span!("task", task = name);
        let handle = tokio::spawn(task.run(shutdown).instrument(span));
        self.running.push((name, handle));
    }

    /// How many tasks were spawned.
    pub fn len(&self) -> usize {
        self.running.len()
    }

    /// Whether no task was spawned.
    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    /// Wait for every task, in the order they were spawned (after their
    /// shutdown tokens fired). A task that panicked is logged by name.
    pub async fn join(self) {
        for (name, handle) in self.running {
            if let Err(e) = handle.await {
                tracing::error!(task = name, error = %e, "a task failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test]
    async fn tasks_run_until_their_token_fires_and_join_waits_for_all() {
        let wound_down = Arc::new(AtomicUsize::new(0));
        let shutdown = CancellationToken::new();
        let mut tasks = Tasks::default();
        for name in ["a", "b"] {
            let wound_down = Arc::clone(&wound_down);
            tasks.spawn(
                task_fn(name, move |shutdown| async move {
                    shutdown.cancelled().await;
                    wound_down.fetch_add(1, Ordering::SeqCst);
                }),
                shutdown.clone(),
            );
        }
        assert_eq!(tasks.len(), 2);
        assert_eq!(wound_down.load(Ordering::SeqCst), 0);
        shutdown.cancel();
        tasks.join().await;
        assert_eq!(wound_down.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_task_that_panics_does_not_stop_the_others_being_joined() {
        let mut tasks = Tasks::default();
        let done = Arc::new(AtomicUsize::new(0));
        tasks.spawn(
            task_fn("panics", |_| async { panic!("boom") }),
            CancellationToken::new(),
        );
        let d = Arc::clone(&done);
        tasks.spawn(
            task_fn("returns", move |_| async move {
                d.fetch_add(1, Ordering::SeqCst);
            }),
            CancellationToken::new(),
        );
        tasks.join().await;
        assert_eq!(done.load(Ordering::SeqCst), 1);
    }
}

/// The clock of a periodic task: ticks every `period` (the first at once;
/// a tick missed while the task worked is taken late, not made up), until
/// the shutdown token fires.
///
/// ```text
///   let mut every = Every::new(period);
///   while every.tick(&shutdown).await {
///       ... one round ...
///   }
/// ```
#[derive(Debug)]
pub struct Every(tokio::time::Interval);

impl Every {
    /// Ticking every `period`.
    pub fn new(period: Duration) -> Self {
        let mut interval = tokio::time::interval(period);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Every(interval)
    }

    /// Wait for the next tick: true, or false once `shutdown` fired.
    pub async fn tick(&mut self, shutdown: &CancellationToken) -> bool {
        tokio::select! {
            _ = shutdown.cancelled() => false,
            _ = self.0.tick() => true,
        }
    }
}
