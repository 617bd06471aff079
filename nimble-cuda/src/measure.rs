//! Summaries of timing samples: median (what the paper reports), mean and standard deviation.

use serde::{Deserialize, Serialize};

/// A set of timing samples and their summary, in microseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Samples {
    pub median_us: f64,
    pub mean_us: f64,
    pub stdev_us: f64,
    pub min_us: f64,
    pub max_us: f64,
    pub samples_us: Vec<f64>,
}

impl Samples {
    /// Summarises `samples_us` (kept in the order measured). An empty set summarises to NaN.
    pub fn new(samples_us: Vec<f64>) -> Samples {
        let n = samples_us.len() as f64;
        let mut sorted = samples_us.clone();
        sorted.sort_by(f64::total_cmp);
        let median_us = match sorted.len() {
            0 => f64::NAN,
            len if len % 2 == 1 => sorted[len / 2],
            len => (sorted[len / 2 - 1] + sorted[len / 2]) / 2.0,
        };
        let mean_us = samples_us.iter().sum::<f64>() / n;
        let variance = samples_us.iter().map(|x| (x - mean_us).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
        Samples {
            median_us,
            mean_us,
            stdev_us: variance.sqrt(),
            min_us: sorted.first().copied().unwrap_or(f64::NAN),
            max_us: sorted.last().copied().unwrap_or(f64::NAN),
            samples_us,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Samples;

    #[test]
    fn median_mean_and_spread() {
        let odd = Samples::new(vec![3.0, 1.0, 2.0]);
        assert_eq!((odd.median_us, odd.mean_us, odd.stdev_us), (2.0, 2.0, 1.0));
        assert_eq!(Samples::new(vec![4.0, 1.0, 2.0, 3.0]).median_us, 2.5);
        assert_eq!((odd.min_us, odd.max_us), (1.0, 3.0));
        assert!(Samples::new(vec![]).median_us.is_nan());
    }
}
