//! The writer thread: group commit (see the module above). It takes the
//! first waiting [`Request`], then every other one already queued, applies
//! them in one write transaction (claims first, answered at once), commits,
//! and only then sends each [`Answer`]; and it folds the recent ids into
//! the id index whenever there are enough of them.

use redb::Database;
use tokio::sync::{mpsc, oneshot};

use super::Memory;
use super::io;
use super::write::{Tables, Unheld};
use crate::schedule::entry::{Entry, Millis, Step};
use crate::schedule::store::{
    Cancel, Finish, Insert, PutTopic, Replay, RetryWait, Settled, StoreError,
};

/// One change, with where its answer goes.
pub(super) enum Request {
    Insert(
        Vec<Entry>,
        Millis,
        oneshot::Sender<Result<Vec<Insert>, StoreError>>,
    ),
    ClaimDue(
        Millis,
        usize,
        u64,
        oneshot::Sender<Result<Vec<Entry>, StoreError>>,
    ),
    ClaimHeld(
        String,
        Millis,
        usize,
        u64,
        oneshot::Sender<Result<Vec<Entry>, StoreError>>,
    ),
    Delivered(Vec<String>, Millis, oneshot::Sender<Result<(), StoreError>>),
    Hold(
        Vec<String>,
        Millis,
        Millis,
        oneshot::Sender<Result<(), StoreError>>,
    ),
    Release(
        Vec<String>,
        Millis,
        Millis,
        oneshot::Sender<Result<(), StoreError>>,
    ),
    Cancel(String, Millis, oneshot::Sender<Result<Cancel, StoreError>>),
    MarkStep(
        Vec<String>,
        Step,
        Millis,
        oneshot::Sender<Result<(), StoreError>>,
    ),
    RetryWait(
        Vec<RetryWait>,
        Millis,
        oneshot::Sender<Result<Settled, StoreError>>,
    ),
    Finish(
        Vec<Finish>,
        Millis,
        oneshot::Sender<Result<Settled, StoreError>>,
    ),
    Replay(String, Millis, oneshot::Sender<Result<Replay, StoreError>>),
    Expire(
        Millis,
        usize,
        oneshot::Sender<Result<Vec<Option<String>>, StoreError>>,
    ),
    Purge(Millis, usize, oneshot::Sender<Result<u64, StoreError>>),
    PutTopic {
        name: String,
        settings: bytes::Bytes,
        max_topics: usize,
        now: Millis,
        tx: oneshot::Sender<Result<PutTopic, StoreError>>,
    },
    DeleteTopic(String, oneshot::Sender<Result<bool, StoreError>>),
}

/// The answer of a request, held until its transaction commits.
enum Answer {
    Inserts(
        Vec<Insert>,
        oneshot::Sender<Result<Vec<Insert>, StoreError>>,
    ),
    Entries(Vec<Entry>, oneshot::Sender<Result<Vec<Entry>, StoreError>>),
    Unit(oneshot::Sender<Result<(), StoreError>>),
    Cancel(Cancel, oneshot::Sender<Result<Cancel, StoreError>>),
    Replay(Replay, oneshot::Sender<Result<Replay, StoreError>>),
    Settled(Settled, oneshot::Sender<Result<Settled, StoreError>>),
    Count(u64, oneshot::Sender<Result<u64, StoreError>>),
    Topics(
        Vec<Option<String>>,
        oneshot::Sender<Result<Vec<Option<String>>, StoreError>>,
    ),
    PutTopic(PutTopic, oneshot::Sender<Result<PutTopic, StoreError>>),
    Flag(bool, oneshot::Sender<Result<bool, StoreError>>),
}

impl Answer {
    fn send(self) {
        match self {
            Answer::Inserts(v, tx) => drop(tx.send(Ok(v))),
            Answer::Entries(v, tx) => drop(tx.send(Ok(v))),
            Answer::Unit(tx) => drop(tx.send(Ok(()))),
            Answer::Cancel(v, tx) => drop(tx.send(Ok(v))),
            Answer::Replay(v, tx) => drop(tx.send(Ok(v))),
            Answer::Settled(v, tx) => drop(tx.send(Ok(v))),
            Answer::Count(v, tx) => drop(tx.send(Ok(v))),
            Answer::Topics(v, tx) => drop(tx.send(Ok(v))),
            Answer::PutTopic(v, tx) => drop(tx.send(Ok(v))),
            Answer::Flag(v, tx) => drop(tx.send(Ok(v))),
        }
    }

    fn fail(self, e: StoreError) {
        match self {
            Answer::Inserts(_, tx) => drop(tx.send(Err(e))),
            Answer::Entries(_, tx) => drop(tx.send(Err(e))),
            Answer::Unit(tx) => drop(tx.send(Err(e))),
            Answer::Cancel(_, tx) => drop(tx.send(Err(e))),
            Answer::Replay(_, tx) => drop(tx.send(Err(e))),
            Answer::Settled(_, tx) => drop(tx.send(Err(e))),
            Answer::Count(_, tx) => drop(tx.send(Err(e))),
            Answer::Topics(_, tx) => drop(tx.send(Err(e))),
            Answer::PutTopic(_, tx) => drop(tx.send(Err(e))),
            Answer::Flag(_, tx) => drop(tx.send(Err(e))),
        }
    }
}

/// The writer's bounds.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub(super) max_group: usize,
    pub(super) fold_ids: usize,
}

/// The writer thread: group commit until the queue closes, folding the
/// recent ids whenever there are enough of them.
pub(super) fn run_writer(
    db: &Database,
    mem: &Memory,
    mut rx: mpsc::Receiver<Request>,
    limits: Limits,
) {
    while let Some(first) = rx.blocking_recv() {
        let mut group = vec![first];
        while group.len() < limits.max_group {
            match rx.try_recv() {
                Ok(r) => group.push(r),
                Err(_) => break,
            }
        }
        commit_group(db, mem, group);
        if mem.recent.len() >= limits.fold_ids {
            fold(db, mem);
        }
    }
}

/// Fold the recent ids into `ids`, in a commit of their own. If it fails,
/// they stay in memory and the next group tries again.
fn fold(db: &Database, mem: &Memory) {
    let recent = &mem.recent;
    let started = std::time::Instant::now();
    let n = recent.len();
    let outcome = (|| -> Result<u64, StoreError> {
        let txn = db.begin_write().map_err(io)?;
        let folded = Tables::open(&txn, mem)?.fold()?;
        txn.commit().map_err(io)?;
        Ok(folded)
    })();
    match outcome {
        Ok(folded) => {
            recent.folded(folded);
            tracing::debug!(
                ids = n,
                ms = started.elapsed().as_millis() as u64,
                "folded recent ids into the id index"
            );
        }
        Err(e) => {
            tracing::error!(error = %e, ids = n, "folding recent ids failed; they stay in memory")
        }
    }
}

fn commit_group(db: &Database, mem: &Memory, group: Vec<Request>) {
    let recent = &mem.recent;
    let mut answers = Vec::with_capacity(group.len());
    let mut added = Vec::new();
    let mut removed = Vec::new();
    let mut settled = std::collections::HashSet::new();
    let mut unheld = Unheld::default();
    let outcome = (|| -> Result<(), StoreError> {
        let txn = db.begin_write().map_err(io)?;
        let wrote = {
            let mut t = Tables::open(&txn, mem)?;
            // Claims (and steps, which change claims) first, answered at
            // once: they write nothing (claims live in memory) and,
            // applied before anything else of the group, see only what is
            // committed. So a claim waits for no commit, only for the
            // group ahead of it, and the firer is not held up behind a
            // large batch being marked delivered.
            let (claims, others): (Vec<Request>, Vec<Request>) = group.into_iter().partition(|r| {
                matches!(
                    r,
                    Request::ClaimDue(..) | Request::ClaimHeld(..) | Request::MarkStep(..)
                )
            });
            for request in claims {
                if let Some(a) = apply(&mut t, request) {
                    a.send();
                }
            }
            // A request that fails is answered with its error at once;
            // what it wrote before failing is committed with the others
            // (inserts are idempotent and claims leased, so a caller that
            // retries finds duplicates, and a claim nobody got comes back
            // when its lease runs out). A failed commit fails them all.
            for request in others {
                if let Some(a) = apply(&mut t, request) {
                    answers.push(a);
                }
            }
            added = std::mem::take(&mut t.added);
            removed = std::mem::take(&mut t.removed);
            settled = std::mem::take(&mut t.settled);
            t.flush_counters()?;
            unheld = t.unheld()?;
            t.wrote
        };
        if !wrote {
            // Claims alone: nothing to commit (they live in memory).
            return txn.abort().map_err(io);
        }
        // Readers hold the claims' lock while they read: the commit and
        // the end of the claims it settled are one step for them.
        let mut claims = mem.claims.lock();
        txn.commit().map_err(io)?;
        for seq in settled.drain() {
            claims.remove(seq);
        }
        Ok(())
    })();
    match outcome {
        Ok(()) => {
            recent.remove(&removed);
            if unheld.nothing_held {
                mem.held.nothing_held();
            } else {
                mem.held.remove(&unheld.users);
            }
            answers.into_iter().for_each(Answer::send);
        }
        Err(e) => {
            recent.remove(&added);
            tracing::error!(error = %e, "delayed store commit failed; nothing of it was applied");
            for a in answers {
                a.fail(e.clone());
            }
        }
    }
}

/// Apply one request: its answer, to send once the transaction commits;
/// `None` when it failed (and was answered with the error at once).
fn apply(t: &mut Tables<'_>, request: Request) -> Option<Answer> {
    match request {
        Request::Insert(entries, now, tx) => reply(t.insert(entries, now), tx, Answer::Inserts),
        Request::ClaimDue(now, limit, lease, tx) => {
            reply(t.claim_due(now, limit, lease), tx, Answer::Entries)
        }
        Request::ClaimHeld(user, now, limit, lease, tx) => {
            reply(t.claim_held(&user, now, limit, lease), tx, Answer::Entries)
        }
        Request::Delivered(ids, now, tx) => reply(t.delivered(ids, now), tx, unit),
        Request::Hold(ids, expires, now, tx) => reply(t.hold(ids, expires, now), tx, unit),
        Request::Release(ids, at, now, tx) => reply(t.release(ids, at, now), tx, unit),
        Request::Cancel(id, now, tx) => reply(t.cancel(&id, now), tx, Answer::Cancel),
        Request::MarkStep(ids, step, now, tx) => reply(t.mark_step(ids, step, now), tx, unit),
        Request::RetryWait(items, now, tx) => reply(t.retry_wait(items, now), tx, Answer::Settled),
        Request::Finish(items, now, tx) => reply(t.finish(items, now), tx, Answer::Settled),
        Request::Replay(id, now, tx) => reply(t.replay(&id, now), tx, Answer::Replay),
        Request::Expire(now, limit, tx) => reply(t.expire(now, limit), tx, Answer::Topics),
        Request::Purge(before, limit, tx) => reply(t.purge(before, limit), tx, Answer::Count),
        Request::PutTopic {
            name,
            settings,
            max_topics,
            now,
            tx,
        } => reply(
            t.topic_tables().put(&name, &settings, max_topics, now),
            tx,
            Answer::PutTopic,
        ),
        Request::DeleteTopic(name, tx) => reply(t.topic_tables().delete(&name), tx, Answer::Flag),
    }
}

fn unit((): (), tx: oneshot::Sender<Result<(), StoreError>>) -> Answer {
    Answer::Unit(tx)
}

fn reply<T>(
    r: Result<T, StoreError>,
    tx: oneshot::Sender<Result<T, StoreError>>,
    wrap: impl FnOnce(T, oneshot::Sender<Result<T, StoreError>>) -> Answer,
) -> Option<Answer> {
    match r {
        Ok(v) => Some(wrap(v, tx)),
        Err(e) => {
            let _ = tx.send(Err(e));
            None
        }
    }
}
