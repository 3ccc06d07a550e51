//! What would bring a flagged statistic within its bound: a window size, a
//! budget, or fewer windows per device. Each is found by planning the
//! stream again with the change — the same accuracy functions `plan`
//! reports — and checked as it will be printed (rounded the safe way), so
//! every suggestion, applied as written, removes its warning. Scaling
//! rules of thumb did not: a std's half-width does not fall as 1/n, and a
//! budget printed rounded down missed its bound (ε = 1.797 gave ±6.2515
//! against 6.25).
//!
//! Post-processing of public parameters: no data, no privacy cost.

use crate::dp::release::{plan, PrivacySpec, StreamSpec, MAX_WINDOW_SIZE};

/// A stream's declaration and the plan's privacy, to plan again with one
/// setting changed.
pub(super) struct Replan<'a> {
    pub privacy: &'a PrivacySpec,
    pub spec: &'a StreamSpec,
}

/// Largest budget factor searched (beyond it the suggestion is omitted).
const MAX_FACTOR: f64 = 1e6;

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

    /// The least window size `n` whose half-width meets `bound_at(n)`
    /// (count windows only; a histogram's bound grows with `n`).
    pub fn window_size(
        &self,
        (name, level): (&str, Option<f64>),
        bound_at: impl Fn(u64) -> f64,
    ) -> Option<u64> {
        if self.spec.window_ms.is_some() {
            return None;
        }
        let with = |n: u64| {
            let mut s = self.spec.clone();
            s.window_size = n;
            Self::meets(self.privacy, &s, (name, level, bound_at(n)))
        };
        least_u64(self.spec.window_size.max(1), MAX_WINDOW_SIZE, with)
    }

    /// The least budget per horizon that meets `bound`, as printed (4
    /// significant digits, rounded up, then checked).
    pub fn budget(&self, stat: (&str, Option<f64>, f64)) -> Option<f64> {
        let now = self.privacy.budget.per_horizon;
        let with = |b: f64| {
            let mut p = self.privacy.clone();
            p.budget.per_horizon = b;
            Self::meets(&p, self.spec, stat)
        };
        let (mut lo, mut hi) = (now, now * 2.0);
        while !with(hi) {
            if hi > now * MAX_FACTOR {
                return None;
            }
            (lo, hi) = (hi, hi * 2.0);
        }
        for _ in 0..40 {
            let mid = (lo + hi) / 2.0;
            if with(mid) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        // Printed with 4 significant digits, rounded up; one step more
        // where the rounded figure still misses (it cannot, but it is
        // checked as printed).
        let mut shown = round_up(hi, 4);
        for _ in 0..10 {
            if with(shown) {
                return Some(shown);
            }
            shown = round_up(shown * (1.0 + 1e-4), 4);
        }
        None
    }

    /// The most windows per device per horizon (below today's) that meet
    /// `bound`.
    pub fn windows(&self, stat: (&str, Option<f64>, f64)) -> Option<u32> {
        let w = self.spec.max_windows_per_device;
        let with = |w: u32| {
            let mut s = self.spec.clone();
            s.max_windows_per_device = w;
            Self::meets(self.privacy, &s, stat)
        };
        if w <= 1 || !with(1) {
            return None;
        }
        // Largest w' in [1, w) that meets it: meeting is monotone in W.
        let (mut ok, mut bad) = (1u32, w);
        while bad - ok > 1 {
            let mid = ok + (bad - ok) / 2;
            if with(mid) {
                ok = mid;
            } else {
                bad = mid;
            }
        }
        Some(ok)
    }
}

/// The least `x` in `(from, max]` for which `ok(x)` holds (monotone), by
/// doubling then bisection; `None` if not even `max`.
fn least_u64(from: u64, max: u64, ok: impl Fn(u64) -> bool) -> Option<u64> {
    let (mut bad, mut hi) = (from, from.saturating_mul(2).min(max));
    while !ok(hi) {
        if hi >= max {
            return None;
        }
        (bad, hi) = (hi, hi.saturating_mul(2).min(max));
    }
    while hi - bad > 1 {
        let mid = bad + (hi - bad) / 2;
        if ok(mid) {
            hi = mid;
        } else {
            bad = mid;
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
    fn rounding_is_up_and_searches_find_the_least() {
        assert_eq!(round_up(1.7971, 4), 1.798);
        assert_eq!(round_up(1.797, 4), 1.797);
        assert_eq!(round_up(0.0123411, 4), 0.01235);
        assert_eq!(least_u64(10, 1000, |n| n >= 137), Some(137));
        assert_eq!(least_u64(10, 100, |n| n >= 137), None);
    }
}
