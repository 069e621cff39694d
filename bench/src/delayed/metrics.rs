//! Herald's own view of delayed notifications (pure): the `herald_delayed_*` metrics from
//! `GET /metrics` (OpenMetrics text), read before and after a measurement and subtracted.
//!
//! The lateness histogram (`herald_delayed_lateness_seconds`: due time to hand-off, first
//! attempts of notifications not held) has fixed buckets, so its percentiles are bucket upper
//! bounds ("p99 <= 10 ms"), and a value past the last finite bucket is only known to be over it.

use std::collections::BTreeMap;

use serde::Serialize;

/// The lateness histogram's name.
const LATENESS: &str = "herald_delayed_lateness_seconds";

/// One scrape: every `herald_delayed_*` sample, by its name with labels as written.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Scrape {
    samples: BTreeMap<String, f64>,
}

impl Scrape {
    /// Parses the text of `/metrics`, keeping the `herald_delayed_` samples.
    pub(crate) fn parse(text: &str) -> Self {
        let mut samples = BTreeMap::new();
        for line in text.lines() {
            if !line.starts_with("herald_delayed_") {
                continue;
            }
            // The value is the last field but one when a timestamp follows; Herald writes none.
            let Some((name, value)) = line.rsplit_once(' ') else {
                continue;
            };
            if let Ok(v) = value.trim().parse::<f64>() {
                samples.insert(name.trim().to_owned(), v);
            }
        }
        Self { samples }
    }

    /// A sample's value (0 when absent: a counter not touched yet).
    pub(crate) fn get(&self, name: &str) -> f64 {
        self.samples.get(name).copied().unwrap_or(0.0)
    }

    /// Every sample whose name starts with `prefix`, with its value.
    fn with_prefix<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = (&'a str, f64)> + 'a {
        self.samples
            .range(prefix.to_owned()..)
            .take_while(move |(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.as_str(), *v))
    }

    /// The lateness histogram: `(upper bound in seconds, cumulative count)` per finite bucket,
    /// ascending, and the count and sum over all.
    fn lateness(&self) -> (Vec<(f64, f64)>, f64, f64) {
        let prefix = format!("{LATENESS}_bucket{{le=\"");
        let mut buckets: Vec<(f64, f64)> = self
            .with_prefix(&prefix)
            .filter_map(|(name, v)| {
                let le = name.strip_prefix(&prefix)?.strip_suffix("\"}")?;
                let le: f64 = le.parse().ok()?;
                le.is_finite().then_some((le, v))
            })
            .collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        (
            buckets,
            self.get(&format!("{LATENESS}_count")),
            self.get(&format!("{LATENESS}_sum")),
        )
    }
}

/// The server's lateness histogram over a measurement (after minus before).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ServerLateness {
    pub(crate) count: u64,
    pub(crate) mean_ms: Option<f64>,
    /// Bucket upper bounds, ms: at least 50% (99%, 100%) of the samples are at or below them;
    /// `None` when past the last finite bucket.
    pub(crate) p50_le_ms: Option<f64>,
    pub(crate) p99_le_ms: Option<f64>,
    pub(crate) max_le_ms: Option<f64>,
    /// `(upper bound ms, samples in this bucket)`, non-empty buckets only; the last bucket,
    /// past every bound, has bound `None`.
    pub(crate) buckets: Vec<(Option<f64>, u64)>,
}

impl ServerLateness {
    /// The histogram between two scrapes. `None` when nothing was observed.
    pub(crate) fn between(before: &Scrape, after: &Scrape) -> Option<Self> {
        let (b_buckets, b_count, b_sum) = before.lateness();
        let (a_buckets, a_count, a_sum) = after.lateness();
        let count = (a_count - b_count).max(0.0);
        if count < 1.0 {
            return None;
        }
        let cumulative: Vec<(f64, f64)> = a_buckets
            .iter()
            .map(|&(le, a)| {
                let b = b_buckets
                    .iter()
                    .find(|(ble, _)| *ble == le)
                    .map_or(0.0, |x| x.1);
                (le, (a - b).max(0.0))
            })
            .collect();
        let bound = |p: f64| -> Option<f64> {
            let rank = (p / 100.0 * count).ceil().max(1.0);
            cumulative
                .iter()
                .find(|(_, c)| *c >= rank)
                .map(|(le, _)| le * 1000.0)
        };
        let mut buckets = Vec::new();
        let mut below = 0.0;
        for &(le, c) in &cumulative {
            if c > below {
                buckets.push((Some(le * 1000.0), (c - below) as u64));
            }
            below = c;
        }
        if count > below {
            buckets.push((None, (count - below) as u64));
        }
        Some(Self {
            count: count as u64,
            mean_ms: Some((a_sum - b_sum) / count * 1000.0),
            p50_le_ms: bound(50.0),
            p99_le_ms: bound(99.0),
            max_le_ms: bound(100.0),
            buckets,
        })
    }
}

/// The counters the report shows, over a measurement (after minus before).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct ServerCounters {
    pub(crate) accepted: u64,
    pub(crate) duplicates: u64,
    pub(crate) fired: u64,
    pub(crate) refired: u64,
    pub(crate) hints_dropped: u64,
    /// Seconds the firer waited for the link.
    pub(crate) link_wait_s: f64,
    /// Failed store operations, by operation.
    pub(crate) store_errors: BTreeMap<String, u64>,
}

impl ServerCounters {
    pub(crate) fn between(before: &Scrape, after: &Scrape) -> Self {
        let seconds = |name: &str| (after.get(name) - before.get(name)).max(0.0);
        let diff = |name: &str| seconds(name) as u64;
        let prefix = "herald_delayed_store_errors_total{op=\"";
        let store_errors = after
            .with_prefix(prefix)
            .filter_map(|(name, _)| {
                let op = name.strip_prefix(prefix)?.strip_suffix("\"}")?;
                let n = diff(name);
                (n > 0).then(|| (op.to_owned(), n))
            })
            .collect();
        Self {
            accepted: diff("herald_delayed_accepted_total"),
            duplicates: diff("herald_delayed_duplicates_total"),
            fired: diff("herald_delayed_fired_total"),
            refired: diff("herald_delayed_refired_total"),
            hints_dropped: diff("herald_delayed_hints_dropped_total"),
            link_wait_s: seconds("herald_delayed_link_wait_seconds_total"),
            store_errors,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(fired: u64, buckets: [u64; 4], count: u64, sum: f64, errors: u64) -> String {
        format!(
            "# HELP herald_delayed_fired Entries handed to the link.\n\
             # TYPE herald_delayed_fired counter\n\
             herald_delayed_fired_total {fired}\n\
             herald_delayed_accepted_total 100\n\
             herald_delayed_store_errors_total{{op=\"claim_due\"}} {errors}\n\
             herald_delayed_lateness_seconds_sum {sum}\n\
             herald_delayed_lateness_seconds_count {count}\n\
             herald_delayed_lateness_seconds_bucket{{le=\"0.001\"}} {}\n\
             herald_delayed_lateness_seconds_bucket{{le=\"0.002\"}} {}\n\
             herald_delayed_lateness_seconds_bucket{{le=\"0.005\"}} {}\n\
             herald_delayed_lateness_seconds_bucket{{le=\"0.01\"}} {}\n\
             herald_delayed_lateness_seconds_bucket{{le=\"+Inf\"}} {count}\n\
             herald_publications_accepted_total{{source=\"http\"}} 7\n\
             # EOF\n",
            buckets[0], buckets[1], buckets[2], buckets[3]
        )
    }

    #[test]
    fn parses_only_the_delayed_samples() {
        let s = Scrape::parse(&text(5, [1, 2, 3, 4], 4, 0.01, 0));
        assert_eq!(s.get("herald_delayed_fired_total"), 5.0);
        assert_eq!(s.get("herald_delayed_lateness_seconds_count"), 4.0);
        assert_eq!(
            s.get("herald_publications_accepted_total{source=\"http\"}"),
            0.0
        );
        assert_eq!(s.get("herald_delayed_nothing"), 0.0);
        let (buckets, count, _) = s.lateness();
        assert_eq!(buckets.len(), 4, "+Inf is not a finite bucket");
        assert_eq!(buckets[0], (0.001, 1.0));
        assert_eq!(count, 4.0);
    }

    #[test]
    fn lateness_between_two_scrapes() {
        let before = Scrape::parse(&text(0, [10, 10, 10, 10], 10, 0.005, 1));
        // 100 more: 50 at <= 1 ms, 30 in (1, 2], 18 in (2, 5], 1 in (5, 10], 1 over 10 ms.
        let after = Scrape::parse(&text(100, [60, 90, 108, 109], 110, 0.305, 3));
        let l = ServerLateness::between(&before, &after).unwrap();
        assert_eq!(l.count, 100);
        assert!((l.mean_ms.unwrap() - 3.0).abs() < 1e-9);
        assert_eq!(l.p50_le_ms, Some(1.0));
        assert_eq!(l.p99_le_ms, Some(10.0));
        assert_eq!(l.max_le_ms, None, "one sample past the last bound");
        assert_eq!(
            l.buckets,
            [
                (Some(1.0), 50),
                (Some(2.0), 30),
                (Some(5.0), 18),
                (Some(10.0), 1),
                (None, 1)
            ]
        );
        assert_eq!(ServerLateness::between(&before, &before), None);
        let c = ServerCounters::between(&before, &after);
        assert_eq!(c.fired, 100);
        assert_eq!(c.accepted, 0);
        assert_eq!(
            c.store_errors,
            BTreeMap::from([("claim_due".to_owned(), 2)])
        );
    }
}
