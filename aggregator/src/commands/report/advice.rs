//! What would bring a flagged statistic within its bound: a window size, a
//! budget, or fewer windows per device. Each starts from how the mechanism
//! scales and is checked by planning the stream again with the change —
//! the same accuracy functions `plan` reports — as it will be printed
//! (rounded the safe way), doubling until the plan meets it and then
//! bisecting back, so every suggestion, applied as written, removes its
//! warning. Scaling rules alone did not: a std's half-width is capped at
//! half the range and does not fall as 1/n, and a budget printed rounded
//! down missed its bound (ε = 1.797 gave ±6.2515 against 6.25).
//!
//! Post-processing of public parameters: no data, no privacy cost.

use crate::dp::release::{plan, PrivacySpec, StreamSpec, MAX_WINDOW_SIZE};

/// A stream's declaration and the plan's privacy, to plan again with one
/// setting changed.
pub(super) struct Replan<'a> {
    pub privacy: &'a PrivacySpec,
    pub spec: &'a StreamSpec,
}

/// Largest budget factor suggested (beyond it the suggestion is omitted).
const MAX_FACTOR: f64 = 1e6;
/// Doublings per suggestion at most: each starts from the mechanism's
/// scaling (a mean's noise falls as 1/n, every scale as 1/ε or 1/√ρ, the
/// per-window budget as 1/W), which a capped half-width (a std's is at
/// most half the range) understates.
const TRIES: usize = 24;

impl Replan<'_> {
    /// The half-width of statistic `name` (quantile `level`) when the
    /// stream is planned with `privacy` and `spec`; `None` if that plan is
    /// refused or states none.
    fn half_width(
        privacy: &PrivacySpec,
        spec: &StreamSpec,
        name: &str,
        level: Option<f64>,
    ) -> Option<f64> {
        let p = plan(privacy, std::slice::from_ref(spec)).ok()?;
        let s = p
            .streams
            .iter()
            .find(|s| s.group.as_ref().is_none_or(|g| g.index == 0))?;
        s.describe()
            .into_iter()
            .find(|d| d.name == name && d.level == level)?
            .half_width
    }

    /// Whether the statistic meets `bound` under the changed settings.
    fn meets(
        privacy: &PrivacySpec,
        spec: &StreamSpec,
        (name, level, bound): (&str, Option<f64>, f64),
    ) -> bool {
        Self::half_width(privacy, spec, name, level).is_some_and(|h| h <= bound * (1.0 + 1e-9))
    }

    fn zcdp(&self) -> bool {
        self.privacy.budget.measure == crate::dp::mechanism::Measure::Zcdp
    }

    /// A window size `n` whose half-width meets `bound_at(n)` (count
    /// windows only; a histogram's bound grows with `n`): from today's `n`
    /// scaled by how far the half-width is over its bound (a mean's noise
    /// falls as 1/n; a bin's does not while its bound grows as n).
    pub fn window_size(
        &self,
        (name, level, hw): (&str, Option<f64>, f64),
        bound_at: impl Fn(u64) -> f64,
    ) -> Option<u64> {
        if self.spec.window_ms.is_some() {
            return None;
        }
        let n = self.spec.window_size.max(1);
        let first = ((n as f64) * hw / bound_at(n)).ceil().max(n as f64 + 1.0);
        let ok = |x: f64| {
            let mut s = self.spec.clone();
            s.window_size = x as u64;
            x <= MAX_WINDOW_SIZE as f64
                && Self::meets(self.privacy, &s, (name, level, bound_at(x as u64)))
        };
        upward(first, MAX_WINDOW_SIZE as f64, f64::ceil, ok).map(|x| x as u64)
    }

    /// A budget per horizon that meets `bound`, as printed (4 significant
    /// digits, rounded up, and checked as printed): from today's scaled as
    /// the noise falls (1/ε, or 1/√ρ).
    pub fn budget(&self, (name, level, hw, bound): (&str, Option<f64>, f64, f64)) -> Option<f64> {
        let now = self.privacy.budget.per_horizon;
        let over = hw / bound;
        let first = now * if self.zcdp() { over * over } else { over };
        let ok = |b: f64| {
            let mut p = self.privacy.clone();
            p.budget.per_horizon = b;
            Self::meets(&p, self.spec, (name, level, bound))
        };
        upward(first.max(now), now * MAX_FACTOR, |b| round_up(b, 4), ok)
    }

    /// A number of windows per device per horizon, below today's, that
    /// meets `bound` (the per-window budget is the horizon's over W): the
    /// most the search finds, from today's scaled as the noise grows.
    pub fn windows(&self, (name, level, hw, bound): (&str, Option<f64>, f64, f64)) -> Option<u32> {
        let w = f64::from(self.spec.max_windows_per_device);
        let ok = |x: f64| {
            let mut s = self.spec.clone();
            s.max_windows_per_device = x as u32;
            x >= 1.0 && Self::meets(self.privacy, &s, (name, level, bound))
        };
        if w < 2.0 || !ok(1.0) {
            return None;
        }
        let under = bound / hw;
        let guess = (w * if self.zcdp() { under * under } else { under })
            .floor()
            .clamp(1.0, w - 1.0);
        // Down by halves to one that meets, then up between it and the
        // first that failed.
        let (mut good, mut bad) = (guess, w);
        for _ in 0..TRIES {
            if ok(good) {
                break;
            }
            bad = good;
            good = (good / 2.0).floor().max(1.0);
        }
        for _ in 0..REFINE {
            let mid = ((good + bad) / 2.0).floor();
            if mid <= good {
                break;
            }
            if ok(mid) {
                good = mid;
            } else {
                bad = mid;
            }
        }
        Some(good as u32)
    }
}

/// Bisection steps after the doubling: within ≈ 2% of the least.
const REFINE: usize = 6;

/// The least value the search finds that passes `ok` (monotone): `first`,
/// else doubling up to `max` until one passes, then bisecting between the
/// last that failed and it; each candidate as `shown` makes it (rounded
/// up, so what is printed is what was checked).
fn upward(
    first: f64,
    max: f64,
    shown: impl Fn(f64) -> f64,
    ok: impl Fn(f64) -> bool,
) -> Option<f64> {
    let (mut bad, mut hi) = (f64::NAN, shown(first));
    for _ in 0..TRIES {
        if hi > max {
            return None;
        }
        if ok(hi) {
            break;
        }
        bad = hi;
        hi = shown(hi * 2.0);
    }
    if hi > max || (bad.is_nan() && !ok(hi)) {
        return None;
    }
    if !bad.is_nan() {
        for _ in 0..REFINE {
            let mid = shown((bad + hi) / 2.0);
            if mid >= hi || mid <= bad {
                break;
            }
            if ok(mid) {
                hi = mid;
            } else {
                bad = mid;
            }
        }
    }
    Some(hi)
}

/// `x` rounded up to `digits` significant digits.
fn round_up(x: f64, digits: i32) -> f64 {
    if !(x.is_finite() && x > 0.0) {
        return x;
    }
    let scale = 10f64.powi(digits - 1 - x.log10().floor() as i32);
    let up = (x * scale).ceil() / scale;
    // The division may land a hair below; the printed form is what counts.
    format!("{up:.*e}", (digits - 1) as usize)
        .parse()
        .unwrap_or(up)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_is_up() {
        assert_eq!(round_up(1.7971, 4), 1.798);
        assert_eq!(round_up(1.797, 4), 1.797);
        assert_eq!(round_up(0.0123411, 4), 0.01235);
    }
}
