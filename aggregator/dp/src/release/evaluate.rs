//! Evaluation: a window's integer values through the calibrated measurements
//! (keyed noise), then post-processing into the published statistics
//! (`post.rs`). Everything after the noisy measurements is post-processing:
//! free.

use super::post::Measured;
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

/// Add noise to each value of an additive measurement, in order.
fn add_noise(m: &mut Measured, mut draw: impl FnMut() -> i128) {
    match m {
        Measured::Scalar(x) => *x += draw(),
        Measured::Vector(xs) => xs.iter_mut().for_each(|x| *x += draw()),
        Measured::Choice(_) | Measured::Choices(_) => unreachable!("selections are not additive"),
    }
}

impl StreamPlan {
    /// The top-coder of this stream.
    pub fn top_coder(&self) -> TopCoder {
        TopCoder::new(self.universe)
    }

    /// The measurements in `range`, with exactly the noise a whole release
    /// gives them when the range starts at 0 or the draws before it were
    /// drawn apart ([`Self::draw_first`]): the draws happen in measurement
    /// order. `adaptive`, if
    /// given, is the favoured subset of the declared candidates chosen from
    /// earlier releases ([`super::adaptive`]): a quantile's prior, joint
    /// quantiles' candidates.
    pub(super) fn measure_first<R: Rng + ?Sized>(
        &self,
        values: &[i64],
        mut rng: Option<&mut R>,
        range: std::ops::Range<usize>,
        adaptive: Option<&[i64]>,
    ) -> Vec<Measured> {
        let taken = &self.measurements[range];
        // Sorted only when a quantile is among the measurements taken.
        let sorted = taken
            .iter()
            .any(|m| m.measurement.candidates().is_some())
            .then(|| stats::sorted(values));
        let mut out = Vec::with_capacity(taken.len());
        for mp in taken {
            let m = match &mp.measurement {
                Measurement::Quantile { level, candidates } => {
                    let mut util = stats::quantile_utilities(
                        sorted.as_deref().expect("sorted for quantiles"),
                        candidates,
                        *level,
                    );
                    if let (Some(favoured), Mechanism::Select(sel)) = (adaptive, &mp.mechanism) {
                        super::adaptive::apply_prior(&mut util, candidates, favoured, sel);
                    }
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
                additive => {
                    let mut m = self.exact_value(additive, values);
                    if let (Mechanism::Additive(noise), Some(r)) =
                        (&mp.mechanism, rng.as_deref_mut())
                    {
                        add_noise(&mut m, || noise.sample(r));
                    }
                    m
                }
            };
            out.push(m);
        }
        out
    }

    /// An additive measurement of `values`, exactly (no noise).
    fn exact_value(&self, m: &Measurement, values: &[i64]) -> Measured {
        let u = &self.universe;
        match m {
            Measurement::Count => Measured::Scalar(values.len() as i128),
            Measurement::CentredSum => Measured::Scalar(stats::centred_sum(values, u)),
            Measurement::Sum => Measured::Scalar(stats::sum(values)),
            Measurement::Boundary => Measured::Scalar(stats::boundary_count(values, u)),
            Measurement::CentredSumSq => Measured::Scalar(stats::centred_sum_sq(values, u)),
            Measurement::Histogram { edges } => Measured::Vector(
                stats::histogram(values, edges)
                    .into_iter()
                    .map(i128::from)
                    .collect(),
            ),
            Measurement::Quantile { .. } | Measurement::JointQuantiles { .. } => {
                unreachable!("selections are not additive")
            }
        }
    }

    /// Draw the noise of the first `take` measurements (additive ones:
    /// one draw per value, in order) exactly as [`Self::measure_first`]
    /// draws it, without measuring anything: the measurements after them
    /// get the same draws as in a whole release, and
    /// [`Self::measure_drawn`] adds these.
    pub(super) fn draw_first<R: Rng + ?Sized>(&self, rng: &mut R, take: usize) -> Vec<i128> {
        let mut draws = Vec::new();
        for mp in &self.measurements[..take] {
            let Mechanism::Additive(noise) = &mp.mechanism else {
                unreachable!("selections are measured last")
            };
            let count = match &mp.measurement {
                Measurement::Histogram { edges } => edges.len() - 1,
                _ => 1,
            };
            draws.extend((0..count).map(|_| noise.sample(rng)));
        }
        draws
    }

    /// The first measurements (additive ones, as many as `draws` covers)
    /// with the noise [`Self::draw_first`] drew: what
    /// [`Self::measure_first`] gives them from the same generator.
    pub(super) fn measure_drawn(
        &self,
        values: &[i64],
        take: usize,
        draws: &[i128],
    ) -> Vec<Measured> {
        let mut draws = draws.iter().copied();
        self.measurements[..take]
            .iter()
            .map(|mp| {
                let mut m = self.exact_value(&mp.measurement, values);
                add_noise(&mut m, || draws.next().expect("a draw per value"));
                m
            })
            .collect()
    }

    pub(super) fn spent_f64(&self, ms: &[&MeasurementPlan]) -> f64 {
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
    pub(super) fn calibrated_sensitivity(&self, m: &MeasurementPlan) -> f64 {
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
        self.evaluate_measured(values, rng, adaptive).0
    }

    /// [`Self::evaluate`], and the measurements it was derived from.
    pub(super) fn evaluate_measured<R: Rng + ?Sized>(
        &self,
        values: &[i64],
        rng: Option<&mut R>,
        adaptive: Option<&[i64]>,
    ) -> (Vec<ReleasedStatistic>, Vec<Measured>) {
        let noisy = rng.is_some();
        if noisy && self.neighbouring.size_is_public() {
            assert_eq!(
                values.len() as u64,
                self.spec.window_size,
                "a window holds exactly n values"
            );
        }
        let measured = self.measure_first(values, rng, 0..self.measurements.len(), adaptive);
        (self.post_process(values, &measured, noisy), measured)
    }

    /// Every statistic from the measurements (noisy or not) and public
    /// parameters only: the post-processing that costs nothing more.
    /// `values` is read for its length under change-one (public `n`).
    pub(super) fn post_process(
        &self,
        values: &[i64],
        measured: &[Measured],
        noisy: bool,
    ) -> Vec<ReleasedStatistic> {
        super::post::post_process(self, values.len(), measured, noisy)
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
    /// window and values always give the same bits. Quantiles are selected
    /// as in a lane's first window (with adaptive quantiles, the escape
    /// grid favoured); later windows use [`Self::release_after`].
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
    /// statistics plus the running totals and the device-limit alarm, in
    /// each of its `G` groups (a group's plan states its declared stream's
    /// cost), plus the key selection: [`Self::horizon_parts`] with `W`
    /// windows joined.
    pub fn per_horizon(&self) -> BigRational {
        let (fixed, step) = self.horizon_parts();
        fixed + step * BigRational::from_integer(self.spec.max_windows_per_device.into())
    }

    /// What a device's horizon on this stream costs, in two parts: the
    /// charges it pays whatever it joins (running totals and the alarm in
    /// each of `G` groups, the key selection), and each window it joins
    /// (its statistics in each of `G` groups), up to `W`.
    pub fn horizon_parts(&self) -> (BigRational, BigRational) {
        let g = BigRational::from_integer(
            self.group
                .as_ref()
                .map_or(1, |g| g.max_groups_per_device)
                .into(),
        );
        let selection = self.selection.as_ref().map(|s| s.spent.clone());
        let fixed = self.fixed_per_group() * &g + selection.unwrap_or_else(BigRational::zero);
        (fixed, &self.per_window * g)
    }

    /// What a device pays per horizon in each group's lane whatever it
    /// joins: the running totals and the device-limit alarm.
    pub(super) fn fixed_per_group(&self) -> BigRational {
        let spent = |x: Option<BigRational>| x.unwrap_or_else(BigRational::zero);
        spent(self.running.as_ref().map(|r| r.spent()))
            + spent(self.alarm.as_ref().map(|a| a.spent.clone()))
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
        }
        out
    }

    /// Every measurement of a window without noise, as integers (a
    /// quantile level gives its utility per candidate): what the
    /// stream-level privacy check compares between neighbouring streams.
    /// Never publish these.
    pub fn exact_measurements(&self, values: &[i64]) -> Vec<Vec<i128>> {
        let sorted = stats::sorted(values);
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
