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
use crate::sums::{sum_half_widths, sum_variance};
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
    /// The direct sum `Σx` (grid units), where planned (add-remove sums).
    #[serde(default)]
    pub sum: Option<f64>,
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
            .or_insert_with(|| sum_half_widths(noise, copies)[k - 1])
    }

    fn width(&mut self, plan: &StreamPlan, measurement: usize, copies: usize) -> f64 {
        *self.widths.entry((measurement, copies)).or_insert_with(|| {
            match &plan.measurements[measurement].mechanism {
                Mechanism::Additive(n) => sum_half_widths(n, copies)[0],
                Mechanism::Select(_) => f64::NAN,
            }
        })
    }
}

/// The plan's statistic names, once every part lists them in that order
/// with the plan's number of values each (one, or one per histogram bin):
/// a foreign writer's record must not index past its values.
fn check_parts(
    stream: &StreamPlan,
    parts: &[PartRelease<'_>],
    cache: &mut FleetCache,
) -> Result<Vec<String>, CombineError> {
    if cache.layout.is_none() {
        // Names and value counts of one evaluation (noise changes neither).
        let mid = (stream.universe.lower() + stream.universe.upper()).div_euclid(2);
        let truth = stream.truth(&[mid]);
        cache.shapes = truth.iter().map(|t| t.values.len()).collect();
        cache.layout = Some(truth.into_iter().map(|t| t.name).collect());
    }
    let layout = cache.layout.clone().unwrap_or_default();
    for p in parts {
        if !p.statistics.iter().map(|s| &s.name).eq(layout.iter()) {
            let found = p.statistics.iter().map(|s| s.name.clone()).collect();
            return Err(CombineError::Statistics {
                found,
                expected: layout,
            });
        }
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
    Ok(layout)
}

/// A statistic's combined noise: (std, 95% half-width); a box-derived
/// interval states no std (not one noise's).
type Spread = (Option<f64>, f64);

/// One seq's checked parts and their weights: `n` (public) under
/// change-one; the released noisy count under add-remove if there is one,
/// else equal.
struct Seq<'a> {
    stream: &'a StreamPlan,
    parts: &'a [PartRelease<'a>],
    layout: &'a [String],
    weights: Vec<f64>,
    total: f64,
    change_one: bool,
    boxes: Option<Boxes>,
}

impl Seq<'_> {
    fn value(p: &PartRelease<'_>, i: usize) -> f64 {
        p.statistics[i].values[0]
    }

    fn at(&self, name: &str) -> Option<usize> {
        self.layout.iter().position(|s| s == name)
    }

    fn weighted(&self, i: usize) -> f64 {
        self.parts
            .iter()
            .zip(&self.weights)
            .map(|(p, w)| w * Self::value(p, i))
            .sum::<f64>()
            / self.total
    }

    /// A total combined from the parts' raw draws of `which` (`field` of
    /// their moments), then clamped as each part's is (`(at least 0, at
    /// most 0)`), in units of `per`: the summed noise's exact interval
    /// holds for the raw sum, and the clamp keeps a true total of that sign
    /// inside it. Summing the clamped values instead was biased (the
    /// interval held in 93–94% of windows, less where counts are small).
    /// Without every part's raw draw, the released values' sum, with no
    /// interval where they were clamped.
    fn raw_total(
        &self,
        cache: &mut FleetCache,
        i: usize,
        field: fn(&RawMoments) -> Option<f64>,
        which: Measurement,
        per: f64,
        (at_least_0, at_most_0): (bool, bool),
    ) -> (Vec<f64>, &'static str, Option<Spread>) {
        let noise = |cache: &mut FleetCache| self.noise_of(cache, |m| *m == which, per);
        match self.raw(field) {
            Some(raw) => {
                let mut v = raw;
                if at_least_0 {
                    v = v.max(0.0);
                }
                if at_most_0 {
                    v = v.min(0.0);
                }
                (vec![v * per], "sum", noise(cache))
            }
            None if at_least_0 || at_most_0 => (self.summed(i), "sum", None),
            None => (self.summed(i), "sum", noise(cache)),
        }
    }

    /// The sum over every part of one raw moment; `None` unless every
    /// part carries it finite.
    fn raw(&self, field: fn(&RawMoments) -> Option<f64>) -> Option<f64> {
        let v = self
            .parts
            .iter()
            .map(|p| p.moments.as_ref().and_then(field))
            .sum::<Option<f64>>()?;
        v.is_finite().then_some(v)
    }

    fn summed(&self, i: usize) -> Vec<f64> {
        (0..self.parts[0].statistics[i].values.len())
            .map(|j| self.parts.iter().map(|p| p.statistics[i].values[j]).sum())
            .collect()
    }

    /// Pooled variance: `Σ w_p (v_p + (μ_p − μ)²) / Σ w_p`, with the
    /// between-partition term where the means are released.
    fn pooled(&self, var_of: &dyn Fn(&PartRelease<'_>) -> f64) -> (f64, &'static str) {
        let mean_at = self.at("mean");
        let fleet_mean = mean_at.map(|i| self.weighted(i));
        let between = |p: &PartRelease<'_>| match (mean_at, fleet_mean) {
            (Some(i), Some(mu)) => (Self::value(p, i) - mu).powi(2),
            _ => 0.0,
        };
        let v = self
            .parts
            .iter()
            .zip(&self.weights)
            .map(|(p, w)| w * (var_of(p) + between(p)))
            .sum::<f64>()
            / self.total;
        let how = if mean_at.is_some() {
            "pooled"
        } else {
            "weighted_mean"
        };
        (v, how)
    }

    /// The spread of Σ over partitions of the noise of the measurement
    /// `which` picks, times `per`.
    fn noise_of(
        &self,
        cache: &mut FleetCache,
        which: impl Fn(&Measurement) -> bool,
        per: f64,
    ) -> Option<Spread> {
        let (idx, plan) = self.stream.find(which)?;
        let Mechanism::Additive(noise) = &plan.mechanism else {
            return None;
        };
        if matches!(noise, Noise::Exact) {
            return Some((Some(0.0), 0.0));
        }
        let m = self.parts.len();
        let sd = sum_variance(noise, m).sqrt() * per;
        Some((Some(sd), cache.width(self.stream, idx, m) * per))
    }

    /// The box interval of `figure` (units) about `value`: `None` without
    /// every part's moments.
    fn boxed(&self, figure: &str, value: f64) -> Option<Spread> {
        let (b, u) = (self.boxes.as_ref()?, &self.stream.universe);
        let res = u.resolution();
        let (lo, hi, width) = (u.lower() as f64, u.upper() as f64, u.width() as f64);
        let half_width = match figure {
            "sum" => derived::sum(b.n?, b.c?, lo, hi).half_width_about(value / res) * res,
            "mean" => derived::mean(b.n?, b.c?, lo, hi).half_width_about(value / res) * res,
            "clamped" => derived::share(b.n?, b.b?).half_width_about(value),
            "variance" => {
                let r = derived::variance(b.n?, b.c?, b.q?, width);
                r.half_width_about(value / (res * res)) * res * res
            }
            _ => {
                let r = derived::variance(b.n?, b.c?, b.q?, width);
                let r = Range {
                    lo: r.lo.max(0.0).sqrt(),
                    hi: r.hi.max(0.0).sqrt(),
                };
                r.half_width_about(value / res) * res
            }
        };
        Some((None, half_width))
    }

    /// Statistic `i`, `name`: its values, how they were combined and their
    /// spread.
    fn statistic(
        &self,
        cache: &mut FleetCache,
        i: usize,
        name: &str,
    ) -> (Vec<f64>, &'static str, Option<Spread>) {
        let res = self.stream.universe.resolution();
        let direct = self.stream.find(|m| *m == Measurement::Sum).is_some();
        match name {
            // Change-one: the exact window sizes.
            "count" if self.change_one => (self.summed(i), "sum", Some((Some(0.0), 0.0))),
            // A partition's count (and a direct sum over a universe of one
            // sign) is released clamped, so the sum of released values is
            // biased: the fleet's is the raw draws' sum ([`Self::raw_total`]).
            "count" => self.raw_total(
                cache,
                i,
                |m| m.count,
                Measurement::Count,
                1.0,
                (true, false),
            ),
            "sum" if direct => {
                let u = &self.stream.universe;
                let clamps = (u.lower() >= 0, u.upper() <= 0);
                self.raw_total(cache, i, |m| m.sum, Measurement::Sum, res, clamps)
            }
            "sum" => {
                let values = self.summed(i);
                let noise = match (direct, self.change_one) {
                    (true, _) => self.noise_of(cache, |m| *m == Measurement::Sum, res),
                    (false, true) => {
                        self.noise_of(cache, |m| *m == Measurement::CentredSum, res / 2.0)
                    }
                    (false, false) => self.boxed("sum", values[0]),
                };
                (values, "sum", noise)
            }
            "histogram" => {
                let hist = |m: &Measurement| matches!(m, Measurement::Histogram { .. });
                (self.summed(i), "sum", self.noise_of(cache, hist, 1.0))
            }
            "mean" | "clamped" => {
                let v = self.weighted(i);
                let noise = match (self.change_one, name) {
                    (true, "mean") => self.noise_of(
                        cache,
                        |m| *m == Measurement::CentredSum,
                        res / 2.0 / self.total,
                    ),
                    (true, _) => {
                        self.noise_of(cache, |m| *m == Measurement::Boundary, 1.0 / self.total)
                    }
                    (false, _) => self.boxed(name, v),
                };
                (vec![v], "weighted_mean", noise)
            }
            "variance" => {
                let (v, how) = self.pooled(&|p| Self::value(p, i));
                (vec![v], how, self.boxed("variance", v))
            }
            "std" => {
                let (v, how) = match self.at("variance") {
                    Some(vi) => self.pooled(&|p| Self::value(p, vi)),
                    None => self.pooled(&|p| Self::value(p, i).powi(2)),
                };
                let sd = v.max(0.0).sqrt();
                (vec![sd], how, self.boxed("std", sd))
            }
            _ => (vec![self.weighted(i)], "weighted_mean", None),
        }
    }
}

/// Combine one seq's releases from `parts` (distinct partitions).
pub(super) fn combine_seq(
    stream: &StreamPlan,
    parts: &[PartRelease<'_>],
    cache: &mut FleetCache,
) -> Result<Vec<FleetStatistic>, CombineError> {
    let first = parts.first().ok_or(CombineError::Empty)?;
    let layout = check_parts(stream, parts, cache)?;
    let change_one = stream.neighbouring.relation == Relation::ChangeOne;
    let count_at = layout.iter().position(|s| s == "count");
    let weights: Vec<f64> = parts
        .iter()
        .map(|p| match (change_one, count_at) {
            (true, _) => p.n as f64,
            (false, Some(i)) => Seq::value(p, i).max(1.0),
            (false, None) => 1.0,
        })
        .collect();
    let seq = Seq {
        stream,
        parts,
        layout: &layout,
        total: weights.iter().sum(),
        weights,
        change_one,
        boxes: fleet_boxes(stream, parts, cache),
    };
    let mut out = Vec::with_capacity(layout.len());
    for (i, name) in layout.iter().enumerate() {
        let (values, combination, noise) = seq.statistic(cache, i, name);
        out.push(FleetStatistic {
            name: name.clone(),
            level: first.statistics[i].level,
            values,
            combination: combination.to_string(),
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
