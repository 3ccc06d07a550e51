//! Helpers shared by the heavy tests: chi-square goodness of fit,
//! Clopper–Pearson bounds, and declarations with every optional setting off.
#![allow(dead_code)]

use fleetdp_dp::accountant::Budget;
use fleetdp_dp::mechanism::Measure;
use fleetdp_dp::relation::Relation;
use fleetdp_dp::release::{plan, PrivacySpec, StatKind, StreamPlan, StreamSpec};
use statrs::distribution::{Beta, ChiSquared, ContinuousCDF};

/// A stream of values in `[lower, upper]` at `resolution` releasing
/// `statistics`: count windows of `window_size`, or one-minute time windows
/// when it is 0 (add-remove); `k = 1`, `W = 1`, nothing optional.
pub fn stream_spec(
    (lower, upper, resolution): (f64, f64, f64),
    window_size: u64,
    statistics: Vec<StatKind>,
) -> StreamSpec {
    StreamSpec {
        name: "test".into(),
        lower,
        upper,
        resolution,
        window_size,
        max_readings_per_device: 1,
        max_windows_per_device: 1,
        budget_share: 1.0,
        statistics,
        histogram_edges: vec![],
        quantiles: vec![],
        quantile_candidates: None,
        adaptive_quantiles: false,
        joint_quantiles: false,
        target_error: vec![],
        window_timeout_ms: None,
        window_ms: (window_size == 0).then_some(60_000),
        running_share: 0.0,
        running_lifetime: 1 << 24,
        device_alarm_share: 0.0,
        groups: None,
    }
}

/// A stream over [-20, 60] at 0.5 releasing count, sum, mean, variance,
/// std and clamped (under add-remove, every figure derived with the noisy
/// count), with `budget` (ε or ρ) per device per horizon under `relation`:
/// count windows of `window_size` (change-one) or one-minute time windows
/// (0, add-remove).
pub fn derived_figures(
    relation: Relation,
    measure: Measure,
    budget: f64,
    window_size: u64,
) -> StreamPlan {
    let spec = stream_spec(
        (-20.0, 60.0, 0.5),
        window_size,
        vec![
            StatKind::Count,
            StatKind::Sum,
            StatKind::Mean,
            StatKind::Variance,
            StatKind::Std,
            StatKind::Clamped,
        ],
    );
    let privacy = privacy(relation, measure, budget);
    plan(&privacy, &[spec]).unwrap().streams.remove(0)
}

/// `budget` (ε or ρ) per device per horizon under `relation`, δ = 10⁻⁶.
pub fn privacy(relation: Relation, measure: Measure, budget: f64) -> PrivacySpec {
    PrivacySpec {
        relation,
        budget: Budget {
            measure,
            per_horizon: budget,
            delta: 1e-6,
        },
    }
}

/// Clopper–Pearson one-sided lower bound on p at confidence 1 − alpha.
pub fn cp_lower(successes: u64, trials: u64, alpha: f64) -> f64 {
    if successes == 0 {
        return 0.0;
    }
    Beta::new(successes as f64, (trials - successes + 1) as f64)
        .unwrap()
        .inverse_cdf(alpha)
}

/// Clopper–Pearson one-sided upper bound on p at confidence 1 − alpha.
pub fn cp_upper(successes: u64, trials: u64, alpha: f64) -> f64 {
    if successes == trials {
        return 1.0;
    }
    Beta::new((successes + 1) as f64, (trials - successes) as f64)
        .unwrap()
        .inverse_cdf(1.0 - alpha)
}

/// Chi-square goodness of fit of integer samples against a pmf. Bins are
/// runs of consecutive integers with expected count ≥ `min_expected`, plus
/// both tails. Returns the p-value.
pub fn chi_square_p(
    samples: &[i128],
    pmf: impl Fn(i128) -> f64,
    support: (i128, i128),
    min_expected: f64,
) -> f64 {
    let n = samples.len() as f64;
    let (lo, hi) = support;
    // Bin boundaries over [lo, hi].
    let mut bins: Vec<(i128, i128, f64)> = Vec::new();
    let (mut start, mut mass) = (lo, 0.0);
    for x in lo..=hi {
        mass += pmf(x);
        if mass * n >= min_expected {
            bins.push((start, x, mass));
            start = x + 1;
            mass = 0.0;
        }
    }
    if mass > 0.0 {
        if let Some(last) = bins.last_mut() {
            last.1 = hi;
            last.2 += mass;
        }
    }
    let inner: f64 = bins.iter().map(|b| b.2).sum();
    let mut observed = vec![0u64; bins.len()];
    let mut outside = 0u64;
    for &s in samples {
        if s < lo || s > hi {
            outside += 1;
            continue;
        }
        let i = bins.partition_point(|b| b.1 < s);
        observed[i] += 1;
    }
    let mut stat = 0.0;
    for (b, &o) in bins.iter().zip(&observed) {
        let e = b.2 * n;
        stat += (o as f64 - e).powi(2) / e;
    }
    let tail = (1.0 - inner).max(0.0) * n;
    if tail >= 1.0 {
        stat += (outside as f64 - tail).powi(2) / tail;
    } else {
        assert!(
            outside <= 3,
            "{outside} samples outside a support of mass {inner}"
        );
    }
    let dof = (bins.len() - 1).max(1) as f64;
    1.0 - ChiSquared::new(dof).unwrap().cdf(stat)
}
