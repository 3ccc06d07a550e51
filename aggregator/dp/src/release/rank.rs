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
//! ordered intervals keeps each in its interval).
//!
//! Under the adaptive prior (`adaptive.rs`) the `far` candidates outside a
//! window's `f` favoured ones lose a penalty of `γ_P` nats. The candidate
//! covering rank `q·n` then scores at least `−γ_P` after the penalty, so a
//! far candidate beyond `τ` is at least `ε·τ/(2Δu)` nats below the best and
//! a favoured one at least that less `γ_P`: the union bound's `m` becomes
//! `far + f·e^(γ_P)` (≈ `far·(f + 1)`), which the stated `τ` takes at its
//! largest over every favoured count a window of the stream can have, so
//! the interval is one public number for every window. Conservative; Monte
//! Carlo in the `release` tests. None where `u* = 0` is not guaranteed
//! (declared candidates that skip grid points) and for joint quantiles,
//! whose utility is over tuples.

use super::{Measurement, MeasurementPlan, Mechanism};
use crate::accuracy::LEVEL;
use crate::mechanism::Selection;
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
/// `adaptive`: the stream's selections may carry the prior of `adaptive.rs`.
pub(super) fn half_width(
    measurements: &[MeasurementPlan],
    u: &Universe,
    nb: Neighbouring,
    adaptive: bool,
) -> Option<f64> {
    let levels: Vec<&MeasurementPlan> = measurements
        .iter()
        .filter(|m| m.measurement.candidates().is_some())
        .collect();
    let count = levels.len();
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
        let miss = (1.0 - LEVEL) / count as f64;
        let most = adaptive.then(|| super::adaptive::max_favoured(candidates, count));
        let tau =
            2.0 * du * (union_size(sel, candidates.len(), most) / miss).ln() / sel.epsilon_f64();
        Some(Some(widest.map_or(tau, |w| w.max(tau))))
    })?
}

/// The union bound's `m` for `m` candidates: `m` itself without a prior;
/// with one whose favoured sets hold at most `most` candidates, the largest
/// `far + f·e^(γ_P)` over every favoured count `f` (a window's set always
/// holds the escape grid; `m` itself stands for a set of every candidate).
fn union_size(sel: &Selection, m: usize, most: Option<usize>) -> f64 {
    let Some(most) = most else {
        return m as f64;
    };
    (1..=most.min(m)).fold(m as f64, |widest, f| {
        let far = m - f;
        let penalty = super::adaptive::far_penalty(sel, far);
        widest.max(far as f64 + f as f64 * sel.gamma_f64(penalty).exp())
    })
}
