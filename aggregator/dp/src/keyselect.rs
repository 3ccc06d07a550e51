//! Private key selection for group-by over keys nobody declared (a firmware
//! version seen in the wild): a key is released only if its noisy count of
//! distinct devices in the horizon clears a threshold.
//!
//! Privacy argument: a device counts in at most `G` keys per horizon
//! ([`crate::groups`]), so the vector of distinct-device counts moves by at
//! most `G` in L1 and `√G` in L2 between neighbours. Each key's count gets
//! discrete Laplace noise of scale `G/ε` (pure) or discrete Gaussian noise
//! of variance `G/(2ρ)` (zCDP), and only the keys whose noisy count reaches
//! the threshold `τ` are released — a post-processing of the noisy counts,
//! except for keys that exist in one neighbour only: those hold this one
//! device (count 1), and each clears `τ` with probability at most `δ/G`
//! (`τ` is the smallest integer for which that holds, computed from the
//! exact noise distribution), so all `G` of them together with at most `δ`.
//! Hence (ε, δ)-DP, or ρ-zCDP up to δ (approximate zCDP), per horizon; the
//! plan states δ beside the budget. Korolova et al. 2009, Gopi et al. 2020;
//! the audit is in `tests/keyselect.rs`.

use crate::mechanism::{Measure, Noise};
use crate::rational::{self, ROUNDING_BITS};
use crate::sampler::{DiscreteGaussian, DiscreteLaplace};
use num_bigint::BigInt;
use num_rational::BigRational;
use rand::Rng;

/// Thresholded noisy distinct counts.
#[derive(Debug, Clone, PartialEq)]
pub struct KeySelection {
    noise: Noise,
    /// A key is released when `count + noise ≥ threshold`.
    pub threshold: i128,
    /// `G`.
    pub groups_per_device: u32,
    /// The δ it was calibrated to (all of one device's keys together).
    pub delta: f64,
}

/// Why a key selection cannot be calibrated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum KeySelectionError {
    #[error("key selection needs δ in (0, 0.5), got {0}")]
    Delta(f64),
    #[error("key selection needs a budget in (0, 10^6], got {0}")]
    Budget(f64),
}

impl KeySelection {
    /// Calibrate for `G` keys per device, budget `budget` (ε or ρ) and `δ`.
    pub fn calibrate(
        measure: Measure,
        groups_per_device: u32,
        budget: f64,
        delta: f64,
    ) -> Result<Self, KeySelectionError> {
        if !(delta > 0.0 && delta < 0.5) {
            return Err(KeySelectionError::Delta(delta));
        }
        if !(budget.is_finite() && budget > 0.0 && budget <= 1e6) {
            return Err(KeySelectionError::Budget(budget));
        }
        let g = BigRational::from_integer(BigInt::from(groups_per_device.max(1)));
        let b = rational::exact(budget);
        let noise = match measure {
            // L1 = G: scale G/ε, rounded up (never more than ε).
            Measure::Pure => Noise::Laplace(DiscreteLaplace::new(&rational::round_up(
                &(&g / &b),
                ROUNDING_BITS,
            ))),
            // L2² = G: σ² = G/(2ρ), rounded up.
            Measure::Zcdp => Noise::Gaussian(DiscreteGaussian::new(&rational::round_up(
                &(&g / (&b * rational::int(2))),
                ROUNDING_BITS,
            ))),
        };
        let per_key = delta / groups_per_device.max(1) as f64;
        // Smallest τ ≥ 2 with P(1 + Z ≥ τ) ≤ δ/G.
        let (mut lo, mut hi) = (2i128, 2i128);
        while tail(&noise, hi - 1) > per_key {
            lo = hi;
            hi = hi.saturating_mul(2);
        }
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if tail(&noise, mid - 1) > per_key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(Self {
            noise,
            threshold: lo,
            groups_per_device: groups_per_device.max(1),
            delta,
        })
    }

    /// Which keys are released, for their distinct-device counts.
    pub fn select<R: Rng + ?Sized>(&self, rng: &mut R, counts: &[u64]) -> Vec<bool> {
        counts
            .iter()
            .map(|&c| self.noisy(rng, c) >= self.threshold)
            .collect()
    }

    /// A key's noisy count (released when at or above [`Self::threshold`]).
    pub fn noisy<R: Rng + ?Sized>(&self, rng: &mut R, count: u64) -> i128 {
        count as i128 + self.noise.sample(rng)
    }

    /// The exact probability that a key with `count` devices is released.
    pub fn release_probability(&self, count: u64) -> f64 {
        tail(&self.noise, self.threshold - count as i128)
    }

    /// Fewest devices a key needs to be released with probability `p`
    /// (for `fleetdp plan`: 50% and 99%).
    pub fn devices_for(&self, p: f64) -> u64 {
        let mut c = 1u64;
        while self.release_probability(c) < p {
            c = c.saturating_mul(2);
        }
        let (mut lo, mut hi) = (c / 2 + 1, c);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.release_probability(mid) >= p {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        hi
    }

    pub fn noise(&self) -> &Noise {
        &self.noise
    }
}

/// `P(Z ≥ x)` for the selection's noise (f64, from the exact pmf's closed
/// forms: `r^x/(1 + r)` for the discrete Laplace, `x ≥ 1`; summed for the
/// discrete Gaussian up to σ = 1000, above by the midpoint rule plus its
/// error bound `10⁻²/σ²` (accuracy.rs), so the tail is never understated).
fn tail(noise: &Noise, x: i128) -> f64 {
    match noise {
        Noise::Exact => f64::from(x <= 0),
        Noise::Laplace(d) => {
            let t = d.scale_f64();
            let r = (-1.0 / t).exp();
            if x >= 1 {
                (-(x as f64) / t).exp() / (1.0 + r)
            } else {
                // 1 − P(Z ≥ 1 − x) by symmetry.
                1.0 - (-((1 - x) as f64) / t).exp() / (1.0 + r)
            }
        }
        Noise::Gaussian(g) if g.sigma_f64() > 1000.0 => {
            let sigma = g.sigma_f64();
            let bound = 1e-2 / (sigma * sigma);
            let above =
                |from: f64| 0.5 * libm::erfc((from - 0.5) / (sigma * std::f64::consts::SQRT_2));
            if x >= 1 {
                (above(x as f64) + bound).min(1.0)
            } else {
                (1.0 - above((1 - x) as f64) + bound).min(1.0)
            }
        }
        Noise::Gaussian(g) => {
            let sigma = g.sigma_f64();
            let norm = g.normaliser();
            let upper = |from: i128| -> f64 {
                // Σ_{y ≥ from} weight(y), from ≥ 0, until negligible.
                let mut s = 0.0;
                let mut y = from;
                loop {
                    let w = g.weight(y);
                    s += w;
                    if (y as f64) > sigma * 40.0 || (w < 1e-300 && y as f64 > sigma) {
                        break;
                    }
                    y += 1;
                }
                s / norm
            };
            if x >= 1 {
                upper(x)
            } else {
                1.0 - upper(1 - x)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key held by one device clears the threshold with probability at
    /// most δ/G, and the threshold is the smallest that does.
    #[test]
    fn the_threshold_is_the_smallest_that_holds_delta() {
        for (measure, budget) in [
            (Measure::Pure, 1.0),
            (Measure::Pure, 0.1),
            (Measure::Zcdp, 0.5),
            (Measure::Zcdp, 1e-7),
        ] {
            for g in [1, 2, 5] {
                let s = KeySelection::calibrate(measure, g, budget, 1e-6).unwrap();
                let per_key = 1e-6 / g as f64;
                assert!(s.release_probability(1) <= per_key, "{measure:?} G={g}");
                assert!(
                    tail(s.noise(), s.threshold - 2) > per_key,
                    "{measure:?} G={g}: not smallest"
                );
                // More devices, more likely; many devices, nearly sure.
                assert!(s.release_probability(2) > s.release_probability(1));
                let sure = s.devices_for(0.99);
                assert!(s.release_probability(sure) >= 0.99);
                assert!(s.release_probability(sure - 1) < 0.99);
                assert!(s.devices_for(0.5) <= sure);
            }
        }
        assert!(KeySelection::calibrate(Measure::Pure, 1, 1.0, 0.0).is_err());
        assert!(KeySelection::calibrate(Measure::Pure, 1, -1.0, 1e-6).is_err());
    }

    /// Pure, G = 1, ε = 1, δ = 10⁻⁶ by hand: t = 1, r = e⁻¹,
    /// P(Z ≥ x) = e^{−x}/(1 + e^{−1}) ≤ 10⁻⁶ from x = 14 (e^{−13}/1.37 ≈ 1.7·10⁻⁶,
    /// e^{−14}/1.37 ≈ 6.1·10⁻⁷): τ − 1 = 14, τ = 15.
    #[test]
    fn a_hand_computed_threshold() {
        let s = KeySelection::calibrate(Measure::Pure, 1, 1.0, 1e-6).unwrap();
        assert_eq!(s.threshold, 15);
    }
}
