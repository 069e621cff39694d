//! Group commit for inserts: batches that callers hand the store while
//! earlier ones are still in Redis go together, as one set of per-shard
//! scripts.
//!
//! Why: a script has a fixed cost in Redis's main thread (the call, its
//! MULTI/EXEC in the AOF, one ZADD per sorted set), and a batch of 1,000
//! spread over 16 shards makes scripts of about 60 entries. Several such
//! batches in one group make a quarter of the calls; the store measure
//! showed Redis's CPU per inserted entry 7-10% lower with scripts of 250
//! than of 60.
//!
//! Nothing waits to be grouped: a batch goes at once when one of the
//! [`IN_FLIGHT`] group slots is free. Batches that arrive while every slot
//! is busy queue (at most `request_queue` of them; policy when full:
//! callers wait) and go together, up to `max_group` entries, in the next
//! group. A caller that stops waiting (the operation timeout) does not
//! stop its group: the scripts run and other callers get their answers.

use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc, oneshot};

use super::insert::Inserter;
use super::metrics::RedisStoreMetrics;
use crate::schedule::entry::{Entry, Millis};
use crate::schedule::store::{Insert, StoreError};

/// Groups in Redis at once: one running while the next is on its way, so
/// Redis never waits for the router between two.
pub(super) const IN_FLIGHT: usize = 2;

/// The callers' side: hands batches to the group-commit task.
pub(super) struct GroupCommit {
    tx: mpsc::Sender<Job>,
}

struct Job {
    entries: Vec<Entry>,
    now: Millis,
    reply: oneshot::Sender<Result<Vec<Insert>, StoreError>>,
}

impl GroupCommit {
    /// Start the task (it ends once the last `GroupCommit` handle is
    /// dropped and its groups are done). `queue` bounds the batches
    /// waiting; a group holds at most `max_group` entries (a larger batch
    /// goes alone).
    pub(super) fn start(
        inserter: Inserter,
        queue: usize,
        max_group: usize,
        metrics: RedisStoreMetrics,
    ) -> GroupCommit {
        let (tx, rx) = mpsc::channel(queue.max(1));
        tokio::spawn(run(Arc::new(inserter), rx, max_group, metrics));
        GroupCommit { tx }
    }

    /// Insert `entries` (accepted at `now`) with whatever batches go in
    /// the same group; the answers are this batch's, in its order.
    pub(super) async fn insert(
        &self,
        entries: Vec<Entry>,
        now: Millis,
    ) -> Result<Vec<Insert>, StoreError> {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            entries,
            now,
            reply,
        };
        self.tx.send(job).await.map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}

fn gone() -> StoreError {
    StoreError::Unavailable("redis: the insert task stopped".into())
}

async fn run(
    inserter: Arc<Inserter>,
    mut rx: mpsc::Receiver<Job>,
    max_group: usize,
    metrics: RedisStoreMetrics,
) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    // A batch that did not fit in the last group: it starts the next.
    let mut held: Option<Job> = None;
    loop {
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let first = match held.take() {
            Some(job) => job,
            None => match rx.recv().await {
                Some(job) => job,
                None => return,
            },
        };
        let mut n = first.entries.len();
        let mut jobs = vec![first];
        while n < max_group {
            match rx.try_recv() {
                Ok(job) if n + job.entries.len() <= max_group => {
                    n += job.entries.len();
                    jobs.push(job);
                }
                Ok(job) => {
                    held = Some(job);
                    break;
                }
                Err(_) => break,
            }
        }
        metrics.insert_groups.inc();
        metrics.insert_batches.inc_by(jobs.len() as u64);
        let inserter = Arc::clone(&inserter);
        tokio::spawn(async move {
            commit(&inserter, jobs).await;
            drop(slot);
        });
    }
}

/// Insert the group's entries in one go and hand each batch its answers.
async fn commit(inserter: &Inserter, jobs: Vec<Job>) {
    let now = jobs.iter().map(|j| j.now).max().unwrap_or_default();
    let mut sizes = Vec::with_capacity(jobs.len());
    let mut replies = Vec::with_capacity(jobs.len());
    let mut entries = Vec::with_capacity(jobs.iter().map(|j| j.entries.len()).sum());
    for job in jobs {
        sizes.push(job.entries.len());
        replies.push(job.reply);
        entries.extend(job.entries);
    }
    match inserter.insert_all(entries, now).await {
        Ok(answers) => {
            let mut answers = answers.into_iter();
            for (size, reply) in sizes.into_iter().zip(replies) {
                // The caller may have stopped waiting: nothing to do.
                let _ = reply.send(Ok(answers.by_ref().take(size).collect()));
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}
