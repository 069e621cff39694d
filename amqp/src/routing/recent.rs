//! [`Recent`]: what a router sent to chosen edges lately, by user and
//! client, so that an edge a user (or client) arrives on gets what went
//! elsewhere for them since their sessions there began: the catch-up that
//! closes the window between a user's move and the new edge's report. Pure,
//! taking `now`.
//!
//! Bounded by age (`window_ms`), count and payload bytes; past a bound the
//! oldest are forgotten (counted: [`Recent::evicted`]). A notification
//! that went to every edge is not kept: every edge has it.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use herald_protocol::envelope::Notification;

use super::view::Key;

/// How far a notification's send time may be before the arriving
/// sessions' start and still be caught up: edges' and routers' clocks
/// differ by this much at most (NTP keeps them within milliseconds). The
/// price: a recipient's first session on an edge may also get what went
/// elsewhere for them in this last second before it began.
pub const CLOCK_SKEW_MS: u64 = 1_000;

/// The log's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecentConfig {
    /// How long a notification is kept: longer than a presence report
    /// takes from an edge to this router.
    pub window_ms: u64,
    /// Most notifications kept.
    pub max: usize,
    /// Most payload bytes kept.
    pub max_bytes: usize,
}

#[derive(Debug)]
struct Sent {
    at_ms: u64,
    n: Arc<Notification>,
    to: Vec<Arc<str>>,
}

/// The catch-up log (see the module docs).
#[derive(Debug)]
pub struct Recent {
    config: RecentConfig,
    /// Number of the entry at the front of `entries`.
    base: u64,
    entries: VecDeque<Sent>,
    by_key: HashMap<Key, VecDeque<u64>>,
    bytes: usize,
    /// Entries forgotten before their window ended (a bound was reached).
    pub evicted: u64,
}

impl Recent {
    /// An empty log.
    pub fn new(config: RecentConfig) -> Self {
        Recent {
            config,
            base: 0,
            entries: VecDeque::new(),
            by_key: HashMap::new(),
            bytes: 0,
            evicted: 0,
        }
    }

    /// Record that `n` went to `to` (maybe none) at `now`.
    pub fn record(&mut self, n: &Arc<Notification>, to: Vec<Arc<str>>, now: u64) {
        if self.config.max == 0 {
            return;
        }
        self.expire(now);
        let number = self.base + self.entries.len() as u64;
        for key in Key::of(n) {
            self.by_key.entry(key).or_default().push_back(number);
        }
        self.bytes += n.payload.len();
        self.entries.push_back(Sent {
            at_ms: now,
            n: Arc::clone(n),
            to,
        });
        while self.entries.len() > self.config.max
            || (self.bytes > self.config.max_bytes && self.entries.len() > 1)
        {
            self.evicted += 1;
            self.pop();
        }
    }

    /// What went to other edges for `key` since `since_ms` (less the
    /// clock skew; 0: everything kept) and not to `edge`, oldest first;
    /// `edge` is recorded as having it now.
    pub fn catch_up(
        &mut self,
        edge: &Arc<str>,
        key: &Key,
        since_ms: u64,
        now: u64,
    ) -> Vec<Arc<Notification>> {
        self.expire(now);
        let from = since_ms.saturating_sub(CLOCK_SKEW_MS);
        let Some(numbers) = self.by_key.get(key) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for &number in numbers {
            let Some(sent) = number
                .checked_sub(self.base)
                .and_then(|i| self.entries.get_mut(i as usize))
            else {
                continue;
            };
            if sent.at_ms >= from && !sent.to.iter().any(|e| e == edge) {
                sent.to.push(Arc::clone(edge));
                out.push(Arc::clone(&sent.n));
            }
        }
        out
    }

    /// Notifications kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn expire(&mut self, now: u64) {
        while self
            .entries
            .front()
            .is_some_and(|s| s.at_ms.saturating_add(self.config.window_ms) < now)
        {
            self.pop();
        }
    }

    fn pop(&mut self) {
        let Some(sent) = self.entries.pop_front() else {
            return;
        };
        self.bytes -= sent.n.payload.len();
        for key in Key::of(&sent.n) {
            if let Some(numbers) = self.by_key.get_mut(&key) {
                // A notification naming a user twice has two numbers.
                while numbers.front().is_some_and(|&f| f <= self.base) {
                    numbers.pop_front();
                }
                if numbers.is_empty() {
                    self.by_key.remove(&key);
                }
            }
        }
        self.base += 1;
    }
}
