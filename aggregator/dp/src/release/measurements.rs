//! Which measurements a stream's declaration needs, validated: the noisy
//! count (add-remove, for the statistics that divide by it), the centred
//! sums, the histogram's edges, the boundary count, and the quantiles'
//! selections with their candidates.
//!
//! Privacy argument: none is calibrated here; each measurement's
//! sensitivity comes from [`crate::stats`] (`plan.rs` calibrates it). What
//! is decided here depends on the declaration only, never on data.

use super::*;
use crate::relation::Relation;
use crate::stats::QuantileLevel;
use crate::universe::Universe;

/// The histogram's measurement: its edges in grid units, at least two,
/// strictly increasing and covering the universe.
fn histogram_measurement(spec: &StreamSpec, u: &Universe) -> Result<Measurement, PlanError> {
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
    Ok(Measurement::Histogram { edges })
}

/// The quantile levels' selections: one per level, or one joint selection
/// (change-one only, without padding, 2 to `MAX_LEVELS` levels).
fn quantile_measurements(
    spec: &StreamSpec,
    u: &Universe,
    relation: Relation,
) -> Result<Vec<Measurement>, PlanError> {
    if spec.quantiles.is_empty() {
        return Err(field_err(
            spec,
            "quantiles",
            "declare at least one level in [0, 1]",
        ));
    }
    let candidates = quantile_candidates(spec, u)?;
    let mut levels = Vec::new();
    for &q in &spec.quantiles {
        let level = QuantileLevel::new(q)
            .ok_or_else(|| field_err(spec, "quantiles", format!("{q} is not in [0, 1]")))?;
        levels.push(level);
    }
    if spec.joint_quantiles {
        if relation != Relation::ChangeOne {
            return Err(field_err(
                spec,
                "joint_quantiles",
                "only under relation = \"change-one\" (under add-remove the per-level split, \
                 with its tighter sensitivity, is as accurate: see docs/performance.md, accuracy beside OpenDP)",
            ));
        }
        if spec.window_timeout_ms.is_some() {
            return Err(field_err(
                spec,
                "joint_quantiles",
                "not with window_timeout: padding puts many readings on the midpoint, and the joint \
                 selection's gap counts cannot split a tie block (its estimates fail on such atoms; \
                 the per-level selection handles them)",
            ));
        }
        if !(2..=crate::joint::MAX_LEVELS).contains(&levels.len()) {
            return Err(field_err(
                spec,
                "joint_quantiles",
                format!("needs 2 to {} quantile levels", crate::joint::MAX_LEVELS),
            ));
        }
        levels.sort_by_key(|l| l.num);
        return Ok(vec![Measurement::JointQuantiles { levels, candidates }]);
    }
    Ok(levels
        .into_iter()
        .map(|level| Measurement::Quantile {
            level,
            candidates: candidates.clone(),
        })
        .collect())
}

/// The quantile candidates in grid units: the declared ones (sorted,
/// distinct, not empty), else every grid point up to
/// `MAX_DEFAULT_CANDIDATES`.
fn quantile_candidates(spec: &StreamSpec, u: &Universe) -> Result<Vec<i64>, PlanError> {
    match &spec.quantile_candidates {
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
            Ok(units)
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
            Ok((u.lower()..=u.upper()).collect())
        }
    }
}

/// The measurements a stream needs, validated.
pub(super) fn measurements_for(
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
    // Add-remove: a noisy count only for statistics that divide by it (or
    // ask for it); a histogram projects onto its own noisy total, a lone
    // sum is measured directly.
    // The clamped share divides by the count as the moments do.
    let moments = [Mean, Variance, Std, Clamped].iter().any(|&k| has(k));
    let count = relation == Relation::AddRemove && (has(Count) || moments);
    if count {
        out.push(Measurement::Count);
    }
    let sums = [Mean, Variance, Std].iter().any(|&k| has(k));
    if sums || (has(Sum) && (count || relation == Relation::ChangeOne)) {
        out.push(Measurement::CentredSum);
    } else if has(Sum) {
        out.push(Measurement::Sum);
    }
    if has(Variance) || has(Std) {
        out.push(Measurement::CentredSumSq);
    }
    if has(Histogram) {
        out.push(histogram_measurement(spec, u)?);
    } else if !spec.histogram_edges.is_empty() {
        return Err(field_err(
            spec,
            "histogram_edges",
            "given but \"histogram\" is not among the statistics",
        ));
    }
    if has(Clamped) {
        out.push(Measurement::Boundary);
    }
    if has(Quantiles) {
        out.extend(quantile_measurements(spec, u, relation)?);
    } else if !spec.quantiles.is_empty() {
        return Err(field_err(
            spec,
            "quantiles",
            "given but \"quantiles\" is not among the statistics",
        ));
    }
    if spec.joint_quantiles && !has(Quantiles) {
        return Err(field_err(
            spec,
            "joint_quantiles",
            "set but \"quantiles\" is not among the statistics",
        ));
    }
    if spec.adaptive_quantiles && !has(Quantiles) {
        return Err(field_err(
            spec,
            "adaptive_quantiles",
            "set but \"quantiles\" is not among the statistics",
        ));
    }
    Ok(out)
}
