//! Accuracy: exact 95% interval half-widths of the discrete noise.
//!
//! For noise `Z` the half-width is the smallest integer `h` with
//! `P(|Z| ≤ h) ≥ 0.95`, computed from the discrete distribution itself (not a
//! continuous approximation), so `value ± h` covers the truth with
//! probability at least 95%. Computed from public parameters only.

use super::mechanism::Noise;
use super::sampler::{DiscreteGaussian, DiscreteLaplace};

/// Coverage level of every interval FleetDP reports.
pub const LEVEL: f64 = 0.95;

/// `P(|Z| > h)` for the discrete Laplace of scale `t`:
/// `2·r^(h+1)/(1+r)` with `r = e^(−1/t)`.
pub fn laplace_tail(d: &DiscreteLaplace, h: u128) -> f64 {
    let t = d.scale_f64();
    let r = (-1.0 / t).exp();
    2.0 * (-((h + 1) as f64) / t).exp() / (1.0 + r)
}

/// Above this scale f64 cannot tell `h` from `h ± 1`: the discrete
/// Laplace's half-width is taken in closed form ([`laplace_half_width`]).
pub const LAPLACE_CLOSED_FORM_SCALE: f64 = 1e9;

/// Smallest `h` with `P(|Z| ≤ h) ≥ 0.95` for the discrete Laplace.
///
/// Above [`LAPLACE_CLOSED_FORM_SCALE`]: `P(|Z| > h) = 2r^{h+1}/(1+r) ≤
/// e^{−(h+1)/t}·(1 + 1/(2t))`, which is ≤ 0.05 once `h + 1 ≥ t·ln 20 + 1`;
/// `h = ⌈t·ln 20·(1 + 10⁻¹²)⌉ + 1` covers that with room for f64 rounding
/// (it may exceed the smallest such `h` by a relative 10⁻¹²).
pub fn laplace_half_width(d: &DiscreteLaplace) -> u128 {
    laplace_half_width_at(d, LEVEL)
}

/// [`laplace_half_width`] at coverage `level` (the closed form with
/// `ln(1/(1 − level))` for `ln 20`).
fn laplace_half_width_at(d: &DiscreteLaplace, level: f64) -> u128 {
    let t = d.scale_f64();
    if t > LAPLACE_CLOSED_FORM_SCALE {
        return (t * (1.0 / (1.0 - level)).ln() * (1.0 + 1e-12)).ceil() as u128 + 1;
    }
    let r = (-1.0 / t).exp();
    let guess = (((1.0 - level) / 2.0 * (1.0 + r)).ln() * -t).ceil() - 1.0;
    let mut h = guess.max(0.0) as u128;
    while h > 0 && laplace_tail(d, h - 1) <= 1.0 - level {
        h -= 1;
    }
    while laplace_tail(d, h) > 1.0 - level {
        h += 1;
    }
    h
}

/// The standard normal's two-sided quantile: `z` with `erf(z/√2) = level`
/// (bisection; to 10⁻¹²).
fn normal_two_sided(level: f64) -> f64 {
    let (mut lo, mut hi) = (0.0f64, 10.0f64);
    while hi - lo > 1e-12 {
        let mid = (lo + hi) / 2.0;
        if libm::erf(mid / std::f64::consts::SQRT_2) < level {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

/// Above this σ the discrete Gaussian's central mass is computed in closed
/// form ([`gaussian_half_width`]); below it by summing the pmf.
pub const GAUSSIAN_CLOSED_FORM_SIGMA: f64 = 1000.0;

/// Smallest `h` with `P(|Z| ≤ h) ≥ 0.95` for the discrete Gaussian.
///
/// For σ ≤ [`GAUSSIAN_CLOSED_FORM_SIGMA`], by summing its pmf. Above, summing
/// would take ~16σ terms (seconds at σ = 10⁶), so the mass uses the midpoint
/// rule: `Σ_{|x|≤h} e^{−x²/2σ²} / Σ_x e^{−x²/2σ²} = erf((h+½)/(σ√2)) + E`,
/// where the normaliser's Poisson-summation error is below `e^{−2π²σ²}` and
/// the Euler–Maclaurin endpoint term bounds `|E| ≤ 10⁻²/σ² ≤ 10⁻⁸`. Asking
/// for `0.95 + 10⁻⁶` (a margin ≫ |E|, yet ≪ the mass of one step, ≈ 0.1/σ ≥
/// 10⁻⁷·10³) keeps the coverage guarantee; `h` is the exact smallest or one
/// more. Above [`LAPLACE_CLOSED_FORM_SCALE`], where f64 no longer resolves
/// single units, the same bound in closed form.
pub fn gaussian_half_width(g: &DiscreteGaussian) -> u128 {
    gaussian_half_width_at(g, LEVEL)
}

/// [`gaussian_half_width`] at coverage `level` (the normal quantiles from
/// [`normal_two_sided`]; at 0.95 they are 1.959964 and, for the closed form's
/// 0.95 + 10⁻⁶, 1.959973).
fn gaussian_half_width_at(g: &DiscreteGaussian, level: f64) -> u128 {
    let sigma = g.sigma_f64();
    if sigma > LAPLACE_CLOSED_FORM_SCALE {
        // f64 no longer resolves single units: `(h + ½)/σ ≥ z(level + 10⁻⁶)`
        // with a relative margin.
        let z = normal_two_sided(level + 1e-6);
        return (z * sigma * (1.0 + 1e-12)).ceil() as u128;
    }
    if sigma > GAUSSIAN_CLOSED_FORM_SIGMA {
        let mass = |h: f64| libm::erf((h + 0.5) / (sigma * std::f64::consts::SQRT_2));
        let target = level + 1e-6;
        let mut h = (normal_two_sided(level) * sigma - 0.5).ceil().max(0.0);
        while h > 0.0 && mass(h - 1.0) >= target {
            h -= 1.0;
        }
        while mass(h) < target {
            h += 1.0;
        }
        return h as u128;
    }
    let norm = g.normaliser();
    let mut mass = g.weight(0) / norm;
    let mut h = 0u128;
    while mass < level {
        h += 1;
        mass += 2.0 * g.weight(h as i128) / norm;
    }
    h
}

/// Half-width for any additive noise (0 for exact values).
pub fn half_width(noise: &Noise) -> u128 {
    half_width_at(noise, LEVEL)
}

/// The smallest `h` with `P(|Z| ≤ h) ≥ level` (intervals that combine two
/// measurements ask each for `1 − (1 − 0.95)/2` and add the bounds: by the
/// union bound both hold together with probability ≥ 95%).
pub fn half_width_at(noise: &Noise, level: f64) -> u128 {
    match noise {
        Noise::Exact => 0,
        Noise::Laplace(d) => laplace_half_width_at(d, level),
        Noise::Gaussian(g) => gaussian_half_width_at(g, level),
    }
}

/// Exact coverage `P(|Z| ≤ h)` of a half-width (tests).
pub fn coverage(noise: &Noise, h: u128) -> f64 {
    match noise {
        Noise::Exact => 1.0,
        Noise::Laplace(d) => 1.0 - laplace_tail(d, h),
        Noise::Gaussian(g) => {
            let norm = g.normaliser();
            (g.weight(0) + 2.0 * (1..=h).map(|x| g.weight(x as i128)).sum::<f64>()) / norm
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rational::{exact, int};

    #[test]
    fn half_widths_are_smallest_with_95_percent() {
        for t in [0.3, 1.0, 10.0, 123.4, 5000.0] {
            let n = Noise::Laplace(DiscreteLaplace::new(&exact(t)));
            let h = half_width(&n);
            assert!(coverage(&n, h) >= LEVEL);
            assert!(h == 0 || coverage(&n, h - 1) < LEVEL, "t={t}");
        }
        for s2 in [0.25, 4.0, 10_000.0, 1e8] {
            let n = Noise::Gaussian(DiscreteGaussian::new(&exact(s2)));
            let h = half_width(&n);
            assert!(coverage(&n, h) >= LEVEL);
            assert!(h == 0 || coverage(&n, h - 1) < LEVEL, "s2={s2}");
        }
        // Continuous Laplace of scale 100 has 95% half-width 100·ln 20 ≈ 299.6.
        let h = half_width(&Noise::Laplace(DiscreteLaplace::new(&int(100))));
        assert!((299..=300).contains(&h), "{h}");
    }

    /// The closed form above σ = 1000 keeps coverage ≥ 95% (exact sum) and
    /// is at most one above the smallest such half-width.
    #[test]
    fn closed_form_gaussian_half_widths_cover_and_are_tight() {
        for sigma in [1000.5, 1001.0, 1733.3, 4096.0, 12_345.6, 99_999.0] {
            let g = DiscreteGaussian::new(&exact(sigma * sigma));
            assert!(g.sigma_f64() > GAUSSIAN_CLOSED_FORM_SIGMA);
            let n = Noise::Gaussian(g);
            let h = half_width(&n);
            assert!(coverage(&n, h) >= LEVEL, "sigma={sigma}");
            assert!(coverage(&n, h - 2) < LEVEL, "sigma={sigma}: not tight");
        }
    }

    /// The Laplace closed form covers (checked with exact tails in f64
    /// where they still resolve) and stays within a relative 10⁻⁹.
    #[test]
    fn closed_form_laplace_half_widths_cover() {
        for t in [1.0000001e9, 3.3e9, 1e12, 1e22] {
            let d = DiscreteLaplace::new(&exact(t));
            let h = laplace_half_width(&d);
            assert!(laplace_tail(&d, h) <= 1.0 - LEVEL, "t={t}");
            let ideal = t * 20f64.ln();
            assert!((h as f64 - ideal) / ideal < 1e-9, "t={t}: {h} vs {ideal}");
        }
    }

    #[test]
    fn huge_gaussian_half_widths_are_closed_form() {
        for sigma in [2e9, 1e20] {
            let g = DiscreteGaussian::new(&exact(sigma * sigma));
            let h = gaussian_half_width(&g) as f64;
            let z = (h + 0.5) / sigma;
            assert!(
                libm::erf(z / std::f64::consts::SQRT_2) >= LEVEL,
                "sigma={sigma}"
            );
            assert!((z - 1.959_964).abs() < 1e-4, "sigma={sigma}: z={z}");
        }
    }
}
