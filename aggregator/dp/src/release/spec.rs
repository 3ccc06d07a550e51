//! What an operator declares per stream ([`StreamSpec`]) and for the whole
//! service ([`PrivacySpec`]), the hard limits on every field, and their
//! validation (each error names the field at fault).

use super::*;
use crate::accountant::Budget;
use crate::relation::Relation;
use crate::universe::{Universe, UniverseError};
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
    /// The share of readings at the universe's bounds: top-coded, or on a
    /// bound already (a universe gone stale shows here first).
    Clamped,
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
            StatKind::Clamped => "clamped",
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
/// Smallest ρ one measurement may be calibrated to under zCDP (about the
/// same noise as [`MIN_MEASUREMENT_EPSILON`]): below it σ grows past 10¹¹
/// units and the exact sampler's arithmetic grows with it.
pub const MIN_MEASUREMENT_RHO: f64 = 1e-22;
/// Stream names: what they may hold (they are parts of keys such as
/// `<stream>/<partition>/<seq>`, so no `/`).
pub const MAX_STREAM_NAME: usize = 128;

/// Largest candidate grid built by default for quantiles.
pub const MAX_DEFAULT_CANDIDATES: u64 = 100_001;

/// A stream as declared (the `[[stream]]` table of the config).
/// `Serialize`: the service derives a plan's identity from it (every field
/// counts unless the service says why not).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamSpec {
    pub name: String,
    pub lower: f64,
    pub upper: f64,
    pub resolution: f64,
    /// Count windows (change-one): `n`, public. 0 with time windows.
    pub window_size: u64,
    /// Time windows (add-remove): their length in milliseconds, aligned to
    /// the epoch (the service checks that it divides the horizon).
    pub window_ms: Option<u64>,
    /// `k`.
    pub max_readings_per_device: u32,
    /// `W` per horizon.
    pub max_windows_per_device: u32,
    pub budget_share: f64,
    pub statistics: Vec<StatKind>,
    pub histogram_edges: Vec<f64>,
    pub quantiles: Vec<f64>,
    /// Candidate values for quantiles; default: every grid point (at most
    /// [`MAX_DEFAULT_CANDIDATES`]).
    pub quantile_candidates: Option<Vec<f64>>,
    /// Draw each window's quantile candidates from the lane's earlier
    /// releases (a band around them and a coarse escape grid) rather than
    /// every declared candidate: see `super::adaptive`.
    pub adaptive_quantiles: bool,
    /// Release every quantile level by one joint selection (change-one,
    /// 2–4 levels: [`crate::joint`]) instead of splitting the budget.
    pub joint_quantiles: bool,
    /// Accuracy targets: a statistic's 95% half-width (stream units; the
    /// histogram per bin, `clamped` as a share, `variance` in units²). The
    /// budget is split so each is met (`super::targets`); empty: evenly.
    pub target_error: Vec<(StatKind, f64)>,
    /// Count windows: close a window that has waited this long (ms of event
    /// time) by padding it to `n` with the midpoint; `None`: wait for `n`.
    pub window_timeout_ms: Option<u64>,
    /// Share of this stream's budget spent on running totals (sum, and the
    /// histogram's bins if declared) released with every window; 0: none.
    pub running_share: f64,
    /// Lifetime (windows per partition) the running totals are tuned for: the
    /// BLT stays private beyond it (error then grows faster); the pure-DP
    /// tree stops there. Rounded up to a power of two.
    pub running_lifetime: u64,
    /// Share of this stream's budget spent on the device-limit alarm
    /// (`crate::alarm`) of each of its lanes; 0: no alarm.
    pub device_alarm_share: f64,
    /// `group_by`: released per group of a public key set (one planned
    /// stream per group, `super::grouped`); `None`: one release.
    pub groups: Option<GroupSpec>,
}

/// Privacy settings shared by all streams.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PrivacySpec {
    pub relation: Relation,
    pub budget: Budget,
}

pub(super) fn field_err(
    spec: &StreamSpec,
    field: &'static str,
    message: impl Into<String>,
) -> PlanError {
    PlanError::Field {
        stream: spec.name.clone(),
        field,
        message: message.into(),
    }
}

pub(super) fn universe_err(spec: &StreamSpec, e: UniverseError) -> PlanError {
    let field = match &e {
        UniverseError::Resolution(_) => "resolution",
        UniverseError::NotFinite { field, .. }
        | UniverseError::OffGrid { field, .. }
        | UniverseError::TooLarge { field, .. } => field,
        UniverseError::Order { .. } => "lower",
    };
    field_err(spec, field, e.to_string())
}

/// Readings a window may hold, for the overflow proof: `n` for count
/// windows, the windower's bound for time windows.
pub(super) fn max_window_readings(spec: &StreamSpec) -> u64 {
    if spec.window_ms.is_some() {
        MAX_TIME_WINDOW_READINGS
    } else {
        spec.window_size
    }
}

/// Most readings a time window holds (the windower drops more, counted).
pub const MAX_TIME_WINDOW_READINGS: u64 = 1 << 32;

/// The windows the relation needs: time windows (no `window_size` or
/// `window_timeout`) under add-remove, count windows of
/// `[1, MAX_WINDOW_SIZE]` under change-one.
fn check_windows(spec: &StreamSpec, relation: Relation) -> Result<(), PlanError> {
    match (relation, &spec.window_ms) {
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
            if spec.window_timeout_ms.is_some() {
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
    Ok(())
}

/// A declaration's own settings, each in its range (name, universe,
/// windows, caps, levels, exact-sum overflow); returns its universe.
pub(super) fn validate_spec(spec: &StreamSpec, relation: Relation) -> Result<Universe, PlanError> {
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
    check_windows(spec, relation)?;
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
