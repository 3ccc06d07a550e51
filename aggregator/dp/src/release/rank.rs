//! The rank interval of released quantiles: a half-width `τ` in readings
//! such that, with probability ≥ 95%, every released level `q` lies between
//! the window's true quantiles at ranks `q·n − τ` and `q·n + τ` (under
//! change-one, where `n` is public, the levels `q ± τ/n`: "p90" means
//! "somewhere between p88 and p92" when `τ/n = 0.02`).
//!
//! Privacy argument: `τ` depends on public parameters only (the selections'
//! ε, utility sensitivity and candidate count, the number of levels), so
//! publishing it costs nothing.
//!
//! Coverage: both selections (permute-and-flip under pure DP, the
//! exponential mechanism under zCDP) choose candidate `c` with probability
//! at most `exp(−ε·(u* − u_c)/(2Δu))`, `u*` the best utility (PF must
//! accept `c` when it visits it; EM's normaliser is at least the best
//! candidate's weight). The utility ([`crate::stats::quantile_utilities`])
//! is minus the distance, in ranks, from `q·n` to the ranks `c` covers, so
//! `u_c ≥ −τ` says exactly that `c` lies between the true quantiles at
//! ranks `q·n ± τ`. When the candidates are every grid point of the
//! universe some candidate covers rank `q·n` (`u* = 0`), so among `m`
//! candidates `P(u_c < −τ) ≤ m·exp(−ε·τ/(2Δu))`; with `L` levels, asking
//! each for `0.05/L` makes all hold together with probability ≥ 95% (union
//! bound), and then the sorted values hold too (sorting values that lie in
//! ordered intervals keeps each in its interval). Conservative; Monte Carlo
//! in the `release` tests. None where `u* = 0` is not guaranteed (declared
//! candidates that skip grid points, adaptive candidates after a lane's
//! first window) and for joint quantiles, whose utility is over tuples.

use super::{Measurement, MeasurementPlan, Mechanism};
use crate::accuracy::LEVEL;
use crate::relation::Neighbouring;
use crate::stats::QuantileLevel;
use crate::universe::Universe;

/// Whether `candidates` hold every grid point of `u` (then a candidate
/// covers every rank).
pub(super) fn covers_grid(candidates: &[i64], u: &Universe) -> bool {
    let grid = u.upper() - u.lower() + 1;
    if (candidates.len() as i64) < grid {
        return false;
    }
    let mut inside: Vec<i64> = candidates
        .iter()
        .copied()
        .filter(|c| (u.lower()..=u.upper()).contains(c))
        .collect();
    inside.sort_unstable();
    inside.dedup();
    inside.len() as i64 == grid
}

/// `τ` (readings) for a stream's quantile selections, or `None` (no
/// quantiles, a joint selection, or candidates that skip grid points).
pub(super) fn half_width(
    measurements: &[MeasurementPlan],
    u: &Universe,
    nb: Neighbouring,
) -> Option<f64> {
    let levels: Vec<&MeasurementPlan> = measurements
        .iter()
        .filter(|m| m.measurement.candidates().is_some())
        .collect();
    let count = levels.len() as f64;
    levels.iter().try_fold(None, |widest: Option<f64>, m| {
        let (Measurement::Quantile { level, candidates }, Mechanism::Select(sel)) =
            (&m.measurement, &m.mechanism)
        else {
            return None;
        };
        if !covers_grid(candidates, u) {
            return None;
        }
        let du = level.utility_sensitivity(nb) as f64 / QuantileLevel::DEN as f64;
        let miss = (1.0 - LEVEL) / count;
        let tau = 2.0 * du * (candidates.len() as f64 / miss).ln() / sel.epsilon_f64();
        Some(Some(widest.map_or(tau, |w| w.max(tau))))
    })?
}
