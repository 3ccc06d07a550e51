//! Post-processing: a window's measurements (noisy, or exact for the
//! truth) into the published statistics, each with its metadata —
//! mechanism, sensitivity and scale in the statistic's units, spend and
//! interval.
//!
//! Privacy argument: everything here reads the noisy measurements and
//! public parameters only (the plan, and `n` where it is public: the
//! window's size under change-one), so it is post-processing and costs
//! nothing. Under add-remove the count is a noisy measurement: a figure
//! divided or scaled by it states the count's spend with its own, and
//! metadata never varies with it (it would look like data).

use super::derived::{self, Noisy};
use super::moments::Spread;
use super::*;
use crate::relation::Relation;

/// What a measurement produced for one window.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Measured {
    Scalar(i128),
    Vector(Vec<i128>),
    Choice(i64),
    /// One candidate per level, ascending (a joint selection).
    Choices(Vec<i64>),
}

/// A measurement's index and plan.
type Found<'a> = (usize, &'a MeasurementPlan);

/// One window's measurements as its statistics read them.
struct Post<'a> {
    plan: &'a StreamPlan,
    measured: &'a [Measured],
    noisy: bool,
    change_one: bool,
    /// The window's readings (change-one's public `n`).
    len: usize,
    /// The count: `n` under change-one, the noisy count under add-remove.
    n_hat: f64,
    /// The divisor of reported sensitivities and scales: `n` where it is
    /// public, else 1 (never the noisy count).
    n_public: f64,
    count: Option<Found<'a>>,
    /// `Σx` (grid units), clamped to `[nL, nU]`, and its measurement.
    sum: Option<(f64, &'a MeasurementPlan)>,
    /// Add-remove: the noisy count and centred sum for the box intervals.
    centred: Option<(Noisy, Noisy)>,
    /// The variance (grid units²), its interval, its measurements.
    variance: Option<(f64, Option<Spread>, [&'a MeasurementPlan; 2])>,
}

impl<'a> Post<'a> {
    fn new(plan: &'a StreamPlan, len: usize, measured: &'a [Measured], noisy: bool) -> Self {
        let u = &plan.universe;
        let (lo, hi) = (u.lower() as f64, u.upper() as f64);
        let change_one = plan.neighbouring.relation == Relation::ChangeOne;
        let count = plan.find(|m| *m == Measurement::Count);
        let mut post = Post {
            plan,
            measured,
            noisy,
            change_one,
            len,
            n_hat: len as f64,
            n_public: 1.0,
            count,
            sum: None,
            centred: None,
            variance: None,
        };
        if let Some((i, _)) = count {
            post.n_hat = post.scalar(i).max(1.0);
        }
        if change_one {
            post.n_public = post.n_hat;
        }
        let n_hat = post.n_hat;
        post.sum = plan.find(|m| *m == Measurement::CentredSum).map(|(i, m)| {
            // Σx = (C1 + n(L+U))/2, clamped to [nL, nU].
            let s = ((post.scalar(i) + n_hat * (lo + hi)) / 2.0).clamp(n_hat * lo, n_hat * hi);
            (s, m)
        });
        post.centred = post.with_n(plan.find(|m| *m == Measurement::CentredSum));
        post.variance = post.variance_of(plan.find(|m| *m == Measurement::CentredSumSq));
        post
    }

    fn scalar(&self, i: usize) -> f64 {
        match self.measured[i] {
            Measured::Scalar(v) => v as f64,
            _ => unreachable!("scalar measurement"),
        }
    }

    /// A noisy measurement for a box interval (`None` without noise).
    fn noisy_at(&self, (i, m): Found<'a>) -> Option<Noisy> {
        match &m.mechanism {
            Mechanism::Additive(_) if self.noisy => Some(Noisy {
                value: self.scalar(i),
                half_widths: m.joint_half_widths.map(|h| h as f64),
            }),
            _ => None,
        }
    }

    /// Add-remove: the noisy count beside `other`, for a box interval.
    fn with_n(&self, other: Option<Found<'a>>) -> Option<(Noisy, Noisy)> {
        self.count
            .filter(|_| !self.change_one)
            .and_then(|c| self.noisy_at(c))
            .zip(other.and_then(|o| self.noisy_at(o)))
    }

    /// Variance and std: with noise and a public n, with a 95% interval
    /// (moments.rs); under add-remove, the box's (derived.rs); otherwise
    /// the plain moment estimate.
    fn variance_of(
        &self,
        sum_sq: Option<Found<'a>>,
    ) -> Option<(f64, Option<Spread>, [&'a MeasurementPlan; 2])> {
        let ((s, m1), (j, m2)) = self.sum.zip(sum_sq)?;
        let u = &self.plan.universe;
        let (lo, hi, w) = (u.lower() as f64, u.upper() as f64, u.width() as f64);
        let n_hat = self.n_hat;
        let s1 = 2.0 * s - n_hat * (lo + hi); // clamped Σc, half units
        let spread = match (&m1.mechanism, &m2.mechanism) {
            (Mechanism::Additive(_), Mechanism::Additive(_)) if self.noisy && self.change_one => {
                Some(super::moments::spread(
                    s1,
                    self.scalar(j),
                    n_hat,
                    [m1, m2],
                    w,
                ))
            }
            _ => None,
        };
        let plain = {
            let mean_c = s1 / n_hat;
            ((self.scalar(j) / n_hat - mean_c * mean_c) / 4.0).clamp(0.0, w * w / 4.0)
        };
        let spread = spread.or_else(|| {
            let ((n, c), q) = self.centred.zip(self.noisy_at((j, m2)))?;
            let r = derived::variance(n, c, q, w);
            Some(Spread::new(plain, r.lo, r.hi))
        });
        Some((spread.map_or(plain, |s| s.variance), spread, [m2, m1]))
    }

    /// A measurement's exact 95% half-width in the statistic's units.
    fn hw(&self, m: &MeasurementPlan, per_unit: f64) -> Option<f64> {
        (self.noisy && matches!(m.mechanism, Mechanism::Additive(_)))
            .then_some(m.half_width as f64 * per_unit)
    }

    /// Under add-remove these statistics are post-processed with the noisy
    /// count: their stated spend includes its (the first measurement named
    /// stays the primary: mechanism, scale).
    fn with_count(&self, ms: &[&'a MeasurementPlan]) -> Vec<&'a MeasurementPlan> {
        let mut v = ms.to_vec();
        v.extend(self.count.map(|(_, m)| m));
        v
    }

    /// A statistic whose metadata is its primary measurement's `m[0]`,
    /// `per_unit` its units per measurement unit.
    fn stat(
        &self,
        name: &str,
        values: Vec<f64>,
        m: &[&MeasurementPlan],
        per_unit: f64,
        half_width: Option<f64>,
    ) -> ReleasedStatistic {
        let (plan, primary) = (self.plan, m[0]);
        ReleasedStatistic {
            name: name.to_string(),
            level: None,
            values,
            mechanism: if self.noisy {
                match &primary.mechanism {
                    Mechanism::Additive(n) => n.name().to_string(),
                    Mechanism::Select(s) => s.name().to_string(),
                }
            } else {
                "none".to_string()
            },
            sensitivity: plan.calibrated_sensitivity(primary) * per_unit,
            scale: match &primary.mechanism {
                Mechanism::Additive(n) => n.scale_f64() * per_unit,
                Mechanism::Select(s) => {
                    2.0 * plan.calibrated_sensitivity(primary) / s.epsilon_f64()
                }
            },
            spent: plan.spent_f64(m),
            half_width,
            rank_half_width: None,
        }
    }

    fn count_stat(&self) -> ReleasedStatistic {
        match self.count {
            Some((i, m)) => {
                let v = vec![self.scalar(i).max(0.0)];
                self.stat("count", v, &[m], 1.0, self.hw(m, 1.0))
            }
            None => ReleasedStatistic {
                name: "count".into(),
                level: None,
                values: vec![self.len as f64],
                mechanism: "exact".into(),
                sensitivity: 0.0,
                scale: 0.0,
                spent: 0.0,
                half_width: Some(0.0),
                rank_half_width: None,
            },
        }
    }

    fn sum_stat(&self) -> ReleasedStatistic {
        let u = &self.plan.universe;
        let (res, lo, hi) = (u.resolution(), u.lower() as f64, u.upper() as f64);
        if let Some((i, m)) = self.plan.find(|m| *m == Measurement::Sum) {
            // n is not public: only the sign of the universe bounds the sum
            // (Σx ≥ 0 when lower ≥ 0, ≤ 0 when upper ≤ 0).
            let mut v = self.scalar(i);
            if lo >= 0.0 {
                v = v.max(0.0);
            }
            if hi <= 0.0 {
                v = v.min(0.0);
            }
            return self.stat("sum", vec![v * res], &[m], res, self.hw(m, res));
        }
        let (s, m) = self.sum.expect("planned");
        let h = if self.change_one {
            self.hw(m, res / 2.0)
        } else {
            self.centred
                .map(|(n, c)| derived::sum(n, c, lo, hi).half_width_about(s) * res)
        };
        self.stat("sum", vec![s * res], &self.with_count(&[m]), res / 2.0, h)
    }

    fn mean_stat(&self) -> ReleasedStatistic {
        let u = &self.plan.universe;
        let (res, lo, hi) = (u.resolution(), u.lower() as f64, u.upper() as f64);
        let (s, m) = self.sum.expect("planned");
        // Metadata from public quantities only: under add-remove `n` is not
        // public, so the mean states the sensitivity and scale of the
        // centred sum it divides (stream units).
        let per = res / 2.0 / self.n_public;
        let h = if self.change_one {
            self.hw(m, per)
        } else {
            self.centred
                .map(|(n, c)| derived::mean(n, c, lo, hi).half_width_about(s / self.n_hat) * res)
        };
        let v = vec![s / self.n_hat * res];
        self.stat("mean", v, &self.with_count(&[m]), per, h)
    }

    /// `variance` or `std`.
    fn spread_stat(&self, name: &str) -> ReleasedStatistic {
        let res = self.plan.universe.resolution();
        let (v, spread, ms) = self.variance.expect("planned");
        let (value, h) = match name {
            "variance" => (
                v * res * res,
                spread.map(|s| s.variance_half_width() * res * res),
            ),
            _ => (v.sqrt() * res, spread.map(|s| s.std_half_width() * res)),
        };
        let per = res * res / 4.0 / self.n_public;
        self.stat(name, vec![value], &self.with_count(&ms), per, h)
    }

    fn clamped_stat(&self) -> ReleasedStatistic {
        let (i, m) = self
            .plan
            .find(|m| *m == Measurement::Boundary)
            .expect("planned");
        // A share of the window: divided by n (change-one) or the noisy
        // count (add-remove, whose spend it states).
        let share = (self.scalar(i) / self.n_hat).clamp(0.0, 1.0);
        let h = if self.change_one {
            self.hw(m, 1.0 / self.n_hat)
        } else {
            self.with_n(Some((i, m)))
                .map(|(n, b)| derived::share(n, b).half_width_about(share))
        };
        let spent = self.with_count(&[m]);
        self.stat("clamped", vec![share], &spent, 1.0 / self.n_public, h)
    }

    fn histogram_stat(&self) -> ReleasedStatistic {
        let (i, m) = self
            .plan
            .find(|m| matches!(m, Measurement::Histogram { .. }))
            .expect("planned");
        let Measured::Vector(raw) = &self.measured[i] else {
            unreachable!("histogram is a vector")
        };
        let raw: Vec<f64> = raw.iter().map(|&c| c as f64).collect();
        // Onto the window size: n (change-one), the noisy count where one
        // is measured, else the bins' own noisy total.
        let (total, spent_with) = match self.count {
            Some(_) => (self.n_hat.round(), self.with_count(&[m])),
            None if self.change_one => (self.n_hat.round(), vec![m]),
            None => (raw.iter().sum::<f64>().max(0.0).round(), vec![m]),
        };
        let counts = project_to_simplex(&raw, total);
        self.stat("histogram", counts, &spent_with, 1.0, self.hw(m, 1.0))
    }

    fn quantile_stats(&self, out: &mut Vec<ReleasedStatistic>) {
        let res = self.plan.universe.resolution();
        let mut qs: Vec<(f64, f64, &MeasurementPlan)> = self
            .plan
            .measurements
            .iter()
            .zip(self.measured.iter())
            .flat_map(|(m, v)| match (&m.measurement, v) {
                (Measurement::Quantile { level, .. }, Measured::Choice(c)) => {
                    vec![(level.as_f64(), *c as f64 * res, m)]
                }
                (Measurement::JointQuantiles { levels, .. }, Measured::Choices(cs)) => levels
                    .iter()
                    .zip(cs)
                    .map(|(l, c)| (l.as_f64(), *c as f64 * res, m))
                    .collect(),
                _ => vec![],
            })
            .collect();
        // Quantiles are monotone in the level: sorting is free, but a
        // sorted value depends on every level's selection (the lowest
        // level's is the minimum of all), so each states the joint spend of
        // all levels.
        let mut vals: Vec<f64> = qs.iter().map(|q| q.1).collect();
        vals.sort_by(f64::total_cmp);
        qs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut all: Vec<&MeasurementPlan> = qs.iter().map(|q| q.2).collect();
        all.dedup_by(|a, b| std::ptr::eq(*a, *b));
        for ((level, _, m), v) in qs.iter().zip(vals) {
            let mut s = self.stat("quantile", vec![v], &[m], 1.0, None);
            s.spent = self.plan.spent_f64(&all);
            s.level = Some(*level);
            s.rank_half_width = self.plan.rank_half_width.filter(|_| self.noisy);
            out.push(s);
        }
    }
}

/// The statistics `plan` declares from one window's `measured` values
/// (`len` readings), in declaration order.
pub(super) fn post_process(
    plan: &StreamPlan,
    len: usize,
    measured: &[Measured],
    noisy: bool,
) -> Vec<ReleasedStatistic> {
    let post = Post::new(plan, len, measured, noisy);
    let mut out = Vec::new();
    for kind in &plan.spec.statistics {
        match kind {
            StatKind::Count => out.push(post.count_stat()),
            StatKind::Sum => out.push(post.sum_stat()),
            StatKind::Mean => out.push(post.mean_stat()),
            StatKind::Variance => out.push(post.spread_stat("variance")),
            StatKind::Std => out.push(post.spread_stat("std")),
            StatKind::Clamped => out.push(post.clamped_stat()),
            StatKind::Histogram => out.push(post.histogram_stat()),
            StatKind::Quantiles => post.quantile_stats(&mut out),
        }
    }
    out
}
