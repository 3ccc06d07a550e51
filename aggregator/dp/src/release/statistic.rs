//! What a window release publishes per statistic ([`ReleasedStatistic`])
//! and the projection that makes a noisy histogram a distribution.
//!
//! Privacy argument: nothing here touches private data; the projection is
//! post-processing of noisy counts.

use serde::{Deserialize, Serialize};

/// One released statistic with its metadata (metric units).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReleasedStatistic {
    /// `count`, `sum`, `mean`, `variance`, `std`, `histogram`, `quantile`.
    pub name: String,
    /// Quantile level, for quantiles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<f64>,
    /// One value, or one per histogram bin.
    pub values: Vec<f64>,
    /// Mechanism of the measurement behind the value.
    pub mechanism: String,
    /// Sensitivity the mechanism is calibrated to (L1 for Laplace and
    /// selection, L2 for Gaussian), in the statistic's units.
    pub sensitivity: f64,
    /// Laplace scale, Gaussian σ or selection 2Δu/ε, in the statistic's units.
    pub scale: f64,
    /// ε or ρ spent by the measurements this statistic is computed from
    /// (statistics sharing a measurement report the same spend once each).
    pub spent: f64,
    /// Exact 95% interval half-width, where one exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub half_width: Option<f64>,
    /// Quantiles: the 95% rank interval's half-width in readings (the value
    /// lies between the true quantiles at ranks `q·n ± r`), where one holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank_half_width: Option<f64>,
}

/// Euclidean projection of `v` onto `{x ≥ 0, Σx = total}`.
pub fn project_to_simplex(v: &[f64], total: f64) -> Vec<f64> {
    let mut u = v.to_vec();
    u.sort_by(|a, b| b.total_cmp(a));
    let (mut cum, mut theta) = (0.0, 0.0);
    for (j, &x) in u.iter().enumerate() {
        cum += x;
        let t = (cum - total) / (j + 1) as f64;
        if x - t > 0.0 {
            theta = t;
        }
    }
    v.iter().map(|&x| (x - theta).max(0.0)).collect()
}
