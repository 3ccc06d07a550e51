//! Exact samplers after Canonne, Kamath and Steinke (2020), "The Discrete
//! Gaussian for Differential Privacy": Bernoulli(p) for rational `p`,
//! Bernoulli(exp(−γ)) for rational `γ`, the discrete Laplace and the discrete
//! Gaussian with rational parameters.
//!
//! Privacy argument: a mechanism's privacy map holds only if the noise has
//! exactly the distribution it assumes. These samplers use nothing but uniform
//! integers and exact rational comparisons, so they are exact; every routine
//! is generic over the natural-number type, run on `u128` when the operands
//! provably fit (the fast path) and on `BigUint` otherwise.

use num_bigint::{BigUint, RandBigInt};
use num_integer::Integer;
use num_rational::BigRational;
use num_traits::{CheckedAdd, CheckedMul, One, ToPrimitive, Zero};
use rand::Rng;

/// Natural numbers the samplers run on. Products that leave a fixed-width
/// type are detected (`checked_*`) and finished in [`BigUint`], so results
/// are exact on every type.
pub trait Nat: Clone + Ord + Integer + From<u32> + CheckedMul + CheckedAdd + ToPrimitive {
    /// Uniform in `[0, n)`, `n > 0`.
    fn below<R: Rng + ?Sized>(rng: &mut R, n: &Self) -> Self;
    /// The same number as a big integer.
    fn to_big(&self) -> BigUint;
}

impl Nat for u64 {
    fn below<R: Rng + ?Sized>(rng: &mut R, n: &Self) -> Self {
        rng.gen_range(0..*n)
    }
    fn to_big(&self) -> BigUint {
        BigUint::from(*self)
    }
}

impl Nat for u128 {
    fn below<R: Rng + ?Sized>(rng: &mut R, n: &Self) -> Self {
        // 64-bit rejection sampling when it suffices: same distribution, faster.
        match u64::try_from(*n) {
            Ok(m) => rng.gen_range(0..m) as u128,
            Err(_) => rng.gen_range(0..*n),
        }
    }
    fn to_big(&self) -> BigUint {
        BigUint::from(*self)
    }
}

impl Nat for BigUint {
    fn below<R: Rng + ?Sized>(rng: &mut R, n: &Self) -> Self {
        rng.gen_biguint_below(n)
    }
    fn to_big(&self) -> BigUint {
        self.clone()
    }
}

/// Bernoulli(num/den), `num ≤ den`, `den > 0`.
pub fn bernoulli<T: Nat, R: Rng + ?Sized>(rng: &mut R, num: &T, den: &T) -> bool {
    // p = 1 needs no randomness.
    num >= den || T::below(rng, den) < *num
}

/// Bernoulli(exp(−num/den)) for `0 ≤ num/den ≤ 1` (CKS Algorithm 1, first part).
fn bernoulli_exp_unit<T: Nat, R: Rng + ?Sized>(rng: &mut R, num: &T, den: &T) -> bool {
    let mut k = T::one();
    loop {
        let Some(kden) = k.checked_mul(den) else {
            return bernoulli_exp_unit_from(rng, &num.to_big(), &den.to_big(), k.to_big());
        };
        if !bernoulli(rng, num, &kden) {
            return k.is_odd();
        }
        k = k + T::one();
    }
}

/// The same loop continued from `k` in big integers.
fn bernoulli_exp_unit_from<R: Rng + ?Sized>(
    rng: &mut R,
    num: &BigUint,
    den: &BigUint,
    mut k: BigUint,
) -> bool {
    loop {
        if !bernoulli(rng, num, &(&k * den)) {
            return k.is_odd();
        }
        k += 1u32;
    }
}

/// Bernoulli(exp(−num/den)) for any `num/den ≥ 0`, `den > 0`.
pub fn bernoulli_exp<T: Nat, R: Rng + ?Sized>(rng: &mut R, num: &T, den: &T) -> bool {
    if num < den {
        return bernoulli_exp_unit(rng, num, den);
    }
    let (whole, frac) = num.div_rem(den);
    let one = T::one();
    let mut i = T::zero();
    while i < whole {
        if !bernoulli_exp_unit(rng, &one, &one) {
            return false;
        }
        i = i + T::one();
    }
    bernoulli_exp_unit(rng, &frac, den)
}

/// Discrete Laplace with scale `t/s` (CKS Algorithm 2): returns the sample.
fn discrete_laplace<T: Nat, R: Rng + ?Sized>(rng: &mut R, t: &T, s: &T) -> i128 {
    let one = T::one();
    loop {
        let u = T::below(rng, t);
        if !bernoulli_exp(rng, &u, t) {
            continue;
        }
        let mut v = T::zero();
        while bernoulli_exp_unit(rng, &one, &one) {
            v = v + T::one();
        }
        // X = U + t·V, Y = ⌊X/s⌋; finished in big integers if X leaves T.
        let y = match t.checked_mul(&v).and_then(|tv| tv.checked_add(&u)) {
            Some(x) if s.is_one() => x.to_i128(),
            Some(x) => (x / s.clone()).to_i128(),
            None => ((u.to_big() + t.to_big() * v.to_big()) / s.to_big()).to_i128(),
        }
        .expect("noise magnitude fits in i128");
        let negative: bool = rng.gen();
        if negative && y == 0 {
            continue;
        }
        return if negative { -y } else { y };
    }
}

fn fits_fast(x: &BigUint) -> Option<u128> {
    // Operands below 2^64 keep every product in the algorithms within u128.
    (x.bits() <= 64).then(|| x.to_u128().expect("≤ 64 bits"))
}

/// The discrete Laplace distribution `P(x) ∝ exp(−|x|/scale)` on ℤ, rational
/// scale.
#[derive(Debug, Clone, PartialEq)]
pub struct DiscreteLaplace {
    num: BigUint,
    den: BigUint,
    fast: Option<(u128, u128)>,
}

impl DiscreteLaplace {
    /// `scale > 0`.
    pub fn new(scale: &BigRational) -> Self {
        let (num, den) = super::rational::parts(scale);
        assert!(!num.is_zero(), "scale must be positive");
        let fast = fits_fast(&num).zip(fits_fast(&den));
        Self { num, den, fast }
    }

    /// The scale `scale` (a float computed from ε and a sensitivity),
    /// rounded up to a rational: never less noise than asked for.
    pub fn at_least(scale: f64) -> Self {
        Self::new(&super::rational::round_up(
            &super::rational::exact(scale),
            super::rational::ROUNDING_BITS,
        ))
    }

    pub fn scale(&self) -> BigRational {
        BigRational::new(self.num.clone().into(), self.den.clone().into())
    }

    pub fn scale_f64(&self) -> f64 {
        super::rational::to_f64(&self.scale())
    }

    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> i128 {
        match self.fast {
            // 64-bit arithmetic when the scale's parts are below 2^32.
            Some((t, s)) if t < 1 << 32 && s < 1 << 32 => {
                discrete_laplace(rng, &(t as u64), &(s as u64))
            }
            Some((t, s)) => discrete_laplace(rng, &t, &s),
            None => discrete_laplace(rng, &self.num, &self.den),
        }
    }

    /// `P(X = x)` in floating point (tests and accuracy only).
    pub fn pmf(&self, x: i128) -> f64 {
        let t = self.scale_f64();
        let r = (-1.0 / t).exp();
        (1.0 - r) / (1.0 + r) * (-(x.unsigned_abs() as f64) / t).exp()
    }
}

/// The discrete Gaussian `P(x) ∝ exp(−x²/(2σ²))` on ℤ, rational `σ²`.
#[derive(Debug, Clone, PartialEq)]
pub struct DiscreteGaussian {
    a: BigUint,
    b: BigUint,
    t: BigUint,
    fast: Option<(u128, u128, u128)>,
}

impl DiscreteGaussian {
    /// `sigma2 = σ² > 0`.
    pub fn new(sigma2: &BigRational) -> Self {
        let (a, b) = super::rational::parts(sigma2);
        assert!(!a.is_zero(), "σ² must be positive");
        // t = ⌊σ⌋ + 1 = isqrt(⌊a/b⌋) + 1.
        let t = (&a / &b).sqrt() + BigUint::one();
        let fast = match (fits_fast(&a), fits_fast(&b), fits_fast(&t)) {
            (Some(a), Some(b), Some(t)) => Some((a, b, t)),
            _ => None,
        };
        Self { a, b, t, fast }
    }

    pub fn sigma2(&self) -> BigRational {
        BigRational::new(self.a.clone().into(), self.b.clone().into())
    }

    pub fn sigma_f64(&self) -> f64 {
        super::rational::to_f64(&self.sigma2()).sqrt()
    }

    /// γ = (|y|·t·b − a)² / (2·a·b·t²) on u128 when nothing overflows.
    fn gamma_fast(y: u128, a: u128, b: u128, t: u128) -> Option<(u128, u128)> {
        let ytb = y.checked_mul(t)?.checked_mul(b)?;
        let d = ytb.abs_diff(a);
        let num = d.checked_mul(d)?;
        let den = a
            .checked_mul(b)?
            .checked_mul(t)?
            .checked_mul(t)?
            .checked_mul(2)?;
        // Keep bernoulli_exp's k·den products in range too.
        (den.leading_zeros() >= 16).then_some((num, den))
    }

    fn gamma_big(&self, y: &BigUint) -> (BigUint, BigUint) {
        let ytb = y * &self.t * &self.b;
        let d = if ytb >= self.a {
            ytb - &self.a
        } else {
            &self.a - ytb
        };
        let den = BigUint::from(2u32) * &self.a * &self.b * &self.t * &self.t;
        (&d * &d, den)
    }

    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> i128 {
        loop {
            let (y, accept) = match self.fast {
                Some((a, b, t)) => {
                    let y = match u64::try_from(t) {
                        Ok(t64) if t64 < 1 << 32 => discrete_laplace(rng, &t64, &1u64),
                        _ => discrete_laplace(rng, &t, &1u128),
                    };
                    let accept = match Self::gamma_fast(y.unsigned_abs(), a, b, t) {
                        Some((num, den)) => bernoulli_exp(rng, &num, &den),
                        None => {
                            let (num, den) = self.gamma_big(&BigUint::from(y.unsigned_abs()));
                            bernoulli_exp(rng, &num, &den)
                        }
                    };
                    (y, accept)
                }
                None => {
                    let y = discrete_laplace(rng, &self.t, &BigUint::one());
                    let (num, den) = self.gamma_big(&BigUint::from(y.unsigned_abs()));
                    (y, bernoulli_exp(rng, &num, &den))
                }
            };
            if accept {
                return y;
            }
        }
    }

    /// Unnormalised `exp(−x²/(2σ²))` (tests and accuracy only).
    pub fn weight(&self, x: i128) -> f64 {
        let s2 = super::rational::to_f64(&self.sigma2());
        let xf = x as f64;
        (-(xf * xf) / (2.0 * s2)).exp()
    }

    /// `P(X = x)` in floating point (tests and accuracy only).
    pub fn pmf(&self, x: i128) -> f64 {
        self.weight(x) / self.normaliser()
    }

    /// `Σ_x exp(−x²/(2σ²))`, summed to 14σ (the rest is below 1e-40).
    pub fn normaliser(&self) -> f64 {
        let sigma = self.sigma_f64();
        let m = (14.0 * sigma).ceil() as i128 + 1;
        1.0 + 2.0 * (1..=m).map(|x| self.weight(x)).sum::<f64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rational::{int, ratio};
    use rand::SeedableRng;
    use rand_chacha::ChaCha20Rng;

    #[test]
    fn big_number_path_matches_its_pmf() {
        let big = DiscreteLaplace {
            num: BigUint::from(5u32),
            den: BigUint::from(2u32),
            fast: None,
        };
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let n = 200_000;
        let mean_abs: f64 = (0..n)
            .map(|_| big.sample(&mut rng).abs() as f64)
            .sum::<f64>()
            / n as f64;
        let exact: f64 = (1..400).map(|x| 2.0 * x as f64 * big.pmf(x)).sum();
        assert!((mean_abs - exact).abs() < 0.03, "{mean_abs} vs {exact}");
    }

    #[test]
    fn fixed_width_overflow_finishes_in_big_integers() {
        // k·den leaves u64 at k = 2: the loop must continue exactly.
        let (num, den) = (u64::MAX / 2, u64::MAX - 1);
        let mut rng = ChaCha20Rng::seed_from_u64(5);
        let n = 200_000;
        let hits = (0..n)
            .filter(|_| bernoulli_exp(&mut rng, &num, &den))
            .count();
        let p = (-0.5f64).exp();
        let z = (hits as f64 - n as f64 * p) / (n as f64 * p * (1.0 - p)).sqrt();
        assert!(z.abs() < 4.0, "z = {z}");
    }

    #[test]
    fn gaussian_pmf_sums_to_one() {
        for s2 in [ratio(1, 4), int(100), int(1_000_000)] {
            let g = DiscreteGaussian::new(&s2);
            let norm = g.normaliser();
            let total: f64 = (-20_000..=20_000).map(|x| g.weight(x) / norm).sum();
            assert!((total - 1.0).abs() < 1e-9, "{total}");
        }
    }
}
