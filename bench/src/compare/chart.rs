//! SVG line charts of a comparison (pure): one line per system, a point per x (a rate, a
//! session count) at the median over the rounds, with axes, ticks and a legend. Written by
//! hand: a chart is a few dozen elements, not worth a plotting library's dependencies.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::system::System;
use crate::harness::stats::spread;

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 400.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 150.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
/// Ticks on a linear y axis.
const Y_TICKS: usize = 5;
/// Largest over smallest value beyond which the y axis is logarithmic.
const LOG_SPAN: f64 = 20.0;

/// The y axis: linear from 0 to a round ceiling, or logarithmic between powers of ten.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum YAxis {
    Linear { max: f64 },
    Log { low_exp: i32, high_exp: i32 },
}

impl YAxis {
    /// The axis for `values`; `None` when none is finite.
    pub(crate) fn for_values(values: impl Iterator<Item = f64>) -> Option<Self> {
        let values: Vec<f64> = values.filter(|v| v.is_finite()).collect();
        let max = values.iter().copied().reduce(f64::max)?;
        let min_positive = values.iter().copied().filter(|&v| v > 0.0).reduce(f64::min);
        match min_positive {
            Some(min) if max / min > LOG_SPAN => {
                let low_exp = min.log10().floor() as i32;
                let high_exp = (max.log10().ceil() as i32).max(low_exp + 1);
                Some(YAxis::Log { low_exp, high_exp })
            }
            _ => Some(YAxis::Linear {
                max: nice_ceiling(max),
            }),
        }
    }

    /// Where `v` sits, from 0 (bottom) to 1 (top).
    pub(crate) fn fraction(self, v: f64) -> f64 {
        match self {
            YAxis::Linear { max } => v / max,
            YAxis::Log { low_exp, high_exp } => {
                (v.log10() - f64::from(low_exp)) / f64::from(high_exp - low_exp)
            }
        }
    }

    /// Whether `v` can be drawn (a log axis has no place for 0).
    pub(crate) fn shows(self, v: f64) -> bool {
        v.is_finite() && (v > 0.0 || matches!(self, YAxis::Linear { .. }))
    }

    /// The values the grid lines stand at.
    pub(crate) fn ticks(self) -> Vec<f64> {
        match self {
            YAxis::Linear { max } => (0..=Y_TICKS)
                .map(|i| max * i as f64 / Y_TICKS as f64)
                .collect(),
            YAxis::Log { low_exp, high_exp } => {
                (low_exp..=high_exp).map(|e| 10f64.powi(e)).collect()
            }
        }
    }
}

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
        System::Baseline => "#7fbf7b",
        System::Nchan => "#2166ac",
        System::Rabbitmq => "#d6604d",
        System::SocketIo => "#762a83",
        System::Sockjs => "#e08214",
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
    } else if value >= 0.01 {
        format!("{value:.2}")
    } else {
        format!("{value}")
    }
}

impl Chart {
    /// The chart as an SVG document; `None` when it has no point. The y axis is logarithmic
    /// (a tick per power of ten) when the values span more than [`LOG_SPAN`] (a peer far off
    /// would flatten the others into the axis), else linear from 0.
    pub(crate) fn svg(&self) -> Option<String> {
        let points = || {
            self.series
                .iter()
                .flat_map(|s| s.points.iter())
                .filter(|p| p.1.is_finite() && p.0.is_finite())
        };
        let x_min = points().map(|p| p.0).reduce(f64::min)?;
        let x_max = points().map(|p| p.0).reduce(f64::max)?;
        let y = YAxis::for_values(points().map(|p| p.1))?;
        let plot_w = WIDTH - LEFT - RIGHT;
        let plot_h = HEIGHT - TOP - BOTTOM;
        let x_of = |x: f64| {
            if x_max > x_min {
                LEFT + (x - x_min) / (x_max - x_min) * plot_w
            } else {
                LEFT + plot_w / 2.0
            }
        };
        let y_of = |v: f64| TOP + plot_h - y.fraction(v) * plot_h;
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
        for value in y.ticks() {
            let at = y_of(value);
            let _ = writeln!(
                out,
                r##"<line x1="{LEFT}" y1="{at:.1}" x2="{:.1}" y2="{at:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                LEFT + plot_w,
                LEFT - 6.0,
                at + 4.0,
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
            escape(&match y {
                YAxis::Log { .. } => format!("{} (log scale)", self.y_label),
                YAxis::Linear { .. } => self.y_label.clone(),
            })
        );
        // The lines, their points, the legend.
        for (i, s) in self.series.iter().enumerate() {
            let c = color(s.system);
            let shown: Vec<(f64, f64)> = s
                .points
                .iter()
                .copied()
                .filter(|&(_, v)| y.shows(v))
                .collect();
            let path: Vec<String> = shown
                .iter()
                .map(|&(x, v)| format!("{:.1},{:.1}", x_of(x), y_of(v)))
                .collect();
            let _ = writeln!(
                out,
                r#"<polyline fill="none" stroke="{c}" stroke-width="2" points="{}"/>"#,
                path.join(" ")
            );
            for &(x, v) in &shown {
                let _ = writeln!(
                    out,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{c}"/>"#,
                    x_of(x),
                    y_of(v)
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
    fn the_y_axis_turns_logarithmic_past_a_span() {
        let linear = YAxis::for_values([26.0, 45.0].into_iter()).unwrap();
        assert_eq!(linear, YAxis::Linear { max: 50.0 });
        assert_eq!(linear.ticks(), vec![0.0, 10.0, 20.0, 30.0, 40.0, 50.0]);
        assert!(linear.shows(0.0));
        let log = YAxis::for_values([23.0, 56.0, 4_673.0, 0.0].into_iter()).unwrap();
        assert_eq!(
            log,
            YAxis::Log {
                low_exp: 1,
                high_exp: 4
            }
        );
        assert_eq!(log.ticks(), vec![10.0, 100.0, 1_000.0, 10_000.0]);
        assert!((log.fraction(100.0) - 1.0 / 3.0).abs() < 1e-9);
        assert!(!log.shows(0.0));
        assert_eq!(YAxis::for_values([f64::NAN].into_iter()), None);
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
