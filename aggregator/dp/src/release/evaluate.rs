//! Evaluation: a window's integer values through the calibrated measurements
//! (keyed noise), then post-processing into the published statistics.
//! Everything after the noisy measurements is post-processing: free.

use super::derived::{self, Noisy};
use super::moments::Spread;
use super::*;
use crate::mechanism::Measure;
use crate::rational::{self};
use crate::relation::Relation;
use crate::rng::ReleaseKey;
use crate::stats::{self, QuantileLevel, Sensitivity};
use crate::universe::TopCoder;
use num_rational::BigRational;
use num_traits::Zero;
use rand::Rng;

/// What a measurement produced for one window.
#[derive(Debug, Clone)]
pub(super) enum Measured {
    Scalar(i128),
    Vector(Vec<i128>),
    Choice(i64),
    /// One candidate per level, ascending (a joint selection).
    Choices(Vec<i64>),
}

/// A selection's choice among `util` (noisy with a generator; without one,
/// the first of the highest utilities: the noise-free truth).
fn choose<R: Rng + ?Sized>(mechanism: &Mechanism, rng: Option<&mut R>, util: &[i128]) -> usize {
    match (mechanism, rng) {
        (Mechanism::Select(sel), Some(r)) => sel.select(r, util),
        _ => util
            .iter()
            .enumerate()
            .max_by_key(|&(i, v)| (*v, std::cmp::Reverse(i)))
            .map(|(i, _)| i)
            .expect("something to choose from"),
    }
}

impl StreamPlan {
    /// The top-coder of this stream.
    pub fn top_coder(&self) -> TopCoder {
        TopCoder::new(self.universe)
    }

    /// The first `take` measurements, with exactly the noise a whole release
    /// gives them (the draws happen in measurement order). `adaptive`, if
    /// given, replaces every quantile's declared candidates (a subset of
    /// them chosen from earlier releases: [`super::adaptive`]).
    pub(super) fn measure_first<R: Rng + ?Sized>(
        &self,
        values: &[i64],
        mut rng: Option<&mut R>,
        take: usize,
        adaptive: Option<&[i64]>,
    ) -> Vec<Measured> {
        let u = &self.universe;
        // Sorted only when a quantile is among the measurements taken.
        let sorted = self.measurements[..take]
            .iter()
            .any(|m| m.measurement.candidates().is_some())
            .then(|| {
                let mut s = values.to_vec();
                s.sort_unstable();
                s
            });
        let mut out = Vec::with_capacity(take);
        for mp in &self.measurements[..take] {
            let mut noise = |mech: &Mechanism| match (mech, rng.as_deref_mut()) {
                (Mechanism::Additive(n), Some(r)) => n.sample(r),
                _ => 0,
            };
            let m = match &mp.measurement {
                Measurement::Count => Measured::Scalar(values.len() as i128 + noise(&mp.mechanism)),
                Measurement::CentredSum => {
                    Measured::Scalar(stats::centred_sum(values, u) + noise(&mp.mechanism))
                }
                Measurement::Sum => Measured::Scalar(stats::sum(values) + noise(&mp.mechanism)),
                Measurement::Boundary => {
                    Measured::Scalar(stats::boundary_count(values, u) + noise(&mp.mechanism))
                }
                Measurement::CentredSumSq => {
                    Measured::Scalar(stats::centred_sum_sq(values, u) + noise(&mp.mechanism))
                }
                Measurement::Histogram { edges } => Measured::Vector(
                    stats::histogram(values, edges)
                        .into_iter()
                        .map(|c| c as i128 + noise(&mp.mechanism))
                        .collect(),
                ),
                Measurement::Quantile { level, candidates } => {
                    let candidates = adaptive.unwrap_or(candidates);
                    let util = stats::quantile_utilities(
                        sorted.as_deref().expect("sorted for quantiles"),
                        candidates,
                        *level,
                    );
                    let idx = choose(&mp.mechanism, rng.as_deref_mut(), &util);
                    Measured::Choice(candidates[idx])
                }
                Measurement::JointQuantiles { levels, candidates } => {
                    let candidates =
                        crate::joint::fit(adaptive.unwrap_or(candidates), levels.len());
                    let nums: Vec<i64> = levels.iter().map(|l| l.num).collect();
                    let util = crate::joint::utilities(
                        sorted.as_deref().expect("sorted for quantiles"),
                        &candidates,
                        &nums,
                        QuantileLevel::DEN,
                    );
                    let idx = choose(&mp.mechanism, rng.as_deref_mut(), &util);
                    let tuple = crate::joint::tuple_at(candidates.len(), levels.len(), idx);
                    Measured::Choices(tuple.into_iter().map(|i| candidates[i]).collect())
                }
            };
            out.push(m);
        }
        out
    }

    fn spent_f64(&self, ms: &[&MeasurementPlan]) -> f64 {
        let total: BigRational = ms.iter().map(|m| m.spent.clone()).sum();
        rational::to_f64(&total)
    }

    pub(super) fn find(
        &self,
        pred: impl Fn(&Measurement) -> bool,
    ) -> Option<(usize, &MeasurementPlan)> {
        self.measurements
            .iter()
            .enumerate()
            .find(|(_, m)| pred(&m.measurement))
    }

    /// Calibrated sensitivity (L1 pure / L2 zCDP) of a measurement, as f64.
    fn calibrated_sensitivity(&self, m: &MeasurementPlan) -> f64 {
        match self.measure {
            Measure::Pure => m.sensitivity.l1_f64(),
            Measure::Zcdp => m.sensitivity.l2_f64(),
        }
    }

    pub(super) fn evaluate<R: Rng + ?Sized>(
        &self,
        values: &[i64],
        rng: Option<&mut R>,
        adaptive: Option<&[i64]>,
    ) -> Vec<ReleasedStatistic> {
        let noisy = rng.is_some();
        if noisy && self.neighbouring.size_is_public() {
            assert_eq!(
                values.len() as u64,
                self.spec.window_size,
                "a window holds exactly n values"
            );
        }
        let measured = self.measure_first(values, rng, self.measurements.len(), adaptive);
        self.post_process(values, &measured, noisy)
    }

    /// Every statistic from the measurements (noisy or not) and public
    /// parameters only: the post-processing that costs nothing more.
    /// `values` is read for its length under change-one (public `n`).
    pub(super) fn post_process<'a>(
        &'a self,
        values: &[i64],
        measured: &[Measured],
        noisy: bool,
    ) -> Vec<ReleasedStatistic> {
        let u = &self.universe;
        let res = u.resolution();
        let (lo, hi) = (u.lower() as f64, u.upper() as f64);
        let change_one = self.neighbouring.relation == Relation::ChangeOne;
        let scalar = |i: usize| match measured[i] {
            Measured::Scalar(v) => v as f64,
            _ => unreachable!("scalar measurement"),
        };
        let hw = |m: &MeasurementPlan, per_unit: f64| {
            (noisy && matches!(m.mechanism, Mechanism::Additive(_)))
                .then_some(m.half_width as f64 * per_unit)
        };
        let stat =
            |name: &str, values: Vec<f64>, m: &[&MeasurementPlan], per_unit: f64, half_width| {
                let primary = m[0];
                ReleasedStatistic {
                    name: name.to_string(),
                    level: None,
                    values,
                    mechanism: if noisy {
                        match &primary.mechanism {
                            Mechanism::Additive(n) => n.name().to_string(),
                            Mechanism::Select(s) => s.name().to_string(),
                        }
                    } else {
                        "none".to_string()
                    },
                    sensitivity: self.calibrated_sensitivity(primary) * per_unit,
                    scale: match &primary.mechanism {
                        Mechanism::Additive(n) => n.scale_f64() * per_unit,
                        Mechanism::Select(s) => {
                            2.0 * self.calibrated_sensitivity(primary) / s.epsilon_f64()
                        }
                    },
                    spent: self.spent_f64(m),
                    half_width,
                    rank_half_width: None,
                }
            };

        // Window size: public under change-one, noisy under add-remove.
        let count = self.find(|m| *m == Measurement::Count);
        let n_hat = match count {
            Some((i, _)) => scalar(i).max(1.0),
            None => values.len() as f64,
        };
        // The divisor of reported sensitivities and scales: `n` where it is
        // public, else 1 (never the noisy count: metadata that varied with
        // it would look like data).
        let n_public = if change_one { n_hat } else { 1.0 };
        let sum = self.find(|m| *m == Measurement::CentredSum).map(|(i, m)| {
            // Σx = (C1 + n(L+U))/2, clamped to [nL, nU].
            let s = ((scalar(i) + n_hat * (lo + hi)) / 2.0).clamp(n_hat * lo, n_hat * hi);
            (s, m)
        });
        let sum_sq = self.find(|m| *m == Measurement::CentredSumSq);
        // Under add-remove, intervals of figures derived with the noisy
        // count come from the box of their measurements (derived.rs).
        let noisy_at = |(i, m): (usize, &'a MeasurementPlan)| match &m.mechanism {
            Mechanism::Additive(_) if noisy => Some(Noisy {
                value: scalar(i),
                half_widths: m.joint_half_widths.map(|h| h as f64),
            }),
            _ => None,
        };
        let with_n = |other: Option<(usize, &'a MeasurementPlan)>| {
            count
                .filter(|_| !change_one)
                .and_then(noisy_at)
                .zip(other.and_then(noisy_at))
        };
        let centred = with_n(self.find(|m| *m == Measurement::CentredSum));
        let direct_sum = self.find(|m| *m == Measurement::Sum);
        // Variance and std: with noise and a public n, bias-corrected with a
        // 95% interval (moments.rs); otherwise the plain moment estimate.
        let variance = sum.zip(sum_sq).map(|((s, m1), (j, m2))| {
            let s1 = 2.0 * s - n_hat * (lo + hi); // clamped Σc, half units
            let w = u.width() as f64;
            let spread = match (&m1.mechanism, &m2.mechanism) {
                (Mechanism::Additive(_), Mechanism::Additive(_)) if noisy && change_one => {
                    Some(super::moments::spread(s1, scalar(j), n_hat, [m1, m2], w))
                }
                _ => None,
            };
            let plain = {
                let mean_c = s1 / n_hat;
                ((scalar(j) / n_hat - mean_c * mean_c) / 4.0).clamp(0.0, w * w / 4.0)
            };
            let spread = spread.or_else(|| {
                let ((n, c), q) = centred.zip(noisy_at((j, m2)))?;
                let r = derived::variance(n, c, q, w);
                Some(Spread::new(plain, r.lo, r.hi))
            });
            (spread.map_or(plain, |s| s.variance), spread, [m2, m1])
        });

        // Under add-remove these statistics are post-processed with the
        // noisy count: their stated spend includes its (the first
        // measurement named stays the primary: mechanism, scale).
        let count_plan: Option<&MeasurementPlan> = count.map(|(_, m)| m);
        fn joined<'a>(
            ms: &[&'a MeasurementPlan],
            count: Option<&'a MeasurementPlan>,
        ) -> Vec<&'a MeasurementPlan> {
            let mut v = ms.to_vec();
            v.extend(count);
            v
        }
        let with_count = |ms: &[&'a MeasurementPlan]| joined(ms, count_plan);
        let mut out = Vec::new();
        for kind in &self.spec.statistics {
            match kind {
                StatKind::Count => match count {
                    Some((i, m)) => out.push(stat(
                        "count",
                        vec![scalar(i).max(0.0)],
                        &[m],
                        1.0,
                        hw(m, 1.0),
                    )),
                    None => out.push(ReleasedStatistic {
                        name: "count".into(),
                        level: None,
                        values: vec![values.len() as f64],
                        mechanism: "exact".into(),
                        sensitivity: 0.0,
                        scale: 0.0,
                        spent: 0.0,
                        half_width: Some(0.0),
                        rank_half_width: None,
                    }),
                },
                StatKind::Sum if direct_sum.is_some() => {
                    let (i, m) = direct_sum.expect("matched");
                    // n is not public: only the sign of the universe bounds
                    // the sum (Σx ≥ 0 when lower ≥ 0, ≤ 0 when upper ≤ 0).
                    let mut v = scalar(i);
                    if lo >= 0.0 {
                        v = v.max(0.0);
                    }
                    if hi <= 0.0 {
                        v = v.min(0.0);
                    }
                    out.push(stat("sum", vec![v * res], &[m], res, hw(m, res)));
                }
                StatKind::Sum => {
                    let (s, m) = sum.expect("planned");
                    let h = if change_one {
                        hw(m, res / 2.0)
                    } else {
                        centred.map(|(n, c)| derived::sum(n, c, lo, hi).half_width_about(s) * res)
                    };
                    out.push(stat("sum", vec![s * res], &with_count(&[m]), res / 2.0, h));
                }
                StatKind::Mean => {
                    let (s, m) = sum.expect("planned");
                    // Metadata from public quantities only: under add-remove
                    // `n` is not public, so the mean states the sensitivity
                    // and scale of the centred sum it divides (stream units).
                    let per = res / 2.0 / n_public;
                    let h = if change_one {
                        hw(m, per)
                    } else {
                        centred.map(|(n, c)| {
                            derived::mean(n, c, lo, hi).half_width_about(s / n_hat) * res
                        })
                    };
                    out.push(stat(
                        "mean",
                        vec![s / n_hat * res],
                        &with_count(&[m]),
                        per,
                        h,
                    ));
                }
                StatKind::Variance => {
                    let (v, spread, ms) = variance.expect("planned");
                    out.push(stat(
                        "variance",
                        vec![v * res * res],
                        &with_count(&ms),
                        res * res / 4.0 / n_public,
                        spread.map(|s| s.variance_half_width() * res * res),
                    ));
                }
                StatKind::Std => {
                    let (v, spread, ms) = variance.expect("planned");
                    out.push(stat(
                        "std",
                        vec![v.sqrt() * res],
                        &with_count(&ms),
                        res * res / 4.0 / n_public,
                        spread.map(|s| s.std_half_width() * res),
                    ));
                }
                StatKind::Clamped => {
                    let (i, m) = self.find(|m| *m == Measurement::Boundary).expect("planned");
                    // A share of the window: divided by n (change-one) or
                    // the noisy count (add-remove, whose spend it states).
                    let share = (scalar(i) / n_hat).clamp(0.0, 1.0);
                    let h = if change_one {
                        hw(m, 1.0 / n_hat)
                    } else {
                        with_n(Some((i, m)))
                            .map(|(n, b)| derived::share(n, b).half_width_about(share))
                    };
                    out.push(stat(
                        "clamped",
                        vec![share],
                        &with_count(&[m]),
                        1.0 / n_public,
                        h,
                    ));
                }
                StatKind::Histogram => {
                    let (i, m) = self
                        .find(|m| matches!(m, Measurement::Histogram { .. }))
                        .expect("planned");
                    let Measured::Vector(raw) = &measured[i] else {
                        unreachable!("histogram is a vector")
                    };
                    let raw: Vec<f64> = raw.iter().map(|&c| c as f64).collect();
                    // Onto the window size: n (change-one), the noisy count
                    // where one is measured, else the bins' own noisy total.
                    let (total, spent_with) = match count {
                        Some(_) => (n_hat.round(), with_count(&[m])),
                        None if change_one => (n_hat.round(), vec![m]),
                        None => (raw.iter().sum::<f64>().max(0.0).round(), vec![m]),
                    };
                    let counts = project_to_simplex(&raw, total);
                    out.push(stat("histogram", counts, &spent_with, 1.0, hw(m, 1.0)));
                }
                StatKind::Quantiles => {
                    let mut qs: Vec<(f64, f64, &MeasurementPlan)> = self
                        .measurements
                        .iter()
                        .zip(measured.iter())
                        .flat_map(|(m, v)| match (&m.measurement, v) {
                            (Measurement::Quantile { level, .. }, Measured::Choice(c)) => {
                                vec![(level.as_f64(), *c as f64 * res, m)]
                            }
                            (Measurement::JointQuantiles { levels, .. }, Measured::Choices(cs)) => {
                                levels
                                    .iter()
                                    .zip(cs)
                                    .map(|(l, c)| (l.as_f64(), *c as f64 * res, m))
                                    .collect()
                            }
                            _ => vec![],
                        })
                        .collect();
                    // Quantiles are monotone in the level: sorting is free,
                    // but a sorted value depends on every level's selection
                    // (the lowest level's is the minimum of all), so each
                    // states the joint spend of all levels.
                    let mut vals: Vec<f64> = qs.iter().map(|q| q.1).collect();
                    vals.sort_by(f64::total_cmp);
                    qs.sort_by(|a, b| a.0.total_cmp(&b.0));
                    let mut all: Vec<&MeasurementPlan> = qs.iter().map(|q| q.2).collect();
                    all.dedup_by(|a, b| std::ptr::eq(*a, *b));
                    for ((level, _, m), v) in qs.iter().zip(vals) {
                        let mut s = stat("quantile", vec![v], &[m], 1.0, None);
                        s.spent = self.spent_f64(&all);
                        s.level = Some(*level);
                        s.rank_half_width = self.rank_half_width.filter(|_| noisy);
                        out.push(s);
                    }
                }
            }
        }
        out
    }

    /// Release a window with noise from `rng`.
    pub fn release_with<R: Rng + ?Sized>(
        &self,
        values: &[i64],
        rng: &mut R,
    ) -> Vec<ReleasedStatistic> {
        self.evaluate(values, Some(rng), None)
    }

    /// Release a window with the keyed noise of docs/DESIGN.md §5: the same key,
    /// window and values always give the same bits. Quantiles use the
    /// declared candidates (a lane's first window); later windows of a
    /// stream with adaptive candidates use [`Self::release_after`].
    pub fn release(
        &self,
        key: &ReleaseKey,
        partition: i32,
        seq: u64,
        values: &[i64],
    ) -> Vec<ReleasedStatistic> {
        self.release_after(key, partition, seq, values, &QuantileTrack::default())
    }

    /// ε or ρ one device can spend per horizon on this stream: `W` windows'
    /// statistics plus the running totals, in each of its `G` groups (a
    /// group's plan states its declared stream's cost).
    pub fn per_horizon(&self) -> BigRational {
        let g = self.group.as_ref().map_or(1, |g| g.max_groups_per_device);
        (&self.per_window * BigRational::from_integer(self.spec.max_windows_per_device.into())
            + self
                .running
                .as_ref()
                .map_or_else(BigRational::zero, |r| r.spent()))
            * BigRational::from_integer(g.into())
            + self
                .selection
                .as_ref()
                .map_or_else(BigRational::zero, |s| s.spent.clone())
    }

    /// The declared stream's name (a group's stream, not the group's).
    pub fn declared_name(&self) -> &str {
        self.group
            .as_ref()
            .map_or(self.spec.name.as_str(), |g| g.base.as_str())
    }

    pub(super) fn histogram_edges_units(&self) -> Vec<i64> {
        self.measurements
            .iter()
            .find_map(|m| match &m.measurement {
                Measurement::Histogram { edges } => Some(edges.clone()),
                _ => None,
            })
            .expect("a running histogram needs the histogram measurement")
    }

    /// Combine one seq's releases from `parts` (distinct partitions) into
    /// fleet-wide statistics (`fleet.rs`: post-processing, free).
    pub fn combine(
        &self,
        parts: &[PartRelease<'_>],
        cache: &mut FleetCache,
    ) -> Result<Vec<FleetStatistic>, CombineError> {
        fleet::combine_seq(self, parts, cache)
    }

    /// Every statistic's metadata (mechanism, sensitivity, scale, spend,
    /// half-width) with no values: it depends on public parameters only, so
    /// it is computed by releasing a window of midpoints with a fixed seed
    /// and dropping the values.
    pub fn describe(&self) -> Vec<ReleasedStatistic> {
        use rand::SeedableRng;
        let mid = (self.universe.lower() + self.universe.upper()).div_euclid(2);
        let values = vec![mid; self.spec.window_size.max(1) as usize];
        let mut out = self.evaluate(
            &values,
            Some(&mut rand_chacha::ChaCha20Rng::seed_from_u64(0)),
            None,
        );
        // Under add-remove a figure derived with the noisy count has an
        // interval that depends on the window (derived.rs): none to state.
        let derived = self.neighbouring.relation == Relation::AddRemove
            && self.find(|m| *m == Measurement::Count).is_some();
        for s in &mut out {
            s.values.clear();
            if derived && ["sum", "mean", "variance", "std", "clamped"].contains(&s.name.as_str()) {
                s.half_width = None;
            }
            // Adaptive candidates keep a rank interval in a lane's first
            // window only (window.rs): none to state.
            if self.spec.adaptive_quantiles {
                s.rank_half_width = None;
            }
        }
        out
    }

    /// Every measurement of a window without noise, as integers (a
    /// quantile level gives its utility per candidate): what the
    /// stream-level privacy check compares between neighbouring streams.
    /// Never publish these.
    pub fn exact_measurements(&self, values: &[i64]) -> Vec<Vec<i128>> {
        let mut sorted = values.to_vec();
        sorted.sort_unstable();
        self.measurements
            .iter()
            .map(|mp| match &mp.measurement {
                Measurement::Count => vec![values.len() as i128],
                Measurement::CentredSum => vec![stats::centred_sum(values, &self.universe)],
                Measurement::Sum => vec![stats::sum(values)],
                Measurement::Boundary => vec![stats::boundary_count(values, &self.universe)],
                Measurement::CentredSumSq => vec![stats::centred_sum_sq(values, &self.universe)],
                Measurement::Histogram { edges } => stats::histogram(values, edges)
                    .into_iter()
                    .map(i128::from)
                    .collect(),
                Measurement::Quantile { level, candidates } => {
                    stats::quantile_utilities(&sorted, candidates, *level)
                }
                Measurement::JointQuantiles { levels, candidates } => {
                    let nums: Vec<i64> = levels.iter().map(|l| l.num).collect();
                    let candidates = crate::joint::fit(candidates, levels.len());
                    crate::joint::utilities(&sorted, &candidates, &nums, QuantileLevel::DEN)
                }
            })
            .collect()
    }

    /// The sensitivity a measurement is calibrated to, in the units of
    /// [`StreamPlan::exact_measurements`] (quantile utilities are scaled by
    /// their level's denominator).
    pub fn calibrated_to(&self, i: usize) -> Sensitivity {
        let m = &self.measurements[i];
        match &m.measurement {
            Measurement::Quantile { level, .. } => Sensitivity::scalar(BigRational::from_integer(
                level.utility_sensitivity(self.neighbouring).into(),
            )),
            Measurement::JointQuantiles { .. } => Sensitivity::scalar(BigRational::from_integer(
                joint_utility_sensitivity(self.neighbouring).into(),
            )),
            _ => m.sensitivity.clone(),
        }
    }

    /// The same statistics without noise (the demo's "true value" and the
    /// benchmark's baseline). Never publish these.
    pub fn truth(&self, values: &[i64]) -> Vec<ReleasedStatistic> {
        self.evaluate::<rand_chacha::ChaCha20Rng>(values, None, None)
    }
}
