//! SVG line charts of a comparison (pure): one line per system, a point per x (a rate, a
//! session count) at the median over the rounds, with axes, ticks and a legend. Written by
//! hand: a chart is a few dozen elements, not worth a plotting library's dependencies.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::report::spread;
use super::system::System;

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 400.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 150.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
/// Ticks on the y axis.
const Y_TICKS: usize = 5;

/// One line: a system's (x, y) points.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Series {
    pub(crate) system: System,
    pub(crate) points: Vec<(f64, f64)>,
}

/// A chart to draw.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Chart {
    pub(crate) title: String,
    pub(crate) x_label: String,
    pub(crate) y_label: String,
    pub(crate) series: Vec<Series>,
}

/// The lines of `(system, x, y)` samples: a point per system and x at the median of its
/// samples there (the rounds) (pure).
pub(crate) fn series_of(samples: impl IntoIterator<Item = (System, f64, f64)>) -> Vec<Series> {
    let mut by_point: BTreeMap<(System, u64), Vec<f64>> = BTreeMap::new();
    for (system, x, y) in samples {
        by_point.entry((system, x.to_bits())).or_default().push(y);
    }
    let mut by_system: BTreeMap<System, Vec<(f64, f64)>> = BTreeMap::new();
    for ((system, x), ys) in by_point {
        if let Some((median, _, _)) = spread(&ys) {
            by_system
                .entry(system)
                .or_default()
                .push((f64::from_bits(x), median));
        }
    }
    by_system
        .into_iter()
        .map(|(system, mut points)| {
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            Series { system, points }
        })
        .collect()
}

fn color(system: System) -> &'static str {
    match system {
        System::Herald => "#1b7837",
        System::Nchan => "#2166ac",
        System::Rabbitmq => "#d6604d",
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A round number at or above `value`: 1, 2 or 5 times a power of ten.
pub(crate) fn nice_ceiling(value: f64) -> f64 {
    if value <= 0.0 || !value.is_finite() {
        return 1.0;
    }
    let power = 10f64.powf(value.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|&v| v >= value)
        .unwrap_or(10.0 * power)
}

fn tick_label(value: f64) -> String {
    if value >= 1000.0 {
        crate::harness::report::grouped(value)
    } else if value >= 10.0 || value == 0.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.2}")
    }
}

impl Chart {
    /// The chart as an SVG document; `None` when it has no point.
    pub(crate) fn svg(&self) -> Option<String> {
        let points = || self.series.iter().flat_map(|s| s.points.iter());
        let x_min = points().map(|p| p.0).reduce(f64::min)?;
        let x_max = points().map(|p| p.0).reduce(f64::max)?;
        let y_max = nice_ceiling(points().map(|p| p.1).reduce(f64::max)?);
        let plot_w = WIDTH - LEFT - RIGHT;
        let plot_h = HEIGHT - TOP - BOTTOM;
        let x_of = |x: f64| {
            if x_max > x_min {
                LEFT + (x - x_min) / (x_max - x_min) * plot_w
            } else {
                LEFT + plot_w / 2.0
            }
        };
        let y_of = |y: f64| TOP + plot_h - y / y_max * plot_h;
        let mut out = String::new();
        let _ = writeln!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            out,
            r#"<text x="{}" y="22" text-anchor="middle" font-size="14">{}</text>"#,
            WIDTH / 2.0,
            escape(&self.title)
        );
        // Axes and the y grid.
        for i in 0..=Y_TICKS {
            let value = y_max * i as f64 / Y_TICKS as f64;
            let y = y_of(value);
            let _ = writeln!(
                out,
                r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                LEFT + plot_w,
                LEFT - 6.0,
                y + 4.0,
                tick_label(value)
            );
        }
        let mut xs: Vec<f64> = points().map(|p| p.0).collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        for x in xs {
            let _ = writeln!(
                out,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                x_of(x),
                TOP + plot_h + 18.0,
                tick_label(x)
            );
        }
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{:.1}" stroke="#333"/><line x1="{LEFT}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#333"/>"##,
            TOP + plot_h,
            TOP + plot_h,
            LEFT + plot_w,
            TOP + plot_h
        );
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            LEFT + plot_w / 2.0,
            HEIGHT - 15.0,
            escape(&self.x_label)
        );
        let _ = writeln!(
            out,
            r#"<text transform="translate(18 {:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
            TOP + plot_h / 2.0,
            escape(&self.y_label)
        );
        // The lines, their points, the legend.
        for (i, s) in self.series.iter().enumerate() {
            let c = color(s.system);
            let path: Vec<String> = s
                .points
                .iter()
                .map(|&(x, y)| format!("{:.1},{:.1}", x_of(x), y_of(y)))
                .collect();
            let _ = writeln!(
                out,
                r#"<polyline fill="none" stroke="{c}" stroke-width="2" points="{}"/>"#,
                path.join(" ")
            );
            for &(x, y) in &s.points {
                let _ = writeln!(
                    out,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{c}"/>"#,
                    x_of(x),
                    y_of(y)
                );
            }
            let ly = TOP + 10.0 + 20.0 * i as f64;
            let lx = LEFT + plot_w + 20.0;
            let _ = writeln!(
                out,
                r#"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{c}" stroke-width="2"/><text x="{:.1}" y="{:.1}">{}</text>"#,
                lx + 20.0,
                lx + 26.0,
                ly + 4.0,
                s.system.name()
            );
        }
        out.push_str("</svg>\n");
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_take_the_median_of_each_point() {
        let series = series_of([
            (System::Nchan, 2.0, 5.0),
            (System::Herald, 2.0, 3.0),
            (System::Herald, 1.0, 1.0),
            (System::Herald, 2.0, 9.0),
            (System::Herald, 2.0, 4.0),
        ]);
        assert_eq!(
            series,
            vec![
                Series {
                    system: System::Herald,
                    points: vec![(1.0, 1.0), (2.0, 4.0)]
                },
                Series {
                    system: System::Nchan,
                    points: vec![(2.0, 5.0)]
                },
            ]
        );
    }

    #[test]
    fn nice_ceilings() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(0.7), 1.0);
        assert_eq!(nice_ceiling(1.3), 2.0);
        assert_eq!(nice_ceiling(3.0), 5.0);
        assert_eq!(nice_ceiling(7.5), 10.0);
        assert_eq!(nice_ceiling(45.0), 50.0);
        assert_eq!(nice_ceiling(12_640.0), 20_000.0);
    }

    #[test]
    fn a_chart_draws_every_point_and_names_every_system() {
        let chart = Chart {
            title: "latency p99 <broadcast>".into(),
            x_label: "deliveries/s".into(),
            y_label: "ms".into(),
            series: vec![
                Series {
                    system: System::Herald,
                    points: vec![(10_000.0, 45.0), (50_000.0, 30.0)],
                },
                Series {
                    system: System::Nchan,
                    points: vec![(10_000.0, 26.0), (50_000.0, 20.0)],
                },
            ],
        };
        let svg = chart.svg().unwrap();
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<circle").count(), 4);
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains(">herald</text>") && svg.contains(">nchan</text>"));
        assert!(svg.contains("latency p99 &lt;broadcast&gt;"));
        assert!(svg.contains(">50,000</text>"));
        let empty = Chart {
            series: Vec::new(),
            ..chart
        };
        assert_eq!(empty.svg(), None);
    }
}
