//! Median and range of repeated measurements, and their formatting.

/// The median and the range of a set of measurements.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub count: usize,
}

impl Spread {
    /// Summarizes `values`; `None` when there are none.
    pub fn of(values: &[f64]) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let middle = sorted.len() / 2;
        let median = if sorted.len().is_multiple_of(2) {
            (sorted[middle - 1] + sorted[middle]) / 2.0
        } else {
            sorted[middle]
        };
        Some(Self {
            median,
            min: sorted[0],
            max: sorted[sorted.len() - 1],
            count: sorted.len(),
        })
    }

    /// The width of the range relative to the median (0.01 = 1%): how much
    /// the measurement varies between rounds.
    pub fn relative_range(&self) -> f64 {
        if self.median == 0.0 {
            0.0
        } else {
            (self.max - self.min) / self.median
        }
    }

    /// `median (min–max)` with `decimals` digits and `unit` after each.
    pub fn show(&self, decimals: usize, unit: &str) -> String {
        format!(
            "{:.*}{unit} ({:.*}–{:.*})",
            decimals, self.median, decimals, self.min, decimals, self.max
        )
    }
}

/// `Spread::of(values)` shown as [`Spread::show`], or "–" without values.
pub fn show(values: &[f64], decimals: usize, unit: &str) -> String {
    Spread::of(values).map_or_else(|| "–".into(), |spread| spread.show(decimals, unit))
}

/// A signed percentage, `+0.42%`, from a ratio (0.0042).
pub fn percent_signed(ratio: f64) -> String {
    format!("{:+.2}%", ratio * 100.0)
}

/// A percentage, `0.42%`, from a ratio (0.0042).
pub fn percent(ratio: f64) -> String {
    format!("{:.2}%", ratio * 100.0)
}

/// Bytes as MB (10^6, as `ps` and the targets count), `34.1 MB`.
pub fn megabytes(bytes: f64) -> f64 {
    bytes / 1e6
}

/// The slope of the least-squares line through `points`, or `None` when
/// the x values do not vary.
pub fn slope(points: &[(f64, f64)]) -> Option<f64> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let covariance: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    let variance: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    (variance > 0.0).then(|| covariance / variance)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        let odd = Spread::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((odd.median, odd.min, odd.max), (2.0, 1.0, 3.0));
        let even = Spread::of(&[4.0, 1.0, 2.0, 3.0]).unwrap();
        assert_eq!(even.median, 2.5);
        assert!(Spread::of(&[]).is_none());
    }

    #[test]
    fn shows_median_and_range() {
        let spread = Spread::of(&[1.0, 2.0, 4.0]).unwrap();
        assert_eq!(spread.show(1, " s"), "2.0 s (1.0–4.0)");
        assert!((spread.relative_range() - 1.5).abs() < 1e-9);
    }

    #[test]
    fn slope_of_a_line() {
        let points = [(1.0, 3.0), (2.0, 5.0), (4.0, 9.0)];
        assert!((slope(&points).unwrap() - 2.0).abs() < 1e-9);
        assert!(slope(&[(1.0, 1.0), (1.0, 2.0)]).is_none());
    }
}
