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

/// Smallest `h` with `P(|Z| ≤ h) ≥ 0.95` for the discrete Laplace.
pub fn laplace_half_width(d: &DiscreteLaplace) -> u128 {
    let t = d.scale_f64();
    let r = (-1.0 / t).exp();
    let guess = (((1.0 - LEVEL) / 2.0 * (1.0 + r)).ln() * -t).ceil() - 1.0;
    let mut h = guess.max(0.0) as u128;
    while h > 0 && laplace_tail(d, h - 1) <= 1.0 - LEVEL {
        h -= 1;
    }
    while laplace_tail(d, h) > 1.0 - LEVEL {
        h += 1;
    }
    h
}

/// Smallest `h` with `P(|Z| ≤ h) ≥ 0.95` for the discrete Gaussian, by
/// summing its pmf (σ up to 10⁷; beyond that the continuous 1.96σ, rounded
/// up, whose error is far below one unit at such σ).
pub fn gaussian_half_width(g: &DiscreteGaussian) -> u128 {
    let sigma = g.sigma_f64();
    if sigma > 1e7 {
        return (1.959_964 * sigma).ceil() as u128 + 1;
    }
    let norm = g.normaliser();
    let mut mass = g.weight(0) / norm;
    let mut h = 0u128;
    while mass < LEVEL {
        h += 1;
        mass += 2.0 * g.weight(h as i128) / norm;
    }
    h
}

/// Half-width for any additive noise (0 for exact values).
pub fn half_width(noise: &Noise) -> u128 {
    match noise {
        Noise::Exact => 0,
        Noise::Laplace(d) => laplace_half_width(d),
        Noise::Gaussian(g) => gaussian_half_width(g),
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
}
