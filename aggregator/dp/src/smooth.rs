//! The smooth-sensitivity release of the median (the smooth
//! sensitivity framework; Nissim, Raskhodnikova & Smith 2007), with an exact
//! sampler.
//!
//! Mechanism. For a window `x` (sorted, grid units on `[lo, hi]`, change-one
//! neighbours as in [`crate::local`]) release `round(med(x) + (2·S(x)/ε)·Z)`,
//! `Z` standard Laplace, clamped to `[lo, hi]`, where `S` is a β-smooth
//! upper bound on the median's local sensitivity with
//! `β ≤ ε / (2 ln(2/δ))`.
//!
//! Privacy argument. Laplace noise is (ε/2, ε/(2 ln(2/δ)))-admissible, so
//! `f(x) + (S(x)/(ε/2))·Z` is (ε, δ)-DP for any β-smooth upper bound `S` of
//! `f`'s local sensitivity (Nissim, Raskhodnikova & Smith 2007, Lemma 2.6 and Example 2): between
//! neighbours the centre moves by at most `LS(x) ≤ S(x)` (sliding) and the
//! scale by at most `e^β` (dilation). Rounding to the grid and clamping are
//! post-processing. Two choices make `S` and the noise exact:
//! - β is `ln((m+1)/m)` for the smallest integer `m` that keeps it at or
//!   below `ε / (2 ln(2/δ))` (a smaller β only tightens the argument), so
//!   the ladder `q^j`, `q = (m+1)/m`, is rational.
//! - `S(x) = q^{j(x)}` with `j(x) = max_k (c(A⁽ᵏ⁾(x)) − k)` over the `k`
//!   with `A⁽ᵏ⁾ ≥ 1`, where `c(a)` is the least `i` with `q^i ≥ a` (exact,
//!   in big integers). It bounds the local sensitivity
//!   (`q^{j} ≥ q^{c(A⁽⁰⁾)} ≥ A⁽⁰⁾`), and since `A⁽ᵏ⁾(x) ≤ A⁽ᵏ⁺¹⁾(y)` for
//!   neighbours and `c` is monotone, `j(x) ≤ j(y) + 1`: `S(x) ≤ e^β S(y)`.
//!   It is the smooth sensitivity `max_k e^{−kβ} A⁽ᵏ⁾` rounded up onto the
//!   ladder (at most a factor `q` more noise).
//! - `R = round(b·Z)` for rational `b = 2·q^j/ε` has `P(R = 0) =
//!   1 − e^{−1/(2b)}` and `P(|R| = k) ∝ e^{−k/b}` for `k ≥ 1` with a fair
//!   sign: Bernoulli(exp(−1/(2b))) decides zero, then `|R|` is a discrete
//!   Laplace of scale `b` conditioned on being non-zero (or, for `b < 1`,
//!   one plus a count of Bernoulli(exp(−1/b)) successes) — all exact
//!   (Canonne, Kamath & Steinke's samplers).
//!
//! `tests/local_bruteforce.rs` checks `S` against the local sensitivity by
//! definition and its smoothness between every pair of neighbours on small
//! universes, the sampler's distribution, and audits the release. Where it
//! stands: `benches/utility` compares it with the default; it is not a
//! `quantile_mechanism` option (docs/performance.md, "Why not
//! propose-test-release or smooth sensitivity").

use crate::local::{ls_at_distance, median_index};
use crate::rational::{exact, parts};
use crate::sampler::{bernoulli_exp, DiscreteLaplace};
use num_bigint::{BigInt, BigUint};
use num_rational::BigRational;
use num_traits::{One, Signed};
use rand::Rng;

/// The ladder `q^j`, `q = (m+1)/m`, of a smooth bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ladder {
    m: u64,
}

impl Ladder {
    /// The ladder for (ε, δ): the smallest `m` with `ln((m+1)/m) ≤
    /// ε / (2 ln(2/δ))`, plus one against rounding in the float check.
    pub fn for_privacy(epsilon: f64, delta: f64) -> Self {
        assert!(epsilon > 0.0 && delta > 0.0 && delta < 1.0);
        let beta = epsilon / (2.0 * (2.0 / delta).ln());
        let m = (1.0 / beta.exp_m1()).ceil().max(1.0) + 1.0;
        assert!(m < 1e15, "ε too small for a smooth bound");
        Self { m: m as u64 }
    }

    /// `m`: the ladder's base is `(m+1)/m`.
    pub fn m(&self) -> u64 {
        self.m
    }

    /// β of the ladder: `ln((m+1)/m)`.
    pub fn beta(&self) -> f64 {
        (1.0 / self.m as f64).ln_1p()
    }

    /// `q^i ≥ a`, exactly.
    fn reaches(&self, i: u32, a: u64) -> bool {
        BigUint::from(self.m + 1).pow(i) >= BigUint::from(a) * BigUint::from(self.m).pow(i)
    }

    /// `c(a)`: the least `i ≥ 0` with `q^i ≥ a`, for `a ≥ 1`.
    pub fn ceil_log(&self, a: u64) -> u32 {
        assert!(a >= 1);
        let f = (a as f64).ln() / self.beta();
        let guess = f.ceil().max(0.0) as u32;
        // Far from an integer, the float's ceiling is the answer; near one,
        // settle it in big integers.
        if (f - f.round()).abs() > 1e-6 {
            return guess;
        }
        let mut i = guess;
        while i > 0 && self.reaches(i - 1, a) {
            i -= 1;
        }
        while !self.reaches(i, a) {
            i += 1;
        }
        i
    }

    /// `q^j` as an exact rational.
    pub fn value(&self, j: i64) -> BigRational {
        let (up, down) = (BigInt::from(self.m + 1), BigInt::from(self.m));
        let e = j.unsigned_abs() as u32;
        if j >= 0 {
            BigRational::new(up.pow(e), down.pow(e))
        } else {
            BigRational::new(down.pow(e), up.pow(e))
        }
    }
}

/// `j(x)`: the exponent of the smooth bound `S(x) = q^{j(x)}` of the lower
/// median of sorted `x` on `[lo, hi]` (module doc).
pub fn smooth_exponent(sorted: &[i64], lo: i64, hi: i64, ladder: &Ladder) -> i64 {
    assert!(lo < hi);
    let top = ladder.ceil_log((hi - lo) as u64) as i64;
    let mut best = i64::MIN;
    // `A⁽ᵏ⁾ ≤ hi − lo`, so once `c(hi − lo) − k` cannot beat the best, no
    // later `k` can; at `k = n + 1`, `A⁽ᵏ⁾ = hi − lo ≥ 1`.
    for k in 0..=sorted.len() as i64 + 1 {
        if top - k <= best {
            break;
        }
        let a = ls_at_distance(sorted, lo, hi, k as usize);
        if a >= 1 {
            best = best.max(ladder.ceil_log(a as u64) as i64 - k);
        }
    }
    best
}

/// `round(b·Z)` for `Z` standard Laplace and rational `b > 0`, exactly.
pub fn rounded_laplace<R: Rng + ?Sized>(rng: &mut R, b: &BigRational) -> i128 {
    assert!(b.is_positive());
    let two = BigRational::from_integer(2.into());
    let (n, d) = parts(&(b * &two).recip());
    if !bernoulli_exp(rng, &n, &d) {
        return 0;
    }
    if *b >= BigRational::one() {
        // P(0) of the discrete Laplace is at most (1 − e⁻¹)/(1 + e⁻¹) < ½.
        let dl = DiscreteLaplace::new(b);
        loop {
            let x = dl.sample(rng);
            if x != 0 {
                return x;
            }
        }
    }
    let (n, d) = parts(&b.recip());
    let mut k: i128 = 1;
    while bernoulli_exp(rng, &n, &d) {
        k += 1;
    }
    if rng.gen() {
        -k
    } else {
        k
    }
}

/// The noise scale `b = 2·S(x)/ε` of a window (grid units).
pub fn noise_scale(sorted: &[i64], lo: i64, hi: i64, epsilon: f64, delta: f64) -> BigRational {
    let ladder = Ladder::for_privacy(epsilon, delta);
    let j = smooth_exponent(sorted, lo, hi, &ladder);
    ladder.value(j) * BigRational::from_integer(2.into()) / exact(epsilon)
}

/// The lower median of sorted `x` on `[lo, hi]`, (ε, δ)-DP under change-one
/// (module doc).
pub fn smooth_median<R: Rng + ?Sized>(
    rng: &mut R,
    sorted: &[i64],
    lo: i64,
    hi: i64,
    epsilon: f64,
    delta: f64,
) -> i64 {
    assert!(!sorted.is_empty() && epsilon.is_finite());
    let b = noise_scale(sorted, lo, hi, epsilon, delta);
    let m = sorted[median_index(sorted.len())] as i128;
    (m + rounded_laplace(rng, &b)).clamp(lo as i128, hi as i128) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ladder_stays_within_beta() {
        for (eps, delta) in [(1.0, 1e-6), (0.1, 1e-9), (5.0, 0.01), (0.01, 1e-3)] {
            let l = Ladder::for_privacy(eps, delta);
            let max = eps / (2.0 * (2.0f64 / delta).ln());
            assert!(l.beta() <= max, "{eps} {delta}: {l:?}");
            // The next larger base would still fit: the ladder is not
            // needlessly fine (one step of slack, the rounding guard).
            let coarser = Ladder { m: l.m - 2 };
            assert!(l.m <= 3 || coarser.beta() > max, "{l:?}");
        }
    }

    #[test]
    fn ceil_log_is_exact() {
        let l = Ladder { m: 1 }; // q = 2
        assert_eq!(l.ceil_log(1), 0);
        assert_eq!(l.ceil_log(2), 1);
        assert_eq!(l.ceil_log(3), 2);
        assert_eq!(l.ceil_log(4), 2);
        assert_eq!(l.ceil_log(1 << 40), 40);
        assert_eq!(l.ceil_log((1 << 40) + 1), 41);
        let l = Ladder { m: 29 };
        for a in 1..3000u64 {
            let c = l.ceil_log(a);
            assert!(l.reaches(c, a) && (c == 0 || !l.reaches(c - 1, a)), "{a}");
        }
    }
}
