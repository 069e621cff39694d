//! The figure of a soak: the least-squares slope of each series after the warm-up, per hour and
//! relative to the series' level (pure).

use serde::Serialize;

/// One series' fit over the samples after the warm-up.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Fit {
    /// Samples the fit used.
    pub(crate) samples: usize,
    /// Mean of those samples (the level).
    pub(crate) level: f64,
    /// Least-squares slope, units per hour.
    pub(crate) per_hour: f64,
    /// `per_hour` as a percentage of `level` (0 when the level is 0).
    pub(crate) percent_per_hour: f64,
    /// The first and last of those samples.
    pub(crate) first: f64,
    pub(crate) last: f64,
}

impl Fit {
    /// Units per minute.
    pub(crate) fn per_minute(&self) -> f64 {
        self.per_hour / 60.0
    }

    /// Percent of the level per minute.
    pub(crate) fn percent_per_minute(&self) -> f64 {
        self.percent_per_hour / 60.0
    }
}

/// Fits `points` (`(seconds since the start, value)`) at or after `from_secs`; `None` with fewer
/// than two such points or when they all share one time.
pub(crate) fn fit(points: &[(f64, f64)], from_secs: f64) -> Option<Fit> {
    let used: Vec<(f64, f64)> = points
        .iter()
        .copied()
        .filter(|(t, v)| *t >= from_secs && v.is_finite())
        .collect();
    if used.len() < 2 {
        return None;
    }
    let n = used.len() as f64;
    let mean_t = used.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_v = used.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = used.iter().map(|p| (p.0 - mean_t).powi(2)).sum();
    if sxx == 0.0 {
        return None;
    }
    let sxy: f64 = used.iter().map(|p| (p.0 - mean_t) * (p.1 - mean_v)).sum();
    let per_second = sxy / sxx;
    let per_hour = per_second * 3600.0;
    let percent_per_hour = if mean_v.abs() > f64::EPSILON {
        per_hour / mean_v.abs() * 100.0
    } else {
        0.0
    };
    Some(Fit {
        samples: used.len(),
        level: mean_v,
        per_hour,
        percent_per_hour,
        first: used[0].1,
        last: used[used.len() - 1].1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flat_series_has_no_slope() {
        let points: Vec<(f64, f64)> = (0..10).map(|i| (f64::from(i) * 60.0, 100.0)).collect();
        let f = fit(&points, 0.0).expect("fit");
        assert_eq!(f.samples, 10);
        assert!(f.per_hour.abs() < 1e-9);
        assert!((f.level - 100.0).abs() < 1e-9);
    }

    #[test]
    fn a_line_gives_its_slope_per_hour_and_relative_to_its_level() {
        // 1 unit per minute from 100: 60 per hour; level at the mean time.
        let points: Vec<(f64, f64)> = (0..=10)
            .map(|i| (f64::from(i) * 60.0, 100.0 + f64::from(i)))
            .collect();
        let f = fit(&points, 0.0).expect("fit");
        assert!((f.per_hour - 60.0).abs() < 1e-9);
        assert!((f.per_minute() - 1.0).abs() < 1e-9);
        assert!((f.level - 105.0).abs() < 1e-9);
        assert!((f.percent_per_hour - 60.0 / 105.0 * 100.0).abs() < 1e-9);
    }

    #[test]
    fn the_warm_up_is_left_out() {
        // Steep growth during the warm-up, flat after it.
        let mut points: Vec<(f64, f64)> = (0..5)
            .map(|i| (f64::from(i) * 60.0, f64::from(i) * 50.0))
            .collect();
        points.extend((5..20).map(|i| (f64::from(i) * 60.0, 250.0)));
        let f = fit(&points, 300.0).expect("fit");
        assert_eq!(f.samples, 15);
        assert!(f.per_hour.abs() < 1e-9);
        assert!(fit(&points, 0.0).expect("fit").per_hour > 100.0);
    }

    #[test]
    fn too_few_points_fit_nothing() {
        assert_eq!(fit(&[(0.0, 1.0)], 0.0), None);
        assert_eq!(fit(&[(5.0, 1.0), (5.0, 2.0)], 0.0), None);
        assert_eq!(fit(&[(0.0, 1.0), (60.0, 2.0)], 61.0), None);
    }

    #[test]
    fn a_zero_level_has_no_relative_slope() {
        let f = fit(&[(0.0, 0.0), (60.0, 0.0)], 0.0).expect("fit");
        assert_eq!(f.percent_per_hour, 0.0);
    }
}
