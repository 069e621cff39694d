//! At most one message per kind of alert per interval (pure; it takes
//! `now`). The first alert goes out at once; those that follow within the
//! interval are held, and go out together as one summary when the
//! interval is over ([`Coalescer::deadline`]). A summary itemises the first
//! [`SHOWN`] alerts and counts the rest, so a flood of a million dead
//! letters is one message a minute, never an unbounded list.

/// Alerts itemised in one summary; the rest are counted.
pub(crate) const SHOWN: usize = 5;

/// What goes out in one message: alerts itemised, and a count of more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Digest<T> {
    /// The first alerts, oldest first (at least one, at most [`SHOWN`]).
    pub(crate) shown: Vec<T>,
    /// Alerts beyond `shown`, counted only.
    pub(crate) more: u64,
    /// When the first of them came in (epoch ms).
    pub(crate) since_ms: u64,
}

impl<T> Digest<T> {
    /// How many alerts the message carries, itemised or counted.
    pub(crate) fn alerts(&self) -> u64 {
        self.shown.len() as u64 + self.more
    }
}

/// The coalescing of one kind of alert.
#[derive(Debug)]
pub(crate) struct Coalescer<T> {
    interval_ms: u64,
    /// When the last message went out.
    last_sent_ms: Option<u64>,
    /// Alerts held for the summary (at most [`SHOWN`]).
    held: Vec<T>,
    /// Alerts held beyond `held`, counted.
    more: u64,
    /// When the first held alert came in.
    since_ms: u64,
}

impl<T> Coalescer<T> {
    /// No message sent yet; at most one per `interval_ms`.
    pub(crate) fn new(interval_ms: u64) -> Self {
        Coalescer {
            interval_ms,
            last_sent_ms: None,
            held: Vec::new(),
            more: 0,
            since_ms: 0,
        }
    }

    /// An alert at `now`: the message to send now (this alert alone), or
    /// `None` when it is held for the summary at [`Coalescer::deadline`].
    pub(crate) fn offer(&mut self, alert: T, now: u64) -> Option<Digest<T>> {
        let quiet = self
            .last_sent_ms
            .is_none_or(|last| now >= last.saturating_add(self.interval_ms));
        if quiet && self.held.is_empty() {
            self.last_sent_ms = Some(now);
            return Some(Digest {
                shown: vec![alert],
                more: 0,
                since_ms: now,
            });
        }
        if self.held.is_empty() {
            self.since_ms = now;
        }
        if self.held.len() < SHOWN {
            self.held.push(alert);
        } else {
            self.more += 1;
        }
        None
    }

    /// When the held alerts are due to go out as a summary; `None` when
    /// nothing is held.
    pub(crate) fn deadline(&self) -> Option<u64> {
        if self.held.is_empty() {
            return None;
        }
        Some(
            self.last_sent_ms
                .map_or(0, |last| last.saturating_add(self.interval_ms)),
        )
    }

    /// The summary of the held alerts if it is due at `now`.
    pub(crate) fn poll(&mut self, now: u64) -> Option<Digest<T>> {
        if self.deadline()? > now {
            return None;
        }
        self.last_sent_ms = Some(now);
        Some(Digest {
            shown: std::mem::take(&mut self.held),
            more: std::mem::take(&mut self.more),
            since_ms: self.since_ms,
        })
    }

    /// How many alerts are held (for the log at shutdown).
    pub(crate) fn held(&self) -> u64 {
        self.held.len() as u64 + self.more
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: u64 = 60_000;

    #[test]
    fn the_first_alert_goes_out_at_once_and_again_after_a_quiet_interval() {
        let mut c = Coalescer::new(MIN);
        let d = c.offer("a", 1_000).unwrap();
        assert_eq!(
            d,
            Digest {
                shown: vec!["a"],
                more: 0,
                since_ms: 1_000
            }
        );
        assert_eq!(d.alerts(), 1);
        assert_eq!(c.deadline(), None);
        // A whole interval later, nothing held: at once again.
        assert_eq!(c.offer("b", 61_000).unwrap().shown, vec!["b"]);
    }

    #[test]
    fn alerts_within_the_interval_go_out_as_one_summary_at_its_end() {
        let mut c = Coalescer::new(MIN);
        c.offer(0, 1_000).unwrap();
        for i in 1..=42u64 {
            assert_eq!(c.offer(i, 1_000 + i * 100), None);
        }
        assert_eq!(c.held(), 42);
        assert_eq!(c.deadline(), Some(61_000));
        assert_eq!(c.poll(60_999), None, "never early");
        let d = c.poll(61_000).unwrap();
        assert_eq!(d.shown, vec![1, 2, 3, 4, 5]);
        assert_eq!(d.more, 37);
        assert_eq!(d.alerts(), 42);
        assert_eq!(d.since_ms, 1_100, "since the first held one");
        assert_eq!((c.deadline(), c.held()), (None, 0));
        // The summary started a new interval: the next alert is held.
        assert_eq!(c.offer(43, 61_500), None);
        assert_eq!(c.deadline(), Some(121_000));
    }

    #[test]
    fn a_late_poll_still_sends_the_summary_and_nothing_overtakes_it() {
        let mut c = Coalescer::new(MIN);
        c.offer("a", 0).unwrap();
        assert_eq!(c.offer("b", 10), None);
        // The interval is over, but "b" waits: "c" joins it in the summary
        // rather than going out before it.
        assert_eq!(c.offer("c", 90_000), None);
        let d = c.poll(90_000).unwrap();
        assert_eq!(d.shown, vec!["b", "c"]);
        assert_eq!(d.since_ms, 10);
    }

    #[test]
    fn the_held_list_is_bounded_whatever_the_flood() {
        let mut c = Coalescer::new(MIN);
        c.offer(0u32, 0);
        for i in 1..1_000_000u32 {
            c.offer(i, 1);
        }
        let d = c.poll(MIN).unwrap();
        assert_eq!(d.shown.len(), SHOWN);
        assert_eq!(d.alerts(), 999_999);
    }
}
