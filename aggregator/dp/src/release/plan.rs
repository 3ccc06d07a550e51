//! Calibration: from validated declarations, the measurements each stream
//! needs, their sensitivities (from [`crate::stats`]) and mechanisms, and the
//! budget split checked by the [`crate::accountant`].

use super::*;
use crate::accountant::{Accountant, BudgetError, StreamClaim, StreamSpend};
use crate::accuracy;
use crate::alarm::AlarmPlan;
use crate::continual::RunningPlan;
use crate::mechanism::{Measure, Noise, Selection};
use crate::rational;
use crate::relation::Neighbouring;
use crate::stats::{QuantileLevel, Sensitivity, Statistic};
use crate::universe::Universe;
use num_rational::BigRational;
use num_traits::Zero;

/// A noisy quantity computed from a window.
#[derive(Debug, Clone, PartialEq)]
pub enum Measurement {
    /// Number of records (noisy only under add-remove).
    Count,
    /// `Σ(2x − L − U)`, half units.
    CentredSum,
    /// `Σx`, units: the sum under add-remove when no statistic needs the
    /// count (derived from the count and `CentredSum` it would split the
    /// budget in two; with the count measured anyway, that derivation is
    /// the more accurate one).
    Sum,
    /// `Σ(2x − L − U)²`, quarter units².
    CentredSumSq,
    /// Counts over bins with these edges (units).
    Histogram { edges: Vec<i64> },
    /// Readings at the universe's bounds.
    Boundary,
    /// Selection of a candidate (units) for one level.
    Quantile {
        level: QuantileLevel,
        candidates: Vec<i64>,
    },
    /// One selection of a candidate per level, jointly ([`crate::joint`]).
    JointQuantiles {
        levels: Vec<QuantileLevel>,
        candidates: Vec<i64>,
    },
}

impl Measurement {
    pub fn name(&self) -> &'static str {
        match self {
            Measurement::Count => "count",
            Measurement::CentredSum => "centred_sum",
            Measurement::Sum => "sum",
            Measurement::CentredSumSq => "centred_sum_sq",
            Measurement::Histogram { .. } => "histogram",
            Measurement::Boundary => "boundary_count",
            Measurement::Quantile { .. } => "quantile",
            Measurement::JointQuantiles { .. } => "joint_quantiles",
        }
    }

    /// Its share of the stream's per-window budget relative to the others:
    /// a joint selection of `m` levels takes what `m` separate ones would.
    pub fn weight(&self) -> usize {
        match self {
            Measurement::JointQuantiles { levels, .. } => levels.len(),
            _ => 1,
        }
    }

    /// The candidates of a quantile selection, joint or not.
    pub fn candidates(&self) -> Option<&[i64]> {
        match self {
            Measurement::Quantile { candidates, .. }
            | Measurement::JointQuantiles { candidates, .. } => Some(candidates),
            _ => None,
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
    /// Its exact half-widths at `1 − 0.05/2` and `1 − 0.05/3`: what an
    /// interval combining two or three measurements asks of each (by the
    /// union bound all hold together with probability ≥ 95%). Computed once
    /// here, not per window.
    pub joint_half_widths: [u128; 2],
}

impl MeasurementPlan {
    /// The half-width for an interval combining `k` (2 or 3) measurements.
    pub fn joint_half_width(&self, k: usize) -> u128 {
        self.joint_half_widths[k - 2]
    }
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
    /// A group of a grouped stream (its name is `<stream>[<key>]`).
    pub group: Option<GroupOf>,
    /// Private keys: the selection that binds the stream's slots.
    pub selection: Option<SelectionPlan>,
    /// The device-limit alarm of each lane, when `device_alarm_share > 0`.
    pub alarm: Option<AlarmPlan>,
    /// The quantiles' 95% rank interval, in readings, where one holds
    /// (`rank.rs`).
    pub rank_half_width: Option<f64>,
}

/// A stream's private-key selection and what it spends per horizon (at
/// most; its noise scale is rounded up).
#[derive(Debug, Clone, PartialEq)]
pub struct SelectionPlan {
    pub mechanism: crate::keyselect::KeySelection,
    pub spent: BigRational,
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

pub(super) fn sensitivity_of(
    m: &Measurement,
    nb: Neighbouring,
    u: &Universe,
    n: u64,
) -> Sensitivity {
    let stat = match m {
        Measurement::Count => Statistic::Count,
        Measurement::CentredSum => Statistic::CentredSum,
        Measurement::Sum => Statistic::Sum,
        Measurement::CentredSumSq => Statistic::CentredSumSq,
        Measurement::Histogram { .. } => Statistic::Histogram,
        Measurement::Boundary => Statistic::BoundaryCount,
        Measurement::Quantile { level, .. } => {
            // Rank units (the utilities' 1/den units divided out).
            return Sensitivity::scalar(BigRational::new(
                level.utility_sensitivity(nb).into(),
                level.den.into(),
            ));
        }
        // Two gap counts per reading (crate::joint), in rank units.
        Measurement::JointQuantiles { .. } => {
            return Sensitivity::scalar(BigRational::from_integer((2 * nb.k).into()));
        }
    };
    stat.sensitivity(nb, u, n)
}

/// The sensitivity of [`crate::joint::utilities`] (units of `1/den`):
/// two gap counts per reading, `k` readings.
pub fn joint_utility_sensitivity(nb: Neighbouring) -> u64 {
    2 * u64::from(nb.k) * QuantileLevel::DEN as u64
}

/// The device-limit alarm's plan for `spec` (none without
/// `device_alarm_share`): a `G`-th of the stream's alarm share per group's
/// lane, as for running totals; refused when its share leaves the windows
/// nothing or its ε falls below the measurement floor.
fn alarm_plan(privacy: &PrivacySpec, spec: &StreamSpec) -> Result<Option<AlarmPlan>, PlanError> {
    let a = spec.device_alarm_share;
    if a == 0.0 {
        return Ok(None);
    }
    let budget = rational::exact(privacy.budget.per_horizon)
        * rational::decimal(spec.budget_share)
        * rational::decimal(a)
        / BigRational::from_integer(grouped::groups_per_device(spec).into());
    let epsilon = AlarmPlan::epsilon_for(privacy.budget.measure, &budget);
    if epsilon.is_nan() || epsilon < MIN_MEASUREMENT_EPSILON {
        return Err(field_err(
            spec,
            "device_alarm_share",
            format!(
                "the alarm would get ε = {:e} per check, below the floor {MIN_MEASUREMENT_EPSILON:e}: \
                 raise device_alarm_share or the budget",
                epsilon
            ),
        ));
    }
    Ok(Some(AlarmPlan::calibrate(privacy.budget.measure, &budget)))
}

/// `device_alarm_share` in its range, leaving the windows a share.
fn check_alarm(spec: &StreamSpec) -> Result<(), PlanError> {
    let a = spec.device_alarm_share;
    if !(a.is_finite() && (0.0..1.0).contains(&a)) {
        return Err(field_err(
            spec,
            "device_alarm_share",
            format!("must be in [0, 1), got {a}"),
        ));
    }
    let taken = a + spec.running_share + grouped::selection_share(spec);
    if taken >= 1.0 {
        return Err(field_err(
            spec,
            "device_alarm_share",
            format!(
                "with running_share and key_selection_share it takes {taken} of the stream's budget, \
                 leaving its windows nothing; lower one of them"
            ),
        ));
    }
    Ok(())
}

/// The running-totals settings, each in its range.
fn check_running(spec: &StreamSpec) -> Result<(), PlanError> {
    let r = spec.running_share;
    if !(r.is_finite() && (0.0..1.0).contains(&r)) {
        return Err(field_err(
            spec,
            "running_share",
            format!("must be in [0, 1), got {r}"),
        ));
    }
    if !(2..=1u64 << 40).contains(&spec.running_lifetime) {
        return Err(field_err(
            spec,
            "running_lifetime",
            "must be in [2, 2^40] windows",
        ));
    }
    Ok(())
}

/// One measurement's mechanism for `budget`: a selection for quantiles
/// (utilities in units of 1/den), else additive noise for `sensitivity`;
/// with its exact 95% half-width and the `1 − 0.05/k` ones (`k` = 2, 3).
fn calibrate_one(
    m: Measurement,
    sensitivity: Sensitivity,
    budget: &BigRational,
    measure: Measure,
    nb: Neighbouring,
) -> MeasurementPlan {
    let (mechanism, spent) = match &m {
        Measurement::Quantile { level, .. } => {
            let du = level.utility_sensitivity(nb);
            let (sel, spent) = Selection::calibrate(measure, du, budget);
            (Mechanism::Select(sel), spent)
        }
        Measurement::JointQuantiles { .. } => {
            let du = joint_utility_sensitivity(nb);
            let (sel, spent) = Selection::calibrate(measure, du, budget);
            (Mechanism::Select(sel), spent)
        }
        _ => {
            let (noise, spent) = Noise::calibrate(measure, &sensitivity, budget);
            (Mechanism::Additive(noise), spent)
        }
    };
    let at = |level: f64| match &mechanism {
        Mechanism::Additive(n) => accuracy::half_width_at(n, level),
        Mechanism::Select(_) => 0,
    };
    let miss = 1.0 - accuracy::LEVEL;
    let (half_width, joint_half_widths) = (
        at(accuracy::LEVEL),
        [at(1.0 - miss / 2.0), at(1.0 - miss / 3.0)],
    );
    MeasurementPlan {
        measurement: m,
        sensitivity,
        mechanism,
        spent,
        half_width,
        joint_half_widths,
    }
}

/// Calibrate a stream's measurements `ms` to its per-window allocation
/// (`None`: nothing noisy to calibrate): each measurement's sensitivity,
/// budget (split evenly or by the stream's targets), mechanism and
/// intervals. Returns them and the per-window spend.
fn calibrate_measurements(
    privacy: &PrivacySpec,
    spec: &StreamSpec,
    u: &Universe,
    ms: Vec<Measurement>,
    alloc: Option<&BigRational>,
) -> Result<(Vec<MeasurementPlan>, BigRational), PlanError> {
    let nb = Neighbouring::new(privacy.relation, spec.max_readings_per_device);
    let mut measurements = Vec::new();
    let mut per_window = BigRational::zero();
    // No noisy measurement (e.g. only `count` under change-one, where
    // it is public): nothing to calibrate, nothing spent per window.
    let no_budget = BigRational::zero();
    let budget = alloc.unwrap_or(&no_budget);
    let measure = privacy.budget.measure;
    let (floor, field, what) = match measure {
        Measure::Pure => (MIN_MEASUREMENT_EPSILON, "epsilon_per_device", "ε"),
        Measure::Zcdp => (MIN_MEASUREMENT_RHO, "rho_per_device", "ρ"),
    };
    if !ms.is_empty() && rational::to_f64(budget) < floor {
        return Err(field_err(
            spec,
            field,
            format!(
                "each of this stream's {} measurements would get {what} = {:e} per window, below the floor {floor:e}: \
                 raise privacy.{field} or budget_share, or lower max_windows_per_device",
                ms.len(),
                rational::to_f64(budget)
            ),
        ));
    }
    let sensitivities: Vec<Sensitivity> = ms
        .iter()
        .map(|m| sensitivity_of(m, nb, u, spec.window_size))
        .collect();
    // The stream's per-window budget, split evenly or by its targets.
    let budgets = match ms.iter().map(Measurement::weight).sum::<usize>() {
        0 => vec![],
        count => targets::split(
            spec,
            privacy.relation,
            measure,
            u.resolution(),
            &ms.iter().zip(&sensitivities).collect::<Vec<_>>(),
            &(budget * BigRational::from_integer(count.into())),
            floor,
        )?,
    };
    for ((m, sensitivity), budget) in ms.into_iter().zip(sensitivities).zip(&budgets) {
        let planned = calibrate_one(m, sensitivity, budget, measure, nb);
        per_window += &planned.spent;
        measurements.push(planned);
    }
    Ok((measurements, per_window))
}

/// What a planned stream spends, as the accountant composes it.
fn spend_of(s: &StreamPlan) -> StreamSpend {
    StreamSpend {
        name: s.spec.name.clone(),
        selection: s
            .selection
            .as_ref()
            .map_or_else(BigRational::zero, |x| x.spent.clone()),
        windows_per_horizon: s.spec.max_windows_per_device,
        groups_per_device: grouped::groups_per_device(&s.spec),
        per_window: s.per_window.clone(),
        per_horizon: s.fixed_per_group(),
    }
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
        grouped::validate_groups(spec)?;
        let ms = super::measurements::measurements_for(spec, &u, privacy.relation)?;
        check_running(spec)?;
        check_alarm(spec)?;
        prepared.push((spec, u, ms));
    }
    let claims: Vec<StreamClaim> = prepared
        .iter()
        .map(|(s, _, ms)| StreamClaim {
            name: s.name.clone(),
            // What running totals and key selection take is not split
            // over windows.
            share: s.budget_share,
            window_fraction: rational::int(1)
                - rational::decimal(grouped::selection_share(s))
                - rational::decimal(s.running_share)
                - rational::decimal(s.device_alarm_share),
            windows_per_horizon: s.max_windows_per_device,
            groups_per_device: grouped::groups_per_device(s),
            measurements: ms.iter().map(Measurement::weight).sum(),
        })
        .collect();
    let allocations = accountant.allocate(&claims)?;
    let mut streams = Vec::new();
    for ((spec, u, ms), alloc) in prepared.into_iter().zip(allocations) {
        let nb = Neighbouring::new(privacy.relation, spec.max_readings_per_device);
        let (measurements, per_window) =
            calibrate_measurements(privacy, spec, &u, ms, alloc.as_ref())?;
        let running = super::running::running_plan(privacy, spec, &u)?;
        let selection = grouped::key_selection(privacy, spec)?;
        let alarm = alarm_plan(privacy, spec)?;
        let rank_half_width =
            super::rank::half_width(&measurements, &u, nb, spec.adaptive_quantiles);
        streams.push(StreamPlan {
            spec: spec.clone(),
            universe: u,
            neighbouring: nb,
            measure,
            measurements,
            per_window,
            running,
            group: None,
            selection: selection.map(|(mechanism, spent)| SelectionPlan { mechanism, spent }),
            rank_half_width,
            alarm,
        });
    }
    let spends: Vec<StreamSpend> = streams.iter().map(spend_of).collect();
    let per_horizon = accountant.compose(&spends)?;
    Ok(Plan {
        privacy: privacy.clone(),
        streams: streams.into_iter().flat_map(grouped::expand).collect(),
        per_horizon,
    })
}
