//! Fleet-wide statistics: one window seq's releases from several partitions
//! combined into one figure per statistic, with its interval where the
//! statistic is one noisy measurement per partition.
//!
//! Privacy argument: a device's readings all live on one partition, so the
//! partitions' windows of a seq hold disjoint devices; the combination reads
//! only released values and public parameters (the plan's noise, `n` under
//! change-one), so it is post-processing and costs nothing. A device pays
//! what its partition's release states (parallel composition).
//!
//! Accuracy: the partitions' noises are independent draws of the same
//! calibrated noise, so a sum's error is the sum of `m` draws; its interval
//! comes from [`crate::sums`] (a convolution, not a normal approximation).
//! Means and shares are weighted by `n` (the fleet's window mean is
//! `Σ n_p·mean_p / Σ n_p`); under count windows every partition has the same
//! `n` and noise, so these are also the inverse-variance weights.
//!
//! Figures that combine several noisy measurements get their interval from
//! the partitions' raw moments summed ([`RawMoments`]): the box of
//! `derived.rs` around the pooled measurements, each with its summed
//! noise's exact `1 − 0.05/k` half-width — at least 95%, conservative.
//! Under add-remove those are the figures derived with the noisy count
//! (sum from the centred sum, mean, clamped share, variance, std); under
//! change-one, with `n` public (exact in the box), variance and std. A
//! released variance could not serve: each partition's is clamped and
//! pooled with the partitions' clamped means.

use super::derived::{self, Noisy, Range};
use super::*;
use crate::mechanism::Noise;
use crate::relation::Relation;
use crate::sums::{sum_half_width, sum_half_width_at, sum_variance};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// One partition's release of a window, as the combination reads it.
#[derive(Debug, Clone, Copy)]
pub struct PartRelease<'a> {
    /// Window size (public under change-one; 0 under add-remove).
    pub n: u64,
    pub statistics: &'a [ReleasedStatistic],
    /// Its raw noisy moments, for the fleet-wide box intervals.
    pub moments: Option<RawMoments>,
}

/// A window's raw noisy measurements, unclamped: the count (add-remove;
/// change-one's is public), the centred sum `Σ(2x − L − U)` (half units), its square sum
/// (quarter units²) and the readings at the bounds, where planned. They are
/// the mechanisms' outputs the released figures were derived from, so
/// publishing them costs nothing; summed over partitions they are the
/// fleet's (with the summed noise), which a clamped figure is not.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct RawMoments {
    pub count: Option<f64>,
    pub centred_sum: Option<f64>,
    pub centred_sum_sq: Option<f64>,
    pub boundary: Option<f64>,
}

/// A fleet-wide statistic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetStatistic {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<f64>,
    pub values: Vec<f64>,
    /// `sum`, `weighted_mean` or `pooled` (variance and std: within- plus
    /// between-partition spread, when the mean is released too).
    pub combination: String,
    /// Standard deviation of the combined noise (one measurement per
    /// partition), statistic units.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub std: Option<f64>,
    /// 95% interval half-width (one measurement per partition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub half_width: Option<f64>,
}

/// Why partitions' releases cannot be combined.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CombineError {
    #[error("no partition releases to combine")]
    Empty,
    #[error("a partition's release lists {found:?}, the plan {expected:?}")]
    Statistics {
        found: Vec<String>,
        expected: Vec<String>,
    },
    #[error("a partition's {statistic} has {found} values, the plan {expected}")]
    Values {
        statistic: String,
        found: usize,
        expected: usize,
    },
}

/// What a stream's combinations reuse: the plan's statistic names in
/// release order (public; computed once), and the half-widths of sums of
/// `m` draws per (measurement, `m`) — a convolution is worth computing once
/// per stream and partition count. One per stream.
#[derive(Debug, Default)]
pub struct FleetCache {
    layout: Option<Vec<String>>,
    /// How many values each statistic has (one, or one per bin).
    shapes: Vec<usize>,
    widths: HashMap<(usize, usize), f64>,
    /// Half-widths at `1 − 0.05/k` per (measurement, `m`, `k`).
    joint: HashMap<(usize, usize, usize), f64>,
}

impl FleetCache {
    /// The exact `1 − 0.05/k` half-width of `copies` draws of a
    /// measurement's noise (`k` = 2 or 3: derived.rs's union bound).
    fn joint_width(&mut self, noise: &Noise, measurement: usize, copies: usize, k: usize) -> f64 {
        *self
            .joint
            .entry((measurement, copies, k))
            .or_insert_with(|| sum_half_width_at(noise, copies, 1.0 - 0.05 / k as f64))
    }

    fn width(&mut self, plan: &StreamPlan, measurement: usize, copies: usize) -> f64 {
        *self.widths.entry((measurement, copies)).or_insert_with(|| {
            match &plan.measurements[measurement].mechanism {
                Mechanism::Additive(n) => sum_half_width(n, copies),
                Mechanism::Select(_) => f64::NAN,
            }
        })
    }
}

/// Combine one seq's releases from `parts` (distinct partitions).
pub(super) fn combine_seq(
    stream: &StreamPlan,
    parts: &[PartRelease<'_>],
    cache: &mut FleetCache,
) -> Result<Vec<FleetStatistic>, CombineError> {
    let first = parts.first().ok_or(CombineError::Empty)?;
    let layout = cache
        .layout
        .get_or_insert_with(|| stream.describe().into_iter().map(|s| s.name).collect())
        .clone();
    for p in parts {
        if !p.statistics.iter().map(|s| &s.name).eq(layout.iter()) {
            let found = p.statistics.iter().map(|s| s.name.clone()).collect();
            return Err(CombineError::Statistics {
                found,
                expected: layout,
            });
        }
    }
    // Shapes as the plan makes them (one value, or one per histogram bin):
    // a foreign writer's record must not index past its values.
    if cache.shapes.is_empty() {
        let mid = (stream.universe.lower() + stream.universe.upper()).div_euclid(2);
        cache.shapes = stream
            .truth(&[mid])
            .iter()
            .map(|t| t.values.len())
            .collect();
    }
    for p in parts {
        for (s, &expected) in p.statistics.iter().zip(&cache.shapes) {
            if s.values.len() != expected {
                return Err(CombineError::Values {
                    statistic: s.name.clone(),
                    found: s.values.len(),
                    expected,
                });
            }
        }
    }
    let m = parts.len();
    let res = stream.universe.resolution();
    let res2 = res * res;
    let (lo_u, hi_u) = (
        stream.universe.lower() as f64,
        stream.universe.upper() as f64,
    );
    let width_u = stream.universe.width() as f64;
    let change_one = stream.neighbouring.relation == Relation::ChangeOne;
    let value = |p: &PartRelease<'_>, i: usize| p.statistics[i].values[0];
    let count_at = layout.iter().position(|s| s == "count");
    // Weights: n (public) under change-one; the released noisy count
    // under add-remove if there is one, else equal.
    let weights: Vec<f64> = parts
        .iter()
        .map(|p| match (change_one, count_at) {
            (true, _) => p.n as f64,
            (false, Some(i)) => value(p, i).max(1.0),
            (false, None) => 1.0,
        })
        .collect();
    let total: f64 = weights.iter().sum();
    let weighted = |i: usize| -> f64 {
        parts
            .iter()
            .zip(&weights)
            .map(|(p, w)| w * value(p, i))
            .sum::<f64>()
            / total
    };
    let summed = |i: usize| -> Vec<f64> {
        let len = first.statistics[i].values.len();
        (0..len)
            .map(|j| parts.iter().map(|p| p.statistics[i].values[j]).sum())
            .collect()
    };
    let boxes = fleet_boxes(stream, parts, cache);
    // (std, half-width) of Σ over partitions of measurement `idx`'s
    // noise, times `per` (a box-derived half-width below has no std).
    let mut noise_of = |idx: Option<usize>, per: f64| {
        let idx = idx?;
        let Mechanism::Additive(noise) = &stream.measurements[idx].mechanism else {
            return None;
        };
        if matches!(noise, Noise::Exact) {
            return Some((Some(0.0), 0.0));
        }
        let sd = sum_variance(noise, m).sqrt() * per;
        Some((Some(sd), cache.width(stream, idx, m) * per))
    };
    let idx = |pred: fn(&Measurement) -> bool| stream.find(pred).map(|(i, _)| i);
    let count_m = idx(|m| *m == Measurement::Count);
    let centred = idx(|m| *m == Measurement::CentredSum);
    let direct = idx(|m| *m == Measurement::Sum);
    let hist = idx(|m| matches!(m, Measurement::Histogram { .. }));
    let boundary = idx(|m| *m == Measurement::Boundary);
    let mean_at = layout.iter().position(|s| s == "mean");
    let fleet_mean = mean_at.map(weighted);
    let variance_at = layout.iter().position(|s| s == "variance");
    // Pooled variance: Σ w_p (v_p + (μ_p − μ)²) / Σ w_p, with the
    // between-partition term where the means are released.
    let pooled = |var_of: &dyn Fn(&PartRelease<'_>) -> f64| -> (f64, &'static str) {
        let between = |p: &PartRelease<'_>| match (mean_at, fleet_mean) {
            (Some(i), Some(mu)) => (value(p, i) - mu).powi(2),
            _ => 0.0,
        };
        let v = parts
            .iter()
            .zip(&weights)
            .map(|(p, w)| w * (var_of(p) + between(p)))
            .sum::<f64>()
            / total;
        let how = if mean_at.is_some() {
            "pooled"
        } else {
            "weighted_mean"
        };
        (v, how)
    };

    let mut out = Vec::with_capacity(layout.len());
    for (i, name) in layout.iter().enumerate() {
        let (values, combination, noise) = match name.as_str() {
            // Change-one: the exact window sizes.
            "count" if change_one => (summed(i), "sum", Some((Some(0.0), 0.0))),
            "count" => (summed(i), "sum", noise_of(count_m, 1.0)),
            "sum" => {
                let values = summed(i);
                let noise = match (direct, change_one) {
                    (Some(d), _) => noise_of(Some(d), res),
                    (None, true) => noise_of(centred, res / 2.0),
                    (None, false) => boxes.as_ref().and_then(|b| {
                        let r = derived::sum(b.n?, b.c?, lo_u, hi_u);
                        Some((None, r.half_width_about(values[0] / res) * res))
                    }),
                };
                (values, "sum", noise)
            }
            "histogram" => (summed(i), "sum", noise_of(hist, 1.0)),
            "mean" => {
                let v = weighted(i);
                let noise = match change_one {
                    true => noise_of(centred, res / 2.0 / total),
                    false => boxes.as_ref().and_then(|b| {
                        let r = derived::mean(b.n?, b.c?, lo_u, hi_u);
                        Some((None, r.half_width_about(v / res) * res))
                    }),
                };
                (vec![v], "weighted_mean", noise)
            }
            "clamped" => {
                let v = weighted(i);
                let noise = match change_one {
                    true => noise_of(boundary, 1.0 / total),
                    false => boxes
                        .as_ref()
                        .and_then(|b| Some((None, derived::share(b.n?, b.b?).half_width_about(v)))),
                };
                (vec![v], "weighted_mean", noise)
            }
            "variance" => {
                let (v, how) = pooled(&|p| value(p, i));
                let noise = boxes.as_ref().and_then(|b| {
                    let r = derived::variance(b.n?, b.c?, b.q?, width_u);
                    Some((None, r.half_width_about(v / res2) * res2))
                });
                (vec![v], how, noise)
            }
            "std" => {
                let (v, how) = match variance_at {
                    Some(vi) => pooled(&|p| value(p, vi)),
                    None => pooled(&|p| value(p, i).powi(2)),
                };
                let sd = v.max(0.0).sqrt();
                let noise = boxes.as_ref().and_then(|b| {
                    let r = derived::variance(b.n?, b.c?, b.q?, width_u);
                    let r = Range {
                        lo: r.lo.max(0.0).sqrt(),
                        hi: r.hi.max(0.0).sqrt(),
                    };
                    Some((None, r.half_width_about(sd / res) * res))
                });
                (vec![sd], how, noise)
            }
            _ => (vec![weighted(i)], "weighted_mean", None),
        };
        out.push(FleetStatistic {
            name: name.clone(),
            level: first.statistics[i].level,
            values,
            combination: combination.to_string(),
            // A box-derived interval states no std (not one noise's).
            std: noise.and_then(|n| n.0),
            half_width: noise.map(|n| n.1),
        });
    }
    Ok(out)
}

/// The fleet's raw moments (every part's summed) as noisy measurements of
/// the pooled window, each with its summed noise's joint half-widths, and
/// under change-one the exact `Σ n`; `None` unless every part carries its
/// moments. A moment that is not finite (a foreign writer's) counts as
/// missing.
struct Boxes {
    n: Option<Noisy>,
    c: Option<Noisy>,
    q: Option<Noisy>,
    b: Option<Noisy>,
}

fn fleet_boxes(
    stream: &StreamPlan,
    parts: &[PartRelease<'_>],
    cache: &mut FleetCache,
) -> Option<Boxes> {
    let moments: Vec<RawMoments> = parts.iter().map(|p| p.moments).collect::<Option<_>>()?;
    let m = parts.len();
    let mut noisy = |want: Measurement, field: fn(&RawMoments) -> Option<f64>| {
        let (i, plan) = stream.find(|x| *x == want)?;
        let Mechanism::Additive(noise) = &plan.mechanism else {
            return None;
        };
        let value = moments.iter().map(field).sum::<Option<f64>>()?;
        if !value.is_finite() {
            return None;
        }
        Some(Noisy {
            value,
            half_widths: [
                cache.joint_width(noise, i, m, 2),
                cache.joint_width(noise, i, m, 3),
            ],
        })
    };
    let n = match stream.neighbouring.relation {
        Relation::ChangeOne => Some(Noisy::exact(parts.iter().map(|p| p.n as f64).sum())),
        Relation::AddRemove => noisy(Measurement::Count, |x| x.count),
    };
    Some(Boxes {
        n,
        c: noisy(Measurement::CentredSum, |x| x.centred_sum),
        q: noisy(Measurement::CentredSumSq, |x| x.centred_sum_sq),
        b: noisy(Measurement::Boundary, |x| x.boundary),
    })
}
