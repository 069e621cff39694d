//! The idempotency ledger: one rule for every path a notification is
//! accepted by. A notification's `id` is taken when it is accepted, over
//! HTTP or AMQP, immediate or delayed, and stays taken for
//! `publish.dedup_window_secs` after that (a delayed one: after its due
//! time). A publication whose id is taken is a duplicate: it goes nowhere,
//! the HTTP answer lists it under `duplicates` (and a delayed one's
//! `scheduled` entry says `"duplicate": true` with the holder's due time),
//! an AMQP one is acked; both are counted in
//! `herald_publish_duplicates_total{source}`.
//!
//! Where the ledger lives follows the delayed store. A standalone gateway
//! (embedded store) and a router without Redis keep it in memory; routers
//! sharing a Redis store claim ids there ([`Store::claim_ids`]: one script
//! call per shard touched per request), so a retry through another router
//! is a duplicate too. Ids claimed for a request the store or the link
//! then refuses are released, so its retry is not.
//!
//! The AMQP intake's immediate publications are forwarded in delivery
//! order without waiting on Redis: they are claimed here in memory
//! ([`IdLedger::claim_here`]) and recorded in the shared ledger behind
//! them by the `id-recorder` task ([`Recorder`]), through a bounded queue
//! (`RECORD_QUEUE`, drop-newest when full, counted in
//! `herald_id_ledger_unrecorded_total`). One recorded after another router
//! took its id is counted in `herald_id_ledger_late_total`: the edges'
//! duplicate window (`edge.dedup_window_secs`) still delivers it once. A
//! redelivered AMQP publication is not claimed at all: its first delivery
//! took the id, and only the forward it failed is being retried.
//!
//! A shared ledger that cannot be reached does not stop immediate
//! publications, which need no store: a request of immediate ones waits
//! at most a second for it, then is claimed in this router's memory alone
//! (recorded there behind), and for the next 5 s so are the others
//! (`herald_id_ledger_unshared_total`). Delayed ones need the store
//! anyway: refused (503) while it is down, as before.
//!
//! Bounded: at most `publish.dedup_max` ids are held in memory; when full,
//! the oldest immediate id is forgotten first, then the delayed one whose
//! hold ends soonest (policy `evict-oldest`, counted in
//! `herald_id_ledger_evicted_total`), which only narrows the window for
//! them. Shared ledger keys expire with their holds.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::ids::{IdHasher, IdHashing, IdKey};
use crate::metrics::SourceLabels;
use crate::schedule::entry::Millis;
use crate::schedule::store::{Claimed, IdClaim, Store, StoreError};
use crate::task::{Task, TaskFuture};

/// Most claims waiting for the `id-recorder` task (drop-newest).
pub const RECORD_QUEUE: usize = 65_536;

/// Most claims the recorder sends to the store in one call.
const RECORD_BATCH: usize = 1_000;

/// How long immediate publications wait for the shared ledger before they
/// are claimed in memory alone (a healthy Redis answers in well under a
/// millisecond).
const SHARED_CLAIM_TIMEOUT: Duration = Duration::from_secs(1);

/// After the shared ledger failed, how long immediate publications skip it.
const SHARED_DOWN_MS: Millis = 5_000;

/// The ledger's counters.
#[derive(Debug, Clone, Default)]
pub struct LedgerMetrics {
    /// Publications refused as duplicates, by intake.
    pub duplicates: Family<SourceLabels, Counter>,
    /// Ids forgotten before their hold ended (the in-memory bound).
    pub evicted: Counter,
    /// Ids held in memory now.
    pub held: Gauge,
    /// AMQP immediate ids not recorded in the shared ledger (its queue
    /// was full, or the store refused the batch).
    pub unrecorded: Counter,
    /// AMQP immediate ids found taken by another router once recorded.
    pub late: Counter,
    /// Immediate ids claimed in memory alone because the shared ledger
    /// could not be reached.
    pub unshared: Counter,
}

impl LedgerMetrics {
    /// Show the duplicates of each of `sources` from the start, at 0.
    pub fn precreate(&self, sources: &[&'static str]) {
        for &source in sources {
            let _ = self.duplicates.get_or_create(&SourceLabels { source });
        }
    }

    /// Register the ledger's families.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "herald_publish_duplicates",
            "Publications refused at accept time as duplicates of an id taken within publish.dedup_window_secs (HTTP: listed under `duplicates`; AMQP: acked), by intake",
            self.duplicates.clone(),
        );
        registry.register(
            "herald_id_ledger_evicted",
            "Ids the idempotency ledger forgot before their hold ended because publish.dedup_max was reached (evict-oldest)",
            self.evicted.clone(),
        );
        registry.register(
            "herald_id_ledger_held",
            "Ids the idempotency ledger holds in this process's memory",
            self.held.clone(),
        );
        registry.register(
            "herald_id_ledger_unrecorded",
            "AMQP immediate publications' ids not recorded in the shared (Redis) ledger: its queue was full (drop-newest) or Redis refused",
            self.unrecorded.clone(),
        );
        registry.register(
            "herald_id_ledger_unshared",
            "Immediate publications' ids claimed in this router's memory alone because the shared (Redis) ledger could not be reached (then skipped for 5 s; recorded there behind)",
            self.unshared.clone(),
        );
        registry.register(
            "herald_id_ledger_late",
            "AMQP immediate publications forwarded before the shared ledger showed another router had taken their id (the edges' duplicate window delivers them once)",
            self.late.clone(),
        );
    }
}

/// The ledger's settings.
#[derive(Debug, Clone, Copy)]
pub struct LedgerConfig {
    /// How long an id stays taken after it is accepted (a delayed one:
    /// after it is due). Zero: the ledger is off, nothing is a duplicate
    /// but what the delayed store already holds.
    pub window: Duration,
    /// Most ids held in memory.
    pub max: usize,
}

impl Default for LedgerConfig {
    fn default() -> Self {
        LedgerConfig {
            window: Duration::from_secs(120),
            max: 1_000_000,
        }
    }
}

/// The idempotency ledger (see the module docs). Cheap to share.
#[derive(Clone)]
pub struct IdLedger {
    inner: Arc<Inner>,
}

struct Inner {
    window_ms: u64,
    local: Mutex<Held>,
    /// The store whose shared ledger is the truth, if it keeps one.
    shared: Option<Arc<dyn Store>>,
    /// To the `id-recorder` task (shared ledgers only).
    record: Option<mpsc::Sender<IdClaim>>,
    /// Until when immediate claims skip the shared ledger (ms; it failed).
    shared_down_until: AtomicU64,
    metrics: LedgerMetrics,
}

impl std::fmt::Debug for IdLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdLedger")
            .field("window_ms", &self.inner.window_ms)
            .field("shared", &self.inner.shared.is_some())
            .finish_non_exhaustive()
    }
}

impl IdLedger {
    /// A ledger kept in this process's memory.
    pub fn local(config: LedgerConfig, metrics: LedgerMetrics) -> Self {
        IdLedger::build(config, metrics, None).0
    }

    /// A ledger in `store`'s shared ledger when it keeps one
    /// ([`Store::keeps_ids`]), with the `id-recorder` task to spawn; else
    /// in memory, without a task.
    pub fn over(
        config: LedgerConfig,
        metrics: LedgerMetrics,
        store: Arc<dyn Store>,
    ) -> (Self, Option<Recorder>) {
        let shared = store.keeps_ids().then_some(store);
        IdLedger::build(config, metrics, shared)
    }

    fn build(
        config: LedgerConfig,
        metrics: LedgerMetrics,
        shared: Option<Arc<dyn Store>>,
    ) -> (Self, Option<Recorder>) {
        let (record, recorder) = match &shared {
            Some(store) if !config.window.is_zero() => {
                let (tx, rx) = mpsc::channel(RECORD_QUEUE);
                let recorder = Recorder {
                    rx,
                    store: Arc::clone(store),
                    metrics: metrics.clone(),
                };
                (Some(tx), Some(recorder))
            }
            _ => (None, None),
        };
        let ledger = IdLedger {
            inner: Arc::new(Inner {
                window_ms: u64::try_from(config.window.as_millis()).unwrap_or(u64::MAX),
                local: Mutex::new(Held::new(config.max)),
                shared,
                record,
                shared_down_until: AtomicU64::new(0),
                metrics,
            }),
        };
        (ledger, recorder)
    }

    /// Whether ids are held at all (`publish.dedup_window_secs` > 0).
    pub fn enabled(&self) -> bool {
        self.inner.window_ms > 0
    }

    /// The claim of an immediate notification's `id`, accepted `now`.
    pub fn immediate(&self, id: &str, now: Millis) -> IdClaim {
        IdClaim {
            id: id.to_owned(),
            due_ms: now,
            hold_until_ms: now.saturating_add(self.inner.window_ms),
        }
    }

    /// The claim of a delayed notification's `id`, due at `due_ms`.
    pub fn delayed(&self, id: &str, due_ms: Millis, now: Millis) -> IdClaim {
        IdClaim {
            id: id.to_owned(),
            due_ms,
            hold_until_ms: due_ms.max(now).saturating_add(self.inner.window_ms),
        }
    }

    /// Claim `claims`, one outcome each, in order: in the shared ledger
    /// when there is one (remembered here too, for [`IdLedger::claim_here`]),
    /// else here. Every id is new when the ledger is off.
    pub async fn claim(
        &self,
        claims: Vec<IdClaim>,
        now: Millis,
    ) -> Result<Vec<Claimed>, StoreError> {
        if !self.enabled() {
            return Ok(vec![Claimed::New; claims.len()]);
        }
        let Some(store) = &self.inner.shared else {
            let mut held = self.inner.local.lock();
            let out = claims.iter().map(|c| held.claim(c, now)).collect();
            self.counted(&held);
            return Ok(out);
        };
        // Immediate publications do not need the store: while it cannot
        // be reached they are claimed here alone (and recorded behind),
        // so an outage of Redis does not stop them.
        let immediate = claims.iter().all(|c| c.due_ms <= now);
        let mut out = if !immediate {
            store.claim_ids(claims.clone()).await?
        } else if self.inner.shared_down_until.load(Ordering::Relaxed) > now {
            return Ok(self.claim_unshared(claims, now));
        } else {
            let asked = tokio::time::timeout(SHARED_CLAIM_TIMEOUT, store.claim_ids(claims.clone()));
            match asked.await {
                Ok(Ok(out)) => out,
                Ok(Err(e)) => return Ok(self.shared_down(claims, now, e.to_string())),
                Err(_) => {
                    let why = format!("no answer in {} ms", SHARED_CLAIM_TIMEOUT.as_millis());
                    return Ok(self.shared_down(claims, now, why));
                }
            }
        };
        let mut held = self.inner.local.lock();
        for (c, outcome) in claims.iter().zip(out.iter_mut()) {
            if *outcome == Claimed::New {
                // Taken here by an AMQP claim not recorded yet: taken.
                *outcome = held.claim(c, now);
            }
        }
        self.counted(&held);
        Ok(out)
    }

    /// The shared ledger failed (`why`): skip it for immediate claims for
    /// `SHARED_DOWN_MS`, and claim `claims` here alone.
    fn shared_down(&self, claims: Vec<IdClaim>, now: Millis, why: String) -> Vec<Claimed> {
        self.inner
            .shared_down_until
            .store(now.saturating_add(SHARED_DOWN_MS), Ordering::Relaxed);
        tracing::warn!(error = %why, retry_in_ms = SHARED_DOWN_MS, "the shared idempotency ledger cannot be reached; immediate publications are checked in this router's memory alone");
        self.claim_unshared(claims, now)
    }

    /// Claim immediate ids here alone (the shared ledger is down), each
    /// new one queued to be recorded there behind.
    fn claim_unshared(&self, claims: Vec<IdClaim>, now: Millis) -> Vec<Claimed> {
        self.inner.metrics.unshared.inc_by(claims.len() as u64);
        claims
            .into_iter()
            .map(|c| self.claim_here(c, now))
            .collect()
    }

    /// Claim one id in memory, without waiting (the AMQP intake's
    /// immediate publications); with a shared ledger the claim is then
    /// recorded there by the `id-recorder` task.
    pub fn claim_here(&self, claim: IdClaim, now: Millis) -> Claimed {
        if !self.enabled() {
            return Claimed::New;
        }
        let outcome = {
            let mut held = self.inner.local.lock();
            let outcome = held.claim(&claim, now);
            self.counted(&held);
            outcome
        };
        if outcome == Claimed::New
            && let Some(tx) = &self.inner.record
            && tx.try_send(claim).is_err()
        {
            self.inner.metrics.unrecorded.inc();
        }
        outcome
    }

    /// Free `ids` this process claimed for publications it then could not
    /// take. A shared ledger that cannot be reached keeps them until their
    /// hold ends (logged).
    pub async fn release(&self, ids: Vec<String>) {
        if !self.enabled() || ids.is_empty() {
            return;
        }
        {
            let mut held = self.inner.local.lock();
            for id in &ids {
                held.release(id);
            }
            self.counted(&held);
        }
        if let Some(store) = &self.inner.shared
            && let Err(e) = store.release_ids(ids).await
        {
            tracing::warn!(error = %e, "cannot release ids in the shared ledger; a retry within the window is answered as a duplicate");
        }
    }

    /// Count `n` duplicates from `source`.
    pub fn count_duplicates(&self, source: &'static str, n: u64) {
        if n > 0 {
            self.inner
                .metrics
                .duplicates
                .get_or_create(&SourceLabels { source })
                .inc_by(n);
        }
    }

    fn counted(&self, held: &Held) {
        self.inner.metrics.held.set(held.len() as i64);
        let evicted = held.evicted;
        let before = self.inner.metrics.evicted.get();
        if evicted > before {
            self.inner.metrics.evicted.inc_by(evicted - before);
        }
    }
}

/// The `id-recorder` task: records the AMQP intake's immediate claims in
/// the shared ledger, in batches.
pub struct Recorder {
    rx: mpsc::Receiver<IdClaim>,
    store: Arc<dyn Store>,
    metrics: LedgerMetrics,
}

impl Task for Recorder {
    fn name(&self) -> &'static str {
        "id-recorder"
    }

    fn run(self: Box<Self>, shutdown: CancellationToken) -> TaskFuture {
        Box::pin(async move {
            let Recorder {
                mut rx,
                store,
                metrics,
            } = *self;
            let mut batch = Vec::with_capacity(RECORD_BATCH);
            loop {
                tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => return,
                    n = rx.recv_many(&mut batch, RECORD_BATCH) => {
                        if n == 0 {
                            return;
                        }
                    }
                }
                let claims = std::mem::take(&mut batch);
                let count = claims.len() as u64;
                match store.claim_ids(claims).await {
                    Ok(out) => {
                        let late = out.iter().filter(|c| **c != Claimed::New).count();
                        metrics.late.inc_by(late as u64);
                    }
                    Err(e) => {
                        metrics.unrecorded.inc_by(count);
                        tracing::warn!(error = %e, ids = count, "cannot record AMQP publications' ids in the shared ledger");
                    }
                }
            }
        })
    }
}

/// Ids held in memory, bounded.
struct Held {
    max: usize,
    hasher: IdHasher,
    /// Each id's hold end and holder's due time.
    ids: HashMap<IdKey, (Millis, Millis), IdHashing>,
    /// Holds of one window (immediate claims), oldest first.
    window: VecDeque<(Millis, IdKey)>,
    /// Longer holds (delayed claims), by end.
    long: BTreeSet<(Millis, IdKey)>,
    /// Ids forgotten before their hold ended, ever.
    evicted: u64,
}

impl Held {
    fn new(max: usize) -> Self {
        Held {
            max: max.max(1),
            hasher: IdHasher::new(),
            ids: HashMap::default(),
            window: VecDeque::new(),
            long: BTreeSet::new(),
            evicted: 0,
        }
    }

    fn len(&self) -> usize {
        self.ids.len()
    }

    /// Take `c.id` unless a live hold has it.
    fn claim(&mut self, c: &IdClaim, now: Millis) -> Claimed {
        self.expire(now);
        let key = self.hasher.key(&c.id);
        if let Some(&(until, due_ms)) = self.ids.get(&key)
            && until > now
        {
            return Claimed::Taken { due_ms };
        }
        while self.ids.len() >= self.max && self.evict_one() {
            self.evicted += 1;
        }
        self.ids.insert(key, (c.hold_until_ms, c.due_ms));
        let immediate = c.due_ms <= now;
        match self.window.back() {
            Some(&(last, _)) if immediate && c.hold_until_ms >= last => {
                self.window.push_back((c.hold_until_ms, key));
            }
            None if immediate => self.window.push_back((c.hold_until_ms, key)),
            _ => {
                self.long.insert((c.hold_until_ms, key));
            }
        }
        Claimed::New
    }

    fn release(&mut self, id: &str) {
        // Its place in the queues goes when they pass it.
        self.ids.remove(&self.hasher.key(id));
    }

    /// Forget holds that ended by `now`.
    fn expire(&mut self, now: Millis) {
        while let Some(&(until, key)) = self.window.front() {
            if until > now {
                break;
            }
            self.window.pop_front();
            self.forget(key, until);
        }
        while let Some(&(until, key)) = self.long.first() {
            if until > now {
                break;
            }
            self.long.pop_first();
            self.forget(key, until);
        }
    }

    /// Forget `key` if its hold is the one ending at `until` (not a later
    /// claim of the same id).
    fn forget(&mut self, key: IdKey, until: Millis) -> bool {
        if self.ids.get(&key).is_some_and(|&(u, _)| u == until) {
            self.ids.remove(&key);
            return true;
        }
        false
    }

    /// Forget the oldest immediate hold, else the delayed one ending
    /// soonest. False when nothing is left.
    fn evict_one(&mut self) -> bool {
        loop {
            let next = match self.window.pop_front() {
                Some(held) => held,
                None => match self.long.pop_first() {
                    Some(held) => held,
                    None => return false,
                },
            };
            if self.forget(next.1, next.0) {
                return true;
            }
        }
    }
}

#[cfg(test)]
mod tests;
