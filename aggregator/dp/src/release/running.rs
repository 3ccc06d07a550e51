//! Running totals as a window's release carries them: the stream's running
//! sum (and histogram) after each window, beside the sum of the windows'
//! own released sums (and noisy bins) and the inverse-variance combination
//! of the two.
//!
//! Under add-remove the running count is not public: it is a noisy total
//! of its own (`count`), the totals' `count` field is 0, and no summed
//! windows sit beside the running sum (a window's sum estimate needs its
//! size).
//!
//! Privacy argument: the running totals' noise is calibrated in
//! [`crate::continual`] to each window's effect ([`running_plan`]: change-one moves
//! `k` readings across the range, add-remove adds or removes `k` readings
//! of at most the largest |bound| each, one count each); the window sums are the window's released sums and
//! its bins the histogram measurement behind its released histogram, both
//! recomputed with the window's own keyed draws (the same bits as its
//! release); adding them up and combining are post-processing of noisy
//! measurements already paid for, so nothing here spends budget.

use super::*;
use crate::continual::{RunningGroup, RunningPlan, RunningState};
use crate::mechanism::Measure;
use crate::rational;
use crate::rational::exact;
use crate::relation::Relation;
use crate::rng::{running_rng, window_digest, window_rng, ReleaseKey, WindowId};
use crate::stats;
use crate::universe::Universe;
use num_rational::BigRational;
use rand::Rng;

/// A running total after one window (metric units).
#[derive(Debug, Clone, PartialEq)]
pub struct RunningValue {
    pub name: &'static str,
    pub windows: u64,
    pub count: u64,
    pub values: Vec<f64>,
    pub std: f64,
    pub mechanism: &'static str,
    pub spent: f64,
    /// The sum of the windows' released estimates so far and its noise
    /// std (the `sum` total of a stream that releases a per-window sum).
    pub summed: Option<(f64, f64)>,
    /// The inverse-variance combination of `values` and `summed` and its
    /// std: never less accurate than either (post-processing, free).
    pub combined: Option<(f64, f64)>,
    /// The `histogram` total's counterparts: the sum of the windows' noisy
    /// bins (as measured, before the release projects them) and the
    /// combination, each with its per-bin std.
    pub summed_bins: Option<(Vec<f64>, f64)>,
    pub combined_bins: Option<(Vec<f64>, f64)>,
}

/// Advance this lane's running totals by window `seq` (noise keyed like
/// the window's, in its own domain); `None` without running totals or
/// past a pure-DP tree's lifetime.
pub(super) fn running_step(
    stream: &StreamPlan,
    key: &ReleaseKey,
    partition: i32,
    seq: u64,
    values: &[i64],
    state: &mut RunningState,
) -> Option<Vec<RunningValue>> {
    let plan = stream.running.as_ref()?;
    let change_one = stream.neighbouring.relation == Relation::ChangeOne;
    let has_bins = plan.groups.iter().any(|g| g.name == "histogram");
    // The window's own totals, one per running total.
    let window: Vec<Vec<i128>> = plan
        .groups
        .iter()
        .map(|g| window_total(stream, g.name, values))
        .collect();
    let digest = window_digest(values);
    let id = WindowId {
        stream: &stream.spec.name,
        partition,
        seq,
    };
    // The window's released sum (the same keyed draws as its release),
    // summed over the windows so far: a second estimate of the sum
    // total, combined with the running total below.
    let (window_sum, window_bins) =
        window_estimates(stream, values, &mut window_rng(key, id, &digest), has_bins);
    // Under add-remove a window's sum estimate needs its size, which is not
    // public there: no summed windows beside the running sum.
    let window_sum = window_sum.filter(|_| change_one);
    let noisy = plan.step(state, &window, &mut running_rng(key, id, &digest))?;
    let t = state.steps;
    let res = plan.resolution;
    let summed = window_sum.map(|(s, var)| {
        state.summed += s;
        (state.summed * res, (t as f64 * var).sqrt() * res)
    });
    let summed_bins = window_bins.and_then(|bins| add_bins(state, bins));
    let total = |(g, v): (&RunningGroup, Vec<f64>)| {
        let totals = Totals {
            resolution: res,
            windows: t,
            count: if change_one {
                t * stream.spec.window_size
            } else {
                0
            },
            summed,
            summed_bins: summed_bins.clone(),
        };
        running_value(g, v, totals)
    };
    Some(plan.groups.iter().zip(noisy).map(total).collect())
}

/// A window's own total for the running total `name`: its sum (grid
/// units), its count, or its histogram's bins.
fn window_total(stream: &StreamPlan, name: &str, values: &[i64]) -> Vec<i128> {
    match name {
        "sum" => vec![stats::sum(values)],
        "count" => vec![values.len() as i128],
        _ => stats::histogram(values, &stream.histogram_edges_units())
            .into_iter()
            .map(|c| c as i128)
            .collect(),
    }
}

/// Add a window's noisy bins (and their noise variance) to the summed
/// bins: their sum and std, only while every window so far was summed (a
/// state written by a version without bins starts them late: never
/// published then).
fn add_bins(state: &mut RunningState, (bins, var): (Vec<f64>, f64)) -> Option<(Vec<f64>, f64)> {
    if state.summed_bins.is_empty() && state.summed_bins_steps == 0 {
        state.summed_bins = vec![0.0; bins.len()];
    }
    if state.summed_bins.len() != bins.len() {
        return None;
    }
    state
        .summed_bins
        .iter_mut()
        .zip(&bins)
        .for_each(|(s, b)| *s += b);
    state.summed_bins_steps += 1;
    let t = state.steps;
    (state.summed_bins_steps == t).then(|| (state.summed_bins.clone(), (t as f64 * var).sqrt()))
}

/// What every running total of a window shares: its number of windows,
/// the public count (change-one), the summed windows' sum and bins.
struct Totals {
    resolution: f64,
    windows: u64,
    count: u64,
    summed: Option<(f64, f64)>,
    summed_bins: Option<(Vec<f64>, f64)>,
}

/// One running total `g` after a window: its noisy values `v` (grid units
/// for the sum), with the summed windows' estimate and the combination
/// where it has one.
fn running_value(g: &RunningGroup, v: Vec<f64>, t: Totals) -> RunningValue {
    let scale = if g.name == "sum" { t.resolution } else { 1.0 };
    let values: Vec<f64> = v.into_iter().map(|x| x * scale).collect();
    let std = g.noise.std_after(t.windows).unwrap_or(f64::NAN) * scale;
    let summed = t.summed.filter(|_| g.name == "sum");
    let combined = summed.map(|(s, s_std)| combine((values[0], std), (s, s_std)));
    let summed_bins = t.summed_bins.filter(|_| g.name == "histogram");
    let combined_bins = summed_bins.as_ref().map(|(bins, s_std)| {
        let both: Vec<(f64, f64)> = values
            .iter()
            .zip(bins)
            .map(|(&v, &b)| combine((v, std), (b, *s_std)))
            .collect();
        let std = both.first().map_or(f64::NAN, |c| c.1);
        (both.into_iter().map(|c| c.0).collect(), std)
    });
    RunningValue {
        name: g.name,
        windows: t.windows,
        // Public under change-one only (count windows of n); add-remove
        // releases the noisy `count` total instead.
        count: t.count,
        values,
        std,
        mechanism: g.noise.name(),
        spent: rational::to_f64(&g.spent),
        summed,
        combined,
        summed_bins,
        combined_bins,
    }
}

/// The window's released sum in units, unrounded as post-processing
/// leaves it, and its noise variance (units²), and (with `bins`) its
/// histogram bins as measured (noisy, before projection) and each bin's
/// noise variance: one pass of the window's keyed generator, the same
/// draws as its release. `None` where the measurement is not planned.
#[allow(clippy::type_complexity)]
fn window_estimates<R: Rng + ?Sized>(
    stream: &StreamPlan,
    values: &[i64],
    rng: &mut R,
    bins: bool,
) -> (Option<(f64, f64)>, Option<(Vec<f64>, f64)>) {
    let sum = stream.find(|m| *m == Measurement::CentredSum);
    let hist = stream
        .find(|m| matches!(m, Measurement::Histogram { .. }))
        .filter(|_| bins);
    let take = sum.iter().chain(&hist).map(|(i, _)| i + 1).max();
    let Some(take) = take else {
        return (None, None);
    };
    let measured = stream.measure_first(values, Some(rng), 0..take, None);
    let sum = sum.and_then(|(i, m)| {
        let (Mechanism::Additive(noise), Measured::Scalar(c)) = (&m.mechanism, &measured[i]) else {
            return None;
        };
        let (lo, hi) = (
            stream.universe.lower() as f64,
            stream.universe.upper() as f64,
        );
        let n = values.len() as f64;
        // As the release's sum: Σx = (C1 + n(L + U)) / 2, clamped to [nL, nU].
        let s = ((*c as f64 + n * (lo + hi)) / 2.0).clamp(n * lo, n * hi);
        Some((s, noise.variance() / 4.0))
    });
    let hist = hist.and_then(|(i, m)| match (&m.mechanism, &measured[i]) {
        (Mechanism::Additive(noise), Measured::Vector(b)) => {
            Some((b.iter().map(|&x| x as f64).collect(), noise.variance()))
        }
        _ => None,
    });
    (sum, hist)
}

/// Inverse-variance combination of two independent estimates `(value, std)`:
/// the weighted mean and its std, `1/√(1/a² + 1/b²)`, at most either std.
/// An estimate with std 0 or not finite is taken alone (or left out).
pub fn combine(a: (f64, f64), b: (f64, f64)) -> (f64, f64) {
    let usable = |(_, s): (f64, f64)| s.is_finite() && s >= 0.0;
    match (usable(a), usable(b)) {
        (true, true) if a.1 == 0.0 => a,
        (true, true) if b.1 == 0.0 => b,
        (true, true) => {
            let (wa, wb) = (1.0 / (a.1 * a.1), 1.0 / (b.1 * b.1));
            ((a.0 * wa + b.0 * wb) / (wa + wb), (1.0 / (wa + wb)).sqrt())
        }
        (true, false) => a,
        _ => b,
    }
}

/// The running totals' plan for `spec` (none without `running_share`):
/// each total calibrated to one window's effect on it (L1 and L2²) over
/// `W` windows a horizon, with a `G`-th of the stream's running share per
/// group. Refused when those effects overflow i64.
pub(super) fn running_plan(
    privacy: &PrivacySpec,
    spec: &StreamSpec,
    u: &Universe,
) -> Result<Option<RunningPlan>, PlanError> {
    let measure = privacy.budget.measure;
    // A window's effect on the running sum, and its square, in i64:
    // change-one moves k readings across the range; add-remove adds or
    // removes k readings, each at most the largest |bound| (grid units).
    let k = spec.max_readings_per_device as i64;
    let change_one = privacy.relation == Relation::ChangeOne;
    let reach = match change_one {
        true => u.width(),
        false => u.lower().abs().max(u.upper().abs()),
    };
    let sum_l1 = k.checked_mul(reach);
    let sum_l2_sq = sum_l1.and_then(|l| l.checked_mul(l));
    if spec.running_share > 0.0 && sum_l2_sq.is_none() {
        return Err(field_err(
            spec,
            "running_share",
            "running totals need (max_readings_per_device × (upper − lower) / resolution)² below 2⁶³; \
             use a coarser resolution or turn running totals off",
        ));
    }
    if spec.running_share <= 0.0 {
        return Ok(None);
    }
    let (l1, l2_sq) = (sum_l1.unwrap_or(0), sum_l2_sq.unwrap_or(0));
    let mut groups = vec![("sum", 1usize, l1, l2_sq)];
    // Add-remove: the running count is not public, so it is a
    // noisy total of its own (k readings a window).
    if !change_one {
        groups.push(("count", 1, k, k * k));
    }
    if let Some(edges) = spec
        .statistics
        .contains(&StatKind::Histogram)
        .then_some(&spec.histogram_edges)
    {
        // k readings change bins: moved (change-one, L1 2k, L2² 2k²)
        // or added/removed (add-remove, all in one bin at worst).
        let (l1, l2_sq) = if change_one {
            (2 * k, 2 * k * k)
        } else {
            (k, k * k)
        };
        groups.push(("histogram", edges.len() - 1, l1, l2_sq));
    }
    // A device counts in up to `G` groups, each its own lanes and
    // running totals: each group's get a `G`-th of the share
    // (`per_horizon` charges them `G` times).
    let budget = exact(privacy.budget.per_horizon)
        * rational::decimal(spec.budget_share)
        * rational::decimal(spec.running_share)
        / BigRational::from_integer(grouped::groups_per_device(spec).into());
    let log2_lifetime = 64 - (spec.running_lifetime - 1).leading_zeros();
    check_node_floor(privacy, spec, &budget, groups.len(), log2_lifetime, None)?;
    let plan = RunningPlan::calibrate(
        measure,
        &groups,
        spec.max_windows_per_device,
        &budget,
        log2_lifetime,
        u.resolution(),
    );
    // A BLT step's ρ is read off the calibrated plan (a pure node's ε
    // was decided above, without one).
    if measure == Measure::Zcdp {
        check_node_floor(
            privacy,
            spec,
            &budget,
            groups.len(),
            log2_lifetime,
            Some(&plan),
        )?;
    }
    Ok(Some(plan))
}

/// The floor every noisy measurement keeps ([`MIN_MEASUREMENT_EPSILON`],
/// [`MIN_MEASUREMENT_RHO`]), applied to what one running total spends per
/// noise draw: a pure tree node's ε is the total's share over `W` windows
/// in `ℓ + 1` levels, a BLT step's ρ its share over `Γ_W`. Below it the
/// noise outgrows the exact sampler's integers (`running_share = 1e-35`
/// passed and panicked at the first release, after every restart).
fn check_node_floor(
    privacy: &PrivacySpec,
    spec: &StreamSpec,
    budget: &BigRational,
    totals: usize,
    log2_lifetime: u32,
    calibrated: Option<&RunningPlan>,
) -> Result<(), PlanError> {
    let per_total = rational::to_f64(budget) / totals as f64;
    let w = f64::from(spec.max_windows_per_device);
    let (per_draw, floor, field, what) = match (privacy.budget.measure, calibrated) {
        // Decided before calibrating: a node's ε needs no plan.
        (Measure::Pure, _) => (
            per_total / (w * f64::from(log2_lifetime + 1)),
            MIN_MEASUREMENT_EPSILON,
            "epsilon_per_device",
            "ε",
        ),
        // Before calibrating: the share itself must clear the floor (a
        // step's ρ is at most the total's), so σ² stays finite.
        (Measure::Zcdp, None) => (per_total, MIN_MEASUREMENT_RHO, "rho_per_device", "ρ"),
        // After: a step's ρ is L²/(2σ²) = share/Γ_W, read off the plan
        // (Γ_W is not computed twice).
        (Measure::Zcdp, Some(plan)) => {
            let per_step = plan
                .groups
                .iter()
                .filter_map(|g| match &g.noise {
                    crate::continual::RunningNoise::Blt { sigma, .. } => {
                        Some(g.window_sensitivity.powi(2) / (2.0 * sigma * sigma))
                    }
                    _ => None,
                })
                .fold(f64::INFINITY, f64::min);
            (per_step, MIN_MEASUREMENT_RHO, "rho_per_device", "ρ")
        }
    };
    if per_draw.is_finite() && per_draw >= floor {
        return Ok(());
    }
    Err(field_err(
        spec,
        "running_share",
        format!(
            "each running total's noise would get {what} = {per_draw:e} per draw, below the floor {floor:e}: \
             raise running_share or privacy.{field}, or lower max_windows_per_device or running_lifetime"
        ),
    ))
}
