//! Mechanisms and their privacy maps: discrete Laplace (ε = Δ₁/t), discrete
//! Gaussian (ρ = Δ₂²/(2σ²), zCDP), and selection over a candidate grid by
//! permute-and-flip (pure DP) or the exponential mechanism (zCDP), both
//! sampled exactly.
//!
//! Privacy argument: calibration turns a float budget into a rational scale
//! rounded *up* (noise) so the exact ε or ρ spent, computed back from that
//! scale, is never above the budget. Selection accepts candidate `r` with
//! probability `exp(−ε(u* − u_r)/(2Δu))` using exact Bernoulli(exp(−γ)):
//! permute-and-flip is ε-DP (McKenna & Sheldon 2020); the exponential
//! mechanism, sampled by uniform proposals with that acceptance, is ε-bounded
//! range and so ε²/8-zCDP (Cesar & Rogers 2021).

use super::rational::{self, ROUNDING_BITS};
use super::sampler::{bernoulli_exp, DiscreteGaussian, DiscreteLaplace};
use super::stats::Sensitivity;
use num_bigint::{BigInt, BigUint};
use num_rational::BigRational;
use num_traits::{Signed, ToPrimitive, Zero};
use rand::Rng;
use serde::{Deserialize, Serialize};

/// How privacy loss is measured and composed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Measure {
    /// Pure ε-DP; composes by adding ε.
    Pure,
    /// Zero-concentrated DP; composes by adding ρ.
    Zcdp,
}

/// Privacy map of the discrete Laplace: `ε = Δ₁ / scale`.
pub fn laplace_epsilon(l1: &BigRational, scale: &BigRational) -> BigRational {
    l1 / scale
}

/// Privacy map of the discrete Gaussian: `ρ = Δ₂² / (2σ²)`.
pub fn gaussian_rho(l2_sq: &BigRational, sigma2: &BigRational) -> BigRational {
    l2_sq / (sigma2 * BigRational::from_integer(BigInt::from(2)))
}

/// The (ε, δ) a ρ-zCDP guarantee implies: `ε = ρ + 2√(ρ·ln(1/δ))`
/// (Bun & Steinke 2016, Proposition 1.3).
pub fn zcdp_to_approx_dp(rho: f64, delta: f64) -> f64 {
    rho + 2.0 * (rho * (1.0 / delta).ln()).sqrt()
}

/// Additive noise for an integer-valued measurement.
#[derive(Debug, Clone, PartialEq)]
pub enum Noise {
    /// Sensitivity 0: the value is public, released exactly, costs nothing.
    Exact,
    Laplace(DiscreteLaplace),
    Gaussian(DiscreteGaussian),
}

impl Noise {
    /// Calibrate noise for `sens` within `budget` (ε or ρ); returns the noise
    /// and the exact amount spent (`≤ budget`).
    pub fn calibrate(
        measure: Measure,
        sens: &Sensitivity,
        budget: &BigRational,
    ) -> (Noise, BigRational) {
        assert!(budget.is_positive(), "budget must be positive");
        if sens.l1.is_zero() {
            return (Noise::Exact, BigRational::zero());
        }
        match measure {
            Measure::Pure => {
                let scale = rational::round_up(&(&sens.l1 / budget), ROUNDING_BITS);
                let spent = laplace_epsilon(&sens.l1, &scale);
                (Noise::Laplace(DiscreteLaplace::new(&scale)), spent)
            }
            Measure::Zcdp => {
                let two = BigRational::from_integer(BigInt::from(2));
                let sigma2 = rational::round_up(&(&sens.l2_sq / (budget * two)), ROUNDING_BITS);
                let spent = gaussian_rho(&sens.l2_sq, &sigma2);
                (Noise::Gaussian(DiscreteGaussian::new(&sigma2)), spent)
            }
        }
    }

    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> i128 {
        match self {
            Noise::Exact => 0,
            Noise::Laplace(d) => d.sample(rng),
            Noise::Gaussian(g) => g.sample(rng),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Noise::Exact => "exact",
            Noise::Laplace(_) => "discrete_laplace",
            Noise::Gaussian(_) => "discrete_gaussian",
        }
    }

    /// Variance of one draw, in the measurement's units²: the discrete
    /// Laplace's `2p/(1 − p)²` with `p = e^(−1/scale)`, the discrete
    /// Gaussian's `σ²` (its exact variance is slightly below: an upper bound).
    pub fn variance(&self) -> f64 {
        match self {
            Noise::Exact => 0.0,
            Noise::Laplace(d) => {
                let p = (-1.0 / d.scale_f64()).exp();
                2.0 * p / ((1.0 - p) * (1.0 - p))
            }
            Noise::Gaussian(g) => g.sigma_f64().powi(2),
        }
    }

    /// Laplace scale or Gaussian σ, in the measurement's units.
    pub fn scale_f64(&self) -> f64 {
        match self {
            Noise::Exact => 0.0,
            Noise::Laplace(d) => d.scale_f64(),
            Noise::Gaussian(g) => g.sigma_f64(),
        }
    }
}

/// Selection of one candidate by utility (higher is better).
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    /// ε of the selection (exact, ≤ the budget's share).
    epsilon: BigRational,
    /// Utility sensitivity, in the utilities' integer units.
    sensitivity: BigUint,
    /// Permute-and-flip (pure) or exponential mechanism (zCDP).
    measure: Measure,
    /// `γ_r = gap_r · gamma_num / gamma_den` with gap in utility units.
    gamma_num: u128,
    gamma_den: u128,
}

impl Selection {
    /// Calibrate for `budget` (ε under pure, ρ under zCDP) and a utility
    /// sensitivity; returns the mechanism and the exact amount spent.
    pub fn calibrate(
        measure: Measure,
        utility_sensitivity: u64,
        budget: &BigRational,
    ) -> (Selection, BigRational) {
        assert!(budget.is_positive() && utility_sensitivity > 0);
        let epsilon = match measure {
            Measure::Pure => rational::round_down(budget, ROUNDING_BITS),
            Measure::Zcdp => {
                // Largest rounded ε with ε²/8 ≤ ρ.
                let eight = BigRational::from_integer(BigInt::from(8));
                let target = budget * &eight;
                let guess = rational::exact(rational::to_f64(&target).sqrt() * (1.0 - 1e-12));
                let mut eps = rational::round_down(&guess, ROUNDING_BITS);
                while &eps * &eps > target {
                    eps = rational::round_down(
                        &(&eps * rational::ratio(999_999, 1_000_000)),
                        ROUNDING_BITS,
                    );
                }
                eps
            }
        };
        let spent = match measure {
            Measure::Pure => epsilon.clone(),
            Measure::Zcdp => &epsilon * &epsilon / BigRational::from_integer(BigInt::from(8)),
        };
        let (en, ed) = rational::parts(&epsilon);
        let den = ed * BigUint::from(utility_sensitivity) * BigUint::from(2u32);
        let sel = Selection {
            gamma_num: en.to_u128().expect("validated: ε below 2^40"),
            gamma_den: den
                .to_u128()
                .expect("validated: utility scale fits in u128"),
            epsilon,
            sensitivity: BigUint::from(utility_sensitivity),
            measure,
        };
        (sel, spent)
    }

    pub fn epsilon_f64(&self) -> f64 {
        rational::to_f64(&self.epsilon)
    }

    /// `γ` of a utility gap (in the utilities' units), in nats: a candidate
    /// `gap` below the best is chosen with probability at most `e^(−γ)`.
    pub fn gamma_f64(&self, gap: i128) -> f64 {
        gap as f64 * self.gamma_num as f64 / self.gamma_den as f64
    }

    /// The smallest utility gap whose `γ` is at least `nats` (a
    /// data-independent penalty: `adaptive.rs`).
    pub fn gap_for_nats(&self, nats: f64) -> i128 {
        let mut gap =
            (nats.max(0.0) * self.gamma_den as f64 / self.gamma_num as f64).ceil() as i128;
        while self.gamma_f64(gap) < nats {
            gap += 1;
        }
        gap
    }

    pub fn name(&self) -> &'static str {
        match self.measure {
            Measure::Pure => "permute_and_flip",
            Measure::Zcdp => "exponential",
        }
    }

    /// Bernoulli(exp(−num/gamma_den)), exactly; big integers when the
    /// sampler's products could leave u128.
    fn bernoulli_exp_gamma<R: Rng + ?Sized>(&self, rng: &mut R, num: u128) -> bool {
        if self.gamma_den.leading_zeros() >= 16 {
            bernoulli_exp(rng, &num, &self.gamma_den)
        } else {
            bernoulli_exp(rng, &BigUint::from(num), &BigUint::from(self.gamma_den))
        }
    }

    /// `gap · gamma_num`, the numerator of γ (fits: validated window sizes
    /// keep gaps below 2^60 and ε numerators below 2^42).
    fn gamma_numerator(&self, gap: i128) -> u128 {
        self.gamma_num
            .checked_mul(gap as u128)
            .expect("validated: gap·ε fits in u128")
    }

    /// Index of the selected candidate.
    pub fn select<R: Rng + ?Sized>(&self, rng: &mut R, utilities: &[i128]) -> usize {
        assert!(!utilities.is_empty(), "no candidates");
        let best = *utilities.iter().max().expect("non-empty");
        match self.measure {
            Measure::Pure => {
                let mut order: Vec<usize> = (0..utilities.len()).collect();
                // Lazy Fisher–Yates: visit candidates in uniformly random order.
                for i in 0..order.len() {
                    let j = rng.gen_range(i..order.len());
                    order.swap(i, j);
                    let r = order[i];
                    if self.bernoulli_exp_gamma(rng, self.gamma_numerator(best - utilities[r])) {
                        return r;
                    }
                }
                unreachable!("the best candidate is always accepted")
            }
            Measure::Zcdp => self.exponential(rng, utilities, best),
        }
    }

    /// The exponential mechanism, `P(r) ∝ exp(−γ_r)` with
    /// `γ_r = ε·(u* − u_r)/(2Δu)`, sampled exactly by rejection: propose a
    /// bucket `J` with probability ∝ `|B_J|·e^(−J)`, where `B_j` holds the
    /// candidates with `⌊γ_r⌋ = j` (a geometric `J` thinned by
    /// Bernoulli(|B_J|/max|B|)), a uniform member `r` of it, and accept with
    /// Bernoulli(exp(−(γ_r − J))). The accepted `r` has probability ∝
    /// `e^(−J)·e^(−(γ_r − J)) = e^(−γ_r)`, and each round accepts with
    /// probability ≥ e^(−1)·(1 − e^(−1))·|B_0|/max|B|.
    fn exponential<R: Rng + ?Sized>(&self, rng: &mut R, utilities: &[i128], best: i128) -> usize {
        let den = self.gamma_den;
        let nums: Vec<u128> = utilities
            .iter()
            .map(|&u| self.gamma_numerator(best - u))
            .collect();
        let mut buckets: std::collections::BTreeMap<u128, Vec<usize>> = Default::default();
        for (r, &num) in nums.iter().enumerate() {
            buckets.entry(num / den).or_default().push(r);
        }
        let largest = buckets.values().map(Vec::len).max().expect("non-empty") as u128;
        loop {
            let mut j = 0u128;
            while bernoulli_exp(rng, &1u128, &1u128) {
                j += 1;
            }
            let Some(bucket) = buckets.get(&j) else {
                continue;
            };
            if !super::sampler::bernoulli(rng, &(bucket.len() as u128), &largest) {
                continue;
            }
            let r = bucket[rng.gen_range(0..bucket.len())];
            let accepted = self.bernoulli_exp_gamma(rng, nums[r] - j * den);
            if accepted {
                return r;
            }
        }
    }

    /// Exact selection probabilities in floating point (tests and audits).
    pub fn probabilities(&self, utilities: &[i128]) -> Vec<f64> {
        let best = *utilities.iter().max().expect("non-empty");
        let c = self.epsilon_f64() / (2.0 * self.sensitivity.to_f64().unwrap_or(f64::NAN));
        let w: Vec<f64> = utilities
            .iter()
            .map(|&u| (-(c * (best - u) as f64)).exp())
            .collect();
        match self.measure {
            Measure::Zcdp => {
                let total: f64 = w.iter().sum();
                w.iter().map(|x| x / total).collect()
            }
            Measure::Pure => permute_and_flip_probabilities(&w),
        }
    }
}

/// P(permute-and-flip returns r) for acceptance probabilities `p`:
/// `Σ_{S ⊆ others} ...` computed by dynamic programming over the number of
/// rejected candidates before r (exact up to float rounding).
fn permute_and_flip_probabilities(p: &[f64]) -> Vec<f64> {
    let m = p.len();
    (0..m)
        .map(|r| {
            // e[j] = elementary symmetric polynomial of degree j in (1 − p_i), i ≠ r.
            let mut e = vec![0.0f64; m];
            e[0] = 1.0;
            for (i, &pi) in p.iter().enumerate() {
                if i == r {
                    continue;
                }
                for j in (1..m).rev() {
                    e[j] += e[j - 1] * (1.0 - pi);
                }
            }
            // r is visited after j specific others, all rejected: j!(m−1−j)!/m!.
            let mut total = 0.0;
            let mut coeff = 1.0 / m as f64; // j = 0
            for (j, ej) in e.iter().enumerate().take(m) {
                total += coeff * ej;
                if j + 1 < m {
                    coeff *= (j + 1) as f64 / (m - 1 - j) as f64;
                }
            }
            total * p[r]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rational::{exact, int};
    use rand::SeedableRng;
    use rand_chacha::ChaCha20Rng;

    #[test]
    fn calibration_never_overspends() {
        for eps in [0.01, 0.1, 1.0 / 3.0, 1.0, 7.3] {
            for l1 in [1, 3, 1250, 100_000] {
                let s = Sensitivity::scalar(int(l1));
                let (_, spent) = Noise::calibrate(Measure::Pure, &s, &exact(eps));
                assert!(spent <= exact(eps));
                assert!(rational::to_f64(&spent) > eps * (1.0 - 1e-9));
                let (_, spent) = Noise::calibrate(Measure::Zcdp, &s, &exact(eps));
                assert!(spent <= exact(eps));
                let (_, spent) = Selection::calibrate(Measure::Zcdp, 3, &exact(eps));
                assert!(spent <= exact(eps) && rational::to_f64(&spent) > eps * 0.999);
            }
        }
        let (n, _) = Noise::calibrate(Measure::Pure, &Sensitivity::scalar(int(100)), &exact(1.0));
        assert_eq!(n.scale_f64(), 100.0);
    }

    #[test]
    fn selection_probabilities_match_sampling() {
        for (measure, budget) in [
            (Measure::Pure, 1.0),
            (Measure::Zcdp, 0.3),
            (Measure::Zcdp, 20.0),
        ] {
            check_selection(measure, budget);
        }
    }

    fn check_selection(measure: Measure, budget: f64) {
        let (sel, _) = Selection::calibrate(measure, 1, &exact(budget));
        let utilities = [0i128, -1, -3, -2, 0, -7, -1];
        let p = sel.probabilities(&utilities);
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        let mut rng = ChaCha20Rng::seed_from_u64(3);
        let n = 200_000;
        let mut counts = [0usize; 7];
        for _ in 0..n {
            counts[sel.select(&mut rng, &utilities)] += 1;
        }
        for (c, pi) in counts.iter().zip(&p) {
            let f = *c as f64 / n as f64;
            assert!((f - pi).abs() < 4.0 * (pi * (1.0 - pi) / n as f64).sqrt() + 1e-4);
        }
    }
}
