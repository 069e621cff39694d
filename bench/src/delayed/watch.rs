//! Watching the two long phases of a run, publishing and delivery: progress on stderr, a
//! Herald process that exits, and the measuring window (CPU, Redis AOF rewrites) around them.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::settings::Settings;
use crate::fleet::Fleet;
use crate::harness::outcome::BenchError;
use crate::harness::progress::Progress as Bar;
use crate::harness::report::grouped;
use crate::scheduled::clock::now_ms;
use crate::scheduled::ingest::{self, Ingested, Progress};
use crate::scheduled::plan::{Plan, Users};
use crate::scheduled::store::AofRewrites;
use crate::scheduled::system::System;
use crate::scheduled::usage::{Reading, Split, Usage};

/// How often progress is printed.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// Publishes `plan` with progress on stderr; fails the run if a Herald process exits.
pub(super) async fn publish(
    s: &Settings,
    system: &mut System,
    plan: Plan,
    users: Arc<Users>,
    keep_dues: bool,
    label: &str,
) -> Result<Ingested, BenchError> {
    let settings = ingest::Settings {
        addr: system
            .api_addr
            .ok_or_else(|| BenchError::Failed("no API address".into()))?,
        api_key: system.api_key.clone(),
        connections: s.connections,
        batch: s.batch,
        payload_bytes: s.payload_bytes,
        keep_dues,
        topic: None,
        callback_only: false,
    };
    let progress = Arc::new(Progress::default());
    let mut task = tokio::spawn({
        let progress = progress.clone();
        async move { ingest::publish(&settings, plan, users, progress).await }
    });
    let started = Instant::now();
    let bar = Bar::new(plan.count);
    let mut tick = tokio::time::interval(PROGRESS_EVERY);
    tick.tick().await;
    loop {
        tokio::select! {
            joined = &mut task => {
                return joined.map_err(|e| BenchError::Failed(format!("publishing: {e}")));
            }
            _ = tick.tick() => {
                let answered = progress.answered.load(Ordering::Relaxed);
                let secs = started.elapsed().as_secs_f64();
                bar.update(answered, || format!(
                    "{label}: {answered} of {} answered in {secs:.1} s ({}/s)",
                    plan.count,
                    grouped(answered as f64 / secs.max(1e-9)),
                ));
                if let Some(gone) = system.exited() {
                    progress.stop.store(true, Ordering::Relaxed);
                    let _ = task.await;
                    return Err(BenchError::Failed(gone));
                }
            }
        }
    }
}

/// Waits for the notifications of `plan` to arrive: until `expected` have, or nothing more
/// arrived for the drain timeout after the last due time, or a process exited. Returns the
/// CPU split from just before the first due time to the end, and the Redis AOF rewrites that
/// ran meanwhile.
pub(super) async fn await_delivery(
    s: &Settings,
    system: &mut System,
    fleet: &mut Fleet,
    usage: &Usage,
    plan: &Plan,
    expected: u64,
    problems: &mut Vec<String>,
) -> (Split, Option<u64>) {
    // Sleep to just before the first due time, then start the CPU window.
    let first_due = plan.first_due_ms();
    let until_due = first_due.saturating_sub(now_ms()).saturating_sub(500);
    if until_due > 0 {
        eprintln!(
            "herald-bench: first due in {:.1} s",
            (first_due.saturating_sub(now_ms())) as f64 / 1000.0
        );
        tokio::time::sleep(Duration::from_millis(until_due)).await;
    }
    let window = Window::open(system, usage).await;
    let base = fleet.received();
    let mut last_count = base;
    let mut last_move = Instant::now();
    let mut last_print = Instant::now();
    let last_due = plan.last_due_ms();
    let bar = Bar::new(expected);
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        fleet.pump();
        let got = fleet.received().saturating_sub(base);
        if got != last_count {
            last_count = got;
            last_move = Instant::now();
        }
        if last_print.elapsed() >= PROGRESS_EVERY {
            last_print = Instant::now();
            let now = now_ms();
            let position = if now < last_due {
                format!(
                    "{:.1} s before the last due time",
                    (last_due - now) as f64 / 1000.0
                )
            } else {
                format!(
                    "{:.1} s after the last due time",
                    (now - last_due) as f64 / 1000.0
                )
            };
            bar.update(got, || format!("received {got} of {expected}, {position}"));
        }
        if got >= expected {
            break;
        }
        if now_ms() > last_due && last_move.elapsed() >= s.drain_timeout {
            problems.push(format!(
                "{} of {expected} arrived; nothing more for {} s after the last due time",
                got,
                s.drain_timeout.as_secs()
            ));
            break;
        }
        if let Some(gone) = system.exited() {
            problems.push(gone);
            break;
        }
        if fleet.any_exited() {
            problems.push("a worker process exited".into());
            break;
        }
    }
    window.close(system, usage).await
}

/// A measuring window: the CPU every watched process used, and the Redis AOF rewrites that
/// ran (when the store is Redis), from [`Window::open`] to [`Window::close`].
pub(super) struct Window {
    cpu: Reading,
    rewrites: Option<AofRewrites>,
}

impl Window {
    pub(super) async fn open(system: &System, usage: &Usage) -> Window {
        Window {
            rewrites: system.aof_rewrites().await,
            cpu: usage.read(),
        }
    }

    /// The CPU split over the window, and how many AOF rewrites ran in it (when Redis said so
    /// at both ends).
    pub(super) async fn close(self, system: &System, usage: &Usage) -> (Split, Option<u64>) {
        let cpu = Split::between(&self.cpu, &usage.read());
        let rewrites = match (self.rewrites, system.aof_rewrites().await) {
            (Some(start), Some(end)) => Some(start.during(&end)),
            _ => None,
        };
        (cpu, rewrites)
    }
}
