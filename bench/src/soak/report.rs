//! The soak's report: the slopes, the growth limits of `--check`, Markdown, and the plot of
//! every series over time as a hand-written SVG (pure).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::fit::Fit;
use super::sample::Values;

/// One sample: seconds since the start and the values.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Sample {
    pub(crate) at_secs: f64,
    pub(crate) values: Values,
}

/// The series of the samples: name -> `(seconds, value)` points.
pub(crate) fn series(samples: &[Sample]) -> BTreeMap<String, Vec<(f64, f64)>> {
    let mut out: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for s in samples {
        for (name, v) in &s.values {
            out.entry(name.clone()).or_default().push((s.at_secs, *v));
        }
    }
    out
}

/// How much a series may grow after the warm-up before `--check` fails the run, per minute.
///
/// A 5-minute run leaves 4 minutes of samples after a 1-minute warm-up: an edge's descriptors
/// move by a dozen with the churn around any fit, RSS by a few percent with the allocator, so
/// the limits are generous, and meant to catch a leak that grows with the traffic (a
/// descriptor, a task, some kilobytes per session or per notification), not to measure a slope.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) enum Limit {
    /// At most this many units per minute.
    PerMinute(f64),
    /// At most this percentage of the level per minute.
    PercentPerMinute(f64),
}

/// The growth limit of a series, if it has one (the processes' and the stores' series; the
/// Herald gauges and the bench's own counts are reported, not checked).
pub(crate) fn limit(series: &str) -> Option<Limit> {
    let group = series.split('/').next().unwrap_or(series);
    match group {
        // Churn moves descriptors by tens; a leak of one per churned session is ~70 a minute
        // per edge at the default churn.
        "fds" => Some(Limit::PerMinute(20.0)),
        // Blocking-pool threads come and go (idle ones leave after 10 s).
        "threads" => Some(Limit::PerMinute(4.0)),
        // 20 % over the 4 minutes after the warm-up of the CI's run.
        "rss_mib" => Some(Limit::PercentPerMinute(5.0)),
        "redis" => Some(Limit::PercentPerMinute(10.0)),
        // Queues are nearly empty: a relative slope of a level near 0 means nothing.
        "rabbitmq_messages" => Some(Limit::PerMinute(50.0)),
        "rabbitmq_queues" => Some(Limit::PerMinute(1.0)),
        _ => None,
    }
}

/// Whether `fit` is beyond `limit`; the reason if so.
pub(crate) fn beyond(series: &str, fit: &Fit, limit: Limit) -> Option<String> {
    match limit {
        Limit::PerMinute(max) if fit.per_minute() > max => Some(format!(
            "{series}: grows {:.2} per minute after the warm-up (limit {max}), {:.1} -> {:.1}",
            fit.per_minute(),
            fit.first,
            fit.last
        )),
        Limit::PercentPerMinute(max) if fit.percent_per_minute() > max => Some(format!(
            "{series}: grows {:.2} % of its level per minute after the warm-up (limit {max} %), \
             {:.1} -> {:.1}",
            fit.percent_per_minute(),
            fit.first,
            fit.last
        )),
        _ => None,
    }
}

/// The series' units, for tables and the plot.
pub(crate) fn unit(series: &str) -> &'static str {
    let group = series.split('/').next().unwrap_or(series);
    match group {
        "rss_mib" => "MiB",
        "fds" => "descriptors",
        "threads" => "threads",
        "rabbitmq_messages" => "messages",
        "rabbitmq_queues" => "queues",
        _ if series.ends_with("_mib") => "MiB",
        _ => "",
    }
}

/// The slopes as a Markdown table (series with a limit first, then the rest).
pub(crate) fn slopes_table(fits: &BTreeMap<String, Fit>, only_limited: bool) -> String {
    let mut out = String::from(
        "| series | unit | level | slope per hour | % of level per hour | first -> last |\n\
         |---|---|---:|---:|---:|---|\n",
    );
    for (name, f) in fits {
        if limit(name).is_some() != only_limited {
            continue;
        }
        let _ = writeln!(
            out,
            "| `{name}` | {} | {} | {:+.2} | {:+.2} % | {} -> {} |",
            unit(name),
            num(f.level),
            f.per_hour,
            f.percent_per_hour,
            num(f.first),
            num(f.last)
        );
    }
    out
}

fn num(v: f64) -> String {
    if v.abs() >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// One line of a panel: its series' name and points.
type Line<'a> = (&'a String, &'a Vec<(f64, f64)>);

/// The plot: one panel per group of series (`rss_mib`, `fds`, `threads`, each for the Herald
/// processes and for the others, the brokers and proxies, whose levels would flatten
/// Herald's; then each store series alone), a line per member, the warm-up shaded, time in
/// minutes.
pub(crate) fn svg(samples: &[Sample], warmup_secs: f64) -> String {
    let all = series(samples);
    let mut panels: BTreeMap<String, Vec<Line<'_>>> = BTreeMap::new();
    for (name, points) in &all {
        let group = name.split('/').next().unwrap_or(name);
        let member = name.split_once('/').map_or("", |(_, m)| m);
        let herald = member.starts_with("router") || member.starts_with("edge");
        let panel = match group {
            "rss_mib" | "fds" | "threads" if herald => format!("{group}, Herald"),
            "rss_mib" | "fds" | "threads" => format!("{group}, brokers and proxies"),
            "rabbitmq_messages" => group.to_owned(),
            "redis" => name.clone(),
            _ => continue,
        };
        panels.entry(panel).or_default().push((name, points));
    }
    let order = [
        "rss_mib, Herald",
        "rss_mib, brokers and proxies",
        "fds, Herald",
        "fds, brokers and proxies",
        "threads, Herald",
        "threads, brokers and proxies",
        "redis/used_memory_mib",
        "redis/keys",
        "rabbitmq_messages",
    ];
    let mut keys: Vec<&String> = panels.keys().collect();
    keys.sort_by_key(|k| {
        order
            .iter()
            .position(|o| *o == k.as_str())
            .unwrap_or(order.len())
    });

    let end = samples.last().map_or(60.0, |s| s.at_secs).max(60.0);
    let (pw, ph, cols) = (560.0, 260.0, 2usize);
    let (ml, mr, mt, mb) = (60.0, 150.0, 30.0, 30.0);
    let rows = keys.len().div_ceil(cols).max(1);
    let width = pw * cols as f64;
    let height = ph * rows as f64;
    let palette = [
        "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
        "#bcbd22", "#17becf", "#393b79", "#637939",
    ];
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    for (i, key) in keys.iter().enumerate() {
        let ox = (i % cols) as f64 * pw;
        let oy = (i / cols) as f64 * ph;
        let lines = &panels[*key];
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for (_, pts) in lines {
            for &(_, v) in pts.iter() {
                lo = lo.min(v);
                hi = hi.max(v);
            }
        }
        if !lo.is_finite() {
            continue;
        }
        lo = lo.min(0.0);
        if hi <= lo {
            hi = lo + 1.0;
        }
        hi *= 1.05;
        let (x0, y0) = (ox + ml, oy + mt);
        let (w, h) = (pw - ml - mr, ph - mt - mb);
        let x = |t: f64| x0 + t / end * w;
        let y = |v: f64| y0 + h - (v - lo) / (hi - lo) * h;
        let u = unit(lines[0].0);
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" font-size=\"13\" font-weight=\"bold\">{key}{}</text>",
            x0,
            oy + 18.0,
            if u.is_empty() {
                String::new()
            } else {
                format!(" ({u})")
            }
        );
        let _ = writeln!(
            out,
            "<rect x=\"{x0}\" y=\"{y0}\" width=\"{:.1}\" height=\"{h}\" fill=\"#eeeeee\"/>",
            x(warmup_secs.min(end)) - x0
        );
        let _ = writeln!(
            out,
            "<rect x=\"{x0}\" y=\"{y0}\" width=\"{w}\" height=\"{h}\" fill=\"none\" stroke=\"#888\"/>"
        );
        for k in 0..=4 {
            let v = lo + (hi - lo) * f64::from(k) / 4.0;
            let _ = writeln!(
                out,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                x0 - 4.0,
                y(v) + 4.0,
                num(v)
            );
        }
        let minutes = (end / 60.0).ceil() as u64;
        let step = (minutes / 6).max(1);
        for m in (0..=minutes).step_by(step as usize) {
            let t = m as f64 * 60.0;
            if t > end {
                break;
            }
            let _ = writeln!(
                out,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{m} min</text>",
                x(t),
                y0 + h + 14.0
            );
        }
        for (j, (name, pts)) in lines.iter().enumerate() {
            let colour = palette[j % palette.len()];
            let path: Vec<String> = pts
                .iter()
                .map(|&(t, v)| format!("{:.1},{:.1}", x(t), y(v)))
                .collect();
            let _ = writeln!(
                out,
                "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" points=\"{}\"/>",
                path.join(" ")
            );
            let member = name.split_once('/').map_or(name.as_str(), |(_, m)| m);
            let _ = writeln!(
                out,
                "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"{colour}\">{member}</text>",
                x0 + w + 8.0,
                y0 + 12.0 + j as f64 * 14.0
            );
        }
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soak::fit::fit;

    fn sample(t: f64, values: &[(&str, f64)]) -> Sample {
        Sample {
            at_secs: t,
            values: values.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
        }
    }

    #[test]
    fn limits_catch_growth_and_pass_flat_series() {
        let growing: Vec<(f64, f64)> = (0..10)
            .map(|i| (f64::from(i) * 60.0, 100.0 + 30.0 * f64::from(i)))
            .collect();
        let f = fit(&growing, 0.0).expect("fit");
        let l = limit("fds/edge1").expect("fds have a limit");
        assert!(beyond("fds/edge1", &f, l).is_some());
        let flat: Vec<(f64, f64)> = (0..10)
            .map(|i| (f64::from(i) * 60.0, 100.0 + f64::from(i % 2)))
            .collect();
        let f = fit(&flat, 0.0).expect("fit");
        assert!(beyond("fds/edge1", &f, l).is_none());
        // 10 % a minute of RSS is beyond 5 %.
        let rss: Vec<(f64, f64)> = (0..10)
            .map(|i| (f64::from(i) * 60.0, 100.0 * 1.1f64.powi(i)))
            .collect();
        let f = fit(&rss, 0.0).expect("fit");
        assert!(
            beyond(
                "rss_mib/router1",
                &f,
                limit("rss_mib/router1").expect("rss")
            )
            .is_some()
        );
        assert_eq!(limit("gauges_edges/herald_sessions_open"), None);
    }

    #[test]
    fn the_plot_has_a_panel_per_group_and_a_line_per_member() {
        let samples = vec![
            sample(
                0.0,
                &[
                    ("rss_mib/edge1", 10.0),
                    ("rss_mib/edge2", 12.0),
                    ("redis/keys", 5.0),
                    ("bench/x", 1.0),
                ],
            ),
            sample(
                60.0,
                &[
                    ("rss_mib/edge1", 11.0),
                    ("rss_mib/edge2", 12.5),
                    ("redis/keys", 6.0),
                    ("bench/x", 1.0),
                ],
            ),
        ];
        let svg = svg(&samples, 30.0);
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 3);
        assert!(svg.contains(">rss_mib, Herald (MiB)<"));
        assert!(svg.contains(">redis/keys<"));
        assert!(!svg.contains("bench/x"));
    }

    #[test]
    fn series_collects_points_by_name() {
        let s = series(&[
            sample(0.0, &[("a/b", 1.0)]),
            sample(60.0, &[("a/b", 2.0), ("c/d", 3.0)]),
        ]);
        assert_eq!(s["a/b"], vec![(0.0, 1.0), (60.0, 2.0)]);
        assert_eq!(s["c/d"], vec![(60.0, 3.0)]);
    }
}
