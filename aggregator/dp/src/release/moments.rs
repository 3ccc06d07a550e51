//! Variance and std of a window from its noisy centred sums, with a 95%
//! interval (change-one: `n` is public).
//!
//! Privacy argument: everything here is post-processing of the two noisy
//! measurements (`Σc`, `Σc²`) and public parameters (`n`, the noise
//! distributions, the universe), so it costs nothing.
//!
//! With `c = 2x − L − U` (half units), noisy `S₁ = Σc + e₁`, `S₂ = Σc² + e₂`
//! and `m̂ = S₁/n`, the estimate `S₂/n − m̂²` of the centred variance has
//! error `e₂/n − 2m·e₁/n − e₁²/n²` with `m` the true centred mean, so its
//! bias is `−Var(e₁)/n²` (`bias`; not corrected: under heavy noise the
//! correction alone exceeds the universe's largest variance and the clamp
//! would erase the data). `|m| ≤ |m̂| + |e₁|/n` (clamping `S₁` into
//! `[−nΔ, nΔ]`, which holds the truth, only moves it closer). With `h₁`,
//! `h₂` the exact 97.5% half-widths of `e₁`, `e₂`, both `|eᵢ| ≤ hᵢ` hold
//! with probability ≥ 95% (union bound), and then the error is at most
//! `h₂/n + 2(|m̂| + h₁/n)·h₁/n + h₁²/n²`. The true variance also lies in
//! `[0, Δ²/4]`: the released value is clamped there and the interval,
//! centred on the released value, is cut to it, so a released 0 comes with
//! the width of what the noise allows instead of looking exact.

use super::MeasurementPlan;
#[cfg(test)]
use crate::mechanism::Noise;

/// A released variance (units²) with the interval around the truth.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Spread {
    /// The estimate clamped into `[0, Δ²/4]`.
    pub variance: f64,
    /// The 95% interval for the true variance, within `[0, Δ²/4]`.
    pub low: f64,
    pub high: f64,
}

impl Spread {
    /// A released variance and the range the truth lies in.
    pub fn new(variance: f64, low: f64, high: f64) -> Self {
        Self {
            variance,
            low,
            high,
        }
    }

    /// The smallest symmetric half-width around `value` that holds `[lo, hi]`.
    fn half_width(value: f64, lo: f64, hi: f64) -> f64 {
        (value - lo).max(hi - value).max(0.0)
    }

    /// The variance's half-width (units²).
    pub fn variance_half_width(&self) -> f64 {
        Self::half_width(self.variance, self.low, self.high)
    }

    /// The std's half-width (units): the interval's square roots.
    pub fn std_half_width(&self) -> f64 {
        Self::half_width(self.variance.sqrt(), self.low.sqrt(), self.high.sqrt())
    }
}

/// The variance from clamped `s1` (half units), `s2` (quarter units²) of
/// `n` readings, measured by `plans` (`Σc`, `Σc²`), universe width `width`
/// (units).
pub(super) fn spread(s1: f64, s2: f64, n: f64, plans: [&MeasurementPlan; 2], width: f64) -> Spread {
    let m = s1 / n;
    let centred = s2 / n - m * m;
    let (h1, h2) = (
        plans[0].joint_half_width(2) as f64,
        plans[1].joint_half_width(2) as f64,
    );
    let err = h2 / n + 2.0 * (m.abs() + h1 / n) * h1 / n + h1 * h1 / (n * n);
    // Quarter units² → units².
    let (v, e, top) = (centred / 4.0, err / 4.0, width * width / 4.0);
    // Around the clamped value: a negative estimate still shows how much
    // spread the noise leaves room for (its interval is [0, e], never [0, 0]).
    let released = v.clamp(0.0, top);
    Spread {
        variance: released,
        low: (v - e).clamp(0.0, top),
        high: (released + e).min(top),
    }
}

/// The expected error of the unclamped variance estimate (units²) for `n`
/// readings and noise `e1` on the centred sum: `−Var(e₁)/(4n²)`.
#[cfg(test)]
pub(super) fn bias(n: f64, e1: &Noise) -> f64 {
    -e1.variance() / (4.0 * n * n)
}
