//! Window release: from a stream's declaration, a calibrated [`StreamPlan`];
//! from a window's integer values, every declared statistic with noise,
//! post-processing and metadata.
//!
//! Privacy argument: each noisy *measurement* (centred sum, centred sum of
//! squares, histogram, each quantile selection, and the count under
//! add-remove) is calibrated to its sensitivity from [`super::stats`] and
//! charged by the [`super::accountant`]; every *statistic* (sum, mean,
//! variance, std, histogram, quantiles) is a post-processing of those
//! measurements and public parameters, so it costs nothing more.

use super::accountant::{Accountant, Budget, BudgetError, StreamClaim, StreamSpend};
use super::accuracy;
use super::continual::{RunningPlan, RunningState};
use super::mechanism::{Measure, Noise, Selection};
use super::rational::{self, exact};
use super::relation::{Neighbouring, Relation};
use super::rng::{running_rng, window_digest, window_rng, ReleaseKey, WindowId};
use super::stats::{self, QuantileLevel, Sensitivity, Statistic};
use super::universe::{TopCoder, Universe, UniverseError};
use num_rational::BigRational;
use num_traits::Zero;
use rand::Rng;
use serde::{Deserialize, Serialize};

/// Statistics a stream may declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StatKind {
    Count,
    Sum,
    Mean,
    Variance,
    Std,
    Histogram,
    Quantiles,
}

impl StatKind {
    pub fn name(&self) -> &'static str {
        match self {
            StatKind::Count => "count",
            StatKind::Sum => "sum",
            StatKind::Mean => "mean",
            StatKind::Variance => "variance",
            StatKind::Std => "std",
            StatKind::Histogram => "histogram",
            StatKind::Quantiles => "quantiles",
        }
    }
}

/// Most readings a count window holds: an open window keeps 8 bytes per
/// reading per lane, so 10⁷ is 80 MB per (stream, partition).
pub const MAX_WINDOW_SIZE: u64 = 10_000_000;
/// Most readings one device may put in a window (`k`).
pub const MAX_READINGS_PER_DEVICE: u32 = 10_000;
/// Most windows one device may touch per horizon (`W`).
pub const MAX_WINDOWS_PER_DEVICE: u32 = 1_000_000;
/// Most quantile levels per stream.
pub const MAX_QUANTILE_LEVELS: usize = 100;
/// Smallest ε one measurement may be calibrated to under pure DP: below it
/// the noise is so wide that computing its interval takes seconds, and the
/// release says nothing anyway.
pub const MIN_MEASUREMENT_EPSILON: f64 = 1e-11;
/// Stream names: what they may hold (they are parts of keys such as
/// `<stream>/<partition>/<seq>`, so no `/`).
pub const MAX_STREAM_NAME: usize = 128;

/// Largest candidate grid built by default for quantiles.
pub const MAX_DEFAULT_CANDIDATES: u64 = 100_001;

/// A stream as declared (the `[[stream]]` table of the config).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamSpec {
    pub name: String,
    pub lower: f64,
    pub upper: f64,
    pub resolution: f64,
    /// Count windows (change-one): `n`, public. Unset (0) with time windows.
    #[serde(default)]
    pub window_size: u64,
    /// Time windows (add-remove): their length (a duration such as "5m",
    /// parsed by the service's configuration),
    /// aligned to the epoch; the horizon must be a whole number of them.
    #[serde(default)]
    pub window: Option<String>,
    /// `k`.
    #[serde(default = "one")]
    pub max_readings_per_device: u32,
    /// `W` per horizon.
    #[serde(default = "one")]
    pub max_windows_per_device: u32,
    #[serde(default = "full_share")]
    pub budget_share: f64,
    pub statistics: Vec<StatKind>,
    #[serde(default)]
    pub histogram_edges: Vec<f64>,
    #[serde(default)]
    pub quantiles: Vec<f64>,
    /// Candidate values for quantiles; default: every grid point (at most
    /// [`MAX_DEFAULT_CANDIDATES`]).
    #[serde(default)]
    pub quantile_candidates: Option<Vec<f64>>,
    /// Close a window that has waited this long by padding it to `n` with the
    /// midpoint (a duration such as "5m", parsed by the service's
    /// configuration); unset: wait for `n` readings.
    #[serde(default)]
    pub window_timeout: Option<String>,
    /// Share of this stream's budget spent on running totals (sum, and the
    /// histogram's bins if declared) released with every window; 0: none.
    #[serde(default)]
    pub running_share: f64,
    /// Lifetime (windows per partition) the running totals are tuned for: the
    /// BLT stays private beyond it (error then grows faster); the pure-DP
    /// tree stops there. Rounded up to a power of two.
    #[serde(default = "default_running_lifetime")]
    pub running_lifetime: u64,
}

fn default_running_lifetime() -> u64 {
    1 << 24
}

fn one() -> u32 {
    1
}
fn full_share() -> f64 {
    1.0
}

/// Privacy settings shared by all streams.
#[derive(Debug, Clone, PartialEq)]
pub struct PrivacySpec {
    pub relation: Relation,
    pub budget: Budget,
}

/// A noisy quantity computed from a window.
#[derive(Debug, Clone, PartialEq)]
pub enum Measurement {
    /// Number of records (noisy only under add-remove).
    Count,
    /// `Σ(2x − L − U)`, half units.
    CentredSum,
    /// `Σ(2x − L − U)²`, quarter units².
    CentredSumSq,
    /// Counts over bins with these edges (units).
    Histogram { edges: Vec<i64> },
    /// Selection of a candidate (units) for one level.
    Quantile {
        level: QuantileLevel,
        candidates: Vec<i64>,
    },
}

impl Measurement {
    pub fn name(&self) -> &'static str {
        match self {
            Measurement::Count => "count",
            Measurement::CentredSum => "centred_sum",
            Measurement::CentredSumSq => "centred_sum_sq",
            Measurement::Histogram { .. } => "histogram",
            Measurement::Quantile { .. } => "quantile",
        }
    }
}

/// How a measurement is randomised.
#[derive(Debug, Clone, PartialEq)]
pub enum Mechanism {
    Additive(Noise),
    Select(Selection),
}

/// One calibrated measurement.
#[derive(Debug, Clone, PartialEq)]
pub struct MeasurementPlan {
    pub measurement: Measurement,
    pub sensitivity: Sensitivity,
    pub mechanism: Mechanism,
    /// ε or ρ spent per window (exact).
    pub spent: BigRational,
    /// 95% half-width of the additive noise, in the measurement's units.
    pub half_width: u128,
}

/// A calibrated stream: everything needed to release its windows.
#[derive(Debug, Clone)]
pub struct StreamPlan {
    pub spec: StreamSpec,
    pub universe: Universe,
    pub neighbouring: Neighbouring,
    pub measure: Measure,
    pub measurements: Vec<MeasurementPlan>,
    /// ε or ρ per window (exact, all measurements).
    pub per_window: BigRational,
    /// Running totals, when `running_share > 0`.
    pub running: Option<RunningPlan>,
}

/// The whole calibrated configuration.
#[derive(Debug, Clone)]
pub struct Plan {
    pub privacy: PrivacySpec,
    pub streams: Vec<StreamPlan>,
    /// ε or ρ per device per horizon, all streams composed (exact).
    pub per_horizon: BigRational,
}

/// Why a declaration cannot be planned; names the field at fault.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PlanError {
    #[error("stream '{stream}': {field}: {message}")]
    Field {
        stream: String,
        field: &'static str,
        message: String,
    },
    #[error("privacy: {0}")]
    Budget(#[from] BudgetError),
}

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
}

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
}

fn field_err(spec: &StreamSpec, field: &'static str, message: impl Into<String>) -> PlanError {
    PlanError::Field {
        stream: spec.name.clone(),
        field,
        message: message.into(),
    }
}

fn universe_err(spec: &StreamSpec, e: UniverseError) -> PlanError {
    let field = match &e {
        UniverseError::Resolution(_) => "resolution",
        UniverseError::NotFinite { field, .. }
        | UniverseError::OffGrid { field, .. }
        | UniverseError::TooLarge { field, .. } => field,
        UniverseError::Order { .. } => "lower",
    };
    field_err(spec, field, e.to_string())
}

/// The measurements a stream needs, validated.
fn measurements_for(
    spec: &StreamSpec,
    u: &Universe,
    relation: Relation,
) -> Result<Vec<Measurement>, PlanError> {
    use StatKind::*;
    let has = |k: StatKind| spec.statistics.contains(&k);
    if spec.statistics.is_empty() {
        return Err(field_err(
            spec,
            "statistics",
            "declare at least one statistic",
        ));
    }
    let mut out = Vec::new();
    if relation == Relation::AddRemove
        && [Count, Sum, Mean, Variance, Std, Histogram]
            .iter()
            .any(|&k| has(k))
    {
        out.push(Measurement::Count);
    }
    if [Sum, Mean, Variance, Std].iter().any(|&k| has(k)) {
        out.push(Measurement::CentredSum);
    }
    if has(Variance) || has(Std) {
        out.push(Measurement::CentredSumSq);
    }
    if has(Histogram) {
        if spec.histogram_edges.len() < 2 {
            return Err(field_err(
                spec,
                "histogram_edges",
                "need at least two edges",
            ));
        }
        let edges = spec
            .histogram_edges
            .iter()
            .map(|&e| u.grid_units("histogram_edges", e))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| universe_err(spec, e))?;
        if edges.windows(2).any(|w| w[0] >= w[1]) {
            return Err(field_err(
                spec,
                "histogram_edges",
                "must be strictly increasing",
            ));
        }
        if edges[0] > u.lower() || *edges.last().expect("≥ 2") < u.upper() {
            return Err(field_err(
                spec,
                "histogram_edges",
                format!(
                    "must cover the universe [{}, {}]: first edge ≤ lower, last edge ≥ upper",
                    spec.lower, spec.upper
                ),
            ));
        }
        out.push(Measurement::Histogram { edges });
    } else if !spec.histogram_edges.is_empty() {
        return Err(field_err(
            spec,
            "histogram_edges",
            "given but \"histogram\" is not among the statistics",
        ));
    }
    if has(Quantiles) {
        if spec.quantiles.is_empty() {
            return Err(field_err(
                spec,
                "quantiles",
                "declare at least one level in [0, 1]",
            ));
        }
        let candidates = match &spec.quantile_candidates {
            Some(c) => {
                let mut units = c
                    .iter()
                    .map(|&v| u.grid_units("quantile_candidates", v))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| universe_err(spec, e))?;
                units.sort_unstable();
                units.dedup();
                if units.is_empty() {
                    return Err(field_err(spec, "quantile_candidates", "must not be empty"));
                }
                units
            }
            None => {
                if u.grid_len() > MAX_DEFAULT_CANDIDATES {
                    return Err(field_err(
                        spec,
                        "quantile_candidates",
                        format!(
                            "the universe has {} grid points (more than {MAX_DEFAULT_CANDIDATES}); declare the candidates",
                            u.grid_len()
                        ),
                    ));
                }
                (u.lower()..=u.upper()).collect()
            }
        };
        for &q in &spec.quantiles {
            let level = QuantileLevel::new(q)
                .ok_or_else(|| field_err(spec, "quantiles", format!("{q} is not in [0, 1]")))?;
            out.push(Measurement::Quantile {
                level,
                candidates: candidates.clone(),
            });
        }
    } else if !spec.quantiles.is_empty() {
        return Err(field_err(
            spec,
            "quantiles",
            "given but \"quantiles\" is not among the statistics",
        ));
    }
    Ok(out)
}

fn sensitivity_of(m: &Measurement, nb: Neighbouring, u: &Universe, n: u64) -> Sensitivity {
    let stat = match m {
        Measurement::Count => Statistic::Count,
        Measurement::CentredSum => Statistic::CentredSum,
        Measurement::CentredSumSq => Statistic::CentredSumSq,
        Measurement::Histogram { .. } => Statistic::Histogram,
        Measurement::Quantile { .. } => Statistic::QuantileUtility,
    };
    stat.sensitivity(nb, u, n)
}

/// Readings a window may hold, for the overflow proof: `n` for count
/// windows, the windower's bound for time windows.
fn max_window_readings(spec: &StreamSpec) -> u64 {
    if spec.window.is_some() {
        MAX_TIME_WINDOW_READINGS
    } else {
        spec.window_size
    }
}

/// Most readings a time window holds (the windower drops more, counted).
pub const MAX_TIME_WINDOW_READINGS: u64 = 1 << 32;

fn validate_spec(spec: &StreamSpec, relation: Relation) -> Result<Universe, PlanError> {
    if spec.name.is_empty()
        || spec.name.len() > MAX_STREAM_NAME
        || !spec
            .name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
    {
        return Err(field_err(
            spec,
            "name",
            format!("1 to {MAX_STREAM_NAME} characters of A-Z, a-z, 0-9, '_', '.', '-' (it is part of the output and state keys)"),
        ));
    }
    let u = Universe::new(spec.lower, spec.upper, spec.resolution)
        .map_err(|e| universe_err(spec, e))?;
    match (relation, &spec.window) {
        (Relation::AddRemove, None) => {
            return Err(field_err(
                spec,
                "window",
                "relation = \"add-remove\" needs time windows (e.g. window = \"5m\"): a window closed by count \
                 would let one added reading shift every later window of its partition and reveal the device's presence",
            ))
        }
        (Relation::ChangeOne, Some(_)) => {
            return Err(field_err(
                spec,
                "window",
                "time windows are for relation = \"add-remove\" (their size is private); change-one uses window_size",
            ))
        }
        (Relation::AddRemove, Some(_)) => {
            // The length itself is parsed and checked by the service's
            // configuration (it must divide the horizon).
            if spec.window_size != 0 {
                return Err(field_err(
                    spec,
                    "window_size",
                    "not used with time windows (their size is private and measured with noise); remove it",
                ));
            }
            if spec.window_timeout.is_some() {
                return Err(field_err(
                    spec,
                    "window_timeout",
                    "not used with time windows (they close at their end plus limits.max_lateness); remove it",
                ));
            }
        }
        (Relation::ChangeOne, None) => {
            if spec.window_size == 0 || spec.window_size > MAX_WINDOW_SIZE {
                return Err(field_err(
                    spec,
                    "window_size",
                    format!("must be in [1, {MAX_WINDOW_SIZE}] (an open window keeps 8 bytes per reading per partition)"),
                ));
            }
        }
    }
    let n = max_window_readings(spec);
    let k = spec.max_readings_per_device;
    let k_max = n.min(MAX_READINGS_PER_DEVICE as u64);
    if k == 0 || k as u64 > k_max {
        return Err(field_err(
            spec,
            "max_readings_per_device",
            format!("must be in [1, {k_max}] (at most window_size and {MAX_READINGS_PER_DEVICE}), got {k}"),
        ));
    }
    let w = spec.max_windows_per_device;
    if w == 0 || w > MAX_WINDOWS_PER_DEVICE {
        return Err(field_err(
            spec,
            "max_windows_per_device",
            format!("must be in [1, {MAX_WINDOWS_PER_DEVICE}], got {w}"),
        ));
    }
    if spec.quantiles.len() > MAX_QUANTILE_LEVELS {
        return Err(field_err(
            spec,
            "quantiles",
            format!("at most {MAX_QUANTILE_LEVELS} levels"),
        ));
    }
    // Overflow proof for the exact sums: n·(2·max|x|)² < 2^120.
    let c = 2 * u.max_abs() as u128 + 1;
    if (n as u128)
        .checked_mul(c * c)
        .is_none_or(|v| v >= 1u128 << 120)
    {
        return Err(field_err(
            spec,
            "window_size",
            "window_size × (2·max|bound|/resolution)² overflows exact 128-bit sums; use a coarser resolution or smaller windows",
        ));
    }
    Ok(u)
}

/// Validate every stream, split the budget, calibrate every measurement and
/// check the composition.
pub fn plan(privacy: &PrivacySpec, specs: &[StreamSpec]) -> Result<Plan, PlanError> {
    let accountant = Accountant::new(privacy.budget.clone())?;
    let measure = privacy.budget.measure;
    let mut prepared = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        if specs[..i].iter().any(|s| s.name == spec.name) {
            return Err(field_err(spec, "name", "declared twice"));
        }
        let u = validate_spec(spec, privacy.relation)?;
        let ms = measurements_for(spec, &u, privacy.relation)?;
        let r = spec.running_share;
        if !(r.is_finite() && (0.0..1.0).contains(&r)) {
            return Err(field_err(
                spec,
                "running_share",
                format!("must be in [0, 1), got {r}"),
            ));
        }
        if r > 0.0 && privacy.relation != Relation::ChangeOne {
            return Err(field_err(
                spec,
                "running_share",
                "running totals need relation = \"change-one\" (the running count must be public)",
            ));
        }
        if !(2..=1u64 << 40).contains(&spec.running_lifetime) {
            return Err(field_err(
                spec,
                "running_lifetime",
                "must be in [2, 2^40] windows",
            ));
        }
        prepared.push((spec, u, ms));
    }
    let claims: Vec<StreamClaim> = prepared
        .iter()
        .map(|(s, _, ms)| StreamClaim {
            name: s.name.clone(),
            // What running totals take is not split over windows.
            share: s.budget_share * (1.0 - s.running_share),
            windows_per_horizon: s.max_windows_per_device,
            measurements: ms.len(),
        })
        .collect();
    let allocations = accountant.allocate(&claims)?;
    let mut streams = Vec::new();
    for ((spec, u, ms), alloc) in prepared.into_iter().zip(allocations) {
        let nb = Neighbouring::new(privacy.relation, spec.max_readings_per_device);
        let mut measurements = Vec::new();
        let mut per_window = BigRational::zero();
        let budget = alloc
            .as_ref()
            .expect("a stream with measurements has a budget");
        if measure == Measure::Pure && rational::to_f64(budget) < MIN_MEASUREMENT_EPSILON {
            return Err(field_err(
                spec,
                "epsilon_per_device",
                format!(
                    "each of this stream's {} measurements would get ε = {:e} per window, below the floor {MIN_MEASUREMENT_EPSILON:e}: \
                     raise privacy.epsilon_per_device or budget_share, or lower max_windows_per_device",
                    ms.len(),
                    rational::to_f64(budget)
                ),
            ));
        }
        for m in ms {
            let sensitivity = sensitivity_of(&m, nb, &u, spec.window_size);
            let (mechanism, spent) = match &m {
                Measurement::Quantile { level, .. } => {
                    // Utilities are in units of 1/den: scale the sensitivity.
                    let du = spec.max_readings_per_device as u64 * level.den as u64;
                    let (sel, spent) = Selection::calibrate(measure, du, budget);
                    (Mechanism::Select(sel), spent)
                }
                _ => {
                    let (noise, spent) = Noise::calibrate(measure, &sensitivity, budget);
                    (Mechanism::Additive(noise), spent)
                }
            };
            let half_width = match &mechanism {
                Mechanism::Additive(n) => accuracy::half_width(n),
                Mechanism::Select(_) => 0,
            };
            per_window += &spent;
            measurements.push(MeasurementPlan {
                measurement: m,
                sensitivity,
                mechanism,
                spent,
                half_width,
            });
        }
        let running = (spec.running_share > 0.0).then(|| {
            let k = spec.max_readings_per_device as i64;
            let mut groups = vec![("sum", 1usize, k * u.width(), (k * u.width()).pow(2))];
            if let Some(edges) = spec
                .statistics
                .contains(&StatKind::Histogram)
                .then_some(&spec.histogram_edges)
            {
                groups.push(("histogram", edges.len() - 1, 2 * k, 2 * k * k));
            }
            let budget = exact(privacy.budget.per_horizon)
                * exact(spec.budget_share)
                * exact(spec.running_share);
            RunningPlan::calibrate(
                measure,
                &groups,
                spec.max_windows_per_device,
                &budget,
                64 - (spec.running_lifetime - 1).leading_zeros(),
                u.resolution(),
            )
        });
        streams.push(StreamPlan {
            spec: spec.clone(),
            universe: u,
            neighbouring: nb,
            measure,
            measurements,
            per_window,
            running,
        });
    }
    let spends: Vec<StreamSpend> = streams
        .iter()
        .map(|s| StreamSpend {
            name: s.spec.name.clone(),
            windows_per_horizon: s.spec.max_windows_per_device,
            per_window: s.per_window.clone(),
            per_horizon: s
                .running
                .as_ref()
                .map_or_else(BigRational::zero, |r| r.spent()),
        })
        .collect();
    let per_horizon = accountant.compose(&spends)?;
    Ok(Plan {
        privacy: privacy.clone(),
        streams,
        per_horizon,
    })
}

/// What a measurement produced for one window.
#[derive(Debug, Clone)]
enum Measured {
    Scalar(i128),
    Vector(Vec<i128>),
    Choice(i64),
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

impl StreamPlan {
    /// The top-coder of this stream.
    pub fn top_coder(&self) -> TopCoder {
        TopCoder::new(self.universe)
    }

    fn measure<R: Rng + ?Sized>(&self, values: &[i64], mut rng: Option<&mut R>) -> Vec<Measured> {
        let u = &self.universe;
        let sorted = self
            .measurements
            .iter()
            .any(|m| matches!(m.measurement, Measurement::Quantile { .. }))
            .then(|| {
                let mut s = values.to_vec();
                s.sort_unstable();
                s
            });
        let mut out = Vec::with_capacity(self.measurements.len());
        for mp in &self.measurements {
            let mut noise = |mech: &Mechanism| match (mech, rng.as_deref_mut()) {
                (Mechanism::Additive(n), Some(r)) => n.sample(r),
                _ => 0,
            };
            let m = match &mp.measurement {
                Measurement::Count => Measured::Scalar(values.len() as i128 + noise(&mp.mechanism)),
                Measurement::CentredSum => {
                    Measured::Scalar(stats::centred_sum(values, u) + noise(&mp.mechanism))
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
                    let util = stats::quantile_utilities(
                        sorted.as_deref().expect("sorted for quantiles"),
                        candidates,
                        *level,
                    );
                    let idx = match (&mp.mechanism, rng.as_deref_mut()) {
                        (Mechanism::Select(sel), Some(r)) => sel.select(r, &util),
                        _ => util
                            .iter()
                            .enumerate()
                            .max_by_key(|&(i, v)| (*v, std::cmp::Reverse(i)))
                            .map(|(i, _)| i)
                            .expect("candidates"),
                    };
                    Measured::Choice(candidates[idx])
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

    fn find(&self, pred: impl Fn(&Measurement) -> bool) -> Option<(usize, &MeasurementPlan)> {
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

    fn evaluate<R: Rng + ?Sized>(
        &self,
        values: &[i64],
        rng: Option<&mut R>,
    ) -> Vec<ReleasedStatistic> {
        let noisy = rng.is_some();
        let measured = self.measure(values, rng);
        self.post_process(values, &measured, noisy)
    }

    /// Every statistic from the measurements (noisy or not) and public
    /// parameters only: the post-processing that costs nothing more.
    /// `values` is read for its length under change-one (public `n`).
    fn post_process<'a>(
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
                }
            };

        // Window size: public under change-one, noisy under add-remove.
        let count = self.find(|m| *m == Measurement::Count);
        let n_hat = match count {
            Some((i, _)) => scalar(i).max(1.0),
            None => values.len() as f64,
        };
        let sum = self.find(|m| *m == Measurement::CentredSum).map(|(i, m)| {
            // Σx = (C1 + n(L+U))/2, clamped to [nL, nU].
            let s = ((scalar(i) + n_hat * (lo + hi)) / 2.0).clamp(n_hat * lo, n_hat * hi);
            (s, m)
        });
        let sum_sq = self.find(|m| *m == Measurement::CentredSumSq);
        let variance = sum.zip(sum_sq).map(|((s, m1), (j, m2))| {
            let mean_c = (2.0 * s - n_hat * (lo + hi)) / n_hat; // half units
            let var_c = scalar(j) / n_hat - mean_c * mean_c; // quarter units²
            let w = u.width() as f64;
            ((var_c / 4.0).clamp(0.0, w * w / 4.0), [m2, m1])
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
                    }),
                },
                StatKind::Sum => {
                    let (s, m) = sum.expect("planned");
                    let h = if change_one { hw(m, res / 2.0) } else { None };
                    out.push(stat("sum", vec![s * res], &with_count(&[m]), res / 2.0, h));
                }
                StatKind::Mean => {
                    let (s, m) = sum.expect("planned");
                    let per = res / 2.0 / n_hat;
                    let h = if change_one { hw(m, per) } else { None };
                    out.push(stat(
                        "mean",
                        vec![s / n_hat * res],
                        &with_count(&[m]),
                        per,
                        h,
                    ));
                }
                StatKind::Variance => {
                    let (v, ms) = variance.expect("planned");
                    out.push(stat(
                        "variance",
                        vec![v * res * res],
                        &with_count(&ms),
                        res * res / 4.0 / n_hat,
                        None,
                    ));
                }
                StatKind::Std => {
                    let (v, ms) = variance.expect("planned");
                    out.push(stat(
                        "std",
                        vec![v.sqrt() * res],
                        &with_count(&ms),
                        res * res / 4.0 / n_hat,
                        None,
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
                    let counts = project_to_simplex(&raw, n_hat.round());
                    out.push(stat(
                        "histogram",
                        counts,
                        &with_count(&[m]),
                        1.0,
                        hw(m, 1.0),
                    ));
                }
                StatKind::Quantiles => {
                    let mut qs: Vec<(f64, f64, &MeasurementPlan)> = self
                        .measurements
                        .iter()
                        .zip(measured.iter())
                        .filter_map(|(m, v)| match (&m.measurement, v) {
                            (Measurement::Quantile { level, .. }, Measured::Choice(c)) => {
                                Some((level.as_f64(), *c as f64 * res, m))
                            }
                            _ => None,
                        })
                        .collect();
                    // Quantiles are monotone in the level: sorting is free,
                    // but a sorted value depends on every level's selection
                    // (the lowest level's is the minimum of all), so each
                    // states the joint spend of all levels.
                    let mut vals: Vec<f64> = qs.iter().map(|q| q.1).collect();
                    vals.sort_by(f64::total_cmp);
                    qs.sort_by(|a, b| a.0.total_cmp(&b.0));
                    let all: Vec<&MeasurementPlan> = qs.iter().map(|q| q.2).collect();
                    for ((level, _, m), v) in qs.iter().zip(vals) {
                        let mut s = stat("quantile", vec![v], &[m], 1.0, None);
                        s.spent = self.spent_f64(&all);
                        s.level = Some(*level);
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
        if self.neighbouring.size_is_public() {
            assert_eq!(
                values.len() as u64,
                self.spec.window_size,
                "a window holds exactly n values"
            );
        }
        self.evaluate(values, Some(rng))
    }

    /// Release a window with the keyed noise of docs/DESIGN.md §5: the same key,
    /// window and values always give the same bits.
    pub fn release(
        &self,
        key: &ReleaseKey,
        partition: i32,
        seq: u64,
        values: &[i64],
    ) -> Vec<ReleasedStatistic> {
        let digest = window_digest(values);
        let id = WindowId {
            stream: &self.spec.name,
            partition,
            seq,
        };
        self.release_with(values, &mut window_rng(key, id, &digest))
    }

    /// ε or ρ one device can spend per horizon on this stream: `W` windows'
    /// statistics plus the running totals.
    pub fn per_horizon(&self) -> BigRational {
        &self.per_window * BigRational::from_integer(self.spec.max_windows_per_device.into())
            + self
                .running
                .as_ref()
                .map_or_else(BigRational::zero, |r| r.spent())
    }

    /// Advance this lane's running totals by window `seq` (noise keyed like
    /// the window's, in its own domain); `None` without running totals or
    /// past a pure-DP tree's lifetime.
    pub fn running_step(
        &self,
        key: &ReleaseKey,
        partition: i32,
        seq: u64,
        values: &[i64],
        state: &mut RunningState,
    ) -> Option<Vec<RunningValue>> {
        let plan = self.running.as_ref()?;
        let mut window = vec![vec![stats::sum(values)]];
        if plan.groups.len() > 1 {
            let edges = self.histogram_edges_units();
            window.push(
                stats::histogram(values, &edges)
                    .into_iter()
                    .map(|c| c as i128)
                    .collect(),
            );
        }
        let digest = window_digest(values);
        let id = WindowId {
            stream: &self.spec.name,
            partition,
            seq,
        };
        let noisy = plan.step(state, &window, &mut running_rng(key, id, &digest))?;
        let t = state.steps;
        Some(
            plan.groups
                .iter()
                .zip(noisy)
                .map(|(g, v)| {
                    let scale = if g.name == "sum" {
                        plan.resolution
                    } else {
                        1.0
                    };
                    RunningValue {
                        name: g.name,
                        windows: t,
                        count: t * self.spec.window_size,
                        values: v.into_iter().map(|x| x * scale).collect(),
                        std: g.noise.std_after(t).unwrap_or(f64::NAN) * scale,
                        mechanism: g.noise.name(),
                        spent: rational::to_f64(&g.spent),
                    }
                })
                .collect(),
        )
    }

    fn histogram_edges_units(&self) -> Vec<i64> {
        self.measurements
            .iter()
            .find_map(|m| match &m.measurement {
                Measurement::Histogram { edges } => Some(edges.clone()),
                _ => None,
            })
            .expect("a running histogram needs the histogram measurement")
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
        );
        for s in &mut out {
            s.values.clear();
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
                Measurement::CentredSumSq => vec![stats::centred_sum_sq(values, &self.universe)],
                Measurement::Histogram { edges } => stats::histogram(values, edges)
                    .into_iter()
                    .map(i128::from)
                    .collect(),
                Measurement::Quantile { level, candidates } => {
                    stats::quantile_utilities(&sorted, candidates, *level)
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
                (self.spec.max_readings_per_device as u64 * level.den as u64).into(),
            )),
            _ => m.sensitivity.clone(),
        }
    }

    /// The same statistics without noise (the demo's "true value" and the
    /// benchmark's baseline). Never publish these.
    pub fn truth(&self, values: &[i64]) -> Vec<ReleasedStatistic> {
        self.evaluate::<rand_chacha::ChaCha20Rng>(values, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn spec() -> StreamSpec {
        StreamSpec {
            name: "cabin_temp_c".into(),
            lower: -40.0,
            upper: 85.0,
            resolution: 0.1,
            window_size: 100,
            max_readings_per_device: 1,
            max_windows_per_device: 24,
            budget_share: 1.0,
            statistics: vec![
                StatKind::Count,
                StatKind::Mean,
                StatKind::Std,
                StatKind::Histogram,
                StatKind::Quantiles,
            ],
            histogram_edges: vec![-40.0, 0.0, 10.0, 20.0, 30.0, 40.0, 85.0],
            quantiles: vec![0.5, 0.9],
            quantile_candidates: None,
            window_timeout: None,
            window: None,
            running_share: 0.0,
            running_lifetime: 1 << 24,
        }
    }

    /// [`spec`] with the windows its relation needs.
    pub(crate) fn spec_for(relation: Relation) -> StreamSpec {
        let mut s = spec();
        if relation == Relation::AddRemove {
            s.window = Some("5m".into());
            s.window_size = 0;
        }
        s
    }

    pub(crate) fn privacy(measure: Measure, relation: Relation) -> PrivacySpec {
        PrivacySpec {
            relation,
            budget: Budget {
                measure,
                per_horizon: 1.0,
                delta: 1e-6,
            },
        }
    }

    #[test]
    fn projection_onto_simplex() {
        let p = project_to_simplex(&[5.0, -2.0, 3.0], 6.0);
        assert!((p.iter().sum::<f64>() - 6.0).abs() < 1e-9);
        assert_eq!(p[1], 0.0);
        assert!((p[0] - 4.0).abs() < 1e-9 && (p[2] - 2.0).abs() < 1e-9);
        assert_eq!(project_to_simplex(&[1.0, 2.0], 3.0), vec![1.0, 2.0]);
    }

    #[test]
    fn field_errors_name_the_field() {
        let p = privacy(Measure::Pure, Relation::ChangeOne);
        type Mutation = Box<dyn Fn(&mut StreamSpec)>;
        let cases: Vec<(Mutation, &str)> = vec![
            (Box::new(|s| s.resolution = 0.0), "resolution"),
            (Box::new(|s| s.upper = 85.05), "upper"),
            (Box::new(|s| s.window_size = 0), "window_size"),
            (
                Box::new(|s| s.max_readings_per_device = 0),
                "max_readings_per_device",
            ),
            (
                Box::new(|s| s.histogram_edges = vec![-40.0, 10.0, 0.0, 85.0]),
                "histogram_edges",
            ),
            (
                Box::new(|s| s.histogram_edges = vec![-30.0, 85.0]),
                "histogram_edges",
            ),
            (Box::new(|s| s.quantiles = vec![1.5]), "quantiles"),
            (Box::new(|s| s.statistics.clear()), "statistics"),
            (
                Box::new(|s| {
                    s.resolution = 1e-9;
                    s.window_size = 1_000_000_000_000_000;
                }),
                "window_size",
            ),
        ];
        for (mutate, field) in cases {
            let mut s = spec();
            mutate(&mut s);
            match plan(&p, &[s]) {
                Err(PlanError::Field {
                    field: f, stream, ..
                }) => {
                    assert_eq!((f, stream.as_str()), (field, "cabin_temp_c"))
                }
                other => panic!("{field}: {other:?}"),
            }
        }
    }

    #[test]
    fn plan_spends_within_budget_and_splits_evenly() {
        for measure in [Measure::Pure, Measure::Zcdp] {
            for rel in [Relation::ChangeOne, Relation::AddRemove] {
                let plan = plan(&privacy(measure, rel), &[spec_for(rel)]).unwrap();
                assert!(plan.per_horizon <= rational::int(1));
                let s = &plan.streams[0];
                let m = s.measurements.len();
                // count (add-remove only), centred sum, sum sq, histogram, 2 quantiles
                assert_eq!(m, if rel == Relation::AddRemove { 6 } else { 5 });
                let spent = rational::to_f64(&plan.per_horizon);
                assert!(spent > 0.999, "{measure:?} {rel:?}: {spent}");
            }
        }
    }

    #[test]
    fn release_is_consistent_with_truth() {
        let plan = plan(&privacy(Measure::Pure, Relation::ChangeOne), &[spec()]).unwrap();
        let s = &plan.streams[0];
        let values: Vec<i64> = (0..100).map(|i| 150 + (i % 20) * 5).collect();
        let truth = s.truth(&values);
        let names: Vec<&str> = truth.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            ["count", "mean", "std", "histogram", "quantile", "quantile"]
        );
        assert_eq!(truth[0].values, vec![100.0]);
        let mean = values.iter().sum::<i64>() as f64 / 100.0 * 0.1;
        assert!((truth[1].values[0] - mean).abs() < 1e-9);
        assert_eq!(truth[3].values.iter().sum::<f64>(), 100.0);
        let key = ReleaseKey::from_bytes([1; 32]);
        let r = s.release(&key, 0, 0, &values);
        assert_eq!(r.len(), truth.len());
        assert!(r[1].half_width.unwrap() > 0.0);
        assert!((r[3].values.iter().sum::<f64>() - 100.0).abs() < 1e-6);
        assert!(r[4].values[0] <= r[5].values[0]);
    }

    #[test]
    fn windows_must_fit_the_relation() {
        let ar = privacy(Measure::Pure, Relation::AddRemove);
        let co = privacy(Measure::Pure, Relation::ChangeOne);
        let field = |r: Result<Plan, PlanError>| match r {
            Err(PlanError::Field { field, message, .. }) => (field, message),
            other => panic!("{other:?}"),
        };
        // Count windows under add-remove: refused, saying why.
        let (f, msg) = field(plan(&ar, &[spec()]));
        assert_eq!(f, "window");
        assert!(msg.contains("presence"), "{msg}");
        // Time windows under change-one, window_size or a timeout beside them.
        assert_eq!(
            field(plan(&co, &[spec_for(Relation::AddRemove)])).0,
            "window"
        );
        let mut s = spec_for(Relation::AddRemove);
        s.window_size = 10;
        assert_eq!(field(plan(&ar, &[s])).0, "window_size");
        let mut s = spec_for(Relation::AddRemove);
        s.window_timeout = Some("1m".into());
        assert_eq!(field(plan(&ar, &[s])).0, "window_timeout");
        // Under add-remove an empty window releases (count 0 plus noise).
        let p = plan(&ar, &[spec_for(Relation::AddRemove)]).unwrap();
        let key = ReleaseKey::from_bytes([3; 32]);
        let r = p.streams[0].release(&key, 0, 7, &[]);
        assert_eq!(r[0].name, "count");
        assert!(r[0].half_width.unwrap() > 0.0);
    }

    /// A sorted quantile depends on every level's selection: each states
    /// the joint spend, and the window's total is unchanged.
    #[test]
    fn sorted_quantiles_state_the_joint_spend() {
        let mut sp = spec();
        sp.statistics = vec![StatKind::Quantiles];
        sp.histogram_edges.clear();
        sp.quantiles = vec![0.1, 0.5, 0.9];
        let plan = plan(&privacy(Measure::Pure, Relation::ChangeOne), &[sp]).unwrap();
        let s = &plan.streams[0];
        let per_level: Vec<f64> = s
            .measurements
            .iter()
            .map(|m| rational::to_f64(&m.spent))
            .collect();
        let joint: f64 = per_level.iter().sum();
        let values: Vec<i64> = (0..100).collect();
        for st in s.release(&ReleaseKey::from_bytes([2; 32]), 0, 0, &values) {
            assert!((st.spent - joint).abs() < 1e-12, "{} vs {joint}", st.spent);
        }
        assert!((joint - rational::to_f64(&s.per_window)).abs() < 1e-12);
        assert!(per_level[0] < joint);
    }

    /// Under add-remove, statistics post-processed with the noisy count
    /// state its spend too.
    #[test]
    fn add_remove_statistics_include_the_counts_spend() {
        let p = plan(
            &privacy(Measure::Pure, Relation::AddRemove),
            &[spec_for(Relation::AddRemove)],
        )
        .unwrap();
        let s = &p.streams[0];
        let spent = |name: &str| {
            s.measurements
                .iter()
                .filter(|m| m.measurement.name() == name)
                .map(|m| rational::to_f64(&m.spent))
                .sum::<f64>()
        };
        let key = ReleaseKey::from_bytes([4; 32]);
        for st in s.release(&key, 0, 0, &[100, 200, 300]) {
            let want = match st.name.as_str() {
                "count" => spent("count"),
                "mean" => spent("centred_sum") + spent("count"),
                "std" => spent("centred_sum_sq") + spent("centred_sum") + spent("count"),
                "histogram" => spent("histogram") + spent("count"),
                _ => continue,
            };
            assert!(
                (st.spent - want).abs() < 1e-12,
                "{}: {} vs {want}",
                st.name,
                st.spent
            );
        }
    }

    /// Every published `spent` covers the measurements its value depends
    /// on: each measurement is perturbed in turn (both ways, several sizes;
    /// a quantile's choice moved to each end of its candidates) and every
    /// statistic whose value moves must state at least that measurement's
    /// spend — both relations, both measures, every statistic.
    #[test]
    fn every_stated_spend_covers_what_its_value_depends_on() {
        use rand_chacha::ChaCha20Rng;
        for rel in [Relation::ChangeOne, Relation::AddRemove] {
            for measure in [Measure::Pure, Measure::Zcdp] {
                let mut sp = spec_for(rel);
                sp.statistics = vec![
                    StatKind::Count,
                    StatKind::Sum,
                    StatKind::Mean,
                    StatKind::Variance,
                    StatKind::Std,
                    StatKind::Histogram,
                    StatKind::Quantiles,
                ];
                sp.quantiles = vec![0.1, 0.5, 0.9];
                let p = plan(&privacy(measure, rel), &[sp]).unwrap();
                let s = &p.streams[0];
                let values: Vec<i64> = (0..100).map(|i| -300 + (i * 37) % 900).collect();
                let base = s.measure::<ChaCha20Rng>(&values, None);
                let out0 = s.post_process(&values, &base, true);
                let mut deps: Vec<Vec<usize>> = vec![Vec::new(); out0.len()];
                for i in 0..base.len() {
                    let variants: Vec<Measured> = match &base[i] {
                        Measured::Scalar(v) => [1, 7, 50, 400, 5000]
                            .iter()
                            .flat_map(|d| [Measured::Scalar(v + d), Measured::Scalar(v - d)])
                            .collect(),
                        Measured::Vector(v) => (0..v.len())
                            .flat_map(|b| {
                                [3i128, -3, 40, -40].map(|d| {
                                    let mut w = v.clone();
                                    w[b] += d;
                                    Measured::Vector(w)
                                })
                            })
                            .collect(),
                        Measured::Choice(_) => {
                            let c = match &s.measurements[i].measurement {
                                Measurement::Quantile { candidates, .. } => candidates,
                                _ => unreachable!(),
                            };
                            vec![Measured::Choice(c[0]), Measured::Choice(*c.last().unwrap())]
                        }
                    };
                    for m in variants {
                        let mut all = base.clone();
                        all[i] = m;
                        for (j, (a, b)) in out0
                            .iter()
                            .zip(s.post_process(&values, &all, true))
                            .enumerate()
                        {
                            if a.values != b.values && !deps[j].contains(&i) {
                                deps[j].push(i);
                            }
                        }
                    }
                }
                // Not vacuous: every measurement moves some statistic.
                for i in 0..base.len() {
                    assert!(
                        deps.iter().any(|d| d.contains(&i)),
                        "{rel:?} {measure:?}: measurement {i} moves nothing"
                    );
                }
                for (j, st) in out0.iter().enumerate() {
                    let needed: f64 = deps[j]
                        .iter()
                        .map(|&i| rational::to_f64(&s.measurements[i].spent))
                        .sum();
                    assert!(
                        st.spent >= needed - 1e-12,
                        "{rel:?} {measure:?} {}({:?}): states {} but depends on {:?} = {needed}",
                        st.name,
                        st.level,
                        st.spent,
                        deps[j]
                            .iter()
                            .map(|&i| s.measurements[i].measurement.name())
                            .collect::<Vec<_>>()
                    );
                }
            }
        }
    }
}
